"""Unlabelled follow-ups (features only): what may not read their outcome.

An unlabelled follow-up (``"follow_up": {..., "labelled": false}``) is a later cohort of a
model's patients sent without the outcome column (``dataset_schema.FeaturesOnly``): its rows
read back with no outcome (NaN), so a monitoring run measures its data drift only. Everything
that would read the outcome (training and its held-out evaluation, a comparison's evaluation,
a statistics query on the outcome) is refused here, before anything is planned or charged.
"""

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset


class DatasetUnlabelled(InvalidRequest):
    kind, title = "dataset-unlabelled", "The dataset has no outcome"


def unlabelled(dataset: Dataset) -> bool:
    """An unlabelled follow-up (a row not yet flushed is labelled: the column's default)."""
    return dataset.labelled is False


def check_labelled(dataset: Dataset, *, needs: str, field: str = "dataset_id") -> None:
    """Refuse (422, naming ``field``) what ``needs`` the outcome of an unlabelled follow-up.

    Raises:
        DatasetUnlabelled: the dataset is an unlabelled follow-up.
    """
    if unlabelled(dataset):
        raise DatasetUnlabelled(
            f"dataset {dataset.id} is an unlabelled follow-up (features only): {needs} needs "
            "the outcome, which its table does not carry; it serves monitoring runs' data "
            "drift only", field=field, allowed="a labelled dataset")
