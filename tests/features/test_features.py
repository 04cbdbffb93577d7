"""The feature spec and the seeded synthetic generator (the article's outcome model)."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from app.datasets.synthetic import SyntheticTable, generate, split_indices, true_logit
from app.features import (
    BY_NAME,
    FEATURE_NAMES,
    FEATURES,
    LOWER,
    MODEL_UPPER,
    N_FEATURES,
    REFERENCE,
    UPPER,
    Feature,
    scale,
)

LARGE_N = 200_000


@pytest.fixture(scope="module")
def large_table() -> SyntheticTable:
    return generate(LARGE_N, seed=2024)


def _row(**values: float) -> np.ndarray:
    return np.array([float(values[name]) for name in FEATURE_NAMES], dtype=np.float64)


# --- generator ---------------------------------------------------------------------------------


def test_same_rows_and_seed_give_identical_tables() -> None:
    a = generate(5_000, seed=11)
    b = generate(5_000, seed=11)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.p, b.p)


def test_different_seed_gives_a_different_table() -> None:
    a = generate(5_000, seed=11)
    b = generate(5_000, seed=12)
    assert a.x.shape == b.x.shape
    assert not np.array_equal(a.x, b.x)
    assert not np.array_equal(a.p, b.p)


def test_table_shapes() -> None:
    t = generate(1_234, seed=3)
    assert t.x.shape == (1_234, N_FEATURES)
    assert t.y.shape == (1_234,)
    assert t.p.shape == (1_234,)


def test_values_are_whole_numbers_within_public_bounds(large_table: SyntheticTable) -> None:
    x = large_table.x
    assert np.all(np.isfinite(x))
    np.testing.assert_array_equal(x, np.rint(x))
    for i, f in enumerate(FEATURES):
        assert x[:, i].min() >= f.lower, f.name
        assert x[:, i].max() <= f.upper, f.name


def test_binary_features_and_outcome_are_zero_or_one(large_table: SyntheticTable) -> None:
    binary = [i for i, f in enumerate(FEATURES) if f.kind == "binary"]
    assert [FEATURE_NAMES[i] for i in binary] == ["substance_use", "prior_crisis"]
    for i in binary:
        assert set(np.unique(large_table.x[:, i])) == {0.0, 1.0}, FEATURE_NAMES[i]
    assert set(np.unique(large_table.y)) == {0.0, 1.0}


def test_prevalence_is_about_two_percent(large_table: SyntheticTable) -> None:
    prevalence = large_table.y.mean()
    assert 0.015 <= prevalence <= 0.03, prevalence


def test_bayes_optimal_auc_is_about_0845(large_table: SyntheticTable) -> None:
    auc = roc_auc_score(large_table.y, large_table.p)
    assert auc == pytest.approx(0.845, abs=0.01)


def test_true_probability_is_sigmoid_of_true_logit() -> None:
    t = generate(2_000, seed=5)
    np.testing.assert_allclose(t.p, 1.0 / (1.0 + np.exp(-true_logit(t.x))), rtol=1e-12)
    assert np.all((t.p > 0) & (t.p < 1))


def test_true_logit_matches_the_article_formula() -> None:
    row = _row(age=34, phq9=22, gaf=35, num_sessions=12, substance_use=1, prior_crisis=1)
    expected = -6 + 0.12 * 22 - 0.03 * 35 + 0.15 * 12 + 1.0 * 1 + 1.8 * 1
    assert true_logit(row[None, :])[0] == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.19, abs=1e-12)

    other = _row(age=70, phq9=3, gaf=90, num_sessions=0, substance_use=0, prior_crisis=0)
    assert true_logit(other[None, :])[0] == pytest.approx(-6 + 0.36 - 2.7, abs=1e-12)


def test_true_logit_ignores_age() -> None:
    young = _row(age=18, phq9=10, gaf=50, num_sessions=5, substance_use=0, prior_crisis=1)
    old = young.copy()
    old[FEATURE_NAMES.index("age")] = 80
    assert true_logit(young[None, :])[0] == true_logit(old[None, :])[0]


# --- scaling -----------------------------------------------------------------------------------


def test_scale_maps_public_model_ranges_to_minus_one_and_plus_one() -> None:
    np.testing.assert_allclose(scale(LOWER[None, :]), -np.ones((1, N_FEATURES)), atol=1e-15)
    np.testing.assert_allclose(scale(MODEL_UPPER[None, :]), np.ones((1, N_FEATURES)), atol=1e-15)
    np.testing.assert_allclose(scale(UPPER[None, :]), np.ones((1, N_FEATURES)), atol=1e-15)
    np.testing.assert_allclose(scale((LOWER + MODEL_UPPER)[None, :] / 2), 0.0, atol=1e-15)


def test_scale_uses_each_features_own_range() -> None:
    for i, f in enumerate(FEATURES):
        top = f.upper if f.model_upper is None else f.model_upper
        row = REFERENCE.copy()
        row[i] = f.lower
        assert scale(row[None, :])[0, i] == pytest.approx(-1.0), f.name
        row[i] = top
        assert scale(row[None, :])[0, i] == pytest.approx(1.0), f.name


def test_only_sessions_has_a_narrower_model_range() -> None:
    narrower = {f.name: f.model_upper for f in FEATURES if f.model_upper is not None}
    assert narrower == {"num_sessions": 15}
    sessions = FEATURE_NAMES.index("num_sessions")
    row = REFERENCE.copy()
    row[sessions] = 40  # valid input, above the model range: counts as 15
    assert scale(row[None, :])[0, sessions] == 1.0


def test_scale_does_not_depend_on_the_data() -> None:
    row = _row(age=34, phq9=22, gaf=35, num_sessions=12, substance_use=1, prior_crisis=0)
    alone = scale(row[None, :])
    extremes = np.array(
        [
            LOWER,
            UPPER,
            [80, 27, 1, 50, 1, 1],
            [18, 0, 100, 0, 0, 0],
            [1e6, -1e6, 1e6, -1e6, 1e6, -1e6],  # out of bounds: clipped, must not stretch
        ],
        dtype=np.float64,
    )
    batch = np.vstack([extremes[:2], row, extremes[2:]])
    np.testing.assert_array_equal(scale(batch)[2], alone[0])

    generated = generate(3_000, seed=9).x
    together = scale(np.vstack([generated, row]))
    np.testing.assert_array_equal(together[-1], alone[0])


def test_scale_output_is_in_unit_box(large_table: SyntheticTable) -> None:
    s = scale(large_table.x)
    assert s.min() >= -1.0
    assert s.max() <= 1.0


# --- split -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_rows", [10, 1_000, 2_001, 100_000])
def test_split_is_a_disjoint_cover_with_about_70_percent_train(n_rows: int) -> None:
    train, holdout = split_indices(n_rows, seed=17)
    # Binomial(n, 0.7): within 4 standard deviations.
    assert abs(len(train) - 0.7 * n_rows) <= 4 * (0.21 * n_rows) ** 0.5 + 1
    assert len(train) + len(holdout) == n_rows
    assert len(np.intersect1d(train, holdout)) == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, holdout])), np.arange(n_rows))


def test_split_is_decided_record_by_record() -> None:
    """Adding a patient moves no other patient between training and held-out rows: the
    partition behind the parallel composition of training and calibration."""
    train, holdout = split_indices(1_000, seed=17)
    train_more, holdout_more = split_indices(1_001, seed=17)
    np.testing.assert_array_equal(train_more[train_more < 1_000], train)
    np.testing.assert_array_equal(holdout_more[holdout_more < 1_000], holdout)


def test_split_is_reproducible_and_seeded() -> None:
    a_train, a_hold = split_indices(1_000, seed=17)
    b_train, b_hold = split_indices(1_000, seed=17)
    np.testing.assert_array_equal(a_train, b_train)
    np.testing.assert_array_equal(a_hold, b_hold)
    c_train, _ = split_indices(1_000, seed=18)
    assert not np.array_equal(np.sort(a_train), np.sort(c_train))


# --- spec --------------------------------------------------------------------------------------


def test_spec_order_and_arrays_agree() -> None:
    assert FEATURE_NAMES == (
        "age",
        "phq9",
        "gaf",
        "num_sessions",
        "substance_use",
        "prior_crisis",
    )
    assert len(FEATURES) == N_FEATURES == len(LOWER) == len(UPPER) == len(REFERENCE)
    assert np.all(LOWER < UPPER)


@pytest.mark.parametrize("feature", FEATURES, ids=lambda f: f.name)
def test_reference_value_is_inside_bounds(feature: Feature) -> None:
    assert feature.lower <= feature.reference <= feature.upper
    if feature.kind == "binary":
        assert feature.reference in (0, 1)
    else:
        assert float(feature.reference).is_integer()


def test_phq9_severity_bands() -> None:
    phq9 = BY_NAME["phq9"]
    bands = [(b.lower, b.upper) for b in phq9.severities]
    assert bands == [(0, 4), (5, 9), (10, 14), (15, 19), (20, 27)]
    # The bands tile the instrument's whole range: every score has exactly one band.
    for score in range(0, 28):
        matching = [b for b in phq9.severities if b.lower <= score <= b.upper]
        assert len(matching) == 1, score
        assert phq9.severity(score) is matching[0]
    assert phq9.severity(4).label == "minimal depressive symptoms"
    assert phq9.severity(5).label == "mild depressive symptoms"
    assert phq9.severity(14).label == "moderate depressive symptoms"
    assert phq9.severity(15).label == "moderately severe depressive symptoms"
    assert phq9.severity(20).label == "severe depressive symptoms"


def test_phq9_reason_reads_like_the_article() -> None:
    assert BY_NAME["phq9"].reason(22) == "PHQ-9 22: severe depressive symptoms (20-27)"
    assert BY_NAME["phq9"].reason(3) == "PHQ-9 3: minimal depressive symptoms (0-4)"


def test_reason_of_described_features() -> None:
    assert BY_NAME["age"].reason(34) == "Age 34 years"
    assert BY_NAME["num_sessions"].reason(12) == "12 sessions in the last 12 months"
    assert BY_NAME["substance_use"].reason(1) == "substance use recorded"
    assert BY_NAME["prior_crisis"].reason(0) == "no prior crisis recorded"
