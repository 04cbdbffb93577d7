"""A bound on the uploads whose bodies arrive at once, per API process.

Each upload holds a spool file, an ingest thread and its arrays until its body ends; without a
bound, many slow clients could hold them all (the pace in ``growing_file`` bounds how long each
may take). Past the bound an upload is refused at once with a 503 and ``Retry-After``, before
it claims its dataset or reads a byte of its body.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.core.errors import DomainError

RETRY_AFTER_SECONDS = 30


class UploadsBusy(DomainError):
    status, kind, title = 503, "uploads-busy", "Too many uploads in progress"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} uploads are already in progress on this server; try again later",
            allowed=f"at most {limit} uploads at once",
        )
        self.headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}


class UploadSlots:
    """A counter of uploads in progress (threads and the event loop may both end one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_use = 0

    @contextmanager
    def slot(self, limit: int) -> Iterator[None]:
        """Hold one slot while the block runs.

        Raises:
            UploadsBusy: ``limit`` slots are already held (503).
        """
        with self._lock:
            if self.in_use >= limit:
                raise UploadsBusy(limit)
            self.in_use += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_use -= 1


uploads_in_progress = UploadSlots()
