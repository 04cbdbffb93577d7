"""The default trainer: DP-SGD (``worker.training.train``, or ``torchrun`` processes for
``world_size`` > 1), reporting and committing its steps at each report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.families.base import DP_SGD
from app.privacy.accounting import Mechanism
from worker.launch import train_distributed
from worker.trainers.base import FitPlan, FittedModel, OnReport, Report, report_interval
from worker.training import EpochCallback, TrainingResult, train

if TYPE_CHECKING:
    import torch

    from app.flows.job_run import LoadedData


def fitted_of(result: TrainingResult) -> FittedModel:
    """A DP-SGD run as the seam's ``FittedModel``: its steps spent as ``Mechanism``s."""
    return FittedModel(network=result.network,
                       spent=[Mechanism(*step) for step in result.history],
                       stopped_early=result.stopped_early,
                       epochs_completed=result.epochs_completed, history=result.history)


class DpSgd:
    """Poisson-sampled, clipped, noised steps, charged by steps (the ledger's per-step
    commits); the network is the family's (``Family.network``)."""

    name = DP_SGD

    def fit(self, plan: FitPlan, data: LoadedData, on_report: OnReport, *,
            device: torch.device) -> FittedModel:
        spec = plan.spec
        if spec is None:
            raise ValueError(f"a {plan.kind} job has no DP-SGD plan to train")

        def on_epoch(epoch: int, history: list[tuple[float, float, int]]) -> bool:
            # Steps actually taken (the accountant's history); the planned count when
            # non-private.
            steps = sum(n for _, _, n in history) or epoch * (spec.steps // spec.epochs)
            return on_report(Report(epoch, spec.epochs, steps,
                                    [Mechanism(*step) for step in history]))

        callback: EpochCallback = on_epoch
        x, y = data.split.train.x, data.split.train.y
        if spec.world_size > 1:  # torchrun; stops only at reports, as below
            result = train_distributed(
                x, y, spec, device=device, on_epoch=callback,
                sync_every=report_interval(spec.epochs), encoder=data.encoder,
                planned_rows=data.split.train.rows,
            )
        else:
            result = train(x, y, spec, device=device, on_epoch=callback, encoder=data.encoder,
                           planned_rows=data.split.train.rows)
        return fitted_of(result)


TRAINER = DpSgd()
