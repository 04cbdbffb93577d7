"""What a service declares about a federation, and what it shows of one.

Everything here is public by declaration: the sites, their public weights, the coordinator's
address, the schema's hash and the recipe are what the clinics agreed on. The report is the
coordinator's: which site took part in which round (the Flower rounds' membership), each site's
planned (epsilon, delta) (a ledger figure), and the federation's evaluation, a sum of the sites'
noisy histograms (post-processing of DP releases).
"""

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from app.core.ids import MAX_ID
from app.core.schemas import (
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.families import DEFAULT_FAMILY
from app.federation.signing import PUBLIC_KEY_PATTERN
from app.jobs.family_field import dp_sgd_family, dp_sgd_family_enum
from app.jobs.schemas import TaskPayload
from app.privacy.annotations import Released
from app.privacy.noise import epochs_for_target
from app.privacy.releases import Release

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}$"
ADDRESS_PATTERN = r"^[A-Za-z0-9.-]{1,200}:[0-9]{1,5}$"
ROLES = ("coordinator", "site")
DEFAULT_ROUNDS = 20
REFERENCE_DELTA = 1e-6
"""The delta at which the default rounds are planned when the recipe names none (each site's
own delta may be smaller: its join then says the federation needs fewer rounds)."""


def rounds_within_cap(*, target_epsilon: float, local_steps: int, delta: float,
                      most: int = DEFAULT_ROUNDS) -> int | None:
    """The most rounds (at most ``most``) of ``local_steps`` full-batch steps that reach
    ``target_epsilon`` within the largest allowed noise; None when not even one does."""
    return epochs_for_target(target_epsilon=target_epsilon, delta=delta, sample_rate=1.0,
                             steps_per_epoch=local_steps, max_epochs=most)


SITE = Released(Release.PUBLIC_INPUT, note="a declared site and its public FedAvg weight (never a "
                "row count)")
DECLARED_NOTE = "a federation as this service declared it"
DECLARED_STATE = Released(Release.OPERATIONAL, note=DECLARED_NOTE)
DECLARED = Released(Release.PUBLIC_INPUT, note=DECLARED_NOTE)
SITE_STATEMENT = Released(Release.LEDGER, note="a site's planned guarantee, computed by the "
                          "coordinator from the public mechanism its answers declare")
SITE_STATEMENTS = Released(Release.LEDGER, note="each site's planned (epsilon, delta), keyed by "
                           "declared site name")
GLOBAL_MODEL = Released(Release.DP_TRAINING, note="the SHA-256 of the released global model's "
                        "weights (post-processing of the sites' DP-SGD releases): the model every "
                        "clinic evaluated and registered")
REPORT_NOTE = "the coordinator's report"
REPORT_LEDGER = Released(Release.LEDGER, note=REPORT_NOTE)
REPORT_OPERATIONAL = Released(Release.OPERATIONAL, note=REPORT_NOTE)
AGREED = Released(Release.PUBLIC_INPUT, note="the recipe the clinics agreed on")
SUMMED_EVALUATION = Released(Release.DP_EVALUATION, note="the sites' noisy evaluation histograms "
                             "summed (the sum's noise is the root sum of squares of theirs); "
                             "every metric post-processing of the sum")
ROUND_MEMBERSHIP = Released(Release.OPERATIONAL, note="which sites' updates a round averaged: who "
                            "answered, not what their rows hold")


class FederatedRecipe(RequestModel):
    """The plan every site runs: ``rounds`` rounds of ``local_steps`` DP-SGD steps on its own
    training part, at the same per-record target epsilon at every site.

    Each site plans its own noise for that target from its own (public) row count: a round is
    ``local_steps`` Poisson-subsampled Gaussian steps, so a site's whole part is one DP-SGD
    mechanism of ``rounds x local_steps`` steps on its ledger. The global model is FedAvg of the
    sites' noisy weights with public weights: post-processing.
    """

    model: Annotated[str, AGREED] = Field(
        default=DEFAULT_FAMILY, json_schema_extra=dp_sgd_family_enum)
    hidden_units: Annotated[int, AGREED] = Field(default=16, ge=1, le=256)
    rounds: Annotated[int, AGREED] = Field(
        default=DEFAULT_ROUNDS, ge=1, le=200,
        description="default: 20, or as many as a full batch at the largest allowed noise reaches "
        "the target in (at the recipe's delta, else 1e-6)")
    local_steps: Annotated[int, AGREED] = Field(default=50, ge=1, le=1000)
    target_epsilon: Annotated[PrivacyNumber, AGREED] = Field(
        gt=0, le=100, description="per record, at every site")
    delta: Annotated[PrivacyNumber | None, AGREED] = Field(
        default=None, gt=0, lt=1,
        description="default: each site's budget delta, else min(1e-5, 1/(10 n))")
    batch_size: Annotated[int | None, AGREED] = Field(
        default=None, ge=8, le=65536,
        description="expected local batch; default: the whole training part (q = 1)")
    optimizer: Annotated[Literal["adam", "sgd"], AGREED] = "adam"
    learning_rate: Annotated[float | None, AGREED] = Field(
        default=None, gt=0, le=10,
        description="default: the family's for the optimizer")
    momentum: Annotated[float, AGREED] = Field(default=0.9, ge=0, lt=1)
    max_grad_norm: Annotated[float | None, AGREED] = Field(
        default=None, gt=0, le=100,
        description="default: the single-site public rule")
    tail_average: Annotated[float, AGREED] = Field(
        default=0.5, ge=0, lt=1,
        description="the model released is the mean of the global models of this last fraction of "
        "rounds (post-processing: the single-site default's rule); 0: the last round's")
    min_sites: Annotated[int, AGREED] = Field(
        default=2, ge=1, le=64,
        description="the fewest sites a round may average; with secure aggregation each clinic "
        "also refuses to unmask a sum over fewer than its own declaration of it")
    round_timeout_seconds: Annotated[float, AGREED] = Field(default=120, ge=1, le=3600)
    secure_aggregation: Annotated[bool, AGREED] = Field(
        default=False, description="every round through Flower's SecAgg+: the coordinator learns "
        "only the weighted sum of the sites' updates (needs min_sites of at least 2; a site that "
        "declares it refuses a plain round)")

    @field_validator("model", mode="before")
    @classmethod
    def _registered_family(cls, value: Any) -> Any:
        """A DP-SGD family: each site's part is charged by rounds of steps."""
        return dp_sgd_family(value)

    @field_validator("secure_aggregation")
    @classmethod
    def _secure_needs_two(cls, secure: bool, info: ValidationInfo) -> bool:
        if secure and info.data.get("min_sites", 2) < 2:
            raise ValueError("secure aggregation needs min_sites of at least 2: one site's "
                             "masked update unmasked alone is that site's update")
        return secure

    @model_validator(mode="before")
    @classmethod
    def _default_rounds(cls, data: Any) -> Any:
        """Rounds left out: the default 20, cut where a full batch at the noise cap cannot
        reach the target in ``20 x local_steps`` steps (the single-site planner's rule at the
        cap). A public function of the recipe, so every service declaring the same recipe
        plans the same rounds; what the declaration answers shows them."""
        if not isinstance(data, dict) or "rounds" in data or data.get("batch_size") is not None:
            return data
        target, steps = data.get("target_epsilon"), data.get("local_steps", 50)
        delta = data.get("delta") or REFERENCE_DELTA
        if not (isinstance(target, int | float) and 0 < target <= 100
                and isinstance(steps, int) and 1 <= steps <= 1000
                and isinstance(delta, float) and 0 < delta < 1):
            return data  # the fields' own checks answer
        fitting = rounds_within_cap(target_epsilon=float(target), local_steps=steps,
                                    delta=delta)
        return data if fitting is None else {**data, "rounds": fitting}


class FederationSite(RequestModel):
    name: Annotated[str, SITE] = Field(pattern=NAME_PATTERN)
    weight: Annotated[float, SITE] = Field(
        default=1.0, gt=0, le=1_000_000,
        description="its public weight in FedAvg (never its row count)")
    public_key: Annotated[str | None, SITE] = Field(
        default=None, pattern=PUBLIC_KEY_PATTERN,
        description="its Ed25519 key ('ed25519:' and 32 bytes in base64, from `dpcrisis "
        "federation-key`): the coordinator averages only answers signed by it; every site declares "
        "one, or none does")


class FederationPart(TaskPayload):
    """What a site's worker needs of its federation to take part in its rounds
    (``app.federation.plan``, ``worker.federated_site``), with this service's own declaration of
    ``min_sites`` and of the sites' keys."""

    id: int
    name: str
    address: str
    site: str
    rounds: int
    local_steps: int
    round_timeout_seconds: float
    public_key: str | None = None
    secure_aggregation: bool = False
    min_sites: int = 2
    site_keys: dict[str, str | None] = Field(default_factory=dict)


class FederationCreate(RequestModel):
    """A federation as this service takes part in it."""

    name: str = Field(pattern=NAME_PATTERN)
    role: Literal["coordinator", "site"]
    address: str = Field(pattern=ADDRESS_PATTERN,
                         description="host:port of the coordinator's Flower server")
    schema_sha256: str = Field(pattern=r"^[0-9a-f]{64}$",
                               description="the declared schema every site's dataset has")
    recipe: FederatedRecipe
    sites: list[FederationSite] = Field(min_length=1, max_length=64)
    site_name: str | None = Field(default=None, pattern=NAME_PATTERN, validate_default=True,
                                  description="a site: which of the sites this service is")

    @field_validator("sites")
    @classmethod
    def _sites_fit_the_recipe(cls, sites: list[FederationSite],
                              info: ValidationInfo) -> list[FederationSite]:
        names = [site.name for site in sites]
        if len(set(names)) != len(names):
            raise ValueError("each site's name must be unique")
        keyed = [site.public_key is not None for site in sites]
        if any(keyed) and not all(keyed):
            raise ValueError("every site declares its public_key, or none does (then any "
                             "client that reaches the coordinator may answer for a site)")
        recipe = info.data.get("recipe")
        if recipe is not None and recipe.min_sites > len(names):
            raise ValueError(f"recipe.min_sites ({recipe.min_sites}) is more than the "
                             f"{len(names)} sites")
        return sites

    @field_validator("site_name")
    @classmethod
    def _site_names_itself(cls, site_name: str | None, info: ValidationInfo) -> str | None:
        role, sites = info.data.get("role"), info.data.get("sites")
        if role == "coordinator" and site_name is not None:
            raise ValueError("only a site names itself; a coordinator leaves site_name out")
        if role == "site" and sites is not None and site_name not in [s.name for s in sites]:
            raise ValueError("a site must name itself among the sites")
        return site_name


class FederationJoin(RequestModel):
    dataset_id: int = Field(ge=1, le=MAX_ID, description="this clinic's dataset of the schema")


class FederationRound(ResponseModel):
    round: Annotated[int, ROUND_MEMBERSHIP]
    sites: Annotated[list[str], ROUND_MEMBERSHIP] = Field(
        description="the sites whose update this round averaged")
    failures: Annotated[int, ROUND_MEMBERSHIP] = Field(
        description="sites asked this round that did not answer in time")
    refused: Annotated[list[str], ROUND_MEMBERSHIP] = Field(
        description="answers refused: from names that are not declared sites, or (sites with keys) "
        "not signed by the site's key")


class SiteStatement(ResponseModel):
    epsilon: Annotated[float, SITE_STATEMENT] = Field(
        description="the site's planned epsilon, computed by the coordinator from the public "
        "mechanism its answers declare (noise multiplier, sample rate, steps), checked against the "
        "plan")
    delta: Annotated[float, SITE_STATEMENT]


class FederationReport(ResponseModel):
    """The coordinator's report, written after every round."""

    rounds: list[FederationRound]
    site_statements: Annotated[dict[str, SiteStatement], SITE_STATEMENTS] = Field(
        description="keyed by declared site name: each site's planned (epsilon, delta)")
    federation_epsilon: Annotated[float | None, REPORT_LEDGER] = Field(
        description="the plan's target epsilon, which every site's answer taken was checked to "
        "meet: the guarantee of a patient treated at one clinic; a patient at several has the "
        "composition of those clinics' (at most the sum)")
    federation_delta: Annotated[float | None, REPORT_LEDGER] = Field(
        description="the recipe's delta, else the largest of the sites' (each its budget's)")
    evaluated_sites: Annotated[list[str], REPORT_OPERATIONAL]
    model_sha256: Annotated[str | None, GLOBAL_MODEL] = Field(
        default=None, description="the SHA-256 of the released global model's weights, as sent to "
        "every site; each clinic's registered model names the same "
        "(metrics.federation.model_sha256), and signs its evaluation of exactly these weights")
    evaluation: Annotated[dict[str, Any] | None, SUMMED_EVALUATION] = Field(
        description="the federation's DP evaluation: the sites' noisy histograms summed, every "
        "metric post-processing of the sum (a job's held-out metrics' keys)")


class FederationOut(ResponseModel):
    id: Annotated[int, DECLARED]
    name: Annotated[str, DECLARED]
    role: Annotated[str, DECLARED]
    address: Annotated[str, DECLARED]
    schema_sha256: Annotated[str, DECLARED]
    recipe: FederatedRecipe
    sites: list[FederationSite]
    site_name: Annotated[str | None, DECLARED]
    state: Annotated[str, DECLARED_STATE]
    report: FederationReport | None = Field(
        description="the coordinator's: rounds with their sites, statements, evaluation")
    created_at: Annotated[UtcDatetime, DECLARED]


register_ranges(FederationCreate)
register_ranges(FederationJoin)
