"""The patient-budget bench runs end to end at its quick sizes and prints both tables (no
timings are asserted: speed is for the bench, not the test suite)."""

import gc
import re

import pytest

from app.core.settings import settings
from bench import patient_budget


@pytest.mark.slow
def test_quick_bench_prints_admission_and_upload_tables(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", settings.data_dir)  # the bench points it away
    try:
        patient_budget.main(["--quick", "--admissions", "5", "--repeat", "1"])
    finally:
        gc.unfreeze()
    printed = capsys.readouterr().out
    row = re.search(r"^\| SQLite \| ([\d,]+) \|", printed, re.M)
    assert row is not None and int(row.group(1).replace(",", "")) > 10, printed
    assert "- admission p95 = " in printed
    for what in ("pyarrow.csv.read_csv", "add_dataset alone (rolled back)",
                 "upload flow: claim, receive, accept"):
        assert f"| {what} |" in printed
    assert "- upload / bare read = " in printed
