"""The walk-through runs end to end on a small sample of its public table through the real
service: the table prints, no patient is refused (the blanked feature included) and every
reported figure is a finite number or explicitly withheld."""

import math

import pytest

pytest.importorskip("statsmodels")

from bench import walkthrough  # noqa: E402

pytestmark = pytest.mark.slow


def _cells(printed: str) -> list[list[str]]:
    lines = [line for line in printed.splitlines() if line.startswith("| ")]
    assert lines[0] == "| quantity | reported | interval | truth | covered |"
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]


def test_quick_walk_prints_every_figure_and_refuses_nobody(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert walkthrough.main(["--quick", "--rows", "2000", "--seed", "7"]) == 0
    printed = capsys.readouterr().out
    assert "refused patients: 0;" in printed
    rows = _cells(printed)
    labels = [row[0] for row in rows]
    assert "held-out AUC, epsilon 1" in labels and "held-out AUC, epsilon 3" in labels
    assert any(label.startswith("comparison: champion") for label in labels)
    assert any(label.startswith("comparison: challenger") for label in labels)
    for tag in ("unshifted", "shifted"):
        assert f"monitoring {tag}: W1 {walkthrough.truth.SHIFTED}" in labels
        assert f"monitoring {tag}: PSI {walkthrough.truth.BLANKED}" in labels
    for label, reported, interval, true, covered in rows:
        assert reported == "withheld" or math.isfinite(float(reported)), label
        assert math.isfinite(float(true)), label  # every truth is computed from the rows
        assert covered in ("yes", "no", "n/a"), label
        if interval != "withheld":
            low, high = (float(v) for v in interval.strip("[]").split(","))
            assert math.isfinite(low) and low <= high, label
