"""A monitoring run on the shared queue: one DP release on the follow-up, then post-processing.

The release (``release_follow_up``) counts every follow-up row once in each histogram: the
training-time evaluation's (public score bin x outcome, overall and per subgroup grouping, on
the training-time release's own bins) and one per feature (``app.monitoring.bins``). One
record changes one cell of each by 1, so the L2 sensitivity is sqrt(1 + groupings + features)
and every cell gets Gaussian noise of std noise_multiplier times that: exactly the one
Gaussian mechanism the follow-up's ledger admitted when the run was submitted
(``app.monitoring.service``). Everything stored after it (the evaluation's metrics, their
drift against the training-time release, each feature's drift against the reference release,
the subgroup gaps) reads only noisy counts and the public noise scales. An unlabelled
follow-up (features only) releases its feature histograms alone (``release_features``: L2
sensitivity sqrt(features), the same noise multiplier and charge): data drift, no performance.
"""

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from pydantic import BaseModel

from app.datasets import parts as dataset_parts
from app.datasets import service as dataset_service
from app.datasets.schema import labels as dataset_labels
from app.datasets.schema.encoding import encoder_for
from app.jobs import queue
from app.jobs.models import SUCCEEDED, Job
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.monitoring import service as monitoring_service
from app.monitoring.bins import FeatureBins, schema_bins
from app.monitoring.schemas import MonitoringPayload
from app.registry import service as registry_service
from app.statistics.models import StatisticsRelease
from worker.dp_histogram import Release, histogram_release
from worker.evaluation import evaluated, json_safe
from worker.handlers import ClaimedJob
from worker.monitoring.drift import NoisyHistogram, feature_drift, performance_drift
from worker.monitoring.fairness import fairness_gaps

N_BOOTSTRAP = 1000
PayloadT = TypeVar("PayloadT", bound=BaseModel)


def _rows(split: dataset_parts.Split) -> dataset_parts.PartRows:
    """Every row of the follow-up (all its parts): a run is not training on it."""
    parts = (split.train, split.calibration, split.evaluation)
    groups = {name: (np.concatenate([p.groups[name][0] for p in parts]), labels)
              for name, (_, labels) in split.train.groups.items()}
    return dataset_parts.PartRows(np.concatenate([p.x for p in parts]),
                                  np.concatenate([p.y for p in parts]), groups,
                                  sum(p.rows for p in parts))


def release_follow_up(rows: dataset_parts.PartRows, probability: np.ndarray, *,
                      edges: np.ndarray, bins: list[FeatureBins], noise_multiplier: float,
                      rng: np.random.Generator) -> tuple[Release, dict[str, np.ndarray]]:
    """The run's one Gaussian release: the evaluation histograms and the feature histograms,
    all with noise of std ``noise_multiplier * sqrt(1 + groupings + features)``."""
    release = histogram_release(rows.y.astype(np.int64), probability, rows.groups, edges=edges,
                                noise_multiplier=noise_multiplier, rng=rng,
                                other_histograms=len(bins), public_rows=rows.rows)
    return release, _noisy_features(rows.x, bins, release.noise_std, rng)


def _noisy_features(x: np.ndarray, bins: list[FeatureBins], std: float,
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each feature's histogram on its public bins, every cell with Gaussian noise of ``std``."""
    found = {}
    for k, b in enumerate(bins):
        counts = np.bincount(b.codes(x[:, k]), minlength=b.n_bins).astype(float)
        found[b.name] = counts + rng.normal(0.0, std, counts.shape) if std > 0 else counts
    return found


def _feature_results(bins: list[FeatureBins], follow: dict[str, np.ndarray], std: float,
                     reference: dict[str, tuple[list[float], float]] | None,
                     rng: np.random.Generator) -> list[dict[str, Any]]:
    found = []
    for b in bins:
        counts = follow[b.name]
        share = np.clip(counts, 0, None) / max(float(np.clip(counts, 0, None).sum()), 1.0)
        entry: dict[str, Any] = {"name": b.name, "bins": b.labels, "follow_up": share,
                                 "reference": None, "psi": None, "psi_ci": None,
                                 "wasserstein": None, "wasserstein_ci": None,
                                 "verdict": "inconclusive", "notes": []}
        if reference is not None and b.name in reference:
            ref_counts, ref_std = reference[b.name]
            ref = np.asarray(ref_counts, dtype=float)
            entry["reference"] = np.clip(ref, 0, None) / max(float(np.clip(ref, 0, None).sum()),
                                                             1.0)
            entry.update(feature_drift(NoisyHistogram(ref, ref_std),
                                       NoisyHistogram(counts, std),
                                       centres=np.asarray(b.centres), rng=rng,
                                       n_bootstrap=N_BOOTSTRAP))
        found.append(json_safe(entry))
    return sorted(found, key=lambda f: -(f["psi"] if f["psi"] is not None else -1.0))


def release_features(x: np.ndarray, bins: list[FeatureBins], *, noise_multiplier: float,
                     rng: np.random.Generator) -> tuple[dict[str, np.ndarray], float]:
    """An unlabelled follow-up's one Gaussian release: one histogram per feature, nothing else.
    One record is one cell of each, so the L2 sensitivity is sqrt(features): the same
    mechanism at the same target as a labelled run's, with less noise per cell."""
    std = noise_multiplier * math.sqrt(len(bins))
    return _noisy_features(x, bins, std, rng), std


def _features_only(session: Any, run_row: Any, job: Job, notes: list[str],
                   rows: dataset_parts.PartRows, bins: list[FeatureBins],
                   rng: np.random.Generator) -> dict[str, Any]:
    """An unlabelled follow-up's results: data drift, no performance and no subgroup gaps
    (both need outcomes), and a note that says so."""
    follow, std = release_features(rows.x, bins, noise_multiplier=job.noise_multiplier,
                                   rng=rng)
    reference = None
    if run_row.reference_release_id is not None:
        statistics = session.get(StatisticsRelease, run_row.reference_release_id)
        reference = monitoring_service.reference_histograms(statistics)
    notes = [*notes,
             f"no performance: dataset {run_row.dataset_id} is an unlabelled follow-up "
             "(features only); only its feature histograms were released, so there is no "
             "performance, performance drift or subgroup gap (each needs outcomes)"]
    return json_safe({
        "model_id": run_row.model_id, "performance": None, "drift": None,
        "features": _feature_results(bins, follow, std, reference, rng), "fairness": None,
        "feature_release": {"noise_std": std, "bins": {b.name: b.labels for b in bins},
                            "histograms": follow},
        "l2_sensitivity": math.sqrt(len(bins)), "notes": notes})


def run(session: Any, job: Job, payload: MonitoringPayload,
        rng: np.random.Generator) -> dict[str, Any]:
    """The run's release and results (the caller finishes the job with them)."""
    run_row = monitoring_service.of_job(session=session, job_id=job.id)
    assert run_row is not None
    model = registry_service.get(session=session, model_id=run_row.model_id)
    dataset = dataset_service.get(session=session, dataset_id=run_row.dataset_id)
    schema = registry_service.schema_of(model)
    rows = _rows(dataset_parts.load_parts(
        dataset, ledger_service.left_out_of(session=session, scope=Scope.job(job.id))))
    if dataset_labels.unlabelled(dataset):  # no outcome: its features' histograms only
        return _features_only(session, run_row, job, list(payload.notes), rows,
                              schema_bins(schema), rng)
    network = registry_service.load_network(model)
    with torch.inference_mode():
        inputs = torch.from_numpy(encoder_for(schema).encode(rows.x).astype(np.float32))
        probability = torch.sigmoid(network(inputs).squeeze(-1)).double().numpy()
    training = (model.metrics or {}).get("release")
    thresholds = dict((model.metrics or {}).get("band_thresholds") or model.band_thresholds)
    edges = (np.asarray(training["bins"][1:-1], dtype=float) if training
             else np.asarray([thresholds["low_medium"], thresholds["medium_high"]]))
    bins = schema_bins(schema)
    release, follow = release_follow_up(rows, probability, edges=edges, bins=bins,
                                        noise_multiplier=job.noise_multiplier, rng=rng)
    performance = evaluated(release, thresholds, rng, N_BOOTSTRAP)
    notes = list(payload.notes)
    reference = None
    if run_row.reference_release_id is not None:
        statistics = session.get(StatisticsRelease, run_row.reference_release_id)
        reference = monitoring_service.reference_histograms(statistics)
    drift = None
    if training is not None:
        drift = performance_drift(training, performance["release"], thresholds=thresholds,
                                  rng=rng, n_bootstrap=N_BOOTSTRAP)
    else:
        notes.append("no performance drift: the model's training-time evaluation has no "
                     "release to compare with")
    fairness = {"follow_up": fairness_gaps(performance["release"], thresholds=thresholds,
                                           rng=rng, n_bootstrap=N_BOOTSTRAP),
                "training": [] if training is None else fairness_gaps(
                    training, thresholds=thresholds, rng=rng, n_bootstrap=N_BOOTSTRAP)}
    return json_safe({
        "model_id": model.id, "performance": performance, "drift": drift,
        "features": _feature_results(bins, follow, release.noise_std, reference, rng),
        "fairness": fairness,
        "feature_release": {"noise_std": release.noise_std,
                            "bins": {b.name: b.labels for b in bins},
                            "histograms": follow},
        "l2_sensitivity": release.l2_sensitivity, "notes": notes})


def run_release_job(
    worker: Any, claimed: ClaimedJob[PayloadT],
    run_job: Callable[[Any, Job, PayloadT, np.random.Generator], dict[str, Any]],
) -> str:
    """Run one claimed release job (a monitoring run, a comparison) to its end: its results
    from ``run_job``, then the job finished, which settles its ledger entry (charged in full:
    its noise was drawn)."""
    with worker.database.session_scope() as session:
        job = session.get(Job, claimed.job_id)
        assert job is not None
        results = run_job(session, job, claimed.payload, np.random.default_rng())
    with worker.database.session_scope() as session:
        finished = queue.finish(session=session, job_id=claimed.job_id,
                                worker_id=worker.worker_id, status=SUCCEEDED, metrics=results)
    return SUCCEEDED if finished is not None else "lease lost: results discarded"

