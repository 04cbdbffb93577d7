"""Trainers: how a family's model is fitted (``base.Trainer``), DP-SGD by default, by name."""

from worker.trainers.base import (
    FitPlan,
    FittedModel,
    OnReport,
    Report,
    Trainer,
    report_interval,
)
from worker.trainers.registry import (
    UnknownTrainer,
    register_trainer,
    trainer_for,
    unregister_trainer,
)

__all__ = [
    "FitPlan",
    "FittedModel",
    "OnReport",
    "Report",
    "Trainer",
    "UnknownTrainer",
    "register_trainer",
    "report_interval",
    "trainer_for",
    "unregister_trainer",
]
