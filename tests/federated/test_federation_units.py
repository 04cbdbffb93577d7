"""The federation's parts without a network: the coordinator's sum of the sites' noisy
evaluations, a site's charge-ahead settlement on its ledger (settle and the reaper), and the
site's plan (its noise reaches the federation's target at its own sample rate)."""

import json
import math
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select, update

from app.auth.principal import Principal
from app.core.database import Database
from app.core.errors import InvalidRequest
from app.core.time import utcnow
from app.datasets import service as dataset_service
from app.datasets.models import Dataset
from app.datasets.schemas import DatasetCreate
from app.federation import plan
from app.federation import service as federation_service
from app.federation.models import Federation
from app.federation.schemas import FederatedRecipe, FederationCreate, FederationJoin
from app.flows import federation as federation_flow
from app.flows import training as training_flow
from app.jobs import queue
from app.jobs.models import FEDERATED, QUEUED, Job
from app.jobs.schemas import JobCreate
from app.ledger import service as ledger_service
from app.ledger.models import LedgerEntry
from app.ledger.release import Scope
from app.privacy.accounting import MAX_NOISE_MULTIPLIER, poisson_plan
from tests.conftest import FAST_TRAINING, small_dataset
from worker.evaluation import evaluate
from worker.federated_coordinator import summed_evaluation
from worker.training import epsilon_of

THRESHOLDS = {"low_medium": 0.2, "medium_high": 0.5}
SEXES = ["female", "male"]
ROUNDS, LOCAL_STEPS = 5, 4


# --------------------------------------------------------------------------- summed evaluation


def site_rows(seed: int, n_labels: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A site's held-out outcomes, calibrated probabilities and group codes (random)."""
    rng = np.random.default_rng(seed)
    n = 400 + 100 * seed
    p = rng.uniform(0.0, 1.0, n)
    y = (rng.uniform(0.0, 1.0, n) < p).astype(np.int64)
    return y, p, rng.integers(0, n_labels, n)


def site_evaluation(seed: int, noise: float, labels: list[str] | None = None) -> dict[str, Any]:
    """What a site returns to the coordinator: its released histograms (JSON, as sent)."""
    names = SEXES if labels is None else labels
    y, p, codes = site_rows(seed, len(names))
    metrics = evaluate(y, p, groups={"sex": (codes, names)}, noise_multiplier=noise,
                       band_thresholds=THRESHOLDS, rng=np.random.default_rng(seed + 100),
                       n_bootstrap=0)
    sent = {"release": metrics["release"], "band_thresholds": metrics["band_thresholds"]}
    return dict(json.loads(json.dumps(sent)))


def summed(evaluations: list[dict[str, Any]]) -> dict[str, Any]:
    result = summed_evaluation(evaluations)
    assert result is not None
    return result


def column_sum(evaluations: list[dict[str, Any]], *path: str) -> np.ndarray:
    """The element-wise sum over sites of the histogram column at ``path``."""
    def at(evaluation: dict[str, Any]) -> np.ndarray:
        node: Any = evaluation["release"]["histograms"]
        for key in path:
            node = node[key]
        return np.asarray(node, dtype=np.float64)

    return np.sum([at(e) for e in evaluations], axis=0)


def test_the_sum_adds_the_sites_noisy_counts_and_their_noise() -> None:
    sites = [site_evaluation(1, 0.5), site_evaluation(2, 1.0), site_evaluation(3, 2.0)]
    release = summed(sites)["release"]
    for column in ("negatives", "positives"):
        assert release["histograms"]["all"][column] == pytest.approx(
            column_sum(sites, "all", column), abs=2e-4)
        for label in SEXES:
            assert release["histograms"]["by_grouping"]["sex"][label][column] == pytest.approx(
                column_sum(sites, "by_grouping", "sex", label, column), abs=2e-4)
    stds = [site["release"]["noise_std"] for site in sites]
    assert release["noise_std"] == pytest.approx(math.sqrt(sum(s * s for s in stds)), abs=1e-4)
    assert release["groupings"] == {"sex": SEXES}
    assert release["bins"] == sites[0]["release"]["bins"]


def test_different_groupings_are_dropped_and_the_overall_sum_kept() -> None:
    sites = [site_evaluation(1, 1.0), site_evaluation(2, 1.0, ["female", "male", "other"])]
    result = summed(sites)
    release = result["release"]
    assert release["groupings"] == {} and release["histograms"]["by_grouping"] == {}
    assert result["subgroups"] == []
    assert release["histograms"]["all"]["positives"] == pytest.approx(
        column_sum(sites, "all", "positives"), abs=2e-4)
    assert release["noise_std"] == pytest.approx(math.sqrt(2) * sites[0]["release"]["noise_std"],
                                                 abs=1e-4)


def test_exact_sites_sum_to_the_pooled_evaluation() -> None:
    """Post-processing of the sum: with exact counts it is the pooled data's evaluation."""
    sites = [site_evaluation(1, 0.0), site_evaluation(2, 0.0)]
    y, p, codes = (np.concatenate(part) for part in zip(site_rows(1), site_rows(2), strict=True))
    exact = evaluate(y, p, groups={"sex": (codes, SEXES)}, noise_multiplier=0.0,
                     band_thresholds=THRESHOLDS, rng=np.random.default_rng(0), n_bootstrap=0)
    result = summed(sites)
    assert result["release"]["histograms"] == exact["release"]["histograms"]
    assert result["roc_auc"] == pytest.approx(exact["roc_auc"], abs=1e-4)


def test_no_evaluation_gives_none() -> None:
    assert summed_evaluation([]) is None


# --------------------------------------------------------------------------- ledger


def _dataset(session: Any, **changes: Any) -> Dataset:
    request = DatasetCreate.model_validate(small_dataset(**changes))
    return dataset_service.create(session=session, request=request)


def _declaration(dataset: Dataset, **recipe: Any) -> FederationCreate:
    return FederationCreate.model_validate({
        "name": "crisis-network", "role": "site", "address": "127.0.0.1:9092",
        "schema_sha256": dataset.schema_hash,
        "recipe": {"rounds": ROUNDS, "local_steps": LOCAL_STEPS, "target_epsilon": 2.0,
                   **recipe},
        "sites": [{"name": "clinic-a"}, {"name": "clinic-b"}], "site_name": "clinic-a"})


def _federated_job(db: Database) -> int:
    """A site's joined (queued, reserved) job of ROUNDS x LOCAL_STEPS steps."""
    with db.session_scope() as session:
        dataset = _dataset(session)
        federation = federation_service.create(session=session, request=_declaration(dataset))
        job = federation_flow.join(session=session, federation_id=federation.id,
                                   request=FederationJoin(dataset_id=dataset.id),
                                   principal=Principal.cli())
        return job.id


def _train_job(db: Database) -> int:
    with db.session_scope() as session:
        dataset = _dataset(session)
        request = JobCreate.model_validate({"dataset_id": dataset.id,
                                            "privacy": {"noise_multiplier": 2.0},
                                            "training": FAST_TRAINING})
        return training_flow.submit_training(session=session, request=request).id


def _claim_and_commit(db: Database, job_id: int, epochs: int, steps_per_epoch: int) -> None:
    """Claim ``job_id`` and record ``epochs`` epochs (rounds) as its worker does."""
    with db.session_scope() as session:
        claimed = queue.claim(session=session, worker_id="site", lease_seconds=60)
        assert claimed is not None and claimed.id == job_id
    for epoch in range(1, epochs + 1):
        progress = queue.EpochProgress(epoch, epoch * steps_per_epoch, 1.0, 1.0)
        with db.session_scope() as session:
            owned, _ = queue.record_epoch(session=session, job_id=job_id, worker_id="site",
                                          progress=progress, lease_seconds=60)
            assert owned


def _charge(db: Database, job_id: int) -> tuple[int, int, bool, str]:
    """(planned steps, charged steps, released, status) of the job's ledger entry."""
    with db.session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert entry is not None
        return entry.steps, entry.charged_steps, entry.released, str(entry.status)


def _expire(db: Database, job_id: int) -> None:
    with db.session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id)
                        .values(lease_until=utcnow() - timedelta(seconds=1)))


def test_charged_ahead_keeps_the_committed_rounds_and_releases_the_rest(db: Database) -> None:
    job_id = _federated_job(db)
    assert _charge(db, job_id) == (ROUNDS * LOCAL_STEPS, ROUNDS * LOCAL_STEPS, False, "reserved")
    _claim_and_commit(db, job_id, epochs=2, steps_per_epoch=LOCAL_STEPS)
    with db.session_scope() as session:
        ledger_service.settle(session=session, scope=Scope.job(job_id), stopped_early=False,
                              charged_ahead=True)
    assert _charge(db, job_id) == (ROUNDS * LOCAL_STEPS, 2 * LOCAL_STEPS, True, "committed")


def test_charged_ahead_with_no_round_releases_everything(db: Database) -> None:
    job_id = _federated_job(db)
    _claim_and_commit(db, job_id, epochs=0, steps_per_epoch=LOCAL_STEPS)
    with db.session_scope() as session:
        ledger_service.settle(session=session, scope=Scope.job(job_id), stopped_early=False,
                              charged_ahead=True)
    assert _charge(db, job_id) == (ROUNDS * LOCAL_STEPS, 0, True, "released")


def test_a_failed_site_keeps_its_rounds_charged(db: Database) -> None:
    """``queue.finish`` settles a federated job charged-ahead, whatever its status."""
    job_id = _federated_job(db)
    _claim_and_commit(db, job_id, epochs=2, steps_per_epoch=LOCAL_STEPS)
    with db.session_scope() as session:
        finished = queue.finish(session=session, job_id=job_id, worker_id="site",
                                status="failed", error_code="federation_ended", error="ended")
        assert finished is not None
    assert _charge(db, job_id) == (ROUNDS * LOCAL_STEPS, 2 * LOCAL_STEPS, True, "committed")


def test_the_reaper_settles_a_lost_site_charged_ahead_and_a_lost_job_in_full(
    db: Database,
) -> None:
    federated, train = _federated_job(db), _train_job(db)
    _claim_and_commit(db, federated, epochs=2, steps_per_epoch=LOCAL_STEPS)
    with db.session_scope() as session:
        job = session.get(Job, train)
        assert job is not None
        steps_per_epoch = job.steps // job.epochs
    _claim_and_commit(db, train, epochs=1, steps_per_epoch=steps_per_epoch)
    _expire(db, federated)
    _expire(db, train)
    with db.session_scope() as session:
        assert sorted(queue.reap_expired(session=session)) == [federated, train]
    with db.session_scope() as session:
        for job_id in (federated, train):
            job = session.get(Job, job_id)
            assert job is not None
            assert (job.status, job.error_code) == ("failed", "worker_lost")
    assert _charge(db, federated) == (ROUNDS * LOCAL_STEPS, 2 * LOCAL_STEPS, True, "committed")
    planned, charged, released, status = _charge(db, train)
    assert (charged, released, status) == (planned, False, "committed")
    assert planned > steps_per_epoch  # the plain job was charged beyond what it committed


# --------------------------------------------------------------------------- the site's plan


def _site(dataset: Dataset, **recipe: Any) -> Federation:
    """The site's federation row as declared (not stored: ``site_job`` only reads it)."""
    declared = _declaration(dataset, **recipe)
    return Federation(id=7, name=declared.name, role=declared.role, address=declared.address,
                      schema_sha256=declared.schema_sha256,
                      recipe=declared.recipe.model_dump(mode="json"),
                      sites=[site.model_dump(mode="json") for site in declared.sites],
                      site_name=declared.site_name, state="declared", report=None)


@pytest.mark.parametrize(("target", "rounds", "local_steps", "batch_size"), [
    (2.0, 4, 25, None), (1.0, 10, 50, 256), (6.0, 2, 10, None), (3.0, 20, 5, 64),
])
def test_the_planned_noise_reaches_the_target_at_the_sites_rate(
    db: Database, target: float, rounds: int, local_steps: int, batch_size: int | None
) -> None:
    with db.session_scope() as session:
        dataset = _dataset(session)
        n_train = dataset.n_train
        job = plan.site_job(federation=_site(dataset, target_epsilon=target, rounds=rounds,
                                             local_steps=local_steps, batch_size=batch_size),
                            dataset=dataset)
    assert (job.kind, job.status, job.steps, job.epochs) == (FEDERATED, QUEUED,
                                                             rounds * local_steps, rounds)
    assert job.delta == 1e-5  # the dataset's budget delta
    if batch_size is None:
        assert job.sample_rate == 1.0 and job.training["batch_size"] == n_train
    else:
        assert job.sample_rate == poisson_plan(n_train, batch_size)[0] < 1.0
        assert job.training["batch_size"] == batch_size
    prv, _ = epsilon_of([(job.noise_multiplier, job.sample_rate, job.steps)], job.delta)
    assert target * 0.99 <= prv <= target + 1e-6
    assert "federation" not in job.training_request  # the part is the kind's payload
    federation = job.payload or {}
    assert (federation["id"], federation["site"], federation["rounds"],
            federation["local_steps"]) == (7, "clinic-a", rounds, local_steps)


def test_an_unreachable_target_names_the_recipes_target(db: Database) -> None:
    with db.session_scope() as session:
        dataset = _dataset(session)
        site = _site(dataset, target_epsilon=0.01, rounds=200, local_steps=1000)
        with pytest.raises(InvalidRequest) as refused:
            plan.site_job(federation=site, dataset=dataset)
    assert refused.value.field == "recipe.target_epsilon"
    assert "200000 steps" in refused.value.detail


def test_the_recipe_defaults_to_the_whole_training_part() -> None:
    assert FederatedRecipe.model_validate({"target_epsilon": 1.0}).batch_size is None


@pytest.mark.parametrize(("target", "local_steps", "rounds"), [
    (0.5, 50, 3), (1.0, 50, 11), (3.0, 50, 20), (0.5, 10, 15),
])
def test_default_rounds_are_cut_where_a_full_batch_would_pass_the_noise_cap(
        target: float, local_steps: int, rounds: int) -> None:
    recipe = FederatedRecipe.model_validate({"target_epsilon": target,
                                             "local_steps": local_steps})
    assert recipe.rounds == rounds
    steps = rounds * local_steps
    at_cap = [(MAX_NOISE_MULTIPLIER, 1.0, steps), (MAX_NOISE_MULTIPLIER, 1.0, steps + local_steps)]
    fits, one_more = (epsilon_of([m], 1e-6)[0] for m in at_cap)
    assert fits <= target and (rounds == 20 or one_more > target)


def test_declared_rounds_or_a_mini_batch_keep_their_rounds() -> None:
    assert FederatedRecipe.model_validate({"target_epsilon": 0.5, "rounds": 30}).rounds == 30
    assert FederatedRecipe.model_validate({"target_epsilon": 0.5, "batch_size": 64}).rounds == 20


def test_a_federation_at_epsilon_one_with_the_default_recipe_plans_within_the_cap(
        db: Database) -> None:
    with db.session_scope() as session:
        dataset = _dataset(session)
        site = _site(dataset)
        site.recipe = FederatedRecipe.model_validate({"target_epsilon": 1.0}).model_dump()
        job = plan.site_job(federation=site, dataset=dataset)
    assert job.steps == 11 * 50 and job.noise_multiplier <= MAX_NOISE_MULTIPLIER
