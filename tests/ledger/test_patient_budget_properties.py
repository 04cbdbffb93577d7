"""Hypothesis: the patient budget holds for any mix of overlapping uploads and
concurrent releases, judged by an independent per-patient composition.

An example draws *cells* of patients and uploads 2-4 private tables into the organisation's
patient space, each a union of cells (patients shared, new and left out at random), then plays
rounds of operations all at once, one thread and one transaction each: jobs at a target epsilon
or a noise multiplier, statistics releases (Gaussian, Laplace), cancels before start, runs that
failed (charged in full) or stopped early (charged for the steps they took); each round's upload
races its releases. After every round, without the app's blocks or filter code:

* every patient (grouped by the datasets that hold them, from the test's own id sets) stays
  within the per-patient budget: the charged entries of those datasets, rebuilt as dp-accounting
  events from their columns and composed by dp-accounting's ``RdpAccountant`` at the space's
  order, or, for a patient's one charged release, its own tight (PLD) epsilon (the first-release
  rule); each dataset's own filter likewise;
* the live blocks are exactly the test's membership patterns with their sizes;
* every refusal is one the model must make: with everything any interleaving of the round could
  have charged by then, the filter the 409 names (``budget_scope``) has no room. Releases on one
  dataset therefore never use up the budget of patients only in another.

The fast lane plays 3 small examples on SQLite; the slow lane 15 larger ones on SQLite and
PostgreSQL. Two examples pin what random ones may miss: a disjoint cohort takes nearly the whole
per-patient budget next to an exhausted re-export, and nine releases race on three re-exports
(the space lock; the driver and the model are in ``tests.ledger.patient_world``).
"""

import itertools
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from app.core.database import Database, set_database
from app.core.settings import settings as app_settings
from app.datasets import service as dataset_service
from app.ledger import chain
from app.ledger.models import LedgerEntry
from app.statistics import cohort as cohort_cache
from tests.ledger.patient_world import (
    MIN_ROWS,
    World,
    charges_of,
    check,
    one,
    play,
    register,
    send,
    upload,
)
from tests.ledger.test_patient_budget import _decided

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

_EXAMPLES = itertools.count()


@pytest.fixture
def org(any_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """The database the upload flow opens its own sessions on, and a data directory of its own."""
    monkeypatch.setattr(app_settings, "data_dir", tmp_path / "data")
    set_database(any_db)
    try:
        yield any_db
    finally:
        set_database(None)


# (kind, which ready dataset or earlier job, value, extra): ``patient_world.play``.
OPS = st.one_of(
    st.tuples(st.just("job_epsilon"), st.integers(0, 9), st.sampled_from([0.5, 1.0, 2.0, 4.0, 7.5]),
              st.sampled_from([0, 32, 64])),
    st.tuples(st.just("job_noise"), st.integers(0, 9), st.sampled_from([0.8, 1.2, 2.0]),
              st.sampled_from([32, 64])),
    st.tuples(st.just("stats"), st.integers(0, 9), st.sampled_from([0.3, 1.0, 3.0]),
              st.sampled_from(["gaussian", "laplace"])),
    st.tuples(st.sampled_from(["cancel", "fail", "partial"]), st.integers(0, 9),
              st.sampled_from([0.25, 0.5]), st.just("")),
)


@st.composite
def scenarios(draw: st.DrawFn, ops: int, extra_rounds: int) -> dict[str, Any]:
    """Cells of 1-90 patients; 2-4 uploads, each a set of cells and a budget of its own; a
    round per upload after the first (which races it) and up to ``extra_rounds`` - 1 more."""
    cells = draw(st.lists(st.integers(1, 90), min_size=3, max_size=6))
    uploads_ = draw(st.lists(st.sets(st.integers(0, len(cells) - 1), min_size=1),
                             min_size=2, max_size=4))
    return {
        "cells": cells, "uploads": uploads_,
        "budgets": [draw(st.sampled_from([4.0, 8.0, 12.0])) for _ in uploads_],
        "rounds": draw(st.lists(st.lists(OPS, min_size=1, max_size=ops),
                                min_size=len(uploads_),
                                max_size=len(uploads_) - 1 + extra_rounds)),
    }


def _cohorts(tag: str, scenario: dict[str, Any]) -> list[list[str]]:
    """Each upload's ids: its cells, padded with patients of its own to ``MIN_ROWS``."""
    cells = [[f"{tag}-c{k}-{i}" for i in range(n)] for k, n in enumerate(scenario["cells"])]
    found = []
    for k, chosen in enumerate(scenario["uploads"]):
        ids = [p for c in sorted(chosen) for p in cells[c]]
        found.append(ids + [f"{tag}-u{k}-{i}" for i in range(max(0, MIN_ROWS - len(ids)))])
    return found


def _scenario(db: Database, folder: Path, scenario: dict[str, Any]) -> Counter[str]:
    """Play the scenario, checking the model after every round and the chains at the end."""
    world = World(db, folder, f"x{next(_EXAMPLES)}")
    cohorts = _cohorts(world.tag, scenario)
    pending = [(register(world, e), ids)
               for e, ids in zip(scenario["budgets"], cohorts, strict=True)]
    first, *later = pending
    send(world, *first)
    world.members[first[0]] = set(first[1])
    charges, last = charges_of(world)
    seen = Counter[str]()
    for number, ops in enumerate(scenario["rounds"]):
        sent = later[number] if number < len(later) else None
        outcomes = play(world, ops, sent)
        if sent is not None:
            world.members[sent[0]] = set(sent[1])
        charges = check(world, outcomes, charges, last)
        last = charges_of(world)[1]
        world.jobs += [o.job_id for o in outcomes if o.job_id is not None]
        seen.update(f"{o.op[0]} {o.result} {o.scope or ''}".strip() for o in outcomes)
    with db.session_scope() as session:
        for dataset_id in world.budgets:
            assert chain.verify(session=session, dataset_id=dataset_id)["valid"]
    for name in seen:
        event(name)  # pytest --hypothesis-show-statistics: what the examples exercised
    return seen


def _settings(examples: int) -> Any:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


@_settings(3)
@given(scenario=scenarios(ops=4, extra_rounds=2))
def test_no_patient_overspends_and_no_refusal_is_unfounded(
        org: Database, tmp_path: Path, scenario: dict[str, Any]) -> None:
    _scenario(org, tmp_path, scenario)


@pytest.mark.slow
@_settings(15)
@given(scenario=scenarios(ops=7, extra_rounds=4))
def test_no_patient_overspends_under_many_racing_releases(
        org: Database, tmp_path: Path, scenario: dict[str, Any]) -> None:
    _scenario(org, tmp_path, scenario)


def _left_out(db: Database) -> dict[int, Any]:
    with db.session_scope() as session:
        return {e.id: _decided(e.left_out) for e in session.scalars(select(LedgerEntry))}


def test_a_disjoint_cohort_keeps_its_whole_budget_while_shared_patients_are_spent(
        org: Database, tmp_path: Path) -> None:
    """Releases on a re-export use up its shared patients' budget, and then leave them out
    while the datasets' own budgets (12) admit them; a disjoint cohort's release of nearly
    the whole per-patient budget is admitted next to them and reads all of its patients."""
    world = World(org, tmp_path, f"d{next(_EXAMPLES)}")
    march = [f"{world.tag}-n{i}" for i in range(200)]
    north = upload(world, 12.0, march)
    april = upload(world, 12.0, march[20:] + [f"{world.tag}-m{i}" for i in range(20)])
    south = upload(world, 12.0, [f"{world.tag}-s{i}" for i in range(200)])
    charges, last = charges_of(world)
    spent = [one(world, "job_epsilon", (north, april)[k % 2], 4.0) for k in range(4)]
    assert [o.result for o in spent] == ["admitted"] * 4  # no patient refuses anything
    left = _left_out(org)
    shared = {"scope": [north, april], "patterns": [[north, april]]}
    # two releases of 4 compose within 8; the third and fourth leave the shared patients out
    assert [left[e] for e in sorted(left)[-4:]] == [None, None, shared, shared]
    disjoint = [one(world, "job_epsilon", south, 7.9), one(world, "stats", south, 1.0, "laplace")]
    assert [o.result for o in disjoint] == ["admitted", "admitted"]
    now = _left_out(org)  # the job reads every patient; the statistics then find no room
    assert [now[e] for e in sorted(now) if e > max(left)] == [
        None, {"scope": [south], "patterns": [[south]]}]
    check(world, [*spent, *disjoint], charges, last)


@pytest.mark.parametrize("seed", range(3))
def test_releases_racing_on_datasets_that_share_patients_never_overspend(
        org: Database, tmp_path: Path, seed: int) -> None:
    """Nine releases at once on three re-exports of one cohort (each dataset's own budget, 12,
    is not what binds): the space's lock serialises them, so the patients they share end
    within their budget of 8 (without it, PostgreSQL let concurrent admissions on different
    datasets that each missed the other's charge, and the shared patients overspent)."""
    rng = random.Random(seed)
    world = World(org, tmp_path, f"r{next(_EXAMPLES)}")
    cohort = [f"{world.tag}-p{i}" for i in range(200)]
    for k in range(3):
        upload(world, 12.0, cohort[5 * k:] + [f"{world.tag}-k{k}-{i}" for i in range(5 * k)])
    with org.session_scope() as session:  # rows in memory: the releases reach the lock together
        for dataset_id in world.members:
            cohort_cache.load(dataset_service.get(session=session, dataset_id=dataset_id))
    charges, last = charges_of(world)
    ops = [("job_epsilon", k % 3, rng.choice([4.0, 5.0]), rng.choice([0, 32]))
           if rng.random() < 0.7 else ("stats", k % 3, 3.0, "gaussian") for k in range(9)]
    outcomes = play(world, ops, None)
    check(world, outcomes, charges, last)
    seen = Counter(o.result for o in outcomes)
    assert seen["admitted"] >= 1, seen
    assert any(_left_out(org).values()), seen  # the patients' budget bound: some left out
