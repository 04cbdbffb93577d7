"""One upload per dataset: an upload claims its dataset before its body arrives.

The claim is a conditional UPDATE in a short transaction of its own (``awaiting_data`` ->
``receiving`` with a random token), so of any number of uploads racing for one dataset exactly
one wins and the others are refused at once (409), before they send a byte more; no database
connection is held while the body arrives. The claim is a lease: the API renews it while the
body arrives (``renew``), then hands it to the queued upload (``queue``: no lease, the upload
row holds it), whose ingest ends it in the transaction that accepts the rows (``ready``) or
gives it back on any failure (``awaiting_data``).

A claim whose process died mid-body stops being renewed: once its lease
(``settings.upload_claim_lease_seconds``) has run out it is stale, a new upload may take it
over, and the start-up recovery gives it back (``give_back_stale``). The claim also names
the process that took it (``this_process``: host, pid and a token drawn at each start), so a
start gives back at once, lease or not, the claims of processes on its host that are gone (or
of its own pid's earlier start); a live owner's claim, or another host's, keeps its lease.
The token makes a stale owner that wakes up harmless: its accept or give-back matches no row.
"""

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from app.core.database import affected_rows
from app.core.errors import Conflict
from app.core.settings import settings
from app.core.time import utcnow
from app.datasets import service
from app.datasets.intake.stored import table_schema
from app.datasets.models import AWAITING_DATA, RECEIVING, Dataset
from app.datasets.patients import legacy_spaces
from app.datasets.service import DatasetHasData as DatasetNotAwaitingData
from app.ledger import spaces

_BOOT = secrets.token_hex(8)  # this start of this process: a reused pid is not the old one


class UploadInProgress(Conflict):
    kind, title = "upload-in-progress", "Another upload is sending this dataset's rows"


@dataclass(frozen=True)
class ClaimedUpload:
    """What an upload needs of its dataset while the body arrives, read when it claimed it:
    the ingest runs without a database session."""

    dataset_id: int
    token: str
    schema: Any  # app.datasets.schema.dataset_schema.DatasetSchema
    coin_scheme: str
    budget_delta: float | None
    patient_secret: str | None = None  # the organisation's patient key, where it keys ids
    patient_space_id: int | None = None  # that space (where the secret is set)
    patient_scheme: str | None = None  # the scheme that space keys its ids with


def stale_before(now: datetime) -> datetime:
    """Claims last renewed before this moment are stale (their process stopped renewing)."""
    return now - timedelta(seconds=settings.upload_claim_lease_seconds)


def this_process() -> str:
    """The owner recorded with the claims this process takes: ``host pid boot``."""
    return f"{socket.gethostname()} {os.getpid()} {_BOOT}"


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` (a claim's ``this_process``) is a process on this host that no
    longer runs: another pid that is not alive, or this pid at an earlier start."""
    try:
        host, pid_text, boot = (owner or "").rsplit(" ", 2)
        pid = int(pid_text)
    except ValueError:
        return False  # no owner recorded: only its lease can end it
    if host != socket.gethostname():
        return False
    if pid == os.getpid():
        return boot != _BOOT
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, another user's
    return False


def claim(*, session: Session, dataset_id: int) -> ClaimedUpload:
    """Claim ``dataset_id`` for one upload (commit right after, before the body is read).

    Raises:
        DatasetNotFound: no such dataset (404).
        UploadInProgress: another upload holds it (409).
        DatasetNotAwaitingData: not an upload, or it already has (or had) its rows (409).
        PatientIdsRequired: registered before patient spaces without an id column (409).
    """
    now, token = utcnow(), secrets.token_hex(16)
    claimed = affected_rows(session.execute(
        update(Dataset)
        .where(Dataset.id == dataset_id, Dataset.source_kind == "upload",
               or_(Dataset.state == AWAITING_DATA,
                   and_(Dataset.state == RECEIVING,
                        Dataset.upload_claimed_at < stale_before(now))))
        .values(state=RECEIVING, upload_claim=token, upload_claimed_at=now,
                upload_claim_owner=this_process())
        .execution_options(synchronize_session=False)
    ))
    dataset = service.get(session=session, dataset_id=dataset_id)
    session.refresh(dataset)
    if claimed != 1:
        _refuse(dataset)
    legacy_spaces.join_organisation(session=session, dataset=dataset)  # registered before spaces
    return claimed_upload(session=session, dataset=dataset, token=token)


def claimed_upload(*, session: Session, dataset: Dataset, token: str) -> ClaimedUpload:
    """What the ingest needs of a dataset claimed under ``token``."""
    space = _keyed_space(session, dataset)
    return ClaimedUpload(dataset.id, token, table_schema(dataset), dataset.coin_scheme,
                         dataset.budget_delta, *((None, None, None) if space is None else
                                                 (space.secret, space.id, space.id_scheme)))


def renew(*, session: Session, dataset_id: int, token: str) -> None:
    """Renew the claim's lease while its body arrives (no-op if no longer ours)."""
    session.execute(
        update(Dataset).where(Dataset.id == dataset_id, Dataset.upload_claim == token,
                              Dataset.upload_claimed_at.is_not(None))
        .values(upload_claimed_at=utcnow()).execution_options(synchronize_session=False))


def queue(*, session: Session, dataset_id: int, token: str) -> bool:
    """Hand the claim to the upload queued with it: no lease from now on (the upload row
    holds it). False when the claim went stale and was taken over meanwhile."""
    return affected_rows(session.execute(
        update(Dataset).where(Dataset.id == dataset_id, Dataset.state == RECEIVING,
                              Dataset.upload_claim == token)
        .values(upload_claimed_at=None).execution_options(synchronize_session=False))) == 1


def give_back_stale(*, session: Session) -> list[str]:
    """Give back every claim whose body will never end: its lease ran out, or its owner is a
    process on this host that is gone; the tokens come back, so that their spools can be
    deleted. A queued claim (no lease: its upload row holds it) is the worker's."""
    before = stale_before(utcnow())
    receiving = session.execute(
        select(Dataset.id, Dataset.upload_claim, Dataset.upload_claimed_at,
               Dataset.upload_claim_owner).where(
            Dataset.state == RECEIVING, Dataset.upload_claimed_at.is_not(None)))
    tokens: list[str] = []
    for dataset_id, token, claimed_at, owner in receiving.all():
        if token is not None and claimed_at is not None and (
                _as_utc(claimed_at) < before or owner_gone(owner)):
            give_back(session=session, claimed=ClaimedUpload(dataset_id, token, None, "", None))
            tokens.append(token)
    return tokens


def _as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _refuse(dataset: Dataset) -> None:
    if dataset.state == RECEIVING:
        raise UploadInProgress(
            f"dataset {dataset.id} is receiving its rows from another upload; send them once, "
            "after that upload ends (it is refused or the dataset becomes ready)",
            field="dataset_id", state=dataset.state,
        )
    raise DatasetNotAwaitingData(
        f"dataset {dataset.id} is {dataset.state} ({dataset.source_kind}): rows can be sent "
        "once, to an upload registered and still awaiting its data; register a new dataset "
        "for other rows", field="dataset_id", state=dataset.state,
    )


def hold(*, session: Session, claimed: ClaimedUpload) -> Dataset:
    """The claimed dataset, locked for the transaction that accepts the rows.

    Raises:
        UploadInProgress: the claim was taken over (it went stale) or given back.
    """
    held = affected_rows(session.execute(
        update(Dataset)
        .where(Dataset.id == claimed.dataset_id, Dataset.state == RECEIVING,
               Dataset.upload_claim == claimed.token)
        .values(upload_claim=None, upload_claimed_at=None, upload_claim_owner=None)
        .execution_options(synchronize_session=False)
    ))
    dataset = service.get(session=session, dataset_id=claimed.dataset_id)
    session.refresh(dataset)
    if held != 1:
        raise UploadInProgress(
            f"dataset {claimed.dataset_id}'s upload claim expired before its rows were "
            "accepted; nothing was stored, send them again", field="dataset_id",
            state=dataset.state,
        )
    return dataset


def give_back(*, session: Session, claimed: ClaimedUpload) -> None:
    """End a failed upload's claim: the dataset awaits its data again (no-op if not ours)."""
    session.execute(
        update(Dataset)
        .where(Dataset.id == claimed.dataset_id, Dataset.state == RECEIVING,
               Dataset.upload_claim == claimed.token)
        .values(state=AWAITING_DATA, upload_claim=None, upload_claimed_at=None,
                upload_claim_owner=None)
        .execution_options(synchronize_session=False)
    )


def _keyed_space(session: Session, dataset: Dataset) -> spaces.PatientSpace | None:
    """The organisation's space when the dataset's ids go into it: the upload keys its ids
    with the space's key and scheme while the body arrives (``patient_index.add_dataset``
    checks they are still the space's)."""
    if dataset.patient_space_id is None:
        return None
    space = session.get(spaces.PatientSpace, dataset.patient_space_id)
    if space is None or space.kind != spaces.SpaceKind.ORGANISATION or space.secret is None:
        return None
    return space
