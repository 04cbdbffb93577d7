"""The model card of a trained model: intended use, training data, held-out metrics and caveats,
worded by the outcome, features and subgroups of the schema the model was trained on.

Kept apart from ``app.reports.privacy_report`` (which places the card in the job's report) so
that what a person reads about the model is in one place; every text that names the outcome
reads it from the model's own schema (``outcome_words``), the generator's included.
"""

from typing import Any

from pydantic import TypeAdapter

from app.datasets.models import Dataset
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind, outcome_words
from app.jobs.models import Job
from app.jobs.results import ServedResults
from app.reports import held_out_words, ledger_words
from app.reports.schemas import HeldOutMetrics, IntendedUse, ModelCard, TrainingData

METRICS_NOTE = (
    "computed from one differentially private release on the evaluation part of the held-out "
    "rows (never used for training or calibration): noisy counts of rows and of positives (rows "
    "with the model's outcome) per fixed public score bin, overall and per subgroup, with "
    "Gaussian noise no costlier than the training (parallel composition, no extra spend). Every "
    "figure, interval included, is computed from those noisy counts alone, so it is covered by "
    "the guarantee; counts are estimates, and the intervals include the noise. They are exact "
    "only for a non-private job on a public dataset (marked exact)"
)

def _training_data(dataset: Dataset, schema: DatasetSchema) -> TrainingData:
    if dataset.source_kind == "synthetic":
        source = (
            f"synthetic: the seed article's logistic generator of {_outcome(schema)} (its "
            "seed, which regenerates every row, is shown to admins and data stewards only); "
            "no real patient is in it"
        )
    elif dataset.union_of is not None:
        members = ", ".join(str(d) for d in dataset.union_of)
        source = (f"a union of the uploaded tables of datasets {members} (each patient once, "
                  "with the latest listed table's row)")
    else:
        source = f"uploaded table ({dataset.source_kind})"
    return TrainingData(
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        source=source,
        synthetic=dataset.source_kind == "synthetic",
        public=dataset.public,
        rows=dataset.n_rows,
        training_rows=dataset.n_train,
        holdout_rows=dataset.n_holdout,
        note="Only public facts about the data are reported; no statistic of the private "
        "training rows (such as their prevalence) is computed or shown.",
        rows_erased_at=dataset.data_erased_at,
    )


def _lower_first(text: str) -> str:
    """A label inside a sentence: "Readmission within 90 days" -> "readmission within 90
    days", while "PHQ-9" or "ICU stay" keep their capitals (as the dashboard's outcomeText)."""
    return text[0].lower() + text[1:] if len(text) > 1 and text[1].islower() else text


def _outcome(schema: DatasetSchema) -> str:
    """What the model predicts, as a sentence names it: the declared label, else the column."""
    return _lower_first(outcome_words(schema))


def _purpose(schema: DatasetSchema) -> str:
    purpose = f"Flag patients at elevated risk of {_outcome(schema)} for clinician review."
    description = (schema.outcome.description or "").strip()
    if not description:
        return purpose
    return f"{purpose} Outcome: {description.rstrip('.')}."


def _column_label(schema: DatasetSchema, name: str) -> str:
    """A subgroup as a person reads it: its declared label; a numeric feature's groups are
    bands of it (the generator's age bands)."""
    feature = next((f for f in schema.features if f.name == name), None)
    if feature is not None:
        numeric = feature.kind in (FeatureKind.NUMERIC, FeatureKind.INTEGER)
        return _lower_first(feature.label or name) + (" bands" if numeric else "")
    attribute = next((a for a in schema.attributes if a.name == name), None)
    return _lower_first(attribute.label or name) if attribute is not None else name


def _subgroups_caveat(job: Job, schema: DatasetSchema) -> str:
    """Names the groupings the evaluation release reported (public declarations), or, before
    there is one, the schema's subgroups."""
    release = (job.metrics or {}).get("release")
    groupings = release.get("groupings") if isinstance(release, dict) else None
    names = list(groupings) if isinstance(groupings, dict) else list(schema.subgroups)
    if not names:
        return ("Performance in subgroups is not reported: the schema declares no subgroup, so "
                "a model that serves some groups of patients worse would go unnoticed here.")
    shown = ", ".join(_column_label(schema, name) for name in names)
    return (f"Performance in subgroups is not guaranteed: only the declared subgroups ({shown}) "
            "are reported, from noisy counts, with wide intervals in small groups; groups the "
            "schema does not declare are not measured, and noise tends to hurt small subgroups "
            "most.")


def _features_caveat(schema: DatasetSchema) -> str:
    count = len(schema.features)
    features = "feature" if count == 1 else "features"
    return (f"The model sees only its {count} declared {features}; the risk of "
            f"{_outcome(schema)} depends on much it does not see.")


def build(job: Job, dataset: Dataset, schema: DatasetSchema) -> ModelCard:
    """Model-card fields: intended use, training data, metrics and caveats, worded by the
    outcome, features and subgroups of the schema the model was trained on."""
    caveats = [
        "Differential privacy adds noise to training and lowers accuracy; compare the metrics "
        "with a non-private baseline before relying on the scores.",
        "Calibration is not guaranteed: probabilities may be off, more so for rare outcomes; "
        "check the Brier score and recalibrate on local data before setting risk bands.",
        _subgroups_caveat(job, schema),
        "Held-out metrics come from a finite sample (few positives when the outcome is rare) "
        "and from noisy counts: read the 95% intervals (they include the DP noise), not only "
        "the point estimates; a metric resting on too few noisy positives is not reported.",
        _features_caveat(schema),
        "The guarantee assumes one row per patient; a patient with several rows is protected "
        "less.",
    ]
    if dataset.source_kind == "synthetic":
        caveats.insert(
            0,
            "Trained on synthetic data: it learns the generator's assumptions, not a real "
            "population, and is not clinically validated (the generator's Bayes-optimal ROC-AUC "
            "is about 0.845, the ceiling for any model).",
        )
    if job.non_private:
        caveats.insert(0, "Trained without differential privacy (epsilon = infinity).")
    caveats[:0] = held_out_words.card_warnings(job.metrics)  # what it could not release
    return ModelCard(
        outcome=outcome_words(schema),
        intended_use=IntendedUse(
            purpose=_purpose(schema),
            users="clinicians, as decision support inside their own assessment",
            decision_support_not_diagnosis=True,
            out_of_scope=[
                "diagnosis",
                "automated decisions (granting, denying or prioritising care without a "
                "clinician)",
                "populations unlike the training data",
            ],
        ),
        training_data=_training_data(dataset, schema),
        metrics=HeldOutMetrics(values=served_results(job.metrics), note=METRICS_NOTE),
        caveats=caveats,
        erasure=ledger_words.model_erasure(dataset.data_erased_at),
    )


_SERVED_RESULTS: TypeAdapter[ServedResults] = TypeAdapter(ServedResults)


def served_results(stored: dict[str, Any] | None) -> ServedResults:
    """A job's stored result as its typed model; None when there is none, or when it matches no
    model (an untyped legacy result is withheld, as the response field itself would)."""
    return _SERVED_RESULTS.validate_python(stored)

