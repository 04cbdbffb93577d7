"""A champion/challenger comparison on the shared queue: one DP release, then post-processing.

The release (``release_pair``) counts every row of the follow-up's evaluation part once in
each model's histograms (public score bin x outcome, overall and per subgroup grouping, on the
champion's training-time bins): 2 (1 + groupings) histograms, so the L2 sensitivity is
sqrt(2 (1 + groupings)) and every cell gets Gaussian noise of std noise_multiplier times
that, the one mechanism the follow-up's ledger admitted (``app.monitoring.comparison``).
Both evaluations, their difference with its interval and the verdict read only those noisy
counts (``worker.monitoring.drift.performance_drift``: challenger as the later side, so
"better" means the challenger is better beyond the noise).

The two histograms hold the same rows, so their errors are positively correlated; the
interval resamples each side independently, which makes it wider than a paired one: a
"better" verdict is conservative, never optimistic.
"""

from typing import Any

import numpy as np
import torch

from app.datasets import parts as dataset_parts
from app.datasets import service as dataset_service
from app.datasets.schema.encoding import encoder_for
from app.jobs.models import Job
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.monitoring.comparison_schemas import ComparisonPayload
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from worker.dp_histogram import Release, histogram_release
from worker.evaluation import evaluated, json_safe
from worker.monitoring.drift import performance_drift

N_BOOTSTRAP = 1000


def scores(model: TrainedModel, x: np.ndarray) -> np.ndarray:
    """The model's predicted probabilities for the rows ``x`` (the schema's features)."""
    network = registry_service.load_network(model)
    schema = registry_service.schema_of(model)
    with torch.inference_mode():
        inputs = torch.from_numpy(encoder_for(schema).encode(x).astype(np.float32))
        return torch.sigmoid(network(inputs).squeeze(-1)).double().numpy()


def release_pair(rows: dataset_parts.PartRows, probabilities: tuple[np.ndarray, np.ndarray],
                 *, edges: np.ndarray, noise_multiplier: float,
                 rng: np.random.Generator) -> tuple[Release, Release]:
    """The comparison's one Gaussian release: each model's evaluation histograms on the same
    rows and bins, every cell with noise of std ``noise_multiplier * sqrt(2 (1 +
    groupings))``."""
    others = 1 + len(rows.groups)  # the other model's histograms, under the same noise
    first, second = (histogram_release(rows.y.astype(np.int64), probability, rows.groups,
                                       edges=edges, noise_multiplier=noise_multiplier, rng=rng,
                                       other_histograms=others, public_rows=rows.rows)
                     for probability in probabilities)
    return first, second


LIKE_WITH_LIKE = ("a figure one model's release could not support is withheld for both models "
                  "(like with like)")


def withhold_alike(ours: Any, theirs: Any) -> bool:
    """Withhold, in both evaluations (same shape), every figure with an interval that either
    withholds: the two releases have the same noise and rows, so a figure shown for one model
    and withheld for the other would compare a number with nothing. True if any was."""
    changed = False
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in ours.keys() & theirs.keys():
            if f"{key}_ci" in ours and (ours[key] is None) != (theirs[key] is None):
                for side in (ours, theirs):
                    side[key] = side[f"{key}_ci"] = None
                    if key == "brier":
                        side["brier_baseline"] = None
                changed = True
            elif isinstance(ours[key], dict | list):
                changed = withhold_alike(ours[key], theirs[key]) or changed
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for a, b in zip(ours, theirs, strict=True):
            changed = withhold_alike(a, b) or changed
    return changed


def run(session: Any, job: Job, asked: ComparisonPayload,
        rng: np.random.Generator) -> dict[str, Any]:
    """The comparison's release and results (the caller finishes the job with them)."""
    champion = registry_service.get(session=session, model_id=asked.champion_id)
    challenger = registry_service.get(session=session, model_id=asked.challenger_id)
    dataset = dataset_service.get(session=session, dataset_id=job.dataset_id)
    rows = dataset_parts.load_parts(
        dataset, ledger_service.left_out_of(session=session, scope=Scope.job(job.id))).evaluation
    training = (champion.metrics or {})["release"]
    thresholds = dict((champion.metrics or {}).get("band_thresholds")
                      or champion.band_thresholds)
    edges = np.asarray(training["bins"][1:-1], dtype=float)
    first, second = release_pair(rows, (scores(champion, rows.x), scores(challenger, rows.x)),
                                 edges=edges, noise_multiplier=job.noise_multiplier, rng=rng)
    ours, theirs = (evaluated(rel, thresholds, rng, N_BOOTSTRAP) for rel in (first, second))
    notes = list(asked.notes)
    if withhold_alike(ours, theirs):
        notes.append(LIKE_WITH_LIKE)
    if dict(challenger.band_thresholds) != thresholds:
        notes.append("the models' high bands differ: precision and recall at the high band "
                     "are both taken at the champion's")
    return json_safe({
        "champion": ours, "challenger": theirs,
        "difference": performance_drift(ours["release"], theirs["release"],
                                        thresholds=thresholds, rng=rng,
                                        n_bootstrap=N_BOOTSTRAP),
        "l2_sensitivity": first.l2_sensitivity, "notes": notes})

