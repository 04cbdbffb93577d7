"""Read the next batch of a table while the current one is checked: one reader thread.

Arrow parses a CSV block or decodes a Parquet row group without the GIL, so on two cores the
reading of batch k + 1 overlaps the checks of batch k (``app.datasets.ingest``): an upload
costs about the larger of the two instead of their sum. Memory grows by one batch.

Whatever the reading thread notices about a batch (Arrow's invalid-row callbacks run there,
while that batch is being parsed) is handed over *with* the batch, so the consumer applies it in
reading order, exactly as a serial read would: error lists and row numbers do not depend on the
thread's timing.
"""

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
E = TypeVar("E")
_DONE = object()


class _Failure:
    def __init__(self, error: BaseException, events: list[object]) -> None:
        self.error, self.events = error, events


class Prefetched(Generic[T, E]):
    """``read()`` in a thread, one item ahead; each item with the events noted while reading it.

    ``read`` returns None at the end. ``note`` (called from ``read``, so on the reading thread)
    records an event for the item being read. Iterating yields ``(item, events)``; events
    noted after the last item come as ``(None, events)``, and those noted before a failure
    come to ``on_failure`` just before the failure is raised. Iterate once; ``close`` (or
    leaving the ``with`` block) stops the thread at the next item, even when the consumer
    stops early.
    """

    def __init__(self, read: Callable[[], T | None],
                 on_failure: Callable[[list[E]], None] = lambda events: None) -> None:
        self._read, self._events, self._on_failure = read, list[E](), on_failure
        self._queue: queue.Queue[object] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="table-prefetch", daemon=True)
        self._started = False

    def note(self, event: E) -> None:
        self._events.append(event)

    def take_noted(self) -> list[E]:
        """The events noted before iteration started (and not yet handed over)."""
        events, self._events = self._events, []
        return events

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            while True:
                item = self._read()
                events, self._events = self._events, []
                if item is None:
                    if events:
                        self._put((None, events))
                    self._put(_DONE)
                    return
                if not self._put((item, events)):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            self._put(_Failure(error, list(self._events)))

    def __iter__(self) -> Iterator[tuple[T | None, list[E]]]:
        if self._started:
            raise RuntimeError("a Prefetched reader is iterated once")
        self._started = True
        self._thread.start()
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                self._on_failure(item.events)  # type: ignore[arg-type]
                raise item.error
            yield item  # type: ignore[misc]

    def close(self) -> None:
        self._stop.set()
        if self._started:
            self._thread.join()

    def __enter__(self) -> "Prefetched[T, E]":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
