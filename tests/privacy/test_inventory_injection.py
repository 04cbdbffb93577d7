"""A reviewer's injection, planted all at once, is caught three times.

A review added, together, a count inside the stored ``metrics`` object, an extra member on the
409 of a duplicate registration, and a response header, and every inventory test still passed.
Here the same three (and their variants) are planted in a snippet given to the same scans, and
in the worker's real metrics object; no file on disk is changed.
"""

import pytest
from pydantic import ValidationError

from app.jobs import kinds
from app.privacy import inventory
from app.privacy.inventory_http import standard_header
from tests.jobs.test_results import held_out_metrics
from tests.privacy import test_inventory_headers, test_inventory_problems
from tests.privacy.inventory_scans import problem_members, response_headers
from tests.privacy.test_inventory_problems import errors, extra_members

PLANTED = '''
from app.core.errors import problem
from app.datasets.rules import DatasetAlreadyRegistered
from app.ledger.errors import BudgetExceeded

ROWS = "X-Rows"


def register(response, existing, n, figures, name):
    response.headers["X-Row-Count"] = str(n)
    response.headers.update({ROWS: str(n)})
    response.headers[name] = str(n)
    raise DatasetAlreadyRegistered("already registered", field="source", existing_rows=n)


def refuse(figures, n):
    raise BudgetExceeded("over budget", **figures)


def answer(JSONResponse, message, n, path):
    message["headers"].append((b"x-positives", str(n).encode()))
    problem(409, "conflict", "Conflict", "taken", path, rows_seen=n)
    return JSONResponse({}, headers={"X-Held-Out-Positives": str(n)})
'''


def _unclassified(found: dict[str, list[str]], prefix: str) -> set[str]:
    return {name for name in found if f"{prefix}:{name}" not in inventory.BY_WHERE}


def test_a_planted_header_fails_the_header_scan() -> None:
    scan = response_headers([("planted.py", PLANTED)])
    headers = {h for h in _unclassified(scan.found, "header") if not standard_header(h)}
    assert headers == {"X-Row-Count", "X-Rows", "x-positives", "X-Held-Out-Positives"}
    assert {w for h in headers for w in scan.found[h]} == {f"planted.py:{n}"
                                                            for n in (10, 11, 21, 23)}
    assert scan.unresolved == ["planted.py:12: response.headers[name] = str(n)"]


def test_a_planted_error_member_fails_the_problem_scan() -> None:
    scan = problem_members([("planted.py", PLANTED)], errors())
    members = _unclassified(extra_members(scan.found), "problem")
    assert members == {"existing_rows", "rows_seen"}
    assert scan.found["existing_rows"] == ["planted.py:13"]
    assert scan.unresolved == ["planted.py:17: **figures"]


def test_a_planted_metric_fails_where_the_job_is_finished() -> None:
    """``metrics["n_positive"] = int(y.sum())`` after ``evaluate`` in the worker."""
    metrics = held_out_metrics()
    metrics["n_positive"] = 80
    with pytest.raises(ValidationError, match="n_positive"):
        kinds.check("train", metrics)


def test_the_real_source_has_none_of_them() -> None:
    """The same checks find nothing unclassified in app/ and worker/ (as the scans' own tests
    say): what the planted snippet adds is what they catch."""
    headers, problems = test_inventory_headers.scan(), test_inventory_problems.scan()
    assert not {h for h in _unclassified(headers.found, "header") if not standard_header(h)}
    assert not _unclassified(extra_members(problems.found), "problem")
    assert not headers.unresolved and not problems.unresolved
