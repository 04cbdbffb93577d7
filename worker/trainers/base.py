"""The trainer seam: how a family's model is fitted, whatever spends its privacy.

A trainer is ``fit(plan, data, on_report) -> FittedModel``. The plan is the job's (its
family, its settings, its delta and the event the ledger reserved for it); the data are the
job's loaded parts (``app.flows.job_run.LoadedData``); ``on_report`` records progress, commits
the spend so far and says whether to go on. What comes back is what the rest of the run
needs and nothing DP-SGD-specific: a torch module mapping the encoded inputs to one logit
(calibration, artifacts and scoring use it as they use any network), the family's part of
the artifact config, and the dp-accounting events it actually spent.

DP-SGD is the default trainer (``worker.trainers.dp_sgd``); a family names another
(``Family.trainer``) and the worker finds it in ``worker.trainers.registry``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dp_accounting import DpEvent

from app.privacy.accounting import Mechanism

if TYPE_CHECKING:
    import torch
    from torch import nn

    from app.flows.job_run import LoadedData
    from worker.training import TrainingSpec

REPORTS_PER_JOB = 20


def report_interval(epochs: int) -> int:
    """Epochs between progress reports (and ledger commits, cancel checks, lease renewals).

    A full-batch job runs hundreds of one-step epochs: reporting each would cost a database
    transaction and a chain record per step. About ``REPORTS_PER_JOB`` reports per job, and
    always one after the last epoch. A job stops (cancel, shutdown) only at a report, so its
    committed steps are exactly the steps it ran.
    """
    return max(1, math.ceil(epochs / REPORTS_PER_JOB))


@dataclass(frozen=True)
class FitPlan:
    """What a trainer is asked to fit, detached from the database session.

    Attributes:
        kind: the family's name (``app.families``).
        hidden_units: the request's hidden width (a family that has none ignores it).
        delta: the job's delta.
        seed: the request's seed (initial weights and other public randomness only; the
            noise is drawn from fresh OS entropy).
        settings: the job's stored training request: the family's own settings are there
            (a fitted family's under ``app.jobs.fitted.RELEASE_KEY``).
        event: what the ledger reserved for the job (its whole planned release).
        spec: DP-SGD's plan (steps, sample rate, noise, clip); None for another trainer.
    """

    kind: str
    hidden_units: int
    delta: float
    seed: int
    settings: Mapping[str, Any]
    event: DpEvent
    spec: TrainingSpec | None = None


History = Sequence[Mechanism | DpEvent]
"""What a run spent, as the accountants compose it (DP-SGD's steps as ``Mechanism``s)."""


@dataclass(frozen=True)
class Report:
    """Progress after a unit of work (DP-SGD: an epoch; a one-release fit: the fit).

    Attributes:
        epoch: units done; epochs: units planned.
        steps: the ledger entry's steps spent so far (DP-SGD's noisy steps; 1 for a release
            charged whole): what the report commits.
        spent: what was spent so far; empty for a non-private run.
    """

    epoch: int
    epochs: int
    steps: int
    spent: History


OnReport = Callable[[Report], bool]
"""Called after each unit of work; False asks the trainer to stop there. Raises what the
worker raises (``worker.tasks.LeaseLost``: stop touching data now)."""


@dataclass
class FittedModel:
    """A fitted model and what it cost.

    Attributes:
        network: encoded inputs -> one logit, tagged with its family (``Family.network``);
            its last ``nn.Linear`` is its output layer (the DP calibration folds its map
            there).
        spent: what the fit actually spent (never less than it touched the data for).
        artifact_config: the family's part of the artifact config (what its
            ``from_artifact`` needs); None: ``Family.artifact_config(hidden_units=...)``.
        stopped_early: stopped at a report before the planned end (cancel, shutdown).
        epochs_completed: units of work done.
    """

    network: nn.Module
    spent: History
    artifact_config: dict[str, Any] | None = None
    stopped_early: bool = False
    epochs_completed: int = 0
    history: list[tuple[float, float, int]] = field(default_factory=list)
    """DP-SGD's accountant history (noise, sample rate, steps); empty for another trainer."""

    @property
    def events(self) -> list[DpEvent]:
        """``spent`` as dp-accounting events."""
        return [s.event if isinstance(s, Mechanism) else s for s in self.spent]


class Trainer(Protocol):
    """Fits one kind of model. Registered by name (``worker.trainers.registry``)."""

    name: str

    def fit(self, plan: FitPlan, data: LoadedData, on_report: OnReport, *,
            device: torch.device) -> FittedModel:
        """Fit ``plan`` on ``data``'s training part; report after each unit of work.

        A trainer that spends all at once reports once, after the fit, with the whole
        planned event spent (``Report(1, 1, 1, [plan.event])``); it must never spend more
        than ``plan.event``, which the ledger reserved.
        """
        ...


class SpentMoreThanReserved(RuntimeError):
    """A trainer spent more than the ledger reserved for its job: the job fails (its whole
    reservation charged), and the model it fitted is never stored."""


def check_spent(plan: FitPlan, fitted: FittedModel) -> None:
    """A one-release trainer's spend must fit within the event the ledger reserved: at every
    RDP order of the ledger's grid and in (epsilon, delta) at the job's delta. DP-SGD's steps
    are checked against its plan by its engine (``worker.training.check_plan``).

    Raises:
        SpentMoreThanReserved: naming what it spent and what was reserved.
    """
    from app.privacy.accounting import epsilon_by_accountant, rdp_curve

    if plan.spec is not None:
        return
    spent, reserved = list(fitted.spent), [plan.event]
    over_rdp = bool((rdp_curve(spent) > rdp_curve(reserved) * (1 + 1e-9) + 1e-12).any())
    eps_spent = epsilon_by_accountant(spent, plan.delta)["prv"]
    eps_reserved = epsilon_by_accountant(reserved, plan.delta)["prv"]
    if over_rdp or eps_spent > eps_reserved * (1 + 1e-9):
        raise SpentMoreThanReserved(
            f"the {plan.kind} trainer spent epsilon {eps_spent:.6g} (at delta {plan.delta:g}), "
            f"more than the {eps_reserved:.6g} its job reserved")
