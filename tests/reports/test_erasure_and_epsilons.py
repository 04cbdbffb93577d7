"""Erasure and the epsilons a person reads, as a privacy officer reads them.

Erasure shows: after ``DELETE /v1/datasets/{id}/data`` the reports (JSON and HTML) say when the
rows were erased and that the ledger and the DP releases remain; the model card says the model
stays in use; the model list marks the model. One epsilon a person reads: each release shows
its headline (PLD) figure, the filter's working figure (RDP at its order) where admission uses
it, with why they differ, and a composed spend above the sum of the tight figures is said to
cost more, not to "save 0".
"""

import re
from datetime import datetime
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.privacy.figures import epsilon_text, round_up
from app.privacy.filter import conversion
from app.reports import ledger_words
from tests.api.scoring_helpers import QUICK_JOB
from tests.conftest import small_dataset
from tests.statistics.helpers import ask

HTML = {"Accept": "text/html"}


class _Tables(HTMLParser):
    """Each table of a page as {caption, headers, rows} of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append({"caption": "", "headers": [], "rows": []})
        elif tag == "caption":
            self._in_caption = True
        elif tag == "tr":
            self._row = []
        elif tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption":
            self._in_caption = False
        elif tag in ("th", "td") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
            if tag == "th":
                self.tables[-1]["headers"].append(self._row[-1])
                self._row.pop()
        elif tag == "tr" and self._row:
            self.tables[-1]["rows"].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self.tables[-1]["caption"] += data
        elif self._cell is not None:
            self._cell.append(data)


def _table(page: str, caption: str) -> dict[str, Any]:
    parser = _Tables()
    parser.feed(page)
    found = [t for t in parser.tables if t["caption"].startswith(caption)]
    assert len(found) == 1, [t["caption"] for t in parser.tables]
    return found[0]


def _page(client: TestClient, path: str) -> str:
    response = client.get(path, headers=HTML)
    assert response.status_code == 200, response.text
    return response.text.replace("&#x27;", "'")


def _epsilon_headers(table: dict[str, Any]) -> list[str]:
    return [h for h in table["headers"] if "ε" in h]


def test_releases_show_one_headline_epsilon_and_the_costlier_composition_honestly(
    client: TestClient,
) -> None:
    """Three small Gaussian releases: each is worth about 0.5 by its own tight (PLD) figure,
    but the filter composes RDP at one order (3.4 for a budget of 10 at 1e-5), whose conversion
    alone costs about 3.9: the composed spend is far above the sum, and the page says why."""
    dataset = client.post("/v1/datasets", json=small_dataset()).json()
    for _ in range(3):
        answer = ask(client, dataset["id"], {"queries": [{"kind": "count"}],
                                             "privacy": {"epsilon": 0.5}})
        assert answer.status_code == 201, answer.text
    report = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    spent, order = report["spent"], report["terms"]["filter_order"]
    assert spent["epsilon"] > spent["naive_sum_epsilon"]  # composition costs more here
    cost = spent["epsilon"] - spent["naive_sum_epsilon"]
    assert spent["composition_cost_epsilon"] == pytest.approx(cost)
    assert spent["saved_by_composition_epsilon"] == 0  # the old key stays, as it was
    note = spent["composition_note"]
    assert note == (f"Composition here costs ε = {epsilon_text(cost, digits=4)} more than the "
                    "sum of each release's tight figure, because the filter composes RDP at "
                    "one order, which is looser than each release's own PLD figure.")
    # The filter's working figure: each release's RDP at the order, summed against the bound,
    # and the composed spend is that sum converted once at the budget delta.
    rdps = [e["filter_rdp"] for e in report["entries"]]
    assert all(r > 0 for r in rdps)
    assert spent["filter_rdp"] == pytest.approx(sum(rdps))
    assert spent["filter_rdp_bound"] == pytest.approx(10 - conversion(order, 1e-5))
    assert spent["epsilon"] == pytest.approx(sum(rdps) + conversion(order, 1e-5))
    assert f"fixed order {order:g}" in spent["figures_note"]

    page = _page(client, f"/v1/datasets/{dataset['id']}/privacy-report")
    assert "Composition saves" not in page and note in page and spent["figures_note"] in page
    entries = _table(page, "Ledger entries")
    assert _epsilon_headers(entries) == ["ε (PLD)"]  # one headline epsilon per release
    assert f"Filter's RDP at order {order:g}" in entries["headers"]
    pld = entries["headers"].index("ε (PLD)")
    rdp = entries["headers"].index(f"Filter's RDP at order {order:g}")
    for row, entry in zip(entries["rows"], report["entries"], strict=True):
        assert row[pld] == epsilon_text(entry["epsilon"]["pld"], digits=4) == "0.5"
        assert row[rdp] == f"{round_up(entry['filter_rdp'], 4):.4g}"
    timeline = _table(page, "Cumulative spend")
    assert _epsilon_headers(timeline) == ["Spent ε after (composed)", "Sum of tight ε after"]
    statistics = _table(page, "Statistics releases")
    assert _epsilon_headers(statistics) == ["ε (its headline)"]  # no target, no second figure
    assert "ε (RDP)" not in page and "Own ε" not in page and "Target ε" not in page
    assert re.search(rf"The filter's working figure</dt><dd>RDP at order {order:g}: "
                     r"[\d.]+ of its bound [\d.]+</dd>", page)


def test_a_public_dataset_has_no_filter_figure(client: TestClient) -> None:
    public = client.post("/v1/datasets", json=small_dataset(public=True,
                                                            privacy_budget=None)).json()
    answer = ask(client, public["id"], {"queries": [{"kind": "count"}],
                                        "privacy": {"epsilon": 0.5}})
    assert answer.status_code == 201, answer.text
    report = client.get(f"/v1/datasets/{public['id']}/privacy-report").json()
    spent = report["spent"]
    assert spent["filter_rdp"] is None and spent["filter_rdp_bound"] is None
    assert spent["figures_note"] == "" and spent["composition_note"] == ""  # one release
    assert [e["filter_rdp"] for e in report["entries"]] == [None]
    page = _page(client, f"/v1/datasets/{public['id']}/privacy-report")
    assert _epsilon_headers(_table(page, "Ledger entries")) == ["ε (PLD)"]
    assert "Filter's RDP" not in page and "working figure" not in page


@pytest.mark.parametrize(
    ("composed", "naive", "releases", "filtered", "said"),
    [
        (1.0, 1.0, 2, True, ""),  # equal: nothing to compare
        (0.5, 0.5, 1, True, ""),  # one release: its own figure
        (float("inf"), 2.0, 2, True, ""),  # non-private: no comparison
        (1.5, 2.0, 2, True, "Composition saves ε = 0.5 against"),
        (2.5, 2.0, 3, True, "costs ε = 0.5 more than the sum of each release's tight figure, "
                            "because the filter composes RDP at one order"),
        (2.5, 2.0, 3, False, "because RDP composition, converted to ε once, is looser here"),
    ],
)
def test_the_composition_line(composed: float, naive: float, releases: int, filtered: bool,
                              said: str) -> None:
    note = ledger_words.composition_note(composed=composed, naive=naive, releases=releases,
                                         filtered=filtered)
    assert (said in note) if said else note == ""


def test_erased_rows_show_in_the_reports_and_the_model_list(
    client: TestClient, run_worker: Any
) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset()).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"], **QUICK_JOB})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    job_id = job.json()["id"]
    model_id = client.get(f"/v1/jobs/{job_id}").json()["model_id"]
    dataset_path = f"/v1/datasets/{dataset['id']}/privacy-report"
    job_path = f"/v1/jobs/{job_id}/privacy-report"

    before = client.get(dataset_path).json()
    assert before["rows_erased_at"] is None and before["erasure"] is None
    card = client.get(job_path).json()["model_card"]
    assert card["erasure"] is None and card["training_data"]["rows_erased_at"] is None
    assert client.get(f"/v1/models/{model_id}").json()["training_rows_erased_at"] is None
    for path in (dataset_path, job_path):
        assert 'id="rows-erased"' not in _page(client, path)

    erased = client.delete(f"/v1/datasets/{dataset['id']}/data")
    assert erased.status_code == 200, erased.text
    at = erased.json()["data_erased_at"]
    day = datetime.fromisoformat(at.replace("Z", "+00:00")).date().isoformat()

    ledger = client.get(dataset_path).json()
    assert datetime.fromisoformat(ledger["rows_erased_at"]) == datetime.fromisoformat(
        at.replace("Z", "+00:00"))
    assert ledger["erasure"] == f"Rows erased on {day}: the ledger and the DP releases remain."
    assert ledger["entries"] == before["entries"]  # the ledger stays as it was
    report = client.get(job_path).json()
    said = (f"The training rows were erased on {day}; this model is a DP release of them and "
            "remains in use under its guarantee.")
    assert report["rows_erased_at"] == ledger["rows_erased_at"]
    assert report["model_card"]["erasure"] == said
    assert report["model_card"]["training_data"]["rows_erased_at"] == ledger["rows_erased_at"]

    assert f'<p class="erased" id="rows-erased">{ledger["erasure"]}</p>' in _page(
        client, dataset_path)
    page = _page(client, job_path)
    assert f'<p class="erased" id="rows-erased">{said}</p>' in page
    assert page.index(said) < page.index("Intended use")  # the model card opens with it

    listed = {m["id"]: m for m in client.get("/v1/models").json()["items"]}
    one = client.get(f"/v1/models/{model_id}").json()
    for model in (listed[model_id], one):
        assert datetime.fromisoformat(model["training_rows_erased_at"].replace(
            "Z", "+00:00")) == datetime.fromisoformat(at.replace("Z", "+00:00"))
    # The model, a DP release, still scores.
    assert client.get("/v1/models/active").json()["training_rows_erased_at"] is not None
