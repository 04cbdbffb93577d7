"""A site's plan as the tests' fake sites hold it: its federation part (``part``), and an honest
site's public mechanism for a recipe, as its answers declare it: the noise its plan needs for the
target at a full batch (the coordinator recomputes the epsilon from it)."""

import functools
from typing import Any

from app.federation.schemas import FederationPart
from app.privacy import noise


@functools.lru_cache(maxsize=16)
def _sigma(target: float, delta: float, steps: int) -> float:
    return noise.noise_for_target(target_epsilon=target, delta=delta, sample_rate=1.0,
                                  steps=steps, accountant="prv")


def mechanism(*, rounds: int, local_steps: int = 50, target: float = 3.0,
              delta: float = 1e-6) -> dict[str, Any]:
    """The figures a site on ``rounds x local_steps`` full-batch steps at ``target`` sends."""
    steps = rounds * local_steps
    return {"steps": local_steps, "planned_steps": steps, "sample_rate": 1.0, "delta": delta,
            "noise_multiplier": _sigma(target, delta, steps)}


def part(site: str, *, secure_aggregation: bool = False, min_sites: int = 2,
         site_keys: dict[str, str | None] | None = None) -> FederationPart:
    """Site ``site``'s part in the federation ``net`` as its worker's run holds it
    (``SiteRun.part``); the fields the fakes never read keep placeholder values."""
    return FederationPart(id=1, name="net", address="127.0.0.1:1", site=site, rounds=2,
                          local_steps=50, round_timeout_seconds=30.0,
                          secure_aggregation=secure_aggregation, min_sites=min_sites,
                          site_keys=site_keys or {})
