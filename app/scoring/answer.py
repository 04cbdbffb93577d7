"""The scoring answer: one typed object, built once by the scoring service, read by every view.

``RiskAnswer`` holds n patients' scores as the batch core computed them (row k is patient k)
beside the typed parts they share: the model's statement (``ModelStatementOut``), the band
thresholds and the reference patient (``ReferenceOut``). Every view is a response model of
``app.scoring.schemas`` made here and nowhere else: ``single()`` (``RiskResult``: ``/v1/risk``,
FHIR and CDS Hooks read it), ``result(k)`` (``RiskBatchResult``), ``compact_result(k)``
(``CompactResult``). The JSON writers (``app.scoring.render``) cut their text from these same
objects, so a new field is a field of the schema plus a line here.

The per-patient parts stay columns rather than 60,000 contribution objects for 10,000
patients: building those would cost more than scoring them (several times the time of writing
the whole answer), so a view is made when something reads it.
"""

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from app.bands import Band, band_of
from app.datasets.schema.encoding import Encoder, built_encoder
from app.scoring.patients import Imputed
from app.scoring.reasons import Shown, imputed_reason, reason_of, severity_of, shown_value
from app.scoring.schemas import (
    TOP_CONTRIBUTIONS,
    BaseValueOut,
    CompactContribution,
    CompactResult,
    ContributionOut,
    ModelRefOut,
    ModelStatementOut,
    ReferenceOut,
    RiskBatchCompact,
    RiskBatchResponse,
    RiskBatchResult,
    RiskResult,
)

NEUTRAL_BELOW = 1e-9
"""A contribution smaller than this (on the log-odds scale) is rounding, not an effect: a
feature at its reference value gets +-1e-12 from float32 arithmetic, and must not read as
"raises" or "lowers"."""


def direction_of(contribution: float) -> str:
    """raises | lowers | neutral, for a contribution on the log-odds scale."""
    if abs(contribution) < NEUTRAL_BELOW:
        return "neutral"
    return "raises" if contribution > 0 else "lowers"


@lru_cache(maxsize=4096)
def _explained(encoder_hash: str, index: int, value: float, imputed: bool
               ) -> tuple[str, dict[str, Any] | None, Shown]:
    feature = built_encoder(encoder_hash).schema.features[index]
    reason = imputed_reason(feature, value) if imputed else reason_of(feature, value)
    return reason, severity_of(feature, value), shown_value(feature, value)


def explained_value(encoder: Encoder, index: int, value: float, imputed: bool = False
                    ) -> tuple[str, dict[str, Any] | None, Shown]:
    """(reason, severity band, value as shown) of one feature value, cached per schema;
    ``imputed``: the value is the reference, scored because the feature was not given."""
    return _explained(encoder.hash, index, value, imputed)


def contribution(encoder: Encoder, index: int, value: float, phi: float,
                 phi_p: float, imputed: bool = False) -> ContributionOut:
    """Feature ``index`` at ``value`` contributing ``phi`` (log-odds) and ``phi_p`` (0-1);
    ``imputed``: not given, so scored at its reference ``value``."""
    feature = encoder.schema.features[index]
    reason, severity, shown = explained_value(encoder, index, value, imputed)
    return ContributionOut.model_validate({
        "feature": feature.name, "label": feature.label or feature.name, "value": shown,
        "contribution": phi, "contribution_probability": phi_p,
        "direction": direction_of(phi), "reason": reason, "severity": severity,
        "imputed": imputed,
    })


def compact_contribution(encoder: Encoder, index: int, value: float, phi: float,
                         phi_p: float, imputed: bool = False) -> CompactContribution:
    """The compact view of ``contribution``: what a results table shows."""
    full = contribution(encoder, index, value, phi, phi_p, imputed)
    return CompactContribution.model_validate(full.model_dump(include=set(
        CompactContribution.model_fields)))


@dataclass(frozen=True)
class RiskAnswer:
    """n patients' answers: shared typed parts, then per-patient columns in request order.

    ``order[k]`` lists patient k's feature indices, largest |log-odds contribution| first;
    ``phi`` and ``phi_p`` are the exact Shapley values on the log-odds and 0-1 scales;
    ``imputed`` names, for the patients who left some out, the features scored at their
    reference value (``raw`` holds that value there).
    """

    model: ModelStatementOut
    band_thresholds: dict[str, float]
    reference: ReferenceOut
    encoder: Encoder
    ids: list[str | None]
    raw: list[list[float]]
    probability: list[float]
    log_odds: list[float]
    phi: list[list[float]]
    phi_p: list[list[float]]
    order: list[list[int]]
    imputed: Imputed

    def __len__(self) -> int:
        return len(self.probability)

    @cached_property
    def model_ref(self) -> ModelRefOut:
        """Which model scored, as each batch result repeats it."""
        return ModelRefOut.model_validate(self.model.model_dump(include={"id", "version",
                                                                         "epsilon", "delta"}))

    @cached_property
    def base(self) -> BaseValueOut:
        """The reference patient's scores, as each batch result repeats them."""
        return BaseValueOut(log_odds=self.reference.log_odds,
                            probability=self.reference.probability)

    def band(self, k: int) -> Band:
        return band_of(self.probability[k], self.band_thresholds)

    def imputed_names(self, k: int) -> list[str]:
        """The names of the features patient k did not give, in the schema's order."""
        features = self.encoder.schema.features
        return [features[i].name for i in self.imputed.get(k, ())]

    def contributions(self, k: int) -> list[ContributionOut]:
        row, phi, phi_p, gone = self.raw[k], self.phi[k], self.phi_p[k], self.imputed.get(k, ())
        return [contribution(self.encoder, i, row[i], phi[i], phi_p[i], i in gone)
                for i in self.order[k]]

    def single(self, k: int = 0) -> RiskResult:
        """Patient k with the full reference and statement: the ``/v1/risk`` answer."""
        return RiskResult(
            probability=self.probability[k], log_odds=self.log_odds[k], band=self.band(k),
            band_thresholds=self.band_thresholds, contributions=self.contributions(k),
            imputed=self.imputed_names(k), reference=self.reference, model=self.model,
        )

    def result(self, k: int) -> RiskBatchResult:
        """Patient k as one element of the batch's ``results``."""
        return RiskBatchResult(
            id=self.ids[k], probability=self.probability[k], log_odds=self.log_odds[k],
            band=self.band(k), band_thresholds=self.band_thresholds,
            contributions=self.contributions(k), imputed=self.imputed_names(k),
            reference=self.base, model=self.model_ref,
        )

    def compact_result(self, k: int) -> CompactResult:
        """Patient k in the compact view: probability, band, top contributions."""
        row, phi, phi_p, gone = self.raw[k], self.phi[k], self.phi_p[k], self.imputed.get(k, ())
        top = [compact_contribution(self.encoder, i, row[i], phi[i], phi_p[i], i in gone)
               for i in self.order[k][:TOP_CONTRIBUTIONS]]
        return CompactResult(id=self.ids[k], probability=self.probability[k],
                             band=self.band(k), contributions=top,
                             imputed=self.imputed_names(k))

    def document(self, results: list[RiskBatchResult]) -> RiskBatchResponse:
        """The batch response around ``results`` (every ``result(k)``, or none for a frame)."""
        return RiskBatchResponse(model=self.model, band_thresholds=self.band_thresholds,
                                 reference=self.reference, results=results)

    def compact_document(self, results: list[CompactResult]) -> RiskBatchCompact:
        """The compact batch response around ``results``."""
        return RiskBatchCompact(model=self.model, band_thresholds=self.band_thresholds,
                                reference=self.base, results=results)
