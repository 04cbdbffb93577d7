"""Scoring responses written straight to JSON: for the batch, the same document as
``Scored.document``.

For 10,000 patients, building 60,000 contribution dicts and then encoding them costs more than
the model itself. Every contribution's constant parts (feature, label, value, reason, severity)
are encoded once per feature value and cached; only the numbers are written per patient, with
``float.__repr__``, exactly as ``json.dumps`` writes them. A test checks the two agree.
"""

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from app.datasets.encoding import built_encoder
from app.scoring.service import Scored, direction_of, explained_value

_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


@lru_cache(maxsize=4096)
def _fragments(encoder_hash: str, index: int, value: float) -> tuple[str, str]:
    """JSON around a contribution's two numbers, for one feature value."""
    encoder = built_encoder(encoder_hash)
    f = encoder.schema.features[index]
    reason, severity, shown = explained_value(encoder, index, value)
    head = (f'{{"feature":{_encode(f.name)},"label":{_encode(f.label or f.name)},'
            f'"value":{_encode(shown) if isinstance(shown, str) else repr(shown)},'
            '"contribution":')
    tail = f',"reason":{_encode(reason)},"severity":{_encode(severity)}}}'
    return head, tail


def _contributions(scored: Scored, k: int) -> str:
    row, phi, phi_p = scored.raw[k], scored.phi[k], scored.phi_p[k]
    digest = scored.encoder.hash
    parts = []
    for i in scored.order[k]:
        head, tail = _fragments(digest, i, row[i])
        parts.append(f'{head}{phi[i]!r},"contribution_probability":{phi_p[i]!r},'
                     f'"direction":"{direction_of(phi[i])}"{tail}')
    return ",".join(parts)


def document_json(document: dict[str, Any]) -> bytes:
    """A response document (one patient's answer) as UTF-8 JSON, as ``batch_json`` writes."""
    return _encode(document).encode()


def batch_json(scored: Scored, ids: Sequence[str | None]) -> bytes:
    """``{"model", "band_thresholds", "reference", "results"}`` as UTF-8 JSON."""
    thresholds = _encode(scored.band_thresholds)
    tail = (f'],"reference":{_encode(scored.short_reference)},'
            f'"model":{_encode(scored.short_model)}}}')
    results = [
        f'{{"id":{_encode(ids[k])},"probability":{scored.probability[k]!r},'
        f'"log_odds":{scored.log_odds[k]!r},"band":"{scored.band(k)}",'
        f'"band_thresholds":{thresholds},"contributions":[{_contributions(scored, k)}{tail}'
        for k in range(len(scored))
    ]
    head = (f'{{"model":{_encode(scored.model)},"band_thresholds":{thresholds},'
            f'"reference":{_encode(scored.reference)},"results":[')
    return (head + ",".join(results) + "]}").encode()
