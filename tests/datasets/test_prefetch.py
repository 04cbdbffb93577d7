"""The upload's reading thread: items in order with their events, failures where they occur,
and no thread left behind when the consumer stops early."""

import threading

import pytest

from app.datasets.prefetch import Prefetched


def _counting(limit: int, fail_at: int | None = None,
              failed: list[list[str]] | None = None) -> tuple[Prefetched[int, str], list[int]]:
    produced: list[int] = []

    def read() -> int | None:
        n = len(produced)
        if n == fail_at:
            reader.note(f"seen before failing at {n}")
            raise ValueError(f"broken at {n}")
        if n == limit:
            reader.note("after the last item")
            return None
        reader.note(f"while reading {n}")
        produced.append(n)
        return n

    reader: Prefetched[int, str] = Prefetched(
        read, on_failure=(lambda events: None) if failed is None else failed.append)
    return reader, produced


def test_items_come_in_order_each_with_the_events_noted_while_it_was_read() -> None:
    reader, _ = _counting(5)
    reader.note("before the first read")
    with reader:
        got = list(reader)
    assert got[0] == (0, ["before the first read", "while reading 0"])
    assert got[1:5] == [(n, [f"while reading {n}"]) for n in range(1, 5)]
    assert got[5] == (None, ["after the last item"])


def test_a_failure_is_raised_in_the_consumer_after_its_events() -> None:
    failed: list[list[str]] = []
    reader, _ = _counting(10, fail_at=3, failed=failed)
    with pytest.raises(ValueError, match="broken at 3"), reader:
        items = [item for item, _ in reader]
    assert failed == [["seen before failing at 3"]]
    assert "items" not in locals()


def test_stopping_early_stops_the_thread_without_reading_everything() -> None:
    reader, produced = _counting(10_000)
    before = threading.active_count()
    with reader:
        for item, _ in reader:
            if item == 2:
                break
    assert threading.active_count() == before
    assert len(produced) <= 5  # past the consumer's item: one queued, one read and waiting


def test_reading_overlaps_the_consumer() -> None:
    """The next item is read while the consumer still works on this one (Arrow's parsing frees
    the GIL, so the two overlap): a consumer that holds the first item sees the second read
    begin. A reader that read only when asked would leave it waiting out the guard."""
    calls, second_read = [0], threading.Event()

    def read() -> int | None:
        calls[0] += 1
        if calls[0] == 2:
            second_read.set()
        return calls[0] if calls[0] <= 2 else None

    with Prefetched(read) as reader:
        overlapped = [second_read.wait(timeout=60) for _ in reader]
    assert overlapped[0] is True


def test_a_reader_is_iterated_once() -> None:
    reader, _ = _counting(1)
    with reader:
        list(reader)
        with pytest.raises(RuntimeError, match="once"):
            list(reader)
