"""Admission over many blocks decides exactly as composing each block's entries afresh.

``app.ledger.admission`` computes each charged entry's RDP once per admission and reads only the
blocks that hold the dataset, filtered by the database (``spaces.patterns_of``: a substring of
the JSON text on SQLite, checked again, so dataset 1 must not take 11's blocks; containment on
PostgreSQL), and the uploads' blocks are opened in one batched INSERT
(``spaces.apply_upload``); ``bench/patient_budget.py`` measures why. Here, on both databases,
for overlapping uploads with partly charged ledgers: the live blocks are the id sets'
membership patterns, and every admission's decision, scope, spend and entries equal a
block-by-block recomputation with ``spend.spent_rdp`` (the code before that change)."""

import math
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy.orm import Session

from app.core.database import Database
from app.core.settings import settings
from app.datasets import service as dataset_service
from app.datasets.models import Dataset
from app.datasets.patients import patient_index
from app.datasets.schemas import DatasetCreate
from app.jobs.models import Job
from app.ledger import admission, spaces
from app.ledger import service as ledger_service
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.ledger.release import Scope
from app.privacy import accounting, events
from app.privacy.filter import RenyiFilter

DECLARED = {
    "features": [{"name": "score", "label": "Score", "kind": "integer", "lower": 0,
                  "upper": 20, "reference": 5}],
    "outcome": {"name": "event", "label": "Event within a year",
                "bands": {"low_medium": 0.1, "medium_high": 0.3}},
    "id_column": "patient_id",
}
CHARGED = accounting.Mechanism(2.0, 0.02, 500)  # about 36 fit one patient's budget of 8
CANDIDATES = [accounting.Mechanism(sigma, 0.02, 500) for sigma in (0.8, 1.0, 1.2, 2.0, 5.0)]


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _register(db: Database, name: str) -> int:
    """An upload in the organisation's space whose own budget (epsilon 100) never binds."""
    request = DatasetCreate.model_validate({
        "name": name, "source": {"kind": "upload"}, "schema": DECLARED,
        "privacy_budget": {"epsilon": 100, "delta": 1e-6}})
    with db.session_scope() as session:
        return dataset_service.create(session=session, request=request).id


def _reserve(session: Session, dataset_id: int) -> int:
    job = Job(dataset_id=dataset_id, noise_multiplier=CHARGED.noise_multiplier,
              sample_rate=CHARGED.sample_rate, steps=CHARGED.steps, epochs=5, delta=1e-7,
              max_grad_norm=1.0, training={})
    session.add(job)
    session.flush()
    dataset = session.get(Dataset, dataset_id)
    assert dataset is not None
    ledger_service.reserve(session=session, dataset=dataset, scope=Scope.job(job.id), event=CHARGED,
                           clip_norm=1.0, delta=job.delta)
    return job.id


def _charge(db: Database, dataset_id: int, k: int) -> None:
    """Two jobs (one committed, one reserved); every third dataset also a cancelled job
    (released: not charged) and one stopped after some steps (charged in part)."""
    with db.session_scope() as session:
        ledger_service.commit(session=session, scope=Scope.job(_reserve(session, dataset_id)))
        _reserve(session, dataset_id)
        if k % 3 == 0:
            ledger_service.release(session=session, scope=Scope.job(_reserve(session, dataset_id)))
            stopped = _reserve(session, dataset_id)
            ledger_service.commit_steps(session=session, scope=Scope.job(stopped), steps=200)
            ledger_service.settle(session=session, scope=Scope.job(stopped), stopped_early=True)


def _candidate(mechanism: accounting.Mechanism) -> LedgerEntry:
    """An entry as ``reserve`` builds it, not stored."""
    said = events.describe(mechanism.event)
    return LedgerEntry(id=None, dataset_id=0, job_id=0, event=events.to_json(mechanism.event),
                       mechanism=said.mechanism, noise_multiplier=mechanism.noise_multiplier,
                       sample_rate=mechanism.sample_rate, steps=mechanism.steps,
                       clip_norm=1.0, delta=1e-7, accountant="rdp")


def _reads(entry: LedgerEntry, datasets: list[int]) -> bool:
    """Whether ``entry``'s release read the patients of a block holding ``datasets`` (its
    recorded decision applied afresh: their datasets within its scope were not left out)."""
    stored = entry.left_out or {}
    then = sorted(set(datasets) & set(stored.get("scope", [])))
    return then not in [sorted(p) for p in stored.get("patterns", [])]


def _recomputed(session: Session, space: spaces.PatientSpace, dataset_id: int,
                entry: LedgerEntry) -> set[tuple[int, ...]]:
    """Every block that cannot afford ``entry``, composing each live block's entries afresh."""
    guard = space.guard
    blocks = [b for b in spaces.live_blocks(session=session, space_id=space.id)
              if dataset_id in b.datasets]
    ledgers = {d: ledger_spend.charged_entries(session=session, dataset_id=d)
               for d in {d for b in blocks for d in b.datasets}}
    refused = set()
    for block in blocks:
        charged = [e for d in block.datasets for e in ledgers[d] if _reads(e, block.datasets)]
        spent = ledger_spend.spent_rdp(charged, guard.order)
        if guard.admits(spent, ledger_spend.spent_rdp([entry], guard.order)):
            continue
        if not charged and ledger_spend.single_release_epsilon(
                entry, guard.delta) <= guard.epsilon:
            continue
        refused.add(tuple(block.datasets))
    return refused


@pytest.mark.slow
def test_admission_over_many_blocks_equals_composing_each_block_afresh(
        any_db: Database) -> None:
    rng = np.random.default_rng(29)
    cohorts = [set(rng.choice(300, int(rng.integers(60, 160)), replace=False).tolist())
               for _ in range(12)]  # 12 datasets: ids 1 and 11, 12 in one space
    datasets = []
    for k, cohort in enumerate(cohorts):
        dataset_id = _register(any_db, f"cohort-{k}")
        with any_db.session_scope() as session:
            patient_index.add_dataset(
                session=session, space_id=spaces.organisation(session=session).id,
                dataset_id=dataset_id, ids=pa.array([f"p-{p}" for p in sorted(cohort)]))
        _charge(any_db, dataset_id, k)
        datasets.append(dataset_id)

    decisions = Counter[str]()
    with any_db.session_scope() as session:
        space = spaces.organisation(session=session)
        live = [b for b in spaces.live_blocks(session=session, space_id=space.id)
                if set(b.datasets) <= set(datasets)]
        everyone = set().union(*cohorts)
        patterns = Counter(tuple(d for d, c in zip(datasets, cohorts, strict=True) if p in c)
                           for p in everyone)
        assert Counter({tuple(b.datasets): b.size for b in live}) == patterns
        assert len(live) > 40
        for dataset_id in datasets:
            holding = [b for b in live if dataset_id in b.datasets]
            assert [b.id for b in spaces.blocks_of(
                session=session, space_id=space.id, dataset_id=dataset_id)] == [
                b.id for b in holding]
            assert spaces.patterns_of(session=session, space_id=space.id,
                                      dataset_id=dataset_id) == {
                tuple(b.datasets) for b in holding}
            budget = ledger_service.LockedBudget(dataset_id, 100.0, 1e-6, None, space.id)
            for mechanism in CANDIDATES:
                entry = _candidate(mechanism)
                # The dataset's own budget (100) admits; its patients never refuse.
                assert admission.shortfall(session=session, dataset=budget, entry=entry) is None
                found = admission.patients_left_out(session=session, dataset=budget,
                                                    entry=entry)
                refusals = _recomputed(session, space, dataset_id, entry)
                if not refusals:
                    assert found is None
                    decisions["everyone read"] += 1
                    continue
                assert found is not None and found.patterns == refusals
                assert found.scope == {d for b in holding for d in b.datasets}
                decisions["some left out"] += 1
    assert decisions["everyone read"] > 10 and decisions["some left out"] > 10, decisions


def test_a_filter_takes_its_searches_tails_out_of_its_delta() -> None:
    """Searches run min(K, M) runs: a composition of them is within (1 + e^eps) times their
    summed P(K > M) of the analysed one, which the filter takes out of its delta."""
    guard = RenyiFilter(3.0, 1e-5, 8.0)
    plain, search = SimpleNamespace(tail_probability=None), SimpleNamespace(tail_probability=1e-8)
    assert ledger_spend.tailed(guard, [plain]) is guard  # type: ignore[list-item]
    tailed = ledger_spend.tailed(guard, [plain, search, search])  # type: ignore[list-item]
    assert tailed.delta == pytest.approx(1e-5 - (1 + math.exp(3.0)) * 2e-8)
    assert tailed.rdp_bound < guard.rdp_bound and tailed.order == guard.order
    spent = ledger_spend.tailed(guard, [search] * 10_000)  # type: ignore[list-item]
    assert spent.rdp_bound < 0  # tails past the filter's delta: nothing more is admitted
