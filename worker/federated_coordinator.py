"""The coordinator of a federation: Flower's server with FedAvg over the sites' DP releases.

The coordinator never sees a row: what reaches it is each site's noisy weights after each round
(DP-SGD releases) and, at the end, each site's noisy evaluation histogram. It averages the
weights with the federation's PUBLIC weights (declared per site; equal by default: weighting by
row counts would release them), keeps a round-by-round report (which sites took part in which
round, each site's planned (epsilon, delta)) in its own database, and sums the histograms into
the federation's evaluation (post-processing: the sum's noise is the root sum of squares of the
sites' noise).

Run: ``dpcrisis federation-coordinator --federation ID`` (flwr is the ``federated`` extra).
"""

import json
import logging
import math
import os
import secrets
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # as worker.flower_logs: before flwr
from flwr.common import (  # noqa: E402 - after the telemetry switch
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server import ServerConfig, start_server  # noqa: E402
from flwr.server.client_manager import ClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402

from app.core.database import Database
from app.core.settings import settings
from app.federation import service as federation_service
from app.federation import signing
from app.federation.models import Federation
from app.federation.schemas import FederatedRecipe
from worker import federated_checks as checks
from worker.dp_histogram import Release
from worker.evaluation import evaluated
from worker.flower_logs import route_flower_logs
from worker.secure_aggregation import SecureServer, SiteGrid

logger = logging.getLogger("dpcrisis.worker")

def summed_evaluation(evaluations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The federation's metrics from the sites' released histograms (their sum), or None when
    no site evaluated. Subgroups are summed where every site released the same groupings."""
    if not evaluations:
        return None
    releases = [e["release"] for e in evaluations]
    first = releases[0]

    def counts(histogram: dict[str, Any]) -> np.ndarray:
        return np.stack([np.asarray(histogram["negatives"], dtype=np.float64),
                         np.asarray(histogram["positives"], dtype=np.float64)], axis=-1)

    overall = np.sum([counts(r["histograms"]["all"]) for r in releases], axis=0)
    labels = first["groupings"]
    same_groups = all(r["groupings"] == labels for r in releases)
    groups: dict[str, np.ndarray] = {}
    if same_groups:
        for name, names in labels.items():
            groups[name] = np.sum([np.stack([counts(r["histograms"]["by_grouping"][name][label])
                                             for label in names]) for r in releases], axis=0)
    noise_std = math.sqrt(sum(float(r["noise_std"]) ** 2 for r in releases))
    l2 = math.sqrt(1 + len(groups))
    release = Release(
        edges=np.asarray(first["bins"], dtype=np.float64)[1:-1], overall=np.asarray(overall),
        groups=groups, labels=labels if same_groups else {},
        noise_multiplier=noise_std / l2,
    )
    thresholds = evaluations[0]["band_thresholds"]
    return evaluated(release, thresholds, np.random.default_rng())


class Report:
    """What the coordinator records, written to its database after every round."""

    def __init__(self, database: Database, federation: Federation) -> None:
        self.database, self.federation_id = database, federation.id
        self.recipe = FederatedRecipe.model_validate(federation.recipe)
        self.rounds: list[dict[str, Any]] = []
        self.statements: dict[str, dict[str, float]] = {}
        self.evaluation: dict[str, Any] | None = None
        self.evaluated_sites: list[str] = []
        self.model_sha256: str | None = None  # of the weights released to the sites

    def as_dict(self) -> dict[str, Any]:
        worst = self.worst()
        return {"rounds": self.rounds, "site_statements": self.statements,
                "federation_epsilon": worst[0], "federation_delta": worst[1],
                "evaluated_sites": self.evaluated_sites, "evaluation": self.evaluation,
                "model_sha256": self.model_sha256}

    def worst(self) -> tuple[float | None, float | None]:
        """The federation's statement: the plan's target epsilon, which every answer taken was
        checked to meet (``federated_checks.statement``), never a figure a site reports; and
        the declared delta, else the largest of the sites' (each its budget's)."""
        if not self.statements:
            return None, None
        delta = self.recipe.delta
        return (self.recipe.target_epsilon,
                delta if delta is not None else max(s["delta"]
                                                    for s in self.statements.values()))

    def write(self, state: str) -> None:
        with self.database.session_scope() as session:
            federation_service.record_report(session=session, federation_id=self.federation_id,
                                             state=state, report=self.as_dict())


class FederationAverage(FedAvg):
    """FedAvg with the federation's public weights, its quorum, and its report."""

    def __init__(self, federation: Federation, report: Report) -> None:
        self.recipe = FederatedRecipe.model_validate(federation.recipe)
        self.weights = {str(site["name"]): float(site["weight"]) for site in federation.sites}
        self.keys = {str(site["name"]): str(site["public_key"]) for site in federation.sites
                     if site.get("public_key")}  # all or none (the declaration's rule)
        self.name = federation.name
        self.nonces: dict[int, str] = {}  # a fresh nonce per round: a replayed answer fails
        self.report = report
        rounds, tail = self.recipe.rounds, self.recipe.tail_average
        self.first_averaged = rounds - max(1, round(tail * rounds)) + 1 if tail > 0 else rounds
        self.mean: list[np.ndarray] | None = None  # of the global models from that round on
        self.averaged = 0
        self.secure = self.recipe.secure_aggregation
        self.global_arrays: list[np.ndarray] = []  # a secure round's starting global model
        self.grid: SiteGrid | None = None  # a secure round's links (which answers it refused)
        self.round_model: list[np.ndarray] = []  # the global model this round sent
        quorum = self.recipe.min_sites
        super().__init__(fraction_fit=1.0, fraction_evaluate=1.0, min_fit_clients=quorum,
                         min_evaluate_clients=quorum, min_available_clients=quorum,
                         accept_failures=True, on_fit_config_fn=self.round_config)

    def round_config(self, server_round: int) -> dict[str, bool | bytes | float | int | str]:
        """What every site is sent with a round: its number and the round's fresh nonce."""
        nonce = self.nonces.setdefault(server_round, secrets.token_hex(16))
        return {"server_round": server_round, "nonce": nonce}

    def authentic(self, site: str, kind: str, server_round: int, metrics: dict[str, Any],
                  payload_sha256: str) -> bool:
        """Whether an answer naming ``site`` is the site's: a declared name and, when the
        federation keys its sites, a signature by its key over this round's nonce."""
        if site not in self.weights:
            return False
        if not self.keys:
            return True
        figures = {k: v for k, v in metrics.items() if k not in ("site", "signature")}
        signed = signing.message(federation=self.name, site=site, kind=kind,
                                 server_round=server_round,
                                 nonce=self.nonces.get(server_round, ""),
                                 payload_sha256=payload_sha256, figures=figures)
        return signing.verifies(self.keys[site], signed, str(metrics.get("signature", "")))

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        if server_round == 1:  # let every declared site join the first round
            client_manager.wait_for(len(self.weights),
                                    timeout=int(self.recipe.round_timeout_seconds))
        self.round_model = parameters_to_ndarrays(parameters)
        return list(super().configure_fit(server_round, parameters, client_manager))

    def acceptable(self, server_round: int, site: str, metrics: dict[str, Any],
                   arrays: list[np.ndarray]) -> bool:
        """Whether an authentic answer fits the plan and the round's model (else it is
        dropped, logged and counted as a failure); notes the site's checked statement."""
        try:
            checks.check_shapes(arrays, self.round_model)
            statement = checks.statement(self.recipe, metrics)
        except checks.Unacceptable as unacceptable:
            logger.warning("federation round %d: dropped the answer of %s: %s",
                           server_round, site, unacceptable)
            return False
        self.report.statements[site] = statement
        return True

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[Any]) -> tuple[Parameters | None, dict[str, Any]]:
        if self.secure:
            return self.aggregate_secure(server_round, results, failures)
        taken: list[tuple[str, list[np.ndarray]]] = []
        refused: list[str] = []
        failed = list(failures)
        for _, fit in results:
            site, arrays = str(fit.metrics.get("site", "")), parameters_to_ndarrays(fit.parameters)
            if (site in (s for s, _ in taken) or not self.authentic(
                    site, signing.FIT, server_round, fit.metrics, signing.arrays_sha256(arrays))):
                refused.append(site)  # a stranger, a forged or replayed answer, a second one
            elif self.acceptable(server_round, site, fit.metrics, arrays):
                taken.append((site, arrays))
            else:
                failed.append(site)
        if not self.close_round(server_round, sorted(s for s, _ in taken), failed, refused):
            return None, {}
        total = sum(self.weights[site] for site, _ in taken)
        layers = [np.sum([self.weights[site] / total * arrays[i] for site, arrays in taken],
                         axis=0) for i in range(len(taken[0][1]))]
        self.average(server_round, layers)
        return ndarrays_to_parameters(layers), {"sites": len(taken)}

    def close_round(self, server_round: int, sites: list[str], failures: list[Any],
                    refused: list[str]) -> bool:
        """Report the round (which sites' answers it takes) and whether they make the quorum."""
        self.report.rounds.append({"round": server_round, "sites": sites,
                                   "failures": len(failures), "refused": sorted(refused)})
        self.report.write("running")
        return len(sites) >= self.recipe.min_sites

    def on_secure_round(self, server_round: int, arrays: list[np.ndarray],
                        grid: SiteGrid | None) -> None:
        """A secure round begins (its global model and links) or ends: a round the protocol
        halted (fewer sites than the quorum finished it) is reported with no sites."""
        if grid is not None:
            self.global_arrays, self.grid = arrays, grid
            return
        if not self.report.rounds or self.report.rounds[-1]["round"] != server_round:
            self.close_round(server_round, [], [], self.refused())

    def refused(self) -> list[str]:
        """The sites whose answers this secure round's links refused."""
        return list(self.grid.refused) if self.grid is not None else []

    def aggregate_secure(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                         failures: list[Any]) -> tuple[Parameters | None, dict[str, Any]]:
        """A SecAgg+ round: every result carries the same unmasked weighted mean of the
        updates of the sites whose masked vectors it holds (each of their answers checked stage
        by stage by the grid); the global model moves by it."""
        sites = sorted({str(fit.metrics.get("site", "")) for _, fit in results})
        dropped = [*failures, *(self.grid.dropped if self.grid is not None else [])]
        if not self.close_round(server_round, sites, dropped, self.refused()) or not results:
            return None, {}
        update = parameters_to_ndarrays(results[0][1].parameters)
        layers = [start + step for start, step in zip(self.global_arrays, update, strict=True)]
        self.average(server_round, layers)
        return ndarrays_to_parameters(layers), {"sites": len(sites)}

    def average(self, server_round: int, layers: list[np.ndarray]) -> None:
        """Polyak-Ruppert averaging of the global models over the tail rounds: post-processing
        of the sites' releases that averages much of their noise away."""
        if server_round < self.first_averaged:
            return
        self.averaged += 1
        if self.mean is None:
            self.mean = [layer.copy() for layer in layers]
            return
        for mean, layer in zip(self.mean, layers, strict=True):
            mean += (layer - mean) / self.averaged

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager
                           ) -> list[tuple[ClientProxy, EvaluateIns]]:
        if server_round != self.recipe.rounds:
            return []  # only the final model is evaluated (each site's DP release)
        epsilon, delta = self.report.worst()
        config: dict[str, bool | bytes | float | int | str] = {
            **self.round_config(server_round), "sites": json.dumps(sorted(self.weights)),
            "federation_epsilon": "" if epsilon is None else epsilon,
            "federation_delta": "" if delta is None else delta}
        if self.mean is not None:  # the model released: the tail rounds' mean
            parameters = ndarrays_to_parameters(self.mean)
        self.report.model_sha256 = signing.arrays_sha256(parameters_to_ndarrays(parameters))
        clients = client_manager.all().values()
        return [(client, EvaluateIns(parameters, config)) for client in clients]

    def aggregate_evaluate(self, server_round: int,
                           results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list[Any]) -> tuple[float | None, dict[str, Any]]:
        evaluations: dict[str, dict[str, Any]] = {}
        for _, res in results:
            site = str(res.metrics.get("site", ""))
            if site in evaluations or not self.authentic(
                    site, signing.EVALUATE, server_round, res.metrics,
                    self.report.model_sha256 or ""):
                continue
            try:
                evaluations[site] = checks.evaluation(res.metrics.get("evaluation"))
            except checks.Unacceptable as unacceptable:
                logger.warning("federation round %d: dropped the answer of %s: %s",
                               server_round, site, unacceptable)
        agreeing = checks.agreeing(list(evaluations.values()))
        self.report.evaluated_sites = [s for s, e in evaluations.items() if e in agreeing]
        self.report.evaluation = summed_evaluation(agreeing)
        return None, {}


def server_certificates(folder: Path | None) -> tuple[bytes, bytes, bytes] | None:
    """Flower's TLS triple (CA certificate, server certificate, server key), or None: plain
    gRPC. Raises FileNotFoundError naming a missing file."""
    if folder is None:
        return None
    return tuple((folder / name).read_bytes()  # type: ignore[return-value]
                 for name in ("ca.crt", "server.pem", "server.key"))


def serve(database: Database, federation_id: int) -> dict[str, Any]:
    """Run the federation's rounds on Flower's server at its declared address; returns the
    report (also stored on the federation's row, state ``finished`` or ``failed``)."""
    with database.session_scope() as session:
        federation = federation_service.get(session=session, federation_id=federation_id)
        if federation.role != "coordinator":
            raise ValueError(f"federation {federation_id} is declared here as a site")
        session.expunge(federation)
    recipe = FederatedRecipe.model_validate(federation.recipe)
    report = Report(database, federation)
    report.write("running")
    route_flower_logs()
    strategy = FederationAverage(federation, report)
    server = SecureServer(strategy, recipe.min_sites,
                          recipe.round_timeout_seconds) if recipe.secure_aggregation else None
    try:
        start_server(server_address=federation.address, server=server,
                     strategy=strategy if server is None else None,
                     config=ServerConfig(num_rounds=recipe.rounds,
                                         round_timeout=recipe.round_timeout_seconds),
                     certificates=server_certificates(settings.flower_certificates))
    except BaseException:
        report.write("failed")
        raise
    report.write("finished" if report.evaluation is not None else "failed")
    return report.as_dict()
