"""``text/csv``: one row per patient, for a spreadsheet or a table load.

Columns: ``id``, ``probability``, ``log_odds``, ``band``, then each feature's contribution on
the log-odds scale (``contribution:<feature>``, in the schema's order), then ``imputed`` (the
features scored at their reference value, ``;``-separated). The same fields as
``RiskBatchResult``, and so the same releases. An id a spreadsheet would run as a formula
(``=``, ``+``, ``-``, ``@``, a tab or a return first) is written after a ``'``.
"""

import csv
import io

from app.formats.base import Format
from app.scoring.answer import RiskAnswer
from app.scoring.schemas import BatchView

MEDIA_TYPE = "text/csv"
ABOUT = "one row per patient: id, probability, log_odds, band, contribution:<feature>..., imputed"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def header(answer: RiskAnswer) -> list[str]:
    names = [f"contribution:{f.name}" for f in answer.encoder.schema.features]
    return ["id", "probability", "log_odds", "band", *names, "imputed"]


def _id(value: str | None) -> str:
    if value is None:
        return ""
    return f"'{value}" if value.startswith(FORMULA_STARTS) else value


def batch(answer: RiskAnswer, view: BatchView = BatchView.FULL) -> bytes:
    """Every patient's row (``view`` changes nothing: a row holds every contribution)."""
    sink = io.StringIO()
    writer = csv.writer(sink, lineterminator="\r\n")
    writer.writerow(header(answer))
    for k in range(len(answer)):
        writer.writerow([_id(answer.ids[k]), repr(answer.probability[k]),
                         repr(answer.log_odds[k]), answer.band(k),
                         *map(repr, answer.phi[k]), ";".join(answer.imputed_names(k))])
    return sink.getvalue().encode()


def single(answer: RiskAnswer) -> bytes:
    return batch(answer)


FORMAT = Format(MEDIA_TYPE, single, batch, ABOUT, order=20)
