"""What a data scientist reads of a search does not tell K, the number of runs it used: the
worker executes the plan's M runs whatever K (``worker.search``), so the job's timestamps,
status and progress, its metrics observation and the log lines are the same whatever K, except
on K > M, whose probability is part of the job's delta (``app.privacy.selection``)."""

import json
import re
import statistics
from datetime import datetime
from io import StringIO
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.observability import job_metrics
from app.privacy import selection
from tests.conftest import small_dataset
from worker import search as worker_search

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

TRAINING = {"epochs": 1, "batch_size": 256}
GRID = [{"learning_rate": 0.1}, {"learning_rate": 0.5}]


class Spy:
    """Each search's K (drawn, or forced), the runs it executed and its metrics observation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, forced: int | None = None) -> None:
        self.drawn: list[int] = []
        self.executed: list[int] = []
        self.observed: list[dict[str, Any]] = []
        self.forced = forced
        draw, run = selection.draw_runs, worker_search.one_run

        def draw_runs(*args: Any) -> int:
            self.drawn.append(draw(*args) if self.forced is None else self.forced)
            self.executed.append(0)
            return self.drawn[-1]

        def one_run(*args: Any, **kwargs: Any) -> worker_search.Run:
            self.executed[-1] += 1
            return run(*args, **kwargs)

        def observe_training(**kwargs: Any) -> None:
            self.observed.append({k: v for k, v in kwargs.items() if k != "seconds"})

        monkeypatch.setattr(selection, "draw_runs", draw_runs)
        monkeypatch.setattr(worker_search, "one_run", one_run)
        monkeypatch.setattr(job_metrics, "observe_training", observe_training)


def _dataset(client: TestClient) -> int:
    made = client.post("/v1/datasets", json=small_dataset(
        privacy_budget={"epsilon": 10.0, "delta": 1e-5}))
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def _search(ds: TestClient, run_worker: Any, dataset_id: int, *, mean: float,
            target: float) -> tuple[dict[str, Any], float]:
    """Submit and run one Poisson search as the data scientist; the job and its duration as
    they read it (finished_at - started_at, seconds)."""
    made = ds.post("/v1/jobs", json={
        "dataset_id": dataset_id, "privacy": {"target_epsilon": target}, "training": TRAINING,
        "search": {"candidates": GRID, "runs": "poisson", "mean_runs": mean}})
    assert made.status_code == 202, made.text
    assert run_worker(1) == 1
    job = ds.get(f"/v1/jobs/{made.json()['id']}").json()
    report = ds.get(f"/v1/jobs/{made.json()['id']}/privacy-report")
    assert report.status_code == 200, report.text
    job["epochs_recorded"] = [e["epoch"] for e in report.json()["epsilon_per_epoch"]]
    took = (datetime.fromisoformat(job["finished_at"])
            - datetime.fromisoformat(job["started_at"])).total_seconds()
    return job, took


def _read(job: dict[str, Any]) -> dict[str, Any]:
    """What a data scientist reads of a finished search, less the ids, times and DP outputs."""
    return {"status": job["status"], "search": job["search"], "progress": job["progress"],
            "epochs_recorded": job["epochs_recorded"], "keys": sorted(job),
            "record": {k: v for k, v in job["metrics"]["search"].items()
                       if k not in ("chosen_candidate", "chosen", "chosen_score")}}


def _lines(stream: StringIO) -> list[str]:
    """The log records' messages, digits masked (job ids, worker ids, times)."""
    return [re.sub(r"\d+", "#", json.loads(line).get("message", ""))
            for line in stream.getvalue().splitlines() if line.strip()]


def test_a_search_that_uses_one_run_reads_as_one_that_uses_more_than_m(
    client: TestClient, client_as: Any, run_worker: Any, monkeypatch: pytest.MonkeyPatch,
    json_log: StringIO,
) -> None:
    spy = Spy(monkeypatch)
    dataset_id, ds = _dataset(client), client_as("data_scientist")
    seen = []
    for forced in (1, selection.MAX_EXECUTED_RUNS + 1):
        spy.forced = forced
        json_log.seek(0)
        json_log.truncate()
        job, took = _search(ds, run_worker, dataset_id, mean=1.0, target=3.0)
        seen.append((_read(job), _lines(json_log), took))
        print(f"K={forced}: {spy.executed[-1]} runs executed, {took:.2f} s")
    (first, first_log, _), (second, second_log, _) = seen
    executed = first["search"]["executed_runs"]
    assert spy.executed == [executed, executed] and 1 < executed < selection.MAX_EXECUTED_RUNS
    assert first == second and first["status"] == "succeeded"
    assert first_log == second_log
    assert spy.observed[0] == spy.observed[1]  # the metrics see M runs' steps, never K's


def _correlation(xs: list[float], ys: list[float]) -> float:
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return 0.0
    return statistics.correlation(xs, ys)


@pytest.mark.slow
def test_twenty_searches_durations_do_not_tell_k(
    client: TestClient, client_as: Any, run_worker: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy, ds = Spy(monkeypatch), client_as("data_scientist")
    took: list[float] = []
    released: list[bool] = []
    for _ in range(20):  # a dataset each: twenty searches would exhaust one budget
        job, seconds = _search(ds, run_worker, _dataset(client), mean=3.0, target=0.3)
        took.append(seconds)
        assert job["status"] in ("succeeded", "failed"), job  # failed: K = 0, after M runs
        released.append(job["status"] == "succeeded")
        assert spy.executed[-1] == job["search"]["executed_runs"]
    # K = 0 releases nothing and skips the evaluation: its status says so already, so K is
    # read from the duration of the searches that released a model
    kept = [(float(k), t) for k, t, r in zip(spy.drawn, took, released, strict=True) if r]
    correlation = _correlation([k for k, _ in kept], [t for _, t in kept])
    print(f"K drawn {spy.drawn}; runs executed {sorted(set(spy.executed))}; durations "
          f"{[round(t, 2) for t in took]}; correlation of duration with K (K >= 1, "
          f"{len(kept)} searches) {correlation:+.2f}; with K = 0 too "
          f"{_correlation([float(k) for k in spy.drawn], took):+.2f}")
    assert len(set(spy.executed)) == 1  # the same M every time, whatever K
    assert abs(correlation) < 0.7  # chance alone passes 0.7 with probability under 0.001
