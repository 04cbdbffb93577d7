"""DP-EBM's trainer: interpret's fit at the job's planned noise, charged whole.

The job's stored settings (``app.families.dp_ebm``) carry the recipe and the planned noise;
the event they describe must be the one the ledger reserved, and interpret must draw exactly
that noise (``ebm_network.fit_ebm`` checks). The spend is reported once the rows were read,
whether the fit then succeeded or not: a run that touched data keeps its charge. The scoring
network is the fit's shape functions stretched by the public ``LOG_ODDS_STRETCH``
(``ebm_layout``), which the DP calibration then corrects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.families.base import FAMILY_TAG
from app.families.dp_ebm import DpEbm, noise_of
from app.jobs.fitted import RELEASE_KEY
from app.privacy import events
from worker.trainers.base import FitPlan, FittedModel, OnReport, Report

if TYPE_CHECKING:
    import torch

    from app.flows.job_run import LoadedData


class PlanMismatch(ValueError):
    """The stored settings describe another release than the ledger reserved."""


class DpEbmTrainer:
    name = DpEbm.trainer

    def fit(self, plan: FitPlan, data: LoadedData, on_report: OnReport, *,
            device: torch.device) -> FittedModel:
        from app.families.ebm_layout import LOG_ODDS_STRETCH
        from app.families.ebm_network import additive_network, fit_ebm

        noise = noise_of(plan.settings[RELEASE_KEY])
        if events.canonical(noise.event) != events.canonical(plan.event):
            raise PlanMismatch("the job's DP-EBM settings are not the release it reserved")
        train = data.split.train
        try:
            fitted = fit_ebm(data.encoder.schema, train.x, train.y, noise,
                             public_rows=train.rows)
        finally:
            on_report(Report(epoch=1, epochs=1, steps=1, spent=[plan.event]))
        network = additive_network(data.encoder, fitted.tables.stretched(LOG_ODDS_STRETCH))
        setattr(network, FAMILY_TAG, DpEbm.name)
        config = DpEbm().artifact_config(hidden_units=plan.hidden_units)
        config["terms"] = network.term_specs()
        return FittedModel(network=network.eval(), spent=[plan.event], artifact_config=config,
                           epochs_completed=1)


TRAINER = DpEbmTrainer()
