"""The trainers by name, as the families by name (``app.families.registry``): a family names
its trainer (``Family.trainer``), the worker fits it with the one registered here."""

from __future__ import annotations

from app.families import Family
from worker.trainers import dp_ebm, dp_sgd
from worker.trainers.base import Trainer

_TRAINERS: dict[str, Trainer] = {}


class UnknownTrainer(LookupError):
    """No trainer of that name is registered (the job fails, named)."""


def register_trainer(trainer: Trainer) -> Trainer:
    """Make ``trainer`` available by its name; returns it.

    Raises:
        ValueError: another trainer already has that name.
    """
    if _TRAINERS.get(trainer.name, trainer) is not trainer:
        raise ValueError(f"a trainer named {trainer.name!r} is already registered")
    _TRAINERS[trainer.name] = trainer
    return trainer


def unregister_trainer(name: str) -> None:
    """Remove a trainer (tests that register a toy one clean up with this)."""
    _TRAINERS.pop(name, None)


def trainer_for(family: Family) -> Trainer:
    """The trainer that fits ``family``.

    Raises:
        UnknownTrainer: none is registered under the family's ``trainer``.
    """
    try:
        return _TRAINERS[family.trainer]
    except KeyError:
        raise UnknownTrainer(f"no trainer {family.trainer!r} is registered (family "
                             f"{family.name!r})") from None


register_trainer(dp_sgd.TRAINER)
register_trainer(dp_ebm.TRAINER)
