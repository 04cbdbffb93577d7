"""An upload's body on disk, readable while it is still arriving.

The route writes each received chunk to the file (``receive``) while the ingestion reads it on a
worker thread (``reader``): a reader's ``read`` returns what has arrived and waits for more
until the body is complete, so parsing and checking overlap the network transfer instead of
following it. A body over the size limit, or a client gone mid-body, makes every reader raise
``BodyAborted``. A Parquet file is read from its end, so its reading waits for the whole body
(``wait_complete``).
"""

import threading
from collections.abc import AsyncIterable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from app.core.errors import DomainError


class BodyAborted(OSError):
    """The body stopped before its end (too large, or the client went away)."""


class UploadTooLarge(DomainError):
    status, kind, title = 413, "upload-too-large", "Upload too large"


class GrowingFile:
    """A file written by one producer and read, from the start, by any number of readers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self.complete = False
        self.aborted = False
        self._changed = threading.Condition()
        path.touch()

    async def receive(self, chunks: AsyncIterable[bytes], *, max_bytes: int) -> None:
        """Append the body's chunks (memory: one chunk); then mark the file complete.

        Raises:
            UploadTooLarge: more than ``max_bytes`` arrived (a 413); readers see an abort.
        """
        try:
            with self.path.open("ab") as out:
                async for chunk in chunks:
                    if self.size + len(chunk) > max_bytes:
                        raise UploadTooLarge(f"the upload exceeds {max_bytes} bytes",
                                             allowed=f"at most {max_bytes} bytes")
                    out.write(chunk)
                    out.flush()
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

    def reader(self) -> "GrowingReader":
        return GrowingReader(self)


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
