"""Scoring answers as JSON bytes, cut from the typed answer (``app.scoring.answer``).

Every scoring answer keeps the bytes it has always had, so the text is the standard library's
``json``, with Python's float repr: pydantic-core and msgspec write the model's delta 1e-05 as
0.00001 and 2.5e-07 as 2.5e-7. pydantic-core still walks the typed objects: each is dumped to
plain values (by alias, in field order) and written from that dump.

For 10,000 patients, writing 60,000 contributions value by value costs more than the model
itself, and most of each is the same for many patients (the statement, thresholds and
reference; a feature value's label, reason and severity). So a batch is written from
templates: a typed part is dumped once with its per-patient fields cut out as holes (``_cut``),
and only the holes (``*_HOLES``) are written per patient, floats with ``float.__repr__`` as
``json`` writes them. A new field of a response model therefore appears here by itself, unless
it differs per patient. A test checks each writer against ``json.dumps`` of the typed views.
"""

import json
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel

from app.bands import BANDS, band_index
from app.datasets.schema.encoding import built_encoder
from app.scoring.answer import NEUTRAL_BELOW, RiskAnswer, compact_contribution, contribution
from app.scoring.schemas import TOP_CONTRIBUTIONS

_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode

RESULT_HOLES = ("id", "probability", "log_odds", "band", "contributions", "imputed")
CONTRIBUTION_HOLES = ("contribution", "contribution_probability", "direction")
COMPACT_RESULT_HOLES = ("id", "probability", "band", "contributions", "imputed")
COMPACT_CONTRIBUTION_HOLES = ("direction", "contribution_probability")
"""The fields that differ from patient to patient, in their models' order (``_cut`` checks)."""


def _plain(part: BaseModel) -> dict[str, Any]:
    return part.model_dump(by_alias=True)


def answer_json(answer: BaseModel) -> bytes:
    """A typed answer (one patient's ``RiskResult``) as UTF-8 JSON."""
    return _encode(_plain(answer)).encode()


def _cut(part: BaseModel, holes: tuple[str, ...]) -> tuple[str, ...]:
    """``part`` as JSON text cut at the fields ``holes``: the ``len(holes) + 1`` pieces
    around them.

    Raises:
        ValueError: the model's fields no longer come in the order ``holes`` names (a writer
            below would put a value in the wrong place).
    """
    pieces, text, seen = [], "{", []
    for n, (key, value) in enumerate(_plain(part).items()):
        text += ("," if n else "") + _encode(key) + ":"
        if key in holes:
            seen.append(key)
            pieces.append(text)
            text = ""
        else:
            text += _encode(value)
    if tuple(seen) != holes:
        raise ValueError(f"{type(part).__name__} has per-patient fields {seen}, not {holes}")
    return (*pieces, text + "}")


@lru_cache(maxsize=4096)
def _contribution(encoder_hash: str, index: int, value: float,
                  imputed: bool = False) -> tuple[str, ...]:
    """A full contribution's text around its holes, for one feature value (``imputed``: the
    reference, scored because the feature was not given)."""
    encoder = built_encoder(encoder_hash)
    return _cut(contribution(encoder, index, value, 0.0, 0.0, imputed), CONTRIBUTION_HOLES)


@lru_cache(maxsize=4096)
def _compact_contribution(encoder_hash: str, index: int, value: float,
                          imputed: bool = False) -> tuple[str, ...]:
    """A compact contribution's text around its holes, for one feature value."""
    encoder = built_encoder(encoder_hash)
    return _cut(compact_contribution(encoder, index, value, 0.0, 0.0, imputed),
                COMPACT_CONTRIBUTION_HOLES)


def _contribution_texts(answer: RiskAnswer, *, compact: bool) -> list[str]:
    """Each patient's contributions (all of them, or the top compact ones) as the JSON text
    inside its list. The hot loop of a batch (one pass per contribution): a template per
    (feature, value) looked up in a local dict, the direction inline (``direction_of``'s rule)."""
    digest, texts = answer.encoder.hash, []
    make = _compact_contribution if compact else _contribution
    limit = TOP_CONTRIBUTIONS if compact else None
    templates: dict[tuple[int, float, bool], tuple[str, ...]] = {}
    for k, (row, phi, phi_p, order) in enumerate(zip(answer.raw, answer.phi, answer.phi_p,
                                                     answer.order, strict=True)):
        gone = answer.imputed.get(k, ())
        parts = []
        for i in order[:limit]:
            key = (i, row[i], i in gone)
            cut = templates.get(key)
            if cut is None:
                cut = templates[key] = make(digest, *key)
            p = phi[i]
            way = "neutral" if -NEUTRAL_BELOW < p < NEUTRAL_BELOW else (
                "raises" if p > 0 else "lowers")
            parts.append(f'{cut[0]}"{way}"{cut[1]}{phi_p[i]!r}{cut[2]}' if compact
                         else f'{cut[0]}{p!r}{cut[1]}{phi_p[i]!r}{cut[2]}"{way}"{cut[3]}')
        texts.append(",".join(parts))
    return texts


def _bands(answer: RiskAnswer) -> list[str]:
    """Every patient's band, at once (``band_index``: ``band_of`` on an array)."""
    index = band_index(np.asarray(answer.probability), answer.band_thresholds)
    return [BANDS[b].value for b in index.tolist()]


def _imputed(answer: RiskAnswer, k: int) -> str:
    """Patient k's ``imputed`` list as JSON ("[]" for most patients)."""
    return _encode(answer.imputed_names(k)) if k in answer.imputed else "[]"


def batch_json(answer: RiskAnswer) -> bytes:
    """The full batch answer (``RiskBatchResponse``) as UTF-8 JSON."""
    head, tail = _cut(answer.document([]), ("results",))
    r0, r1, r2, r3, r4, r5, r6 = _cut(answer.result(0), RESULT_HOLES)
    contributions, bands = _contribution_texts(answer, compact=False), _bands(answer)
    results = [
        f'{r0}{_encode(answer.ids[k])}{r1}{answer.probability[k]!r}{r2}'
        f'{answer.log_odds[k]!r}{r3}"{bands[k]}"{r4}[{contributions[k]}]{r5}'
        f'{_imputed(answer, k)}{r6}'
        for k in range(len(answer))
    ]
    return f"{head}[{','.join(results)}]{tail}".encode()


def compact_json(answer: RiskAnswer) -> bytes:
    """The compact batch answer (``RiskBatchCompact``) as UTF-8 JSON."""
    head, tail = _cut(answer.compact_document([]), ("results",))
    r0, r1, r2, r3, r4, r5 = _cut(answer.compact_result(0), COMPACT_RESULT_HOLES)
    contributions, bands = _contribution_texts(answer, compact=True), _bands(answer)
    results = [
        f'{r0}{_encode(answer.ids[k])}{r1}{answer.probability[k]!r}{r2}"{bands[k]}"'
        f'{r3}[{contributions[k]}]{r4}{_imputed(answer, k)}{r5}'
        for k in range(len(answer))
    ]
    return f"{head}[{','.join(results)}]{tail}".encode()
