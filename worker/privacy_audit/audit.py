"""One privacy audit of a job's mechanism: accounted epsilon (upper) against audited (lower).

Runs, with the job's exact settings (sample rate, steps, noise multiplier, clip norm, learning
rate, model, delta) and the worker's own engine:

1. the white-box one-run audit (gradient canaries; the tightest bound),
2. the black-box one-run audit (canary records, final model only),
3. membership inference (loss threshold and LiRA with shadow models) on the DP model and on a
   non-private model trained on the same rows.

The two one-run bounds share the confidence by a union bound, so both hold together with the
requested confidence. If either exceeds the accountant's epsilon, the implementation does not
do what the accounting claims: that is the alarm.
"""

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from app.privacy_audit import service as audit_service
from worker.privacy_audit import blackbox, membership, whitebox
from worker.privacy_audit.membership import Checkpoint
from worker.training import TrainingSpec

AUDITORS = 2  # white-box and black-box one-run bounds: each gets half of 1 - confidence


@dataclass(frozen=True)
class AuditPlan:
    """What to audit and how hard: the job's mechanism and the audit's sizes."""

    spec: TrainingSpec
    canaries: int
    shadow_models: int
    seed: int
    confidence: float = 0.95


def accounted_epsilon(spec: TrainingSpec) -> float:
    """What the accountant claims for exactly these settings (the service's figure)."""
    return audit_service.accounted_epsilon(
        noise_multiplier=spec.noise_multiplier, sample_rate=spec.sample_rate, steps=spec.steps,
        delta=spec.delta,
    )


def run(
    plan: AuditPlan,
    x_train: np.ndarray,
    y_train: np.ndarray,
    *,
    device: torch.device,
    checkpoint: Checkpoint = lambda _phase: None,
    membership_attacks: bool = True,
) -> dict[str, Any]:
    """Every part of the audit; returns the JSON-able result with ``alarm`` set."""
    spec = plan.spec
    each = 1.0 - (1.0 - plan.confidence) / AUDITORS
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def timed(name: str, part: Any, **kwargs: Any) -> dict[str, Any]:
        checkpoint(name)
        t0 = time.perf_counter()
        out = part(x_train, y_train, spec, seed=plan.seed, device=device, **kwargs)
        timings[name] = time.perf_counter() - t0
        return out

    one_run = {
        "white_box": timed("white_box", whitebox.audit, canaries=plan.canaries, confidence=each),
        "black_box": timed("black_box", blackbox.audit, canaries=plan.canaries, confidence=each),
    }
    attacks = None
    if membership_attacks:
        attacks = timed(
            "membership", membership.attack, shadow_models=plan.shadow_models,
            checkpoint=checkpoint,
        )
    accounted = accounted_epsilon(spec)
    audited = max(part["epsilon"] for part in one_run.values())
    return {
        "accounted_epsilon": None if math.isinf(accounted) else accounted,
        "non_private": math.isinf(accounted),
        "accountant": "prv",
        "delta": spec.delta,
        "audited_epsilon": audited,
        "audited_by": max(one_run, key=lambda name: one_run[name]["epsilon"]),
        "confidence": plan.confidence,
        "alarm": audited > accounted,
        "canaries": plan.canaries,
        "one_run": one_run,
        "membership": attacks,
        "settings": {
            "model": spec.kind, "hidden_units": spec.hidden_units,
            "noise_multiplier": spec.noise_multiplier, "sample_rate": spec.sample_rate,
            "steps": spec.steps, "epochs": spec.epochs, "batch_size": spec.batch_size,
            "max_grad_norm": spec.max_grad_norm, "optimizer": spec.optimizer,
            "learning_rate": spec.learning_rate, "momentum": spec.momentum,
            "tail_average": spec.tail_average,
            "training_rows": len(x_train),
        },
        "seconds": {**timings, "total": time.perf_counter() - started},
    }
