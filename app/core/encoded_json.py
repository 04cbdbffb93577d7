"""JSON already encoded: written to a JSON column as it is, and embedded as it is where a
record's canonical JSON is hashed (``app.ledger.hashing.canonical_json``).

An upload that splits thousands of patient blocks chains them all in one record
(``app.ledger.space_chain.append_upload``): building a dict per block, then encoding them for
the hash and again for the column, costs an order of magnitude more than writing the record's
text once from the blocks' known JSON.
"""

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EncodedJSON:
    """A JSON value's text, in canonical form (sorted keys, no whitespace): the form
    ``canonical_json`` gives, so a record whose hash covers it hashes the same once read back
    and decoded."""

    text: str


def dumps(value: Any) -> str:
    """The engines' JSON serializer: an ``EncodedJSON`` as it is, anything else as SQLAlchemy
    would have written it (``json.dumps``)."""
    return value.text if isinstance(value, EncodedJSON) else json.dumps(value)
