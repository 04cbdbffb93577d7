"""A clinic's Flower client, watched: the coordinator is another party and may fall silent.

Flower's client blocks on its connection: a coordinator that accepts the connection and never
speaks (or stops speaking) would hold the clinic's worker, and every job queued behind it,
while the part's cancel went unread. So the client runs in a thread and the worker's own thread
watches it: the part ends when the coordinator has said nothing for one round timeout while the
clinic was waiting on it (its own training and evaluation do not count), when its job is
cancelled or the worker stops (at any stage, also mid-round), or when its lease is lost.

An abandoned client thread is harmless: every answer checks the run first (``Contact``), and
every round commits its charge under the job's lease before it reads a row, which fails once
the job has ended.
"""

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POLL_SECONDS = 0.25
CANCEL_CHECK_SECONDS = 1.0
"""How often the job's cancel flag is read from the database while the part runs."""


class PartEnded(RuntimeError):
    """The part was abandoned (cancel, silence, stop): its client thread must not answer."""


class Silent(RuntimeError):
    """The coordinator said nothing for a round timeout while this clinic waited on it."""


class Contact:
    """When the coordinator last spoke to this clinic and whether the clinic is answering."""

    def __init__(self) -> None:
        self.heard = time.monotonic()
        self.busy = False
        self.ended = threading.Event()

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Around each answer: the coordinator has spoken; the clinic works (not silence)
        until it has answered; nothing is answered once the part has ended."""
        if self.ended.is_set():
            raise PartEnded("this site's part has ended")
        self.busy = True
        try:
            yield
        finally:
            self.busy = False
            self.heard = time.monotonic()
        if self.ended.is_set():
            raise PartEnded("this site's part ended while it answered")


def watch(part: Callable[[], None], contact: Contact, *, silence_seconds: float,
          stopped: Callable[[], bool], cancelled: Callable[[], bool]) -> None:
    """Run ``part`` (the Flower client) in a thread until it returns, and re-raise what it
    raised; or end the part early.

    Args:
        silence_seconds: the longest the coordinator may say nothing while the clinic waits.
        stopped: whether the worker stops or lost the job's lease (read every poll).
        cancelled: whether the job's cancel was asked (read every ``CANCEL_CHECK_SECONDS``).

    Raises:
        Silent: the coordinator said nothing for ``silence_seconds``.
        PartEnded: the job was cancelled or the worker stops.
    """
    failure: list[BaseException] = []

    def client() -> None:
        try:
            part()
        except BaseException as exc:  # noqa: BLE001 - handed to the watching thread
            failure.append(exc)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(client,),
                              name="dpcrisis-federated-client", daemon=True)
    thread.start()
    next_cancel_check = time.monotonic() + CANCEL_CHECK_SECONDS
    while True:
        thread.join(POLL_SECONDS)
        if not thread.is_alive():
            break
        now = time.monotonic()
        check = now >= next_cancel_check
        if check:
            next_cancel_check = now + CANCEL_CHECK_SECONDS
        if stopped() or (check and cancelled()):
            contact.ended.set()
            raise PartEnded("this site's part was cancelled")
        if not contact.busy and now - contact.heard > silence_seconds:
            contact.ended.set()
            raise Silent(f"the coordinator said nothing for {silence_seconds:g} s (the "
                         "federation's round timeout)")
    if failure:
        raise failure[0]
