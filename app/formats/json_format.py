"""``application/json``: the scoring answers as they have always been written (``render``)."""

from app.formats.base import Format
from app.scoring import render
from app.scoring.answer import RiskAnswer
from app.scoring.schemas import BatchView

MEDIA_TYPE = "application/json"
ABOUT = "RiskResult (one patient); RiskBatchResponse or RiskBatchCompact (a batch, by view)"


def single(answer: RiskAnswer) -> bytes:
    return render.answer_json(answer.single())


def batch(answer: RiskAnswer, view: BatchView) -> bytes:
    return render.compact_json(answer) if view is BatchView.COMPACT else render.batch_json(answer)


FORMAT = Format(MEDIA_TYPE, single, batch, ABOUT, order=0)
