"""A training job's hyper-parameter search: its plan, its event and its noise.

``"search": {"candidates": [...], "runs": "poisson" | "truncated_negative_binomial",
"mean_runs": k, "shape": eta}`` beside ``privacy`` and ``training``
(``app.jobs.search_schemas``): the worker trains a random number of DP-SGD runs, each on a
candidate drawn uniformly from the public list, scores each by a DP release on the calibration
part and keeps the best (``worker.search``); the whole search is one ledger entry,
``RepeatAndSelectDpEvent(one run, mean_runs, shape)`` (``app.privacy.selection``), admitted by
the same filter. The planner finds the per-run noise at which the whole search meets
``privacy.target_epsilon``, then M, the public number of runs the worker executes whatever K
(``selection.executed_runs``): fixed here, before anything is known of the data, at the job's
delta or its dataset budget's where smaller, so every figure it is stated at covers the tail.

A candidate is a partial ``training`` config: what it leaves out is ``training``'s. Every run
must be the same mechanism (the charge is one run's event repeated), so a candidate may change
what the noise does not see (model, optimizer, learning rate, momentum, clip norm, tail
average, hidden units), never the sampling plan (batch size, epochs) nor the seed or the
processes: those are ``training``'s, for every run.
"""

from typing import Any

from dp_accounting.dp_event import DpEvent, RepeatAndSelectDpEvent
from sqlalchemy.orm import object_session

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset
from app.families import create_family
from app.jobs import recipe
from app.jobs.schemas import TrainingConfig
from app.jobs.search_schemas import SEARCH_KEY, SearchOut, SearchRequest
from app.ledger import spaces
from app.privacy import accounting, events, selection
from app.privacy.accounting import MAX_NOISE_MULTIPLIER


def plan(*, search: SearchRequest, request_training: TrainingConfig, noise_multiplier: float,
         sample_rate: float, steps: int, delta: float, budget_delta: float | None,
         filters: tuple[tuple[float, float], ...] = ()) -> dict[str, Any]:
    """The stored plan: each candidate's changes (with the learning rate of its optimizer and
    model where neither it nor ``training`` sets one), the distribution and its shape, and the
    runs executed whatever K with the probability that K exceeds them.

    Args:
        delta: the job's delta; budget_delta: its dataset's (None: public, no budget).
        filters: the (epsilon, delta) of every filter that composes the search (its
            dataset's and its patients'): each holds a share for its tail.

    Raises:
        InvalidRequest: a candidate's family spends otherwise than ``training.model``'s (its
            ``training_event`` differs), so the runs would not be one mechanism; or the mean is
            too large for the tail to fit in MAX_EXECUTED_RUNS runs.
    """
    run = run_event(request_training.model, noise_multiplier, sample_rate, steps)
    if events.describe(run).mechanism != events.SUBSAMPLED_GAUSSIAN:
        raise InvalidRequest(
            f"{request_training.model!r} spends {events.describe(run).mechanism}, not DP-SGD's "
            "Poisson-subsampled Gaussian steps: a search repeats DP-SGD runs",
            field="training.model", allowed="families trained by DP-SGD")
    base = events.canonical(run)
    candidates = []
    for index, candidate in enumerate(search.candidates):
        changes = candidate.changes()
        model = str(changes.get("model", request_training.model))
        if events.canonical(run_event(model, noise_multiplier, sample_rate, steps)) != base:
            raise InvalidRequest(
                f"candidate {index}'s model {model!r} spends another DP event than "
                f"{request_training.model!r}: the runs of one search must be one mechanism",
                field=f"search.candidates.{index}.model",
                allowed="families whose training spends training.model's DpEvent")
        if "learning_rate" not in changes and request_training.learning_rate is None:
            changes["learning_rate"] = recipe.default_learning_rate(
                str(changes.get("optimizer", request_training.optimizer)), model)
        candidates.append(changes)
    shape = selection.shape_of(search.runs, search.shape)
    smallest = delta if budget_delta is None else min(delta, budget_delta)
    executed = _executed(selection.search_event(run, search.mean_runs, shape), smallest, search,
                         filters)
    return {"candidates": candidates, "runs": search.runs, "mean_runs": search.mean_runs,
            "shape": None if search.runs == selection.POISSON else shape,
            "executed_runs": executed.runs, "tail_probability": executed.tail_probability}


def _executed(event: DpEvent, delta: float, search: SearchRequest,
              filters: tuple[tuple[float, float], ...] = ()) -> selection.Executed:
    """``selection.executed_runs``, its refusal a 422 naming the mean that fits.

    Raises:
        InvalidRequest: naming ``search.mean_runs``.
    """
    assert isinstance(event, RepeatAndSelectDpEvent)
    try:
        return selection.executed_runs(event, delta, filters)
    except selection.TooManyRuns as refused:
        raise InvalidRequest(
            f"mean_runs {search.mean_runs:g} ({search.runs}) draws more than "
            f"{selection.MAX_EXECUTED_RUNS} runs too often: the worker executes a fixed number "
            "of runs whatever K, so that its timing cannot tell K, and P(K > that number) "
            "must be negligible against delta; use a smaller mean"
            + ("" if search.runs == selection.POISSON
               else ", a larger shape, or poisson runs"),
            field="search.mean_runs",
            allowed=f"[1, {refused.largest_mean:g}] for this distribution, epsilon and delta"
            if refused.largest_mean is not None else "none of poisson runs at this epsilon: "
            "truncated_negative_binomial runs, mean 1",
        ) from refused


def executed_of(stored: dict[str, Any], run: DpEvent, delta: float) -> selection.Executed:
    """The plan's executed runs and tail. A plan stored without them (queued before they were
    planned) gets them at the job's ``delta``, or MAX_EXECUTED_RUNS with whatever tail it has:
    its record states that tail either way."""
    if "executed_runs" in stored:
        return selection.Executed(int(stored["executed_runs"]), float(stored["tail_probability"]))
    event = event_of(stored, run)
    assert isinstance(event, RepeatAndSelectDpEvent)
    try:
        return selection.executed_runs(event, delta)
    except selection.TooManyRuns:
        most = selection.MAX_EXECUTED_RUNS
        tails = selection.tail_probabilities(stored["runs"], float(stored["mean_runs"]),
                                             shape_of(stored), most)
        return selection.Executed(most, float(tails[-1]))


def run_event(model: str, noise_multiplier: float, sample_rate: float, steps: int) -> DpEvent:
    """One run's event, as the family declares its training's (``Family.training_event``)."""
    return create_family(model).training_event(noise_multiplier=noise_multiplier,
                                               sample_rate=sample_rate, steps=steps)


def shape_of(stored: dict[str, Any]) -> float:
    """dp-accounting's shape of a stored plan (infinity: Poisson)."""
    return selection.shape_of(stored["runs"], stored.get("shape"))


def event_of(stored: dict[str, Any], run: DpEvent) -> DpEvent:
    """The whole search's event around one run's: what the ledger charges."""
    return selection.search_event(run, float(stored["mean_runs"]), shape_of(stored))


def stored_plan(training: dict[str, Any]) -> dict[str, Any] | None:
    """A job's stored search plan (its stored training request keeps it); None: one run."""
    found = training.get(SEARCH_KEY)
    return found if isinstance(found, dict) else None


def noise_for_target(*, search: SearchRequest, model: str, target_epsilon: float, delta: float,
                     sample_rate: float, steps: int) -> float:
    """The per-run noise at which the whole search meets ``target_epsilon``.

    Raises:
        SearchUnreachable (a ``TargetUnreachable``): not even the largest noise reaches it.
    """
    return selection.noise_for_search(
        target_epsilon=target_epsilon, delta=delta,
        run_of=lambda sigma: run_event(model, sigma, sample_rate, steps),
        mean=search.mean_runs, shape=selection.shape_of(search.runs, search.shape))


def epochs_for_target(*, search: SearchRequest, model: str, target_epsilon: float, delta: float,
                      sample_rate: float, steps_per_epoch: int, max_epochs: int) -> int | None:
    """The most epochs whose search reaches ``target_epsilon`` at the largest noise."""
    return selection.epochs_for_search(
        target_epsilon=target_epsilon, delta=delta, max_epochs=max_epochs,
        run_at=lambda epochs: run_event(model, MAX_NOISE_MULTIPLIER, sample_rate,
                                        epochs * steps_per_epoch),
        mean=search.mean_runs, shape=selection.shape_of(search.runs, search.shape))


def floor_epsilon(*, search: SearchRequest, model: str, delta: float, sample_rate: float,
                  steps: int) -> float:
    """The search's epsilon at the largest noise: the least a target may ask."""
    run = run_event(model, MAX_NOISE_MULTIPLIER, sample_rate, steps)
    return selection.search_epsilon(selection.search_event(
        run, search.mean_runs, selection.shape_of(search.runs, search.shape)), delta)


def view(*, training: dict[str, Any], noise_multiplier: float, sample_rate: float, steps: int,
         delta: float) -> SearchOut | None:
    """A job's search as its answer shows it: the plan, one run's epsilon and the total."""
    stored = stored_plan(training)
    if stored is None:
        return None
    run = run_event(str(training.get("model")), noise_multiplier, sample_rate, steps)
    tight = accounting.create_accountant("prv")
    total = selection.search_epsilon(event_of(stored, run), delta)
    return SearchOut.of(stored, run_epsilon=tight.epsilon([run], delta), total_epsilon=total,
                        executed=executed_of(stored, run, delta))


def filters_of(dataset: Dataset) -> tuple[tuple[float, float], ...]:
    """The (epsilon, delta) of the filters a release on ``dataset`` is composed by: its own
    budget's and its patient space's (public: the declared budgets)."""
    found = []
    if dataset.budget_epsilon is not None and dataset.budget_delta is not None:
        found.append((dataset.budget_epsilon, dataset.budget_delta))
    session = object_session(dataset)
    space = None if session is None or dataset.patient_space_id is None else \
        session.get(spaces.PatientSpace, dataset.patient_space_id)
    if space is not None:
        found.append((space.budget_epsilon, space.budget_delta))
    return tuple(found)


def tail_probability(training: dict[str, Any]) -> float | None:
    """A search job's P(K > M), as planned (None: not a search); the ledger records it."""
    plan = stored_plan(training)
    return None if plan is None else float(plan["tail_probability"])
