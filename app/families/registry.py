"""The families by name, as Opacus keeps its accountants (``create_accountant("rdp")``).

Everything that depends on the model kind asks here: ``create_family(name)`` for a request's or
an artifact's family, ``family_of_network(network)`` for a network's (the tag its family set).
A new family registers itself with ``register_family`` (the built-in two are registered below);
nothing else changes. ``legacy_family_of`` is the one place an artifact's family is derived
for a config that does not name it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.families.base import FAMILY_TAG, Family
from app.families.dp_ebm import DpEbm
from app.families.logistic import Logistic
from app.families.mlp import MLP

if TYPE_CHECKING:
    from torch import nn

_FAMILIES: dict[str, Family] = {}
DEFAULT_FAMILY = Logistic.name
"""The family of a request that names none (the default recipe's, measured in bench/)."""


class UnknownFamily(ValueError):
    """No family of that name is registered."""


def register_family(family: Family) -> Family:
    """Make ``family`` available by its name; returns it (usable on an instance at import).

    Raises:
        ValueError: another family already has that name.
    """
    if _FAMILIES.get(family.name, family) is not family:
        raise ValueError(f"a family named {family.name!r} is already registered")
    _FAMILIES[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Remove a family (tests that register a toy one clean up with this)."""
    _FAMILIES.pop(name, None)


def family_names() -> tuple[str, ...]:
    """The registered names, the built-in ones first (request validation lists them)."""
    return tuple(_FAMILIES)


def create_family(name: str) -> Family:
    """The family called ``name``.

    Raises:
        UnknownFamily: none is registered under that name.
    """
    try:
        return _FAMILIES[name]
    except KeyError:
        raise UnknownFamily(f"unknown model family {name!r}") from None


family_of = create_family
"""The same lookup, read as a question (``family_of(model.kind)``)."""


def family_of_network(network: nn.Module) -> Family | None:
    """The family that built ``network`` (its tag), or None for a network built elsewhere."""
    name = getattr(network, FAMILY_TAG, None)
    return _FAMILIES.get(name) if isinstance(name, str) else None


def legacy_family_of(config: Mapping[str, Any],
                     state_dict: Mapping[str, Any] | None = None) -> Family:
    """The family of a stored artifact, from its config: ``family``, else ``kind`` (every
    artifact since the first stored it). Only a config naming neither falls back to the rule
    of the two original families: a single linear layer's weights are the logistic model's,
    anything else the MLP's. Kept here, and only here, so that no other code guesses.

    Raises:
        UnknownFamily: the config names a family that is not registered.
    """
    name = config.get("family", config.get("kind"))
    if name is None:
        name = Logistic.name if set(state_dict or {}) <= {"0.weight", "0.bias"} else MLP.name
    return create_family(str(name))


register_family(Logistic())
register_family(MLP())
register_family(DpEbm())
