"""DP-EBM as a peer of the proxy study (bench/peers.py): its bins come from the declared
schema only (no category read off the rows), and each fit draws fresh noise."""

import numpy as np
import pytest

from bench import peers, proxies


def test_the_layout_reads_the_declared_bounds_and_category_counts_only() -> None:
    table = proxies.make("mixed@200")
    types, bounds = peers._ebm_layout(table.schema)
    names = [feature.name for feature in table.schema.features]
    assert types == ["continuous"] * len(names)  # no nominal or ordinal type: interpret
    # takes those categories from the rows' np.unique, whatever list is declared
    assert bounds[names.index("region")] == (-0.5, 4.5)  # 5 declared categories' codes
    assert bounds[names.index("smoker")] == (-0.5, 1.5)
    assert bounds[names.index("crp")] == (0.0, 500.0)  # the declared bounds, not the rows'
    assert set(bounds) == set(range(len(names)))
    other = proxies.make("mixed@200", generator_seed=7)  # other rows, the same declaration
    assert peers._ebm_layout(other.schema) == (types, bounds)
    wild = table.x[:5].copy()
    wild[:, names.index("crp")] = 900.0  # above the declared upper bound
    rows = peers._ebm_rows(wild, bounds)
    assert np.all(rows[:, names.index("crp")] == 500.0)
    assert np.array_equal(rows[:, names.index("region")], wild[:, names.index("region")])


def test_a_category_only_one_row_holds_changes_no_bin() -> None:
    """Neighbouring tables (one row's rare category) get the same histogram cells: the fit's
    bins for a categorical feature are its declared codes' range split evenly."""
    pytest.importorskip("interpret")
    from interpret.privacy import DPExplainableBoostingClassifier

    table = proxies.make("mixed@300")
    names = [feature.name for feature in table.schema.features]
    region = names.index("region")
    types, bounds = peers._ebm_layout(table.schema)
    cut_sets = []
    for rare in (False, True):
        x = table.x.copy()
        x[:, region] = np.minimum(x[:, region], 3)
        if rare:
            x[0, region] = 4  # one patient with the category nobody else has
        model = DPExplainableBoostingClassifier(
            feature_types=types, privacy_bounds=bounds, epsilon=8.0, delta=1e-5, n_jobs=1,
            max_rounds=1, random_state=1)
        with pytest.warns(UserWarning, match="fixed"):  # interpret: a fixed seed in a test
            model.fit(peers._ebm_rows(x, bounds), table.y.astype(int))
        assert isinstance(model.bins_[region][0], np.ndarray)  # cuts, not a category map
        cut_sets.append(model.bins_[region][0])
    assert np.array_equal(cut_sets[0], cut_sets[1])  # same seed, same noise: same cuts


@pytest.mark.slow
def test_a_fit_ranks_a_strong_signal_and_draws_fresh_noise() -> None:
    pytest.importorskip("interpret")
    table = proxies.make("strong@900")
    train, held = slice(0, 700), slice(700, None)
    fits = [peers.dp_ebm_fit(table.schema, table.x[train], table.y[train], epsilon=3.0,
                             delta=1e-5)(table.x[held]) for _ in range(2)]
    for p in fits:
        assert np.all((p > 0) & (p < 1))
        assert peers.scores(table.y[held], p).auc > 0.75  # a few inputs nearly decide it
    assert not np.allclose(fits[0], fits[1])  # the noise is not seeded


@pytest.mark.slow
def test_the_family_fit_ranks_a_strong_signal() -> None:
    """The service's dp_ebm fit as the study runs it: declared bins, planned noise."""
    pytest.importorskip("interpret")
    table = proxies.make("strong@900")
    train, held = slice(0, 700), slice(700, None)
    p = peers.dp_ebm_family_fit(table.schema, table.x[train], table.y[train], epsilon=3.0,
                                delta=1e-5)(table.x[held])
    assert np.all((p > 0) & (p < 1))
    assert peers.scores(table.y[held], p).auc > 0.75
