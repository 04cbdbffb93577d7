"""Held-out evaluation: numpy ranking metrics match sklearn, intervals behave, calibration and
risk-band metrics mean what they say, subgroups partition the rows, and nothing emits NaN."""

import json
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from app.bands import BANDS, DEFAULT_BAND_THRESHOLDS, band_index, band_of
from app.datasets import synthetic
from app.features import FEATURE_NAMES, N_FEATURES
from worker.evaluation import evaluate
from worker.holdout_metrics import ranking_metrics, wilson

AGE = FEATURE_NAMES.index("age")


def _dumps(metrics: dict[str, Any]) -> str:
    return json.dumps(metrics, allow_nan=False)


def _holdout(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic held-out rows scored by a plausible, imperfect model (shrunk, noisy logit)."""
    table = synthetic.generate(n_rows, seed)
    rng = np.random.default_rng(seed + 1000)
    z = 0.8 * synthetic.true_logit(table.x) + rng.normal(0.0, 0.3, n_rows) - 0.3
    return table.x, table.y, 1.0 / (1.0 + np.exp(-z))


def _x_with_ages(ages: np.ndarray) -> np.ndarray:
    x = np.zeros((len(ages), N_FEATURES))
    x[:, AGE] = ages
    return x


@pytest.mark.parametrize("prevalence", [0.02, 0.3, 0.5])
@pytest.mark.parametrize("tied", [False, True])
def test_auc_and_average_precision_equal_sklearn(prevalence: float, tied: bool) -> None:
    rng = np.random.default_rng(7)
    y = (rng.random(3000) < prevalence).astype(np.float64)
    score = rng.random(3000) * 0.6 + 0.3 * y
    if tied:  # coarse scores: many ties within and across classes
        score = np.round(score, 1)
    auc, ap, auc_ci, ap_ci = ranking_metrics(y, score, n_bootstrap=0, rng=rng)
    assert auc == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    assert ap == pytest.approx(average_precision_score(y, score), abs=1e-12)
    assert auc_ci is None and ap_ci is None


def test_evaluate_point_estimates_equal_sklearn_and_keep_old_keys() -> None:
    _, y, p = _holdout(8000, 7)
    metrics = evaluate(y, p)
    assert metrics["split"] == "holdout" and metrics["rows"] == len(y)
    assert metrics["positives"] == int(y.sum())
    assert metrics["roc_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-4)
    assert metrics["pr_auc"] == pytest.approx(average_precision_score(y, p), abs=1e-4)
    assert metrics["brier"] == pytest.approx(np.mean((p - y) ** 2), abs=1e-4)
    assert metrics["subgroups"] is None and any("subgroups" in n for n in metrics["notes"])
    _dumps(metrics)


@pytest.mark.parametrize("prevalence", [0.03, 0.4])  # the multinomial and the row-draw paths
def test_bootstrap_matches_a_naive_sklearn_bootstrap(prevalence: float) -> None:
    rng = np.random.default_rng(3)
    y = (rng.random(800) < prevalence).astype(np.float64)
    score = np.round(rng.random(800) * 0.7 + 0.3 * y, 2)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    naive_auc, naive_ap = [], []
    for _ in range(4000):  # resample rows; score each resample with the sklearn-checked metric
        rows = np.concatenate([rng.choice(pos, len(pos)), rng.choice(neg, len(neg))])
        auc, ap, _, _ = ranking_metrics(y[rows], score[rows], n_bootstrap=0, rng=rng)
        naive_auc.append(auc)
        naive_ap.append(ap)
    _, _, auc_ci, ap_ci = ranking_metrics(y, score, n_bootstrap=4000, rng=rng)
    assert auc_ci == pytest.approx(np.percentile(naive_auc, [2.5, 97.5]), abs=0.01)
    assert ap_ci == pytest.approx(np.percentile(naive_ap, [2.5, 97.5]), abs=0.015)


def test_intervals_contain_the_estimate_and_narrow_with_more_rows() -> None:
    widths = []
    for n_rows in (8000, 80000):  # holdouts of 2,400 and 24,000 rows
        table = synthetic.generate(n_rows, 11)
        _, holdout = synthetic.split_indices(n_rows, 11)
        y, p = table.y[holdout], table.p[holdout]
        metrics = evaluate(y, p)
        for key in ("roc_auc", "pr_auc"):
            low, high = metrics[f"{key}_ci"]
            assert low <= metrics[key] <= high
        widths.append([np.diff(metrics[f"{key}_ci"])[0] for key in ("roc_auc", "pr_auc")])
        assert metrics["ci_method"] == "stratified percentile bootstrap, 1000 resamples"
    assert widths[1][0] < widths[0][0] / 2 and widths[1][1] < widths[0][1] / 2


def test_same_seed_same_intervals_and_no_bootstrap_gives_none() -> None:
    _, y, p = _holdout(4000, 5)
    assert evaluate(y, p, rng_seed=4) == evaluate(y, p, rng_seed=4)
    none = evaluate(y, p, n_bootstrap=0)
    assert none["roc_auc_ci"] is None and none["pr_auc_ci"] is None
    assert none["roc_auc"] == evaluate(y, p)["roc_auc"]


def test_calibrated_predictor_has_small_ece_and_a_badly_scaled_one_large() -> None:
    rng = np.random.default_rng(0)
    p = rng.beta(0.5, 4.0, 20000)
    y = rng.binomial(1, p).astype(np.float64)  # labels drawn from the probabilities
    calibrated = evaluate(y, p, n_bootstrap=0)
    overconfident = evaluate(y, np.minimum(3 * p, 1.0), n_bootstrap=0)
    assert calibrated["ece"] < 0.01 and calibrated["ece_equal_width"] < 0.01
    assert overconfident["ece"] > 0.15 and overconfident["ece_equal_width"] > 0.15

    curve = calibrated["reliability"]
    assert len(curve) == 10 and sum(b["rows"] for b in curve) == len(y)
    assert sum(b["positives"] for b in curve) == int(y.sum())
    assert all(b["rows"] == 2000 for b in curve)  # equal mass
    assert [b["mean_predicted"] for b in curve] == sorted(b["mean_predicted"] for b in curve)
    for b in curve:
        low, high = b["observed_ci"]
        assert b["p_from"] <= b["mean_predicted"] <= b["p_to"]
        assert low <= b["observed_rate"] <= high
        assert abs(b["mean_predicted"] - b["observed_rate"]) < 0.03


def test_band_precision_and_recall_by_hand() -> None:
    p = np.array([0.01, 0.04, 0.05, 0.10, 0.19, 0.20, 0.50, 0.90])
    y = np.array([0, 1, 0, 1, 0, 0, 1, 1], dtype=np.float64)
    bands = evaluate(y, p)["bands"]
    # low: 0.01, 0.04 (1 positive); medium: 0.05, 0.10, 0.19 (1); high: 0.20, 0.50, 0.90 (2)
    assert [bands[b]["exactly"]["rows"] for b in BANDS] == [2, 3, 3]
    assert [bands[b]["exactly"]["positives"] for b in BANDS] == [1, 1, 2]
    assert [bands[b]["exactly"]["precision"] for b in BANDS] == [0.5, 0.3333, 0.6667]
    assert [bands[b]["exactly"]["recall"] for b in BANDS] == [0.25, 0.25, 0.5]
    assert [bands[b]["at_or_above"]["rows"] for b in BANDS] == [8, 6, 3]
    assert [bands[b]["at_or_above"]["share_of_rows"] for b in BANDS] == [1.0, 0.75, 0.375]
    assert [bands[b]["at_or_above"]["precision"] for b in BANDS] == [0.5, 0.5, 0.6667]
    assert [bands[b]["at_or_above"]["recall"] for b in BANDS] == [1.0, 0.75, 0.5]
    assert bands["medium"]["p_from"] == 0.05 and bands["medium"]["p_to"] == 0.2
    high = bands["high"]["exactly"]
    assert high["precision_ci"] == [round(v, 4) for v in wilson(2, 3)]


def test_band_index_agrees_with_the_risk_endpoint_at_the_thresholds() -> None:
    for thresholds in (DEFAULT_BAND_THRESHOLDS, {"low_medium": 0.1, "medium_high": 0.3}):
        p = np.array([0.0, 0.0499, 0.05, 0.0999, 0.1, 0.1999, 0.2, 0.2999, 0.3, 1.0])
        expected = [band_of(float(v), dict(thresholds)) for v in p]
        assert [BANDS[i] for i in band_index(p, thresholds)] == expected
    custom = evaluate(np.array([0.0, 1.0]), np.array([0.08, 0.12]),
                      band_thresholds={"low_medium": 0.1, "medium_high": 0.3})
    assert custom["band_thresholds"] == {"low_medium": 0.1, "medium_high": 0.3}
    assert custom["bands"]["low"]["exactly"]["rows"] == 1


def test_wilson_interval_known_values() -> None:
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 0) is None


def test_age_subgroups_partition_the_rows() -> None:
    x, y, p = _holdout(8000, 7)
    metrics = evaluate(y, p, x_raw=x)
    groups = metrics["subgroups"]
    assert [g["group"] for g in groups] == ["18-29", "30-44", "45-64", "65-80"]
    assert sum(g["rows"] for g in groups) == metrics["rows"]
    assert sum(g["positives"] for g in groups) == metrics["positives"]
    for band in BANDS:
        assert sum(g["bands"][band]["exactly"]["rows"] for g in groups) == (
            metrics["bands"][band]["exactly"]["rows"])
    for g in groups:
        member = (x[:, AGE] >= g["from"]) & (x[:, AGE] <= g["to"])
        assert g["rows"] == member.sum()
        if g["roc_auc"] is not None:
            assert g["roc_auc"] == pytest.approx(roc_auc_score(y[member], p[member]), abs=1e-4)
    _dumps(metrics)


def test_band_edges_and_out_of_range_ages_land_in_one_group() -> None:
    ages = np.array([17, 18, 29, 30, 44, 45, 64, 65, 80, 81])
    metrics = evaluate(np.zeros(10), np.full(10, 0.01), x_raw=_x_with_ages(ages))
    assert [g["rows"] for g in metrics["subgroups"]] == [3, 2, 2, 3]


def test_single_class_holdout_gives_none_with_reasons() -> None:
    x, _, p = _holdout(2000, 3)
    metrics = evaluate(np.zeros(len(p)), p, x_raw=x)
    for key in ("roc_auc", "pr_auc", "roc_auc_ci", "pr_auc_ci"):
        assert metrics[key] is None
    assert any("need both classes" in note for note in metrics["notes"])
    assert metrics["brier"] is not None and metrics["ece"] is not None
    assert metrics["bands"]["high"]["at_or_above"]["recall"] is None
    for g in metrics["subgroups"]:
        assert g["roc_auc"] is None and g["notes"]
    _dumps(metrics)


def test_small_and_empty_subgroups_do_not_crash() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    ages = np.where(rng.random(n) < 0.5, 50, 70)  # no one under 45
    ages[:40] = 35  # a 40-row group aged 30-44 with 3 positives
    y = (rng.random(n) < 0.05).astype(np.float64)
    y[:40] = 0
    y[:3] = 1
    y[ages == 70] = 0  # no positives aged 65-80
    p = np.clip(rng.random(n) * 0.3 + 0.2 * y, 0, 1)
    metrics = evaluate(y, p, x_raw=_x_with_ages(ages))
    empty, small, full, no_positives = metrics["subgroups"]
    assert empty["rows"] == 0 and empty["roc_auc"] is None and empty["brier"] is None
    assert small["rows"] == 40 and small["positives"] == 3
    assert small["roc_auc"] is None and small["ece"] is None
    assert any("fewer than 5" in note for note in small["notes"])
    assert any("fewer than 100" in note for note in small["notes"])
    assert full["roc_auc"] is not None and full["roc_auc_ci"] is not None and not full["notes"]
    assert no_positives["positives"] == 0 and no_positives["roc_auc"] is None
    assert no_positives["bands"]["low"]["exactly"]["recall"] is None
    assert any("need both classes" in note for note in no_positives["notes"])
    _dumps(metrics)


def test_whole_holdout_with_few_positives_keeps_the_auc_but_no_interval() -> None:
    y = np.zeros(500)
    y[:3] = 1
    p = np.linspace(0.9, 0.01, 500)
    metrics = evaluate(y, p)
    assert metrics["roc_auc"] == 1.0 and metrics["roc_auc_ci"] is None
    assert any("no confidence intervals" in note for note in metrics["notes"])
    _dumps(metrics)


@pytest.mark.parametrize(
    ("y", "p", "x"),
    [
        ([0, 1, 0], [0.1, float("nan"), 0.2], None),
        ([0, 1, 0], [0.1, 1.2, 0.2], None),
        ([0, 2, 0], [0.1, 0.5, 0.2], None),
        ([0, 1], [0.1, 0.5, 0.2], None),
        ([0, 1, 0], [0.1, 0.5, 0.2], np.zeros((3, 2))),
    ],
)
def test_bad_input_raises_value_error(y: list, p: list, x: np.ndarray | None) -> None:
    with pytest.raises(ValueError):
        evaluate(np.array(y, dtype=float), np.array(p), x_raw=x)


def test_definitions_are_part_of_the_output() -> None:
    metrics = evaluate(np.array([0.0, 1.0]), np.array([0.1, 0.3]))
    for key in ("roc_auc", "pr_auc", "ci", "ece", "reliability", "bands", "subgroups"):
        assert metrics["definitions"][key]
    _dumps(metrics)
