"""deploy/prometheus: the rules file loads (``promtool check rules``) and its unit tests pass
(``promtool test rules``: the band-mix alert fires when the mix moves, not when it holds or on
too few answers).

Skipped where promtool is absent (``apt-get install prometheus``); with CI set, promtool is
required (``.ci/run`` installs it), so a missing install step fails instead of passing quietly.
The series and labels the rules read are checked against the served-score collector, so a
renamed metric cannot leave the rules querying nothing.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app.bands import BANDS
from app.observability.served_scores import SCORE_BUCKETS

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "dpcrisis-alerts.yml"
RULE_TESTS = RULES_DIR / "dpcrisis-alerts.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (.ci/run installs Debian's prometheus)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def _run(*args: str) -> str:
    done = subprocess.run(list(args), cwd=RULES_DIR, capture_output=True, text=True,
                          timeout=120, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_promtool_checks_the_rules_file(promtool: str) -> None:
    output = _run(promtool, "check", "rules", RULES.name)
    assert "SUCCESS" in output, output


@pytest.mark.slow  # about 2 s: a week of synthetic series, evaluated every 10 minutes
def test_promtool_unit_tests_of_the_alerts_pass(promtool: str) -> None:
    output = _run(promtool, "test", "rules", RULE_TESTS.name)
    assert "SUCCESS" in output and "FAILED" not in output, output


def test_the_rules_read_the_served_score_series() -> None:
    """Names, band values and bucket bounds the rules and their tests use are the collector's."""
    rules, tests = RULES.read_text(), RULE_TESTS.read_text()
    assert "dpcrisis_served_band_total" in rules and "dpcrisis_served_score_bucket" in rules
    assert 'band="high"' in rules
    used_bands = set(re.findall(r'band="(\w+)"', tests))
    assert used_bands == {str(b) for b in BANDS}
    bounds = {float(le) for le in re.findall(r'le="([0-9.]+)"', tests)}
    assert bounds <= set(SCORE_BUCKETS), bounds - set(SCORE_BUCKETS)
    assert "vector(0.10)" in rules  # the declared tolerance: one number, easy to find
