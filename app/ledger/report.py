"""Privacy reports a privacy officer can hand on: per job and per dataset."""

import math
from typing import Any

from sqlalchemy.orm import Session

from app.core.time import as_utc
from app.datasets.models import Dataset
from app.jobs import service as job_service
from app.jobs.models import Job
from app.ledger import service as ledger_service
from app.ledger.models import LedgerEntry


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def job_report(*, session: Session, job: Job, dataset: Dataset) -> dict[str, Any]:
    """Mechanism, sampling, noise, clipping, steps, delta, epsilon by accountant, per epoch."""
    planned = job_service.planned_epsilon(job)
    steps_per_epoch = job.steps // job.epochs if job.epochs else 0
    expected_batch = job.sample_rate * dataset.n_train
    if job.non_private:
        statement = (
            "Non-private training (no noise): no differential-privacy guarantee; allowed only "
            "because the dataset is public."
        )
    else:
        statement = (
            f"The model satisfies ({planned['prv']:.3g}, {job.delta:g})-differential privacy "
            f"for each record (one patient) of dataset {dataset.id} ({dataset.n_rows} rows, "
            f"{dataset.n_train} used for training): DP-SGD with Poisson sampling at rate "
            f"{job.sample_rate:.4g}, per-sample clipping of the whole gradient to norm "
            f"{job.max_grad_norm:g}, Gaussian noise multiplier {job.noise_multiplier:.4g}, "
            f"{job.steps} steps over {job.epochs} epochs (PRV accountant; RDP gives "
            f"{planned['rdp']:.3g}). Held-out metrics are computed on rows not used for training."
        )
    return {
        "job_id": job.id,
        "dataset_id": dataset.id,
        "status": job.status,
        "privacy_unit": "record (one patient)",
        "dataset_rows": dataset.n_rows,
        "training_rows": dataset.n_train,
        "holdout_rows": dataset.n_holdout,
        "mechanism": "non-private" if job.non_private else "DP-SGD (Poisson-subsampled Gaussian)",
        "sampling": "poisson",
        "sample_rate": job.sample_rate,
        "expected_batch_size": expected_batch,
        "noise_multiplier": job.noise_multiplier,
        "clip_norm": job.max_grad_norm,
        "clipping": "per-sample, whole gradient (all parameters together)",
        "steps": job.steps,
        "steps_per_epoch": steps_per_epoch,
        "epochs": job.epochs,
        "epochs_completed": job.progress_epoch,
        "delta": job.delta,
        "target_epsilon": job.target_epsilon,
        "epsilon": planned,
        "epsilon_spent": job.epsilon_spent,
        "epsilon_per_epoch": job.epsilon_per_epoch,
        "metrics": job.metrics,
        "metrics_note": "computed on held-out rows never used for training",
        "statement": statement,
    }


def entry_view(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "job_id": entry.job_id,
        "status": entry.status,
        "mechanism": entry.mechanism,
        "noise_multiplier": entry.noise_multiplier,
        "sample_rate": entry.sample_rate,
        "steps": entry.steps,
        "clip_norm": entry.clip_norm,
        "delta": entry.delta,
        "accountant": entry.accountant,
        "epsilon": {"rdp": entry.epsilon_rdp, "prv": entry.epsilon_prv},
        "created_at": as_utc(entry.created_at),
        "updated_at": as_utc(entry.updated_at),
    }


def dataset_report(*, session: Session, dataset: Dataset) -> dict[str, Any]:
    """Budget, composed spend (RDP), the naive sum for comparison, remaining, all entries."""
    spend = ledger_service.dataset_spend(session=session, dataset=dataset)
    entries = ledger_service.list_entries(session=session, dataset_id=dataset.id)
    return {
        "dataset_id": dataset.id,
        "public": dataset.public,
        "privacy_unit": "record (one patient)",
        "budget": {"epsilon": dataset.budget_epsilon, "delta": dataset.budget_delta},
        "spent": {
            "epsilon": _finite(spend.composed_epsilon),
            "non_private": math.isinf(spend.composed_epsilon),
            "composition": "Rényi DP over a fixed grid of orders (sound under adaptive choice)",
            "naive_sum_epsilon": _finite(spend.naive_epsilon),
            "accountant": ledger_service.COMPOSITION_ACCOUNTANT,
        },
        "remaining": {"epsilon": spend.remaining_epsilon},
        "entries": [entry_view(e) for e in entries],
    }
