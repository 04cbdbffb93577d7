"""An upload's body written to a spool file as it arrives, with the guards that bound it.

The body is written chunk by chunk (memory: one chunk) and its SHA-256 (the kept file's name)
is taken as it arrives; more than ``max_bytes`` is a 413, a body slower than its ``Pace`` a
408. Nothing reads the spool until it is complete: a worker ingests it
(``app.flows.upload``), where Parquet's page bounds and the row checks guard memory.
"""

import asyncio
import hashlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import DomainError


class UploadTooLarge(DomainError):
    status, kind, title = 413, "upload-too-large", "Upload too large"


class UploadTooSlow(DomainError):
    """The body arrived slower than the minimum rate, or took longer than the longest time a
    body may take: a client trickling bytes would otherwise hold its dataset's claim for hours."""

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




@dataclass(frozen=True)
class Spooled:
    size: int  # bytes
    sha256: str  # hex, of the body as sent


async def spool(chunks: AsyncIterable[bytes], path: Path, *, max_bytes: int,
                pace: Pace | None = None,
                renew: Callable[[], Awaitable[None]] | None = None,
                renew_seconds: float = 10.0) -> Spooled:
    """Write the body's chunks to ``path`` (created), hashing them as they come; ``renew``
    (the dataset's claim) is awaited every ``renew_seconds`` while the body arrives.

    Raises:
        UploadTooLarge: more than ``max_bytes`` arrived (a 413).
        UploadTooSlow: the body fell behind ``pace`` (a 408).
    """
    digest, renewed = hashlib.sha256(), time.monotonic()
    size = [0]
    with path.open("wb") as out:
        async for chunk in _paced(chunks, pace, lambda: size[0]):
            if size[0] + len(chunk) > max_bytes:
                raise UploadTooLarge(f"the upload exceeds {max_bytes} bytes",
                                     allowed=f"at most {max_bytes} bytes")
            out.write(chunk)
            digest.update(chunk)
            size[0] += len(chunk)
            if renew is not None and time.monotonic() - renewed > renew_seconds:
                await renew()
                renewed = time.monotonic()
    return Spooled(size[0], digest.hexdigest())
