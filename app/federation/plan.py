"""A site's part in a federation, planned as one DP-SGD mechanism on its own ledger.

The site's ``rounds x local_steps`` steps are Poisson-subsampled Gaussian steps on its training
part, so its whole part is the single-site job's mechanism with ``steps = rounds x local_steps``:
the same noise search, the same clip rule, the same size floors, the same filter at admission.
Every figure here is public: the recipe, the site's row counts, its budget's delta.
"""

from typing import Any

from app.core.errors import Conflict, InvalidRequest
from app.datasets.models import Dataset
from app.federation.models import Federation
from app.federation.schemas import FederatedRecipe, FederationPart
from app.jobs import recipe as rules
from app.jobs import service as job_service
from app.jobs import size_floor
from app.jobs.models import FEDERATED, QUEUED, Job
from app.privacy import noise
from app.privacy.accounting import poisson_plan

TARGET_FIELD = "recipe.target_epsilon"  # the federation's, as declared on this service


def _part(federation: Federation, recipe: FederatedRecipe) -> FederationPart:
    """What the site's worker needs of the federation to take part in its rounds: with this
    service's own declaration of ``min_sites`` and of the sites' keys, which its secure rounds
    are checked against (``worker.secure_site``), whatever the coordinator declared."""
    assert federation.site_name is not None  # a site's federation (``site_job`` checks)
    return FederationPart(
        id=federation.id, name=federation.name, address=federation.address,
        site=federation.site_name, rounds=recipe.rounds, local_steps=recipe.local_steps,
        round_timeout_seconds=recipe.round_timeout_seconds,
        public_key=_declared_key(federation), secure_aggregation=recipe.secure_aggregation,
        min_sites=recipe.min_sites,
        site_keys={s["name"]: s.get("public_key") for s in federation.sites})


def _declared_key(federation: Federation) -> str | None:
    """The public key this site declared for itself (None: the federation keys no site)."""
    mine = [s for s in federation.sites if s["name"] == federation.site_name]
    return mine[0].get("public_key") if mine else None


class NotThisFederation(Conflict):
    kind, title = "federation-mismatch", "The dataset or service cannot take part"


def site_job(*, federation: Federation, dataset: Dataset) -> Job:
    """The site's job (kind ``federated``, queued, not yet stored or reserved).

    Raises:
        NotThisFederation: this service coordinates the federation, or the dataset's declared
            schema is not the federation's (409).
        DatasetNotTrainable, DatasetUnlabelled, DatasetTooSmall, InvalidRequest: as a
            single-site job on the same dataset.
    """
    if federation.role != "site" or federation.site_name is None:
        raise NotThisFederation(f"this service coordinates federation {federation.name!r}; "
                                "clinics join it on their own services", field="federation_id")
    if dataset.schema_hash != federation.schema_sha256:
        raise NotThisFederation(
            f"dataset {dataset.id}'s declared schema is not federation {federation.name!r}'s "
            f"(sha256 {federation.schema_sha256[:12]}...)", field="dataset_id")
    job_service.check_trainable(dataset)
    recipe = FederatedRecipe.model_validate(federation.recipe)
    delta = job_service.resolve_delta(dataset, recipe.delta)
    inputs = rules.n_inputs(dataset)
    size_floor.check_held_out(dataset)
    size_floor.check_training(dataset=dataset, epsilon=recipe.target_epsilon, delta=delta,
                              inputs=inputs, field=TARGET_FIELD)
    n_train = dataset.n_train
    batch = n_train if recipe.batch_size is None else min(recipe.batch_size, n_train)
    sample_rate, _ = poisson_plan(n_train, batch)
    steps = recipe.rounds * recipe.local_steps
    try:
        sigma = noise.noise_for_target(target_epsilon=recipe.target_epsilon, delta=delta,
                                       sample_rate=sample_rate, steps=steps, accountant="prv")
    except noise.TargetUnreachable as exc:
        raise InvalidRequest(
            f"target_epsilon {recipe.target_epsilon:g} cannot be reached in {steps} steps at "
            f"this site's sample rate {sample_rate:.3g}: the federation needs fewer rounds or "
            "local steps, or a larger epsilon", field=TARGET_FIELD) from exc
    clip = recipe.max_grad_norm or rules.default_clip(
        noise_multiplier=sigma, sample_rate=sample_rate, steps=steps, n_train=n_train,
        inputs=inputs)
    learning_rate = recipe.learning_rate or rules.default_learning_rate(recipe.optimizer,
                                                                         recipe.model)
    training: dict[str, Any] = {
        "model": recipe.model, "hidden_units": recipe.hidden_units, "batch_size": batch,
        "epochs": recipe.rounds, "learning_rate": learning_rate, "optimizer": recipe.optimizer,
        "momentum": recipe.momentum, "max_grad_norm": clip, "tail_average": 0.0, "seed": 0,
        "world_size": 1,
    }
    return Job(
        dataset_id=dataset.id, status=QUEUED, kind=FEDERATED,
        target_epsilon=recipe.target_epsilon, requested_noise_multiplier=None,
        noise_multiplier=sigma, sample_rate=sample_rate, steps=steps, epochs=recipe.rounds,
        delta=delta, max_grad_norm=clip, training=training,
        payload=_part(federation, recipe).model_dump(mode="json"), progress_epoch=0,
        epsilon_per_epoch=[], cancel_requested=False,
    )
