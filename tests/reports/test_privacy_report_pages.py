"""Privacy reports as HTML pages (content negotiation, plots, statement, model card) and the
JSON fields they share: the real app, a real worker, small synthetic datasets."""

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import FAST_TRAINING, small_dataset

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

HTML = {"Accept": "text/html"}
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
VOID = {"meta", "link", "br", "hr", "img", "input", "wbr", "area", "base", "col", "source"}


class _Balance(HTMLParser):
    """Checks that every element is closed in order (void and self-closed ones excepted)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


def _assert_page(response: Any) -> str:
    """A complete, self-contained HTML5 page with headers that forbid external resources."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert "accept" in response.headers["vary"].lower()
    page = response.text
    assert page.startswith("<!DOCTYPE html>")
    assert '<html lang="en">' in page and '<meta charset="utf-8">' in page
    checker = _Balance()
    checker.feed(page)
    checker.close()
    assert not checker.errors and not checker.stack, (checker.errors, checker.stack)
    assert "script" not in checker.tags and "link" not in checker.tags
    assert not re.search(r"\b(src|srcset)=", page)
    assert re.findall(r"https?://[^\s\"'<]+", page) == ["http://www.w3.org/2000/svg"] * page.count(
        "<svg"
    )
    return page


def _svg(page: str, chart_id: str) -> str:
    match = re.search(rf'<svg[^>]*id="{chart_id}".*?</svg>', page, re.S)
    assert match, f"no chart {chart_id}"
    svg = match.group(0)
    assert 'role="img"' in svg and "<title" in svg and 'class="legend"' in svg
    assert 'class="axis x-axis"' in svg and 'class="tick"' in svg
    return svg


def _points(svg: str, series: int) -> int:
    group = re.search(rf'<g class="series series-{series}".*?</g>', svg, re.S)
    return 0 if group is None else group.group(0).count('class="point"')


def _submit(client: TestClient, dataset_id: int, privacy: dict[str, Any]) -> int:
    response = client.post(
        "/v1/jobs", json={"dataset_id": dataset_id, "privacy": privacy, "training": FAST_TRAINING}
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


@pytest.mark.parametrize(
    ("accept", "html"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/json", False),
        ("application/problem+json, */*;q=0.1", False),
        ("text/html", True),
        ("text/*", True),
        (BROWSER["Accept"], True),
        ("application/json, text/html", True),
        ("application/json;q=0.9, text/html", True),
        ("text/html;q=0.5, application/json", False),
        ("text/html;q=0, */*", False),
        ("TEXT/HTML; Q=0.8, application/json; q=0.8", True),
        ("nonsense, text/html;q=abc", False),
    ],
)
def test_content_negotiation(
    client: TestClient, dataset: dict[str, Any], accept: str | None, html: bool
) -> None:
    headers = {} if accept is None else {"Accept": accept}
    response = client.get(f"/v1/datasets/{dataset['id']}/privacy-report", headers=headers)
    assert response.status_code == 200
    assert "accept" in response.headers["vary"].lower()
    if html:
        assert response.headers["content-type"].startswith("text/html")
    else:
        assert response.headers["content-type"] == "application/json"
        assert response.json()["dataset_id"] == dataset["id"]


@pytest.mark.parametrize("path", ["/v1/jobs/999/privacy-report", "/v1/datasets/999/privacy-report"])
def test_unknown_ids_stay_problem_json_when_html_is_asked(client: TestClient, path: str) -> None:
    response = client.get(path, headers=BROWSER)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["status"] == 404


def test_openapi_documents_both_media_types(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/jobs/{job_id}/privacy-report", "/v1/datasets/{dataset_id}/privacy-report"):
        content = paths[path]["get"]["responses"]["200"]["content"]
        assert {"application/json", "text/html"} <= set(content)


def test_private_job_and_dataset_pages(
    client: TestClient, dataset: dict[str, Any], run_worker: Any
) -> None:
    first = _submit(client, dataset["id"], {"target_epsilon": 3})
    second = _submit(client, dataset["id"], {"noise_multiplier": 2.0})
    assert run_worker() == 2

    report = client.get(f"/v1/jobs/{first}/privacy-report").json()
    assert report["non_private"] is False and report["epsilon_text"] != "infinity"
    assert report["accountants"] == {"reported": "prv", "composition": "rdp"}
    statement = report["statement"]
    for words in (
        "one record, which is one patient",
        f"{dataset['rows']} rows, of which {dataset['training_rows']} were used for training",
        "Poisson sampling",
        f"probability {report['sample_rate']:.4g}",
        "expected batch size",
        f"noise multiplier {report['noise_multiplier']:.4g}",
        f"L2 norm {report['clip_norm']:g}",
        f"{report['steps']} steps over 3 epochs",
        "PLD accountant",
        "the headline figure",
        "Rényi filter admits the job by its RDP at the filter's one fixed order",
        f"delta = {report['delta']:g}",
        f"epsilon = {report['epsilon_text']}",
        "every checkpoint or intermediate model",
        "post-processing",
        "calibrated by Platt scaling",
        "compose in parallel",
        "held-out metrics are one Gaussian release on the evaluation rows",
        "DP releases on disjoint held-out parts",
        "the calibration and evaluation releases",
        "raw data store",
        "operators and the database",
        "side channels such as timing",
        "the choice of the budget",
    ):
        assert words in statement, words
    assert float(report["epsilon_text"]) >= report["epsilon"]["pld"]  # rounded up, never down
    assert "every checkpoint and intermediate model of the run" in report["coverage"]["covers"]
    assert any("held-out metrics" in c for c in report["coverage"]["covers"])
    assert not any("held-out" in c for c in report["coverage"]["does_not_cover"])
    assert "without noise" not in statement
    assert "gives epsilon" not in statement  # one epsilon: the headline (PLD) figure
    assert report["filter_rdp"] > 0  # the filter's working figure: RDP at its order
    release = report["metrics"]["release"]  # the evaluation is one DP release
    assert release["mechanism"] == "gaussian" and release["exact"] is False
    assert release["noise_std"] > 0 and report["metrics"]["exact"] is False
    assert {"age", "sex"} <= set(release["groupings"])
    card = report["model_card"]
    assert "clinician review" in card["intended_use"]["purpose"]
    assert card["intended_use"]["decision_support_not_diagnosis"] is True
    assert any("automated decisions" in u for u in card["intended_use"]["out_of_scope"])
    data = card["training_data"]
    assert (data["rows"], data["training_rows"], data["holdout_rows"]) == (
        dataset["rows"], dataset["training_rows"], dataset["holdout_rows"])
    assert data["rows"] == 2000 and 1300 < data["training_rows"] < 1500  # ~70% by the coins
    assert data["synthetic"] is True and data["public"] is False
    assert "prevalence" not in data  # no statistic of the private training rows
    assert card["metrics"]["values"] == report["metrics"]
    assert "held-out" in card["metrics"]["note"] and len(card["caveats"]) >= 4
    assert "differentially private release" in card["metrics"]["note"]

    page = _assert_page(client.get(f"/v1/jobs/{first}/privacy-report", headers=BROWSER))
    svg = _svg(page, "epsilon-per-epoch")
    assert _points(svg, 0) == 3 and _points(svg, 1) == 0  # the headline (PLD) only
    assert "planned final ε (PLD)" in svg and "target ε 3" in svg
    assert "<table><caption>Epsilon per epoch" in page
    for escaped in (report["statement"].replace("'", "&#x27;"), "Model card", "Intended use",
                    "not a diagnosis", "Training data", "Held-out metrics", "Caveats",
                    "Does not cover", f'href="/v1/datasets/{dataset["id"]}/privacy-report"'):
        assert escaped in page, escaped
    assert "∞" not in page
    assert "The filter&#x27;s working figure" in page and "ε, RDP" not in page
    for words in ("The evaluation release", "Noise multiplier σ", "L2 sensitivity",
                  "Reliability by public bin", "Held-out metrics by subgroup"):
        assert words in page, words
    reliability = _svg(page, "reliability")
    assert "perfect calibration" in reliability

    ledger = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    assert [p["job_id"] for p in ledger["timeline"]] == [first, second]
    assert ledger["timeline"][-1]["composed_epsilon"] == pytest.approx(ledger["spent"]["epsilon"])
    assert ledger["spent"]["saved_by_composition_epsilon"] > 0
    assert ledger["spent"]["composition_cost_epsilon"] == 0
    assert ledger["spent"]["composition_note"].startswith("Composition saves ε = ")
    assert ledger["budget"]["limited"] is True

    page = _assert_page(client.get(f"/v1/datasets/{dataset['id']}/privacy-report", headers=HTML))
    svg = _svg(page, "cumulative-spend")
    assert _points(svg, 0) == 3 and _points(svg, 1) == 3  # the origin and two charged jobs
    # Step after: the spend stays at 0 until the first charged job, then rises (not before).
    composed = re.search(r'<g class="series series-0"[^>]*>\s*<path d="([^"]+)"', svg)
    assert composed and re.fullmatch(r"M\S+ \S+ H\S+ V\S+ H\S+ V\S+", composed.group(1))
    assert re.search(r'<line class="reference"[^>]*><title>budget ε 10: 10</title>', svg)
    for words in ("Spent ε, composed (the filter&#x27;s figure)",
                  "Sum of each release&#x27;s tight ε (PLD)", "Composition saves ε = ",
                  "Remaining ε", "ε = 10, δ = 1e-05", "Ledger entries"):
        assert words in page, words
    for job_id in (first, second):
        href = f'href="/v1/jobs/{job_id}/privacy-report"'
        assert page.count(href) == 2  # the timeline table and the entries table
    followed = client.get(f"/v1/jobs/{second}/privacy-report", headers=BROWSER)
    assert "Privacy report: job" in _assert_page(followed)


def test_non_private_job_on_public_dataset_reads_infinity(
    client: TestClient, run_worker: Any
) -> None:
    public = client.post(
        "/v1/datasets", json=small_dataset(public=True, privacy_budget=None)
    ).json()
    private_job = _submit(client, public["id"], {"noise_multiplier": 1.0})
    open_job = _submit(client, public["id"], {"noise_multiplier": 0})
    assert run_worker() == 2

    response = client.get(f"/v1/jobs/{open_job}/privacy-report")
    assert "Infinity" not in response.text and "NaN" not in response.text  # valid JSON
    report = response.json()
    assert report["non_private"] is True and report["epsilon_text"] == "infinity"
    assert report["epsilon"] == {"pld": None, "prv": None, "rdp": None}
    assert report["statement"].startswith("Non-private training: epsilon = infinity.")
    assert report["coverage"]["covers"] == []
    assert report["metrics"]["exact"] is True  # public data, no noise: marked exact
    assert report["metrics"]["release"]["mechanism"].startswith("none")
    assert "held-out metrics are exact" in report["statement"]

    page = _assert_page(client.get(f"/v1/jobs/{open_job}/privacy-report", headers=HTML))
    assert "ε = ∞ (non-private)" in page
    svg = _svg(page, "epsilon-per-epoch")
    assert svg.count('class="off-scale series-0"') == 3  # one ∞ mark per epoch, off the axis
    assert _points(svg, 0) == 0
    assert page.count("<td class=\"num\">∞ (non-private)</td>") == 3  # the headline per epoch

    ledger_response = client.get(f"/v1/datasets/{public['id']}/privacy-report")
    assert "Infinity" not in ledger_response.text
    ledger = ledger_response.json()
    assert ledger["spent"]["epsilon"] is None and ledger["spent"]["naive_sum_epsilon"] is None
    assert ledger["spent"]["epsilon_text"] == "infinity" and ledger["spent"]["non_private"]
    assert ledger["budget"] == {"epsilon": None, "delta": None, "limited": False}
    assert [e["epsilon_text"] == "infinity" for e in ledger["entries"]] == [False, True]
    assert [p["non_private"] for p in ledger["timeline"]] == [False, True]

    page = _assert_page(client.get(f"/v1/datasets/{public['id']}/privacy-report", headers=HTML))
    assert "none (public dataset)" in page and "unlimited (no budget)" in page
    assert "∞ (non-private)" in page
    svg = _svg(page, "cumulative-spend")
    assert _points(svg, 0) == 2  # the origin and the private job; the open one is off scale
    assert 'class="off-scale series-0"' in svg and 'class="reference"' not in svg
    assert f'href="/v1/jobs/{private_job}/privacy-report"' in page
    private = client.get(f"/v1/jobs/{private_job}/privacy-report").json()
    assert "public without a budget: no filter admits the job" in private["statement"]
    assert private["filter_rdp"] is None  # no filter, so no working figure beside the headline
    assert "working figure" not in _assert_page(
        client.get(f"/v1/jobs/{private_job}/privacy-report", headers=HTML))


def test_pages_before_any_training(client: TestClient, dataset: dict[str, Any]) -> None:
    page = _assert_page(client.get(f"/v1/datasets/{dataset['id']}/privacy-report", headers=HTML))
    assert "No job has been charged yet" in _svg(page, "cumulative-spend")
    assert "No rows yet." in page

    job_id = _submit(client, dataset["id"], {"noise_multiplier": 5.0})
    report = client.get(f"/v1/jobs/{job_id}/privacy-report").json()
    assert report["status"] == "queued" and report["epsilon_per_epoch"] == []
    assert "The job is queued" in report["statement"]
    page = _assert_page(client.get(f"/v1/jobs/{job_id}/privacy-report", headers=HTML))
    svg = _svg(page, "epsilon-per-epoch")
    assert "No epoch has finished yet" in svg and _points(svg, 0) == 0
    assert "No held-out metrics yet" in page
