"""Unions of cohorts: one dataset whose rows are earlier cohorts' rows, each patient once.

A clinic that retrains after a monitoring run often wants the training cohort and its
follow-ups together (more rows, the latest period included). A **union** is declared like any
dataset (``source: {"kind": "union", "datasets": [...]}``, by a data steward, with its own
budget): its members are the organisation's private uploads of one declared schema, ready and
labelled. It has no table of its own: its rows are read from its members' stored tables each
time (``load_table``), so erasing a member's rows erases the union's too (``erase_with``).

Each patient is one row: a patient in several members keeps the row of the **last** member
listed that holds them (list cohorts oldest first, and each patient's latest record is the one
trained on), matched by the keyed word of their id under the union's own secret. (Two ids with
one 64-bit word, odds near N^2 / 2^65, would count as one patient: one row fewer, never a
patient charged less.) A row keeps the part (training, calibration, evaluation) its member's
coin gave it: list a follow-up last, and its evaluation part stays out of the union's training
part, so a model retrained on the union is compared with its champion on that follow-up
(``app.monitoring.comparison``) on rows it never trained on.

Its budget is the patients': the union joins the organisation's patient space as a dataset
that holds every patient of every member (``patient_index.add_union``), so a release on it
charges every block of every member, and each member's next release sees that spend.

Its **public size** is its members' summed (rows, and each part's rows): the exact count of
its patients would be the members' overlap, a fact about which patients the tables share, so
it stays with the tables' holders (``patient_overlap``). Releases plan on the public sizes and
read the fewer rows there are, as a release that leaves patients out does
(``app.datasets.parts``).
"""

import dataclasses
import hashlib

import numpy as np
import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from app.core.errors import Conflict, InvalidRequest
from app.core.time import utcnow
from app.datasets import record_coins
from app.datasets.intake import table_store
from app.datasets.intake.stored import load_table as load_member_table
from app.datasets.models import ERASED, READY, Dataset
from app.datasets.patients import identity, patient_ids
from app.datasets.rules import check_delta
from app.datasets.schema import labels
from app.datasets.schemas import DatasetCreate, UnionSource
from app.ledger import spaces

UNION = "union"


class UnionWithoutRows(Conflict):
    kind, title = "union-without-rows", "A member of the union has no rows"


def _refuse(member_id: int, reason: str) -> InvalidRequest:
    return InvalidRequest(f"dataset {member_id} {reason}", field="source.datasets",
                          allowed="ready, labelled private uploads of the organisation, "
                          "of one declared schema")


def members(*, session: Session, member_ids: list[int]) -> list[Dataset]:
    """The declared members, checked, in the order declared.

    Raises:
        InvalidRequest: a member that does not exist, is not a private upload of the
            organisation's patient space, has no rows, is unlabelled, or is of another
            declared schema than the first (422, ``source.datasets``).
    """
    found = {d.id: d for d in session.scalars(select(Dataset).where(Dataset.id.in_(member_ids)))}
    organisation = spaces.organisation(session=session).id
    chosen: list[Dataset] = []
    for member_id in member_ids:
        member = found.get(member_id)
        if member is None or member.state == "withdrawn":
            raise _refuse(member_id, "does not exist")
        if member.source_kind != "upload" or member.public \
                or member.patient_space_id != organisation:
            raise _refuse(member_id, "is not a private upload of the organisation's "
                          "patient space (only its patients can be matched across tables)")
        if member.state != READY:
            raise _refuse(member_id, f"is {member.state}: it has no rows to join")
        if labels.unlabelled(member):
            raise _refuse(member_id, "is an unlabelled follow-up: a union is trained "
                          "on, so each member carries the outcome")
        if member.schema_hash != (chosen[0].schema_hash if chosen else member.schema_hash):
            raise _refuse(member_id, f"is not of dataset {chosen[0].id}'s declared "
                          "schema")
        chosen.append(member)
    return chosen


def build(*, session: Session, request: DatasetCreate) -> Dataset:
    """A union's dataset row, ready, with its public sizes and a fresh secret (the caller adds
    it, flushes it and joins it to the patient space, ``patient_index.add_union``).

    Raises:
        InvalidRequest: as ``members``; a schema sent (a union takes its members'), or its
            own or the organisation's per-patient delta above 1/(10 n) for its patients
            (422).
    """
    source = request.source
    assert isinstance(source, UnionSource)
    if request.declared_schema is not None:
        raise InvalidRequest("a union takes its members' declared schema: send none",
                             field="schema")
    if request.follow_up is not None:
        raise InvalidRequest("a union is not a follow-up: monitoring runs measure a model "
                             "on one later cohort", field="follow_up")
    chosen = members(session=session, member_ids=source.datasets)
    secret = identity.new_secret()
    n_rows = sum(m.n_rows for m in chosen)  # public sizes: the members' (module docstring)
    budget = request.privacy_budget
    if budget is not None:
        check_delta(budget.delta, n_rows, field="privacy_budget.delta")
    space = spaces.organisation(session=session)  # as an upload of as many rows would be
    check_delta(space.budget_delta, n_rows, field="the organisation's per-patient delta")
    return Dataset(
        source_kind=UNION, union_of=[m.id for m in chosen], n_rows=n_rows,
        n_train=sum(m.n_train for m in chosen),
        n_calibration=sum(m.n_calibration for m in chosen),
        seed=0, record_secret=secret, coin_scheme=identity.CURRENT_SCHEME,
        schema_json=chosen[0].schema_json, schema_hash=chosen[0].schema_hash, state=READY,
        ledger_version=0, imputed=_imputed(chosen))


def _imputed(chosen: list[Dataset]) -> dict[str, int]:
    """Values imputed per feature, summed over the members (an exact intake fact, shown to
    the tables' holders only, as a member's; a patient in two members counts twice)."""
    total: dict[str, int] = {}
    for member in chosen:
        for name, count in (member.imputed or {}).items():
            total[name] = total.get(name, 0) + int(count)
    return total


def _joined(tables: list[table_store.IngestedTable]) -> table_store.IngestedTable:
    names = list(tables[0].attributes)
    return table_store.IngestedTable(
        features=np.concatenate([t.features for t in tables]),
        outcome=np.concatenate([t.outcome for t in tables]),
        ids=pa.concat_arrays([record_coins.id_strings(t.ids) for t in tables]),
        attributes={name: np.concatenate([t.attributes[name] for t in tables])
                    for name in names},
        imputed={},
        fingerprint=hashlib.sha256(":".join(t.fingerprint for t in tables).encode())
        .hexdigest())


def _last_rows(words: np.ndarray) -> np.ndarray:
    """The rows to keep, in table order: for each word, its last row."""
    reversed_first = np.unique(words[::-1], return_index=True)[1]
    return np.sort(len(words) - 1 - reversed_first)


def _rows(chosen: list[Dataset], secret: str, scheme: str
          ) -> tuple[table_store.IngestedTable, np.ndarray, np.ndarray]:
    """The members' rows one after another, each row's part in its own member (that
    member's coin: a follow-up's evaluation part stays out of the union's training part, so
    a model retrained on the union can still be compared on it), and the rows to keep."""
    for member in chosen:
        if member.record_secret is None:
            raise UnionWithoutRows(f"dataset {member.id}'s rows are gone", field="dataset_id")
    tables = [load_member_table(member) for member in chosen]
    parts = np.concatenate([identity.parts_of(table.ids, member.record_secret or "",
                                              scheme=member.coin_scheme)
                            for table, member in zip(tables, chosen, strict=True)])
    # Parts by each member's own ids; patients by the ids their steward declared, if any.
    joined = _joined([dataclasses.replace(table, ids=patient_ids.of(member, table.ids))
                      for table, member in zip(tables, chosen, strict=True)])
    keep = _last_rows(record_coins.keyed_words(joined.ids, secret, scheme=scheme))
    return joined, parts, keep


def load_with_parts(dataset: Dataset) -> tuple[table_store.IngestedTable, np.ndarray]:
    """The union's rows (its members' tables, each patient once: the last member's row) and
    each row's part (the one its member gave it).

    Raises:
        UnionWithoutRows: a member's rows were erased, or no longer hold the patients the
            union was declared with (409).
    """
    session = object_session(dataset)
    if session is None or dataset.union_of is None or dataset.record_secret is None:
        raise UnionWithoutRows(f"dataset {dataset.id} is {dataset.state}: it has no rows",
                               field="dataset_id", state=dataset.state)
    found = {d.id: d for d in session.scalars(
        select(Dataset).where(Dataset.id.in_(dataset.union_of)))}
    gone = [i for i in dataset.union_of if i not in found or found[i].state != READY]
    if gone:
        raise UnionWithoutRows(f"dataset {dataset.id} is a union of datasets {gone} whose rows "
                               "are gone", field="dataset_id", state=dataset.state)
    table, parts, keep = _rows([found[i] for i in dataset.union_of], dataset.record_secret,
                               dataset.coin_scheme)
    declared = (dataset.patient_overlap or {}).get("patients", len(keep))
    if len(keep) != declared:
        raise UnionWithoutRows(f"dataset {dataset.id}'s members no longer hold the patients "
                               "it was declared with", field="dataset_id", state=dataset.state)
    return table_store.IngestedTable(
        features=table.features[keep], outcome=table.outcome[keep],
        ids=table.ids.take(pa.array(keep)),
        attributes={name: codes[keep] for name, codes in table.attributes.items()},
        imputed=dict(dataset.imputed or {}), fingerprint=table.fingerprint), parts[keep]


def load_table(dataset: Dataset) -> table_store.IngestedTable:
    """The union's rows (``load_with_parts``)."""
    return load_with_parts(dataset)[0]


def erase_with(*, session: Session, member: Dataset) -> list[Dataset]:
    """Erase the rows of every union that holds ``member`` (its rows are the members'; the
    union's secret goes too): the unions erased now."""
    erased = []
    for union in session.scalars(select(Dataset).where(Dataset.source_kind == UNION,
                                                       Dataset.state == READY)):
        if member.id in (union.union_of or []):
            union.record_secret, union.state = None, ERASED
            union.data_erased_at = utcnow()
            erased.append(union)
    session.flush()
    return erased
