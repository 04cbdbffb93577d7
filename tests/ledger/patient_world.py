"""A patient space driven as the service runs it, and an independent per-patient model of
what it may spend (``test_patient_budget_properties``).

The driver registers private uploads and sends their rows through the upload flow, submits
jobs and statistics releases through their flows, and ends jobs through the job and ledger
services (a cancel before start, a failed run, a run stopped early), each operation in a
thread and a transaction of its own, all of a round at once. The model knows each dataset's
patients from the test's own id sets, rebuilds every charged entry as a dp-accounting event
from its columns, and composes them with dp-accounting's ``RdpAccountant`` (``PLDAccountant``
for a single release): none of the app's block, filter or accounting code.
"""

import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from dp_accounting.dp_event import (
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    LaplaceDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
)
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from sqlalchemy import select

from app.auth.principal import Principal
from app.core.database import Database
from app.core.errors import Conflict, InvalidRequest
from app.datasets import parts, uploads
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.flows import upload as upload_flow
from app.jobs import service as job_service
from app.jobs.schemas import JobCreate
from app.ledger import service as ledger_service
from app.ledger import spaces
from app.ledger.errors import BudgetExceeded
from app.ledger.models import LedgerEntry
from app.ledger.release import Scope
from app.privacy import events
from app.statistics import noise as release_noise
from app.statistics import plan as planning
from app.statistics import service as statistics_service
from app.statistics.schemas import StatisticsCreate

SCHEMA = {
    "features": [{"name": "score", "label": "Score", "kind": "integer", "lower": 0,
                  "upper": 20, "reference": 5},
                 {"name": "flag", "label": "Flag", "kind": "binary", "reference": 0}],
    "outcome": {"name": "event", "label": "Event within a year",
                "bands": {"low_medium": 0.1, "medium_high": 0.3}},
    "id_column": "patient_id",
}
DELTA, MIN_ROWS = 1e-6, 160  # an upload's delta; rows enough for every part's size floor
FLOAT_SLACK = 1e-6  # two RDP implementations agree to far better than this
TIGHT_SLACK = 0.02  # PLD (here) against PRV (the app's tight accountant)
MARGIN = 0.05  # a refusal is wrong only when the model has at least this much room
ONE_SHOT = {"gaussian": GaussianDpEvent, "laplace": LaplaceDpEvent}


@dataclass(frozen=True)
class Charge:
    entry_id: int
    dataset_id: int
    event: DpEvent  # rebuilt from the entry's columns, at its charged steps
    left_out: dict[str, Any] | None = None  # as the entry recorded it at admission

    def reads(self, pattern: tuple[int, ...]) -> bool:
        """Whether the release read the patients now in exactly ``pattern``'s datasets: not
        when their datasets at admission (those of ``pattern`` its scope then held) are a
        pattern it left out."""
        if not self.left_out:
            return True
        then = sorted(set(pattern) & set(self.left_out["scope"]))
        return then not in [sorted(p) for p in self.left_out["patterns"]]


@dataclass
class Outcome:
    op: tuple[Any, ...]
    dataset_id: int | None = None
    result: str = "skipped"  # admitted | refused | invalid | done | skipped
    scope: str | None = None
    request: Any = None
    job_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # a refusal's 409 members


@dataclass
class World:
    """One example's datasets, their patients (the test's own record) and admitted jobs."""

    db: Database
    folder: Path
    tag: str
    members: dict[int, set[str]] = field(default_factory=dict)
    budgets: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    jobs: list[int] = field(default_factory=list)

    def patterns(self) -> Counter[tuple[int, ...]]:
        """How many patients are in exactly each list of datasets (what blocks should be)."""
        everyone = set().union(*self.members.values())
        return Counter(tuple(sorted(d for d, ids in self.members.items() if p in ids))
                       for p in everyone)


# --------------------------------------------------------------------------- the app, driven


def register(world: World, epsilon: float) -> int:
    """A private upload awaiting its rows, with a budget of its own (the space's is 8)."""
    with world.db.session_scope() as session:
        dataset = dataset_service.create(session=session, request=DatasetCreate.model_validate(
            {"name": f"{world.tag}-{len(world.budgets)}", "source": {"kind": "upload"},
             "schema": SCHEMA, "privacy_budget": {"epsilon": epsilon, "delta": DELTA}}))
        world.budgets[dataset.id] = (epsilon, DELTA, float(dataset.filter_order or 0.0))
        return dataset.id


def send(world: World, dataset_id: int, ids: list[str]) -> None:
    """The upload flow as the route runs it: claim, receive, accept (which keys the ids in)."""
    rng = np.random.default_rng(dataset_id)
    score, flag = rng.integers(0, 21, len(ids)), rng.integers(0, 2, len(ids))
    event = rng.random(len(ids)) < 0.3
    path = world.folder / f"{world.tag}-{dataset_id}.csv"
    path.write_text("patient_id,score,flag,event\n" + "".join(
        f"{i},{s},{f},{int(e)}\n" for i, s, f, e in zip(ids, score, flag, event, strict=True)))
    claimed = upload_flow.claim(dataset_id=dataset_id)
    received = uploads.receive(claimed=claimed, path=path, media_type="text/csv")
    upload_flow.accept(received=received, principal=Principal.cli())


def upload(world: World, epsilon: float, ids: list[str]) -> int:
    """Register a private upload with its own budget, send its rows, and note its patients."""
    dataset_id = register(world, epsilon)
    send(world, dataset_id, ids)
    world.members[dataset_id] = set(ids)
    return dataset_id


def one(world: World, kind: str, dataset_id: int, value: float, extra: Any = 0) -> Outcome:
    """One operation on ``dataset_id`` alone (``play``'s ops name a ready dataset by index)."""
    (outcome,) = play(world, [(kind, sorted(world.members).index(dataset_id), value, extra)],
                      None)
    return outcome


def _submit(world: World, outcome: Outcome) -> None:
    kind, index, value, extra = outcome.op
    ready = sorted(world.members)
    dataset_id = outcome.dataset_id = ready[index % len(ready)]
    if kind == "stats":
        outcome.request = StatisticsCreate.model_validate({
            "queries": [{"kind": "count"}, {"kind": "mean", "feature": "score"}],
            "privacy": {"epsilon": value, "mechanism": extra}})
        with world.db.session_scope() as session:
            dataset = dataset_service.get(session=session, dataset_id=dataset_id)
            statistics_service.release(session=session, dataset=dataset, request=outcome.request)
    else:
        privacy = ({"target_epsilon": value} if kind == "job_epsilon"
                   else {"noise_multiplier": value})
        training = {"batch_size": extra, "epochs": 2} if extra else {}
        outcome.request = JobCreate.model_validate(
            {"dataset_id": dataset_id, "privacy": privacy, "training": training})
        with world.db.session_scope() as session:
            job = training_flow.submit_training(session=session, request=outcome.request)
            outcome.job_id = job.id


def _end(world: World, outcome: Outcome) -> None:
    """A cancel before start, a failed run (charged in full) or one stopped early."""
    kind, index, value, _ = outcome.op
    job_id = world.jobs[index % len(world.jobs)]
    with world.db.session_scope() as session:
        if kind == "cancel":
            job_service.cancel(session=session, job=job_service.get(session=session,
                                                                    job_id=job_id))
        elif kind == "fail":
            ledger_service.settle(session=session, scope=Scope.job(job_id), stopped_early=False)
        else:
            steps = job_service.get(session=session, job_id=job_id).steps
            ledger_service.commit_steps(session=session, scope=Scope.job(job_id),
                                        steps=max(1, int(value * steps)))
    if kind == "partial":
        with world.db.session_scope() as session:
            ledger_service.settle(session=session, scope=Scope.job(job_id), stopped_early=True)


def play(world: World, ops: list[tuple[Any, ...]], sent: tuple[int, list[str]] | None
         ) -> list[Outcome]:
    """Run a round's operations (and ``sent``: an upload's dataset and ids) at once, one
    thread and transaction each. ``ops``: (kind, index of a ready dataset or of an earlier
    job, value, extra); kinds: job_epsilon, job_noise (value; extra: batch size or 0), stats
    (epsilon; extra: mechanism), cancel, fail, partial (value: the share of steps run)."""
    outcomes = [Outcome(op) for op in ops]
    start = threading.Barrier(len(ops) + (sent is not None))
    failures: list[BaseException] = []

    def run(outcome: Outcome) -> None:
        start.wait()
        try:
            if outcome.op[0] in ("cancel", "fail", "partial"):
                if world.jobs:
                    _end(world, outcome)
                    outcome.result = "done"
            else:
                _submit(world, outcome)
                outcome.result = "admitted"
        except BudgetExceeded as refused:
            outcome.result, outcome.scope = "refused", refused.extra["budget_scope"]
            outcome.detail = refused.extra
        except InvalidRequest:  # a size floor at this epsilon: refused before the ledger
            outcome.result = "invalid"
        except Conflict:  # a cancel that another cancel of the same job beat
            outcome.result = "done"
        except BaseException as error:  # noqa: BLE001 - re-raised in the main thread
            failures.append(error)

    def deliver() -> None:
        start.wait()
        try:
            assert sent is not None
            send(world, *sent)
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    threads = [threading.Thread(target=run, args=(o,)) for o in outcomes]
    threads += [threading.Thread(target=deliver)] if sent is not None else []
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return outcomes


# --------------------------------------------------------------------------- the model


def _rebuilt(entry: LedgerEntry, steps: int) -> DpEvent:
    """The entry's release from its columns (not its stored event), at ``steps``."""
    if entry.statistics_release_id is not None:
        return ComposedDpEvent([ONE_SHOT[entry.mechanism](c) for c in entry.components or []])
    step = PoissonSampledDpEvent(entry.sample_rate, GaussianDpEvent(entry.noise_multiplier))
    return SelfComposedDpEvent(step, steps)


def charges_of(world: World) -> tuple[dict[int, list[Charge]], int]:
    """The charged entries of the world's datasets, and the largest entry id of any status."""
    found: dict[int, list[Charge]] = {d: [] for d in world.budgets}
    last = 0
    with world.db.session_scope() as session:
        for entry in session.scalars(select(LedgerEntry).where(
                LedgerEntry.dataset_id.in_(list(world.budgets))).order_by(LedgerEntry.id)):
            last = max(last, entry.id)
            # The stored event is the one its columns describe (what the model composes).
            assert events.from_json(entry.event) == _rebuilt(entry, entry.steps), entry.id
            if entry.charged_steps > 0:
                found[entry.dataset_id].append(
                    Charge(entry.id, entry.dataset_id, _rebuilt(entry, entry.charged_steps),
                           entry.left_out))
    return found, last


def room(history: list[DpEvent], epsilon: float, delta: float, order: float) -> float:
    """How much of ``epsilon`` the filter leaves after ``history`` (negative: overspent), by
    dp-accounting: RDP at the one order converted at ``delta``, or, for a single release, its
    own tight epsilon (the first-release rule), by PLD: up to ``TIGHT_SLACK`` above the app's
    PRV figure, which that slack is added back for."""
    if not history:
        return epsilon
    rdp = RdpAccountant(orders=[order])
    for event in history:
        rdp.compose(event)
    room = epsilon - rdp.get_epsilon(delta)
    if room >= 0 or len(history) > 1:
        return room
    tight = PLDAccountant().compose(history[0]).get_epsilon(delta)
    return max(room, epsilon - tight + TIGHT_SLACK)


def _space(world: World) -> tuple[float, float, float]:
    with world.db.session_scope() as session:
        space = spaces.organisation(session=session)
        return space.budget_epsilon, space.budget_delta, space.filter_order


def _requested_event(world: World, outcome: Outcome) -> DpEvent:
    """What a refused request would have charged, planned again from public facts."""
    with world.db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=outcome.dataset_id or 0)
        if isinstance(outcome.request, JobCreate):
            return job_service.training_event(job_service.plan(dataset=dataset,
                                                               request=outcome.request))
        privacy = outcome.request.privacy
        plans = planning.plan(schema=parts.schema_of(dataset), request=outcome.request)
        return release_noise.event(release_noise.calibrate(
            plans, mechanism=privacy.mechanism, epsilon=privacy.epsilon,
            delta=privacy.delta or dataset.budget_delta))


def check(world: World, outcomes: list[Outcome], before: dict[int, list[Charge]],
          last: int) -> dict[int, list[Charge]]:
    """After a round: nobody over a budget, the blocks as the ids say, and every refusal one
    the model must make. ``before`` and ``last``: the charges and largest entry id before the
    round (``charges_of``). Returns the charges now."""
    charges, _ = charges_of(world)
    space = _space(world)
    patterns = world.patterns()
    for pattern, size in patterns.items():  # no patient over the per-patient budget
        read = [c for d in pattern for c in charges[d] if c.reads(pattern)]
        left = room([c.event for c in read], *space)
        entries = [c.entry_id for c in read]
        assert left >= -FLOAT_SLACK, f"{size} patients of {pattern}: {-left:.4g} over ({entries})"
    for dataset_id, budget in world.budgets.items():  # nor any dataset over its own
        left = room([c.event for c in charges[dataset_id]], *budget)
        assert left >= -FLOAT_SLACK, f"dataset {dataset_id}: {-left:.4g} over its budget"
    with world.db.session_scope() as session:
        live = Counter[tuple[int, ...]]()
        for block in spaces.live_blocks(session=session, space_id=spaces.organisation(
                session=session).id):
            if block.datasets[0] in world.budgets:
                live[tuple(block.datasets)] += block.size
    assert live == patterns
    # Everything any interleaving could have charged when a refusal was decided: the round's
    # start, plus every entry the round added (cancels and early stops only ever take back).
    most = {d: [*before.get(d, []), *(c for c in charges[d] if c.entry_id > last)]
            for d in charges}
    for outcome in outcomes:
        if outcome.result != "refused":
            continue
        # Only the dataset's own budget refuses (public facts); patients are left out instead.
        assert outcome.scope == "dataset", outcome
        dataset_id, wanted = outcome.dataset_id or 0, _requested_event(world, outcome)
        history = [c.event for c in most[dataset_id]]
        left = room([*history, wanted], *world.budgets[dataset_id])
        assert left < MARGIN, (outcome, left)
    return charges
