"""The headline accountant's name where people read it, and its deprecated alias.

The PLD figure was keyed ``prv`` when it came from Opacus' PRV accountant; answers now name it
``pld`` and, for one release, still carry ``prv`` beside it with the same value (marked
``deprecated`` in OpenAPI). Inside, ``prv`` stays the registry key, the figure key and the
database column (``epsilon_prv``).
"""

from typing import TypeVar

PLD_KEY, DEPRECATED_PLD_KEY = "pld", "prv"

V = TypeVar("V")


def with_pld_key(figures: dict[str, V]) -> dict[str, V]:
    """``figures`` keyed by accountant, with the ``pld`` key beside its deprecated ``prv``."""
    if DEPRECATED_PLD_KEY in figures and PLD_KEY not in figures:
        return {**figures, PLD_KEY: figures[DEPRECATED_PLD_KEY]}
    return figures


# How a person reads each accountant's registry key: the PLD figure's key is still ``prv``.
_WORDS = {DEPRECATED_PLD_KEY: "PLD", PLD_KEY: "PLD"}


def accountant_word(name: str) -> str:
    """The accountant as statements, reports and the dashboard name it: 'PLD' for the
    registry's ``prv`` key (Opacus' PRV accountant is gone), else the key in capitals."""
    return _WORDS.get(name, name.upper())
