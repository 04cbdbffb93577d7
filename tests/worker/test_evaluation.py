"""The held-out evaluation as one DP release: the noisy histograms have the stated shape, noise and
sensitivity; every metric is a function of them alone (binned ROC-AUC and AP equal sklearn's on
the bin-discretised scores when exact); noise changes the output and widens the intervals; no
patient's value or exact count leaks; empty groups are answered; nothing emits NaN."""

import json
import math
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from app.bands import BANDS, DEFAULT_BAND_THRESHOLDS, Band
from app.datasets import synthetic
from worker.dp_histogram import Release, all_edges, bin_edges, bin_of, histogram, release
from worker.evaluation import evaluate, evaluated
from worker.histogram_metrics import band_of_bins, project_nonnegative, representatives

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

T = DEFAULT_BAND_THRESHOLDS


def _dumps(metrics: dict[str, Any]) -> str:
    return json.dumps(metrics, allow_nan=False)


def _holdout(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Synthetic evaluation rows scored by a plausible, imperfect model, with age and sex."""
    table = synthetic.generate(n_rows, seed)
    rng = np.random.default_rng(seed + 1000)
    z = 0.8 * synthetic.true_logit(table.x) + rng.normal(0.0, 0.3, n_rows) - 0.3
    return table.y, 1.0 / (1.0 + np.exp(-z)), synthetic.subgroups(table.x, table.sex)


def _run(y: np.ndarray, p: np.ndarray, groups: dict[str, Any] | None = None, noise: float = 0.0,
         seed: int | None = 0, **kw: Any) -> dict[str, Any]:
    return evaluate(y, p, groups=groups or {}, noise_multiplier=noise, band_thresholds=kw.pop(
        "thresholds", T), rng=np.random.default_rng(seed), **kw)


def test_bins_are_public_and_hold_the_band_cut_offs() -> None:
    edges = bin_edges(T)
    assert 15 <= len(edges) + 1 <= 25  # bins per rule: tests/worker/test_dp_histogram.py
    assert {0.05, 0.2} <= set(edges) and np.all(np.diff(edges) > 0)
    custom = bin_edges({"low_medium": 0.1, "medium_high": 0.33})
    assert {0.1, 0.33} <= set(custom)
    # a cut-off belongs to the band (and bin) above it, as in app.bands
    assert bin_of(np.array([0.0499, 0.05, 0.2]), edges).tolist() == [
        list(edges).index(0.05), list(edges).index(0.05) + 1, list(edges).index(0.2) + 1]


def test_release_shape_noise_and_sensitivity() -> None:
    y, p, groups = _holdout(3000, 3)
    exact = release(y.astype(np.int64), p, groups, noise_multiplier=0.0, thresholds=T,
                    rng=np.random.default_rng(0))
    n_bins = len(bin_edges(T)) + 1
    assert exact.overall.shape == (n_bins, 2)
    assert exact.groups["age"].shape == (4, n_bins, 2)
    assert exact.groups["sex"].shape == (2, n_bins, 2)
    assert exact.overall.sum() == len(y) and exact.overall[:, 1].sum() == y.sum()
    for counts in exact.groups.values():  # each grouping partitions the rows
        assert np.array_equal(counts.sum(axis=0), exact.overall)
    assert exact.l2_sensitivity == pytest.approx(math.sqrt(3)) and exact.noise_std == 0

    # removing one record moves one cell of each histogram by 1: L2 distance sqrt(1 + groupings)
    keep = np.arange(len(y)) != 17
    bins, smaller = bin_of(p, exact.edges), bin_of(p[keep], exact.edges)
    diffs = [histogram(bins, y.astype(int), n_bins)
             - histogram(smaller, y[keep].astype(int), n_bins)]
    for codes, labels in groups.values():
        diffs.append(histogram(bins, y.astype(int), n_bins, codes, len(labels))
                     - histogram(smaller, y[keep].astype(int), n_bins, codes[keep], len(labels)))
    assert math.sqrt(sum((d**2).sum() for d in diffs)) == pytest.approx(exact.l2_sensitivity)

    rng = np.random.default_rng(1)
    noise = np.concatenate([
        (release(y.astype(np.int64), p, groups, noise_multiplier=2.0, thresholds=T, rng=rng)
         .groups["age"] - exact.groups["age"]).ravel() for _ in range(100)])
    assert noise.std() == pytest.approx(2.0 * math.sqrt(3), rel=0.05)  # std = sigma x sensitivity
    assert abs(noise.mean()) < 0.1


@pytest.mark.parametrize("prevalence", [0.02, 0.3])
def test_exact_binned_metrics_equal_sklearn_on_discretised_scores(prevalence: float) -> None:
    rng = np.random.default_rng(7)
    y = (rng.random(4000) < prevalence).astype(np.float64)
    p = np.clip(rng.beta(0.6, 6.0, 4000) + 0.25 * y, 0.0, 1.0)
    metrics = _run(y, p, n_bootstrap=0)
    binned = bin_of(p, bin_edges(T))
    assert metrics["exact"] is True and metrics["release"]["mechanism"].startswith("none")
    assert metrics["rows"] == len(y) and metrics["positives"] == y.sum()
    assert metrics["roc_auc"] == pytest.approx(roc_auc_score(y, binned), abs=1e-4)
    assert metrics["pr_auc"] == pytest.approx(average_precision_score(y, binned), abs=1e-4)
    assert metrics["roc_auc"] != pytest.approx(roc_auc_score(y, p), abs=1e-4)  # binned, not raw
    rep = representatives(bin_edges(T))[binned]
    assert metrics["brier"] == pytest.approx(np.mean((rep - y) ** 2), abs=1e-4)
    assert metrics["roc_auc_ci"] is None and metrics["ci_method"] == "none (n_bootstrap=0)"


def test_band_precision_and_recall_by_hand() -> None:
    p = np.array([0.01, 0.04, 0.05, 0.10, 0.19, 0.20, 0.50, 0.90])
    y = np.array([0, 1, 0, 1, 0, 0, 1, 1], dtype=np.float64)
    bands = _run(y, p, n_bootstrap=0)["bands"]
    assert [bands[b]["exactly"]["rows"] for b in BANDS] == [2, 3, 3]
    assert [bands[b]["exactly"]["positives"] for b in BANDS] == [1, 1, 2]
    assert [bands[b]["exactly"]["precision"] for b in BANDS] == [0.5, 0.3333, 0.6667]
    assert [bands[b]["at_or_above"]["rows"] for b in BANDS] == [8, 6, 3]
    assert [bands[b]["at_or_above"]["share_of_rows"] for b in BANDS] == [1.0, 0.75, 0.375]
    assert [bands[b]["at_or_above"]["recall"] for b in BANDS] == [1.0, 0.75, 0.5]
    assert bands["medium"]["p_from"] == 0.05 and bands["medium"]["p_to"] == 0.2
    custom = _run(np.array([0.0, 1.0]), np.array([0.08, 0.12]), n_bootstrap=0,
                  thresholds={"low_medium": 0.1, "medium_high": 0.3})
    assert custom["bands"]["low"]["exactly"]["rows"] == 1
    assert {0.1, 0.3} <= set(custom["release"]["bins"])


def test_band_precision_is_shown_by_its_rows_apart_from_its_own_cells() -> None:
    """Whether a band's precision is shown reads the band's rows estimated apart from its own
    noisy cells (the public row count less the rows outside it; a group's: the whole part's
    less the other groups'): noise that inflates the band's own cells never shows it, as it
    did when the band's own noisy rows decided (the figure then leant towards 1/2)."""
    edges = bin_edges(T)
    high = band_of_bins(edges, T) == BANDS.index(Band.HIGH)
    counts = np.where(high[:, None], [[0.0, 1.0]], [[100.0, 20.0]])  # one row per high bin
    public = int(counts.sum())
    floor = 2.0 * 2.0 * math.sqrt(2 * high.sum())  # twice the noise std (2 a cell) of its rows

    def shown(overall: np.ndarray, rows: int | None, groups: np.ndarray | None = None) -> list:
        grouped = {} if groups is None else {"site": groups}
        metrics = evaluated(Release(edges=edges, overall=overall, groups=grouped,
                                    labels={"site": ["a", "b"]} if grouped else {},
                                    noise_multiplier=2.0 / math.sqrt(1 + len(grouped)),
                                    public_rows=rows), T, np.random.default_rng(0), 0)
        return [m["bands"]["high"]["at_or_above"]["precision"] is not None
                for m in (metrics, *metrics["subgroups"])]

    inflated = counts + np.where(high[:, None], [[30.0, 0.0]], 0.0)  # as noise up to 30 a cell
    assert inflated[high].sum() > floor > counts[high].sum()
    assert shown(counts, public) == shown(inflated, public) == [False]
    notes = evaluated(Release(edges=edges, overall=inflated, groups={}, labels={},
                              noise_multiplier=2.0, public_rows=public), T,
                      np.random.default_rng(0), 0)["notes"]
    assert any(n.startswith("band precision not reported") and "high at or above" in n
               for n in notes), notes
    assert shown(counts, public + 100) == [True]  # rows outside the band fewer: read larger
    assert shown(inflated, None) == [True]  # no public count, no grouping: its own rows
    # a group: the whole part's band less the other group's; an empty group whose own high
    # cells the noise inflated stays withheld, and the whole part reads its grouping's sum
    assert shown(counts, None, np.stack([counts, inflated - counts]))[2:] == [False]
    assert shown(counts + inflated, None, np.stack([counts, inflated])) == [True, False, True]


def test_noise_changes_the_output_and_widens_the_intervals() -> None:
    y, p, groups = _holdout(4000, 5)
    one, two = (_run(y, p, groups, noise=1.0, seed=None, n_bootstrap=200) for _ in range(2))
    assert one["release"]["histograms"] != two["release"]["histograms"]
    assert one["exact"] is False and one["release"]["mechanism"] == "gaussian"
    assert one["release"]["noise_std"] == pytest.approx(math.sqrt(3), abs=1e-4)
    widths = []
    for noise in (0.0, 0.5, 1.5):
        runs = [_run(y, p, groups, noise=noise, seed=s, n_bootstrap=300) for s in range(6)]
        widths.append([np.mean([np.diff(m[f"{k}_ci"])[0] for m in runs])
                       for k in ("roc_auc", "prevalence", "brier")])
    assert all(a < b for a, b in zip(widths[0], widths[1], strict=True))
    assert all(a < b for a, b in zip(widths[1], widths[2], strict=True))


@pytest.mark.slow  # seconds of hypothesis or I/O: the full suite runs it
def test_intervals_cover_the_exact_binned_value() -> None:
    y, p, groups = _holdout(3000, 9)
    exact = _run(y, p, groups, n_bootstrap=0)
    runs = [_run(y, p, groups, noise=1.5, seed=s, n_bootstrap=300) for s in range(30)]
    for key in ("roc_auc", "prevalence", "brier"):
        inside = [m[f"{key}_ci"][0] <= exact[key] <= m[f"{key}_ci"][1] for m in runs]
        assert sum(inside) >= 25, (key, sum(inside))


def test_output_depends_on_probabilities_only_through_public_bins() -> None:
    y, p, groups = _holdout(3000, 11)
    edges = bin_edges(T)
    full = all_edges(edges)
    b = bin_of(p, edges)
    moved = full[b] + (full[b + 1] - full[b]) * np.random.default_rng(3).random(len(p)) * 0.99
    for noise in (0.0, 1.0):  # same bins, same rng: the same output to the last digit
        assert _run(y, p, groups, noise=noise, seed=4) == _run(y, moved, groups, noise=noise,
                                                                 seed=4)
    noisy = _run(y, p, groups, noise=1.0, seed=4)
    curve = noisy["reliability"]
    assert [c["p_from"] for c in curve] + [curve[-1]["p_to"]] == [round(e, 4) for e in full]
    assert noisy["rows"] != len(y) and noisy["positives"] != y.sum()  # no exact count
    cells = noisy["release"]["histograms"]["all"]["positives"]
    assert not any(float(c).is_integer() for c in cells)


def test_empty_group_is_still_answered() -> None:
    y, p, groups = _holdout(2000, 13)
    codes = np.where(groups["sex"][0] == 0, 0, 2)  # nobody in the middle group
    three = {"site": (codes, ["north", "middle", "south"])}
    for noise in (0.0, 2.0):
        metrics = _run(y, p, three, noise=noise)
        middle = next(g for g in metrics["subgroups"] if g["group"] == "middle")
        assert middle["grouping"] == "site" and middle["roc_auc"] is None and middle["notes"]
        assert "middle" in metrics["release"]["histograms"]["by_grouping"]["site"]
        assert (middle["rows"] == 0) == (noise == 0)
        _dumps(metrics)
    assert [g["group"] for g in metrics["subgroups"]] == ["north", "middle", "south"]


def test_few_noisy_positives_give_none_with_notes() -> None:
    y = np.zeros(600)
    y[:3] = 1
    p = np.linspace(0.9, 0.001, 600)
    exact = _run(y, p)
    assert exact["roc_auc"] is None and exact["pr_auc"] is None and exact["roc_curve"] == []
    assert any("fewer than 5 in a class" in n for n in exact["notes"])
    assert exact["brier"] is not None
    y, p, _ = _holdout(3000, 17)  # ~60 positives: enough exactly, too few under heavy noise
    assert _run(y, p)["roc_auc"] is not None
    # 54 positives against a floor of 2 noise stds of their noisy sum: withheld unless the noise
    # on that sum is over 1.4 stds up (about 8% of draws), whatever the number of bins
    heavy = [_run(y, p, noise=20.0, seed=s, n_bootstrap=0) for s in range(10)]
    withheld = [h for h in heavy if h["roc_auc"] is None]
    assert len(withheld) >= 8 and all(any("ROC-AUC and PR-AUC not reported" in n
                                           for n in h["notes"]) for h in withheld)


def test_projection_keeps_totals_unbiased_and_counts_non_negative() -> None:
    truth = np.zeros((18, 2))
    truth[:6, 0], truth[3:8, 1] = 300.0, 6.0  # sparse positives, as at 2% prevalence
    assert np.array_equal(project_nonnegative(truth), truth)
    rng = np.random.default_rng(0)
    noisy = truth + rng.normal(0.0, 3.0, (2000, *truth.shape))
    projected = project_nonnegative(noisy)
    assert projected.min() >= 0
    assert np.allclose(projected.sum(axis=1), np.clip(noisy.sum(axis=1), 0, None))
    clamped = np.clip(noisy, 0, None)[..., 1].sum(axis=1).mean()
    assert abs(projected[..., 1].sum(axis=1).mean() - 30) < 0.5 < clamped - 30 - 5


def test_metrics_are_json_safe_in_every_corner() -> None:
    y, p, groups = _holdout(1500, 19)
    for case in (
        _run(y, p, groups, noise=1.0),
        _run(np.zeros(len(y)), p, groups, noise=0.0),  # one class
        _run(np.zeros(0), np.zeros(0), {"sex": (np.zeros(0), ["f", "m"])}, noise=1.0),  # no rows
        _run(y, p, groups, noise=50.0, n_bootstrap=50),
    ):
        text = _dumps(case)
        assert "NaN" not in text and "Infinity" not in text
        for key in ("release", "roc_auc", "bands", "reliability", "subgroups", "ci", "none"):
            assert key in case or key in case["definitions"]


@pytest.mark.parametrize(
    ("y", "p", "groups", "noise"),
    [
        ([0, 1, 0], [0.1, float("nan"), 0.2], {}, 0.0),
        ([0, 1, 0], [0.1, 1.2, 0.2], {}, 0.0),
        ([0, 2, 0], [0.1, 0.5, 0.2], {}, 0.0),
        ([0, 1], [0.1, 0.5, 0.2], {}, 0.0),
        ([0, 1, 0], [0.1, 0.5, 0.2], {}, -1.0),
        ([0, 1, 0], [0.1, 0.5, 0.2], {"g": (np.array([0, 1, 2]), ["a", "b"])}, 0.0),
        ([0, 1, 0], [0.1, 0.5, 0.2], {"g": (np.array([0, 1]), ["a", "b"])}, 0.0),
        ([0, 1, 0], [0.1, 0.5, 0.2], {"g": (np.array([0, 0.5, 1]), ["a", "b"])}, 0.0),
    ],
)
def test_bad_input_raises_value_error(y: list, p: list, groups: dict, noise: float) -> None:
    with pytest.raises(ValueError):
        _run(np.array(y, dtype=float), np.array(p), groups, noise=noise)
