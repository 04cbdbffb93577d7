"""A closed vocabulary stored as its words: a ``StrEnum`` in Python, a ``VARCHAR`` in the table.

Each domain defines its vocabularies once, as ``StrEnum``s in its models module; the ORM column
``StrEnumColumn(JobStatus, 16)`` writes the member's value (the same string as before, so the
database schema and every stored row are unchanged) and reads it back as the member, and the
API schemas type their fields with the same enum, so OpenAPI lists the words. A vocabulary
that a registry holds instead (one module per word) is stored the same way (``WordColumn``).
"""

from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

E = TypeVar("E", bound=StrEnum)


class StrEnumColumn(TypeDecorator[E]):
    """A ``String(length)`` column holding a ``StrEnum``'s values (no CHECK constraint: the
    schema is the same ``VARCHAR`` Alembic created, so ``compare_type`` sees no change)."""

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int) -> None:
        super().__init__(length)
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: Any, dialect: Dialect) -> E | None:
        """The member; a word outside the vocabulary (a tampered row) comes back as it is, so
        the checks that look for one (the ledger's chain verification) can name it."""
        if value is None or value not in self.enum._value2member_map_:
            return value
        return self.enum(value)


class WordColumn(TypeDecorator[str]):
    """A ``String(length)`` column holding a word a registry lists rather than a closed enum
    (a job's kind: ``app.jobs.kinds``), written and read as a plain ``str``; the schema is the
    same ``VARCHAR`` as a ``StrEnumColumn``'s."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else str(value)
