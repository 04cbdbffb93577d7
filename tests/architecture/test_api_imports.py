"""The API process starts without torch: an upload's path never needs it, and torch alone
is a few hundred MB of a process whose goal is under 300 MB while a million rows arrive
(``bench/upload_memory.py``). Torch loads with the first model scored or trained."""

import subprocess
import sys

import pytest

_PROBE = """
import sys
def loaded():
    return sorted(m for m in sys.modules if m in ("torch", "opacus"))
from app.main import create_app
create_app()
import app.flows.upload, app.datasets.intake.spool, app.datasets.intake.ingest
import app.privacy.accounting
print(loaded())
from app.families import create_family
create_family("logistic").network(3)
print(loaded())
"""


@pytest.mark.slow  # a fresh interpreter imports the whole service
def test_the_api_starts_without_torch() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          check=True, timeout=120)
    at_start, after_a_network = done.stdout.strip().splitlines()[-2:]
    assert at_start == "[]", done.stdout
    assert after_a_network == "['torch']", done.stdout  # the probe sees torch when it loads
