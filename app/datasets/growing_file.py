"""An upload's body on disk, readable while it is still arriving.

The route writes each received chunk to the file (``receive``) while the ingestion reads it on a
worker thread (``reader``): a reader's ``read`` returns what has arrived and waits for more
until the body is complete, so parsing and checking overlap the network transfer instead of
following it. The body's SHA-256 (the kept file's name) is taken chunk by chunk as it arrives,
so no pass over the whole file follows the last row's checks. A body over the size limit, or
a client gone mid-body, makes every reader raise ``BodyAborted``. A Parquet file is read from
its end, so its reading waits for the whole body (``wait_complete``).
"""

import asyncio
import hashlib
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from app.core.errors import DomainError


class BodyAborted(OSError):
    """The body stopped before its end (too large, or the client went away)."""


class UploadTooLarge(DomainError):
    status, kind, title = 413, "upload-too-large", "Upload too large"


class UploadTooSlow(DomainError):
    """The body arrived slower than the minimum rate, or took longer than the longest time a
    body may take: a client trickling bytes would otherwise hold the upload's slot forever."""

    status, kind, title = 408, "upload-too-slow", "Upload too slow"


@dataclass(frozen=True)
class Pace:
    """How slowly a body may arrive: after ``grace_seconds``, at least ``min_bytes_per_second``
    on average since it began, and never longer than ``max_seconds`` in all."""

    min_bytes_per_second: float
    grace_seconds: float
    max_seconds: float

    def deadline_for(self, size: int, started: float) -> float:
        """The monotonic time by which byte ``size + 1`` must have arrived."""
        by_rate = started + self.grace_seconds + (size + 1) / self.min_bytes_per_second
        return min(by_rate, started + self.max_seconds)

    def too_slow(self, size: int) -> "UploadTooSlow":
        return UploadTooSlow(
            f"the upload's body arrived too slowly ({size} bytes so far): after the first "
            f"{self.grace_seconds:g} s it must average at least "
            f"{self.min_bytes_per_second:g} bytes/s and end within {self.max_seconds:g} s",
            allowed=f"at least {self.min_bytes_per_second:g} bytes/s, at most "
                    f"{self.max_seconds:g} s",
        )


class GrowingFile:
    """A file written by one producer and read, from the start, by any number of readers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self.complete = False
        self.aborted = False
        self._changed = threading.Condition()
        self._digest = hashlib.sha256()
        path.touch()

    async def receive(self, chunks: AsyncIterable[bytes], *, max_bytes: int,
                      pace: Pace | None = None) -> None:
        """Append the body's chunks (memory: one chunk); then mark the file complete.

        Raises:
            UploadTooLarge: more than ``max_bytes`` arrived (a 413); readers see an abort.
            UploadTooSlow: the body fell behind ``pace`` (a 408); readers see an abort.
        """
        try:
            with self.path.open("ab") as out:
                async for chunk in _paced(chunks, pace, lambda: self.size):
                    if self.size + len(chunk) > max_bytes:
                        raise UploadTooLarge(f"the upload exceeds {max_bytes} bytes",
                                             allowed=f"at most {max_bytes} bytes")
                    out.write(chunk)
                    out.flush()
                    self._digest.update(chunk)  # releases the GIL: readers go on beside it
                    self._grow(len(chunk))
        except BaseException:
            self.abort()
            raise
        with self._changed:
            self.complete = True
            self._changed.notify_all()

    def _grow(self, by: int) -> None:
        with self._changed:
            self.size += by
            self._changed.notify_all()

    def abort(self) -> None:
        with self._changed:
            self.aborted = True
            self._changed.notify_all()

    def wait_for(self, size: int) -> int:
        """Block until ``size`` bytes arrived or the body is complete; the size arrived.

        Raises:
            BodyAborted: the body stopped before its end.
        """
        with self._changed:
            self._changed.wait_for(lambda: self.aborted or self.complete or self.size >= size)
            if self.aborted:
                raise BodyAborted("the upload's body stopped before its end")
            return self.size

    def wait_complete(self) -> None:
        self.wait_for(float("inf"))  # type: ignore[arg-type]

    def sha256(self) -> str:
        """The whole body's SHA-256 (hex), once it is complete.

        Raises:
            BodyAborted: the body stopped before its end.
        """
        self.wait_complete()
        return self._digest.hexdigest()

    def reader(self) -> "GrowingReader":
        return GrowingReader(self)


async def _paced(chunks: AsyncIterable[bytes], pace: Pace | None,
                 size: Callable[[], int]) -> AsyncIterator[bytes]:
    """``chunks``, each awaited no longer than ``pace`` allows (unbounded without one)."""
    iterator = aiter(chunks)
    started = time.monotonic()
    while True:
        if pace is None:
            wait = None
        else:
            wait = pace.deadline_for(size(), started) - time.monotonic()
            if wait <= 0:
                raise pace.too_slow(size())
        try:
            chunk = await asyncio.wait_for(anext(iterator), timeout=wait)
        except StopAsyncIteration:
            return
        except TimeoutError:
            assert pace is not None
            raise pace.too_slow(size()) from None
        yield chunk


class GrowingReader:
    """A sequential binary reader of a ``GrowingFile`` (what Arrow's CSV reader asks for)."""

    def __init__(self, growing: GrowingFile) -> None:
        self._growing = growing
        self._file: BinaryIO = growing.path.open("rb")
        self._at = 0
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all the rest for -1), waiting for them to arrive; b"" at
        the end of a complete body."""
        wanted = float("inf") if size is None or size < 0 else self._at + size
        available = self._growing.wait_for(wanted)  # type: ignore[arg-type]
        count = available - self._at if size is None or size < 0 else min(
            size, available - self._at)
        data = self._file.read(count)
        self._at += len(data)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._at

    def close(self) -> None:
        self._file.close()
        self.closed = True

    def __enter__(self) -> "GrowingReader":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
