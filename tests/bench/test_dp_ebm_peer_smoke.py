"""DP-EBM as a peer of the proxy study (bench/peers.py): its bins and categories come from
the declared schema only, and each fit draws fresh noise."""

import numpy as np
import pytest

from bench import peers, proxies


def test_the_layout_reads_the_declared_bounds_and_categories_only() -> None:
    table = proxies.make("mixed@200")
    types, bounds = peers._ebm_layout(table.schema)
    names = [feature.name for feature in table.schema.features]
    assert types[names.index("region")] == ["north", "south", "east", "west", "central"]
    assert types[names.index("smoker")] == ["0", "1"]
    assert bounds[names.index("crp")] == (0.0, 500.0)  # the declared bounds, not the rows'
    assert set(bounds) == {i for i, kind in enumerate(types) if kind == "continuous"}
    other = proxies.make("mixed@200", generator_seed=7)  # other rows, the same declaration
    assert peers._ebm_layout(other.schema) == (types, bounds)
    rows = peers._ebm_rows(table.x[:5], types)
    codes = table.x[:5, names.index("region")].astype(int)
    assert list(rows[:, names.index("region")]) == [types[names.index("region")][c]
                                                    for c in codes]


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
