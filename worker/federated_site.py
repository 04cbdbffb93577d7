"""A clinic's part in a federation: the Flower client its own worker runs for a ``federated`` job.

The worker that holds the clinic's rows claims the job like any other (its lease, heartbeat and
cancel are the queue's) and connects to the coordinator's Flower server. Per round it:

1. commits the round's steps to the dataset's ledger BEFORE it touches a row (the entry was
   reserved whole when the clinic joined), so a kill at any moment leaves no step uncharged;
   the remainder is released when the federation ends without it (``ledger.settle``'s
   ``charged_ahead``);
2. loads the global weights and runs ``local_steps`` DP-SGD steps on its training part with its
   planned noise (the single-site engine: Poisson sampling, per-sample clipping, Gaussian noise);
3. returns the noisy weights with weight 1 (FedAvg's weights are the federation's public ones,
   never a row count) and its site name and planned (epsilon, delta).

After the last round the server sends the global model for evaluation: the site calibrates and
evaluates it on its own held-out parts (today's DP releases, in parallel with its training: no
extra charge), registers it in its own registry (inactive until its admin activates it) and
returns its noisy evaluation histogram, which the coordinator sums. Nothing else leaves.
"""

import hashlib
import json
import logging
import time
from typing import Any

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.core.settings import settings
from app.federation import signing
from app.federation.schemas import FederationPart
from app.flows import job_run
from app.flows.job_run import LoadedData
from app.jobs import queue
from app.jobs.models import CANCELLED, FAILED, SUCCEEDED
from app.jobs.schemas import TaskPayload
from app.privacy.accounting import finite_or_none
from app.registry.network import build_network
from worker import optimizer as optimizers
from worker.dpsgd import DPSGD, secret_generator
from worker.federated_watch import Contact, PartEnded, Silent, watch
from worker.flower_logs import route_flower_logs
from worker.tasks import ClaimedJob, JobWorker, LeaseLost, evaluate_step, finish
from worker.training import TrainingResult, TrainingSpec, epsilon_of, make_optimizer

logger = logging.getLogger("dpcrisis.worker")
CONNECT_SECONDS = 120.0  # how long a site waits for the coordinator's server to come up


class RoundRefused(RuntimeError):
    """The server asked for a round this site cannot run (past its plan, or stopped)."""


class FederatedPayload(TaskPayload):
    """The ``federated`` kind's payload: the site's local DP-SGD spec and its federation part."""

    spec: TrainingSpec
    part: FederationPart


class SiteRun:
    """One site's state across the rounds: its engine, its rounds run, its final model."""

    def __init__(self, worker: JobWorker, claimed: ClaimedJob[FederatedPayload],
                 loaded: LoadedData) -> None:
        self.worker, self.claimed, self.loaded = worker, claimed, loaded
        self.part: FederationPart = claimed.payload.part
        spec = self.spec = claimed.payload.spec
        torch.manual_seed(spec.seed)  # the same initial weights at every site (not data)
        encoder = loaded.encoder
        self.network = build_network(spec.kind, spec.hidden_units,
                                     encoder.n_inputs).to(worker.device)
        train = loaded.split.train
        self.optimizer = make_optimizer(self.network, spec, n_train=train.rows, fused=True)
        device = worker.device
        self.engine = DPSGD(
            self.network, self.optimizer,
            torch.as_tensor(encoder.encode(train.x), dtype=torch.float32, device=device),
            torch.as_tensor(train.y, dtype=torch.float32, device=device),
            batch_size=spec.batch_size, noise_multiplier=spec.noise_multiplier,
            max_grad_norm=spec.max_grad_norm, sampling_rng=secret_generator(device),
            planned_rows=train.rows,
            noise_rng=secret_generator(device),
        )
        if abs(self.engine.sample_rate - spec.sample_rate) > 1e-12:
            raise RuntimeError("the sampling differs from the rate the ledger charged")
        self.rounds_run = 0
        self.evaluated = False
        self.key: Ed25519PrivateKey | None = None  # set when the federation keys its sites
        self.model_sha256 = ""  # of the global weights received for evaluation
        self.stages: Any = None  # a secure federation's SecAgg+ state (``secure_answer``)
        self.contact = Contact()  # when the coordinator last spoke (``worker.federated_watch``)

    @property
    def site(self) -> str:
        return self.part.site

    def weights(self) -> list[np.ndarray]:
        return [p.detach().cpu().numpy().copy() for p in self.network.parameters()]

    def load_weights(self, arrays: list[np.ndarray]) -> None:
        with torch.no_grad():
            for param, value in zip(self.network.parameters(), arrays, strict=True):
                param.copy_(torch.as_tensor(value, dtype=param.dtype).reshape(param.shape))

    def figures(self) -> dict[str, Any]:
        """What a round's answer says beside its weights: the site's public mechanism, from
        which the coordinator computes its epsilon (``worker.federated_checks``)."""
        spec = self.spec
        return {"steps": self.part.local_steps, "planned_steps": int(spec.steps),
                "noise_multiplier": float(spec.noise_multiplier),
                "sample_rate": float(spec.sample_rate), "delta": float(spec.delta)}

    def secure_answer(self, config: dict[str, Any]) -> dict[str, Any]:
        """This site's signed answer to one SecAgg+ stage (its masked vector stage runs the
        round: ``run_round``, charged first)."""
        from worker import secure_aggregation, secure_site  # flwr is the ``federated`` extra

        if self.stages is None:
            self.stages = secure_site.SiteStages(
                self.run_round, lambda: {**self.figures(), "site": self.site},
                secure_site.Declared.of(self.part))
        try:
            stage, payload = self.stages.answer(config)
        except secure_site.Unsafe as unsafe:  # the coordinator sees this site drop out
            logger.warning("federated part: refused a secure aggregation stage: %s", unsafe)
            raise RoundRefused(f"secure aggregation refused: {unsafe}") from unsafe
        if stage == secure_aggregation.Stage.COLLECT_MASKED_VECTORS and self.stages.clipped:
            logger.warning("federated part: %d update values clipped to +-%g for secure "
                           "aggregation so far", self.stages.clipped,
                           secure_aggregation.UPDATE_RANGE)
        return self.signed({secure_aggregation.FIELD: payload},
                           kind=secure_aggregation.kind_of(stage), config=config,
                           payload_sha256=hashlib.sha256(payload).hexdigest(),
                           covered=(secure_aggregation.FIELD,))

    def run_round(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Charge the round, then run it from the global weights ``arrays``."""
        local_steps = self.part.local_steps
        if self.rounds_run >= self.part.rounds:
            raise RoundRefused("the server asked for more rounds than this site planned")
        self._commit_round(local_steps)
        self.load_weights(arrays)
        optimizers.restart(self.optimizer)  # each round starts fresh from the global model
        self.network.train()
        self.engine.run_steps(local_steps)
        self.rounds_run += 1
        return self.weights()

    def _commit_round(self, local_steps: int) -> None:
        """Commit the round's steps (and renew the lease) before any row is read."""
        spec, claimed = self.spec, self.claimed
        steps = (self.rounds_run + 1) * local_steps
        eps_prv, eps_rdp = epsilon_of([(spec.noise_multiplier, spec.sample_rate, steps)],
                                      spec.delta)
        progress = queue.EpochProgress(self.rounds_run + 1, steps, finite_or_none(eps_prv),
                                       finite_or_none(eps_rdp))
        with self.worker.database.session_scope() as session:
            owned, cancel = queue.record_epoch(
                session=session, job_id=claimed.job_id, worker_id=self.worker.worker_id,
                progress=progress, lease_seconds=self.worker.lease_seconds, ahead=True)
        if not owned:
            raise LeaseLost(claimed.job_id)
        if cancel or self.worker.stop_requested.is_set():
            raise RoundRefused("this site's part was cancelled")

    def finish_with(self, arrays: list[np.ndarray], config: dict[str, Any]) -> dict[str, Any]:
        """Evaluate the global model on this site's held-out parts and register it here."""
        self.load_weights(arrays)
        self.model_sha256 = signing.arrays_sha256(arrays)
        result = TrainingResult(network=self.network, epochs_completed=self.rounds_run,
                                history=self.engine.history)
        trained = evaluate_step(self.spec, result, self.loaded)
        trained.metrics["federation"] = {
            "name": self.part.name, "site": self.site,
            "rounds": self.part.rounds, "rounds_run": self.rounds_run,
            "sites": json.loads(str(config.get("sites", "[]"))),
            "federation_epsilon": _number(config.get("federation_epsilon")),
            "federation_delta": _number(config.get("federation_delta")),
            "model_sha256": self.model_sha256,
            "secure_aggregation": bool(self.stages is not None
                                       and self.stages.rounds == self.rounds_run),
        }
        sha = job_run.store(trained=trained)
        with self.worker.database.session_scope() as session:
            model = job_run.commit(
                session=session, job_id=self.claimed.job_id, dataset_id=self.claimed.dataset_id,
                worker_id=self.worker.worker_id, trained=trained, artifact_sha256=sha)
        if model is None:
            raise LeaseLost(self.claimed.job_id)
        self.evaluated = True
        return {"release": trained.metrics["release"],
                "band_thresholds": trained.metrics["band_thresholds"]}

    def signed(self, figures: dict[str, Any], *, kind: str, config: dict[str, Any],
               payload_sha256: str, covered: tuple[str, ...] = ()) -> dict[str, Any]:
        """``figures`` with this site's name and, when the federation keys its sites, its
        signature over them (less the ``covered`` ones: the payload, signed by its hash), the
        payload's hash and the coordinator's round and nonce."""
        answer = {**figures, "site": self.site}
        if self.key is None:
            return answer
        figures = {k: v for k, v in figures.items() if k not in covered}
        signed = signing.message(
            federation=self.part.name, site=self.site, kind=kind,
            server_round=int(config.get("server_round", 0)), nonce=str(config.get("nonce", "")),
            payload_sha256=payload_sha256, figures=figures)
        return {**answer, "signature": signing.sign(self.key, signed)}


def site_key(part: FederationPart) -> tuple[Ed25519PrivateKey | None, str | None]:
    """This site's signing key when its federation declares keys: (key, None), or (None, why
    it cannot take part); (None, None) when the federation keys no site."""
    declared = part.public_key
    if declared is None:
        return None, None
    path = settings.federation_site_key
    if path is None:
        return None, "the federation declares the sites' keys: set FEDERATION_SITE_KEY"
    try:
        key = signing.load_private(path)
    except (OSError, ValueError) as exc:
        return None, f"FEDERATION_SITE_KEY cannot be read as an Ed25519 key: {exc}"
    if signing.public_of(key) != declared:
        return None, "FEDERATION_SITE_KEY is not the key this site declared in the federation"
    return key, None


def _number(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)


def run_federated(worker: JobWorker, claimed: ClaimedJob[FederatedPayload]) -> str:
    """Take part in the federation until its server ends; returns the job's final status."""
    with worker.database.session_scope() as session:
        loaded = job_run.load(session=session, dataset_id=claimed.dataset_id,
                              job_id=claimed.job_id)
    run = SiteRun(worker, claimed, loaded)
    try:
        import flwr  # noqa: F401 - the federated extra; without it, say so before any round
    except ImportError:
        finish(worker, claimed.job_id, FAILED, error_code="federated_extra_missing",
               error="this worker cannot take part: pip install -e '.[federated]'")
        return FAILED
    run.key, refused = site_key(run.part)
    if refused is not None:  # before any round: nothing charged, the reservation released
        finish(worker, claimed.job_id, FAILED, error_code="federation_key_unusable",
               error=refused)
        return FAILED
    try:
        take_part(run)
    except Silent as silent:  # the rounds it began stay charged, the rest is released
        logger.warning("federated part: %s", silent)
        finish(worker, claimed.job_id, FAILED, error_code="federation_silent",
               error=str(silent))
        return FAILED
    except (RoundRefused, PartEnded) as refused:  # cancelled, or asked past its plan
        status = CANCELLED if "cancelled" in str(refused) else FAILED
        finish(worker, claimed.job_id, status, error_code="federation_round_refused",
               error=str(refused))
        return status
    if run.evaluated:
        return SUCCEEDED
    # The federation ended (or dropped this site) before its final model reached it: the
    # rounds it began stay charged, the rest of the reservation is released.
    finish(worker, claimed.job_id, FAILED, error_code="federation_ended",
           error=f"the federation ended after {run.rounds_run} of this site's rounds")
    return FAILED


def take_part(run: SiteRun) -> None:
    """Run Flower's client (``connect``) under the watch of this worker's thread: a silent
    coordinator holds the clinic at most one round timeout, and a cancel ends the part at
    any stage (``worker.federated_watch``)."""
    worker, job_id = run.worker, run.claimed.job_id

    def stopped() -> bool:
        lost = worker.heartbeat is not None and worker.heartbeat.lost.is_set()
        return lost or worker.stop_requested.is_set()

    def cancelled() -> bool:
        with worker.database.session_scope() as session:
            return queue.cancel_requested(session=session, job_id=job_id)

    watch(lambda: connect(run.part.address, run), run.contact,
          silence_seconds=run.part.round_timeout_seconds, stopped=stopped,
          cancelled=cancelled)


def connect(address: str, run: SiteRun) -> None:
    """Run Flower's client until the server says goodbye; retry only until first contact.

    With Flower's gRPC transport a client started before the server fails at once, so the
    site retries for ``CONNECT_SECONDS``; once the server has spoken, a lost server ends it.
    """
    import grpc
    from flwr.client import start_client

    client = site_client(run)
    route_flower_logs()
    ca = settings.flower_root_certificate
    root = None if ca is None else ca.read_bytes()  # TLS: the coordinator's CA
    deadline, delay = time.monotonic() + CONNECT_SECONDS, 0.2
    while True:
        try:
            start_client(server_address=address, client=client.to_client(),
                         insecure=root is None, root_certificates=root)
            return
        except grpc.RpcError as exc:
            if (client.contacted or exc.code() != grpc.StatusCode.UNAVAILABLE
                    or time.monotonic() + delay > deadline or run.contact.ended.is_set()):
                if run.rounds_run:
                    return  # the federation went away after rounds this site ran
                raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def site_client(run: SiteRun) -> Any:
    """A Flower ``NumPyClient`` over ``run`` (built here: flwr is the ``federated`` extra)."""
    from flwr.client import NumPyClient

    from worker.secure_aggregation import FIELD  # flwr is there: this is its client

    class SiteClient(NumPyClient):
        contacted = False

        def get_properties(self, config: dict[str, Any]) -> dict[str, Any]:
            self.contacted = True
            with run.contact.answering():
                return {"site": run.site}

        def get_parameters(self, config: dict[str, Any]) -> list[np.ndarray]:
            self.contacted = True
            with run.contact.answering():
                return run.weights()  # the seeded initial weights, the same at every site

        def fit(self, parameters: list[np.ndarray], config: dict[str, Any]
                ) -> tuple[list[np.ndarray], int, dict[str, Any]]:
            self.contacted = True
            with run.contact.answering():
                if FIELD in config:  # a SecAgg+ stage (``worker.secure_aggregation``)
                    return [], 0, run.secure_answer(config)
                if run.part.secure_aggregation:  # before any charge or row
                    raise RoundRefused("the federation requires secure aggregation; the "
                                       "coordinator asked for a plain round")
                weights = run.run_round(parameters)
                return weights, 1, run.signed(run.figures(), kind=signing.FIT, config=config,
                                              payload_sha256=signing.arrays_sha256(weights))

        def evaluate(self, parameters: list[np.ndarray], config: dict[str, Any]
                     ) -> tuple[float, int, dict[str, Any]]:
            self.contacted = True
            with run.contact.answering():
                evaluation = json.dumps(run.finish_with(parameters, config))
                return 0.0, 1, run.signed({"evaluation": evaluation}, kind=signing.EVALUATE,
                                          config=config, payload_sha256=run.model_sha256)

    return SiteClient()
