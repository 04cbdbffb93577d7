"""Every Arrow layout a common writer gives a column (pandas, polars, DuckDB, R arrow, Spark)
loads as the plain form of the same values (current pandas' ``large_string`` ids were once
a 500). A property test: hypothesis draws the rows, each column's Arrow type and the
writer's options; the table must load identically, or be refused identically, to its plain
form (text as ``string``, numbers as ``int64``)."""

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.datasets.intake import ingest
from app.datasets.intake.text_values import per_value, utf8_text
from app.datasets.schema.dataset_schema import DatasetSchema
from tests.datasets.test_dataset_schema import CONTRACT

SCHEMA = DatasetSchema.model_validate(
    {**CONTRACT, "features": [{**CONTRACT["features"][0], "missing": "reference"},
                              *CONTRACT["features"][1:]]})
TEXT = [pa.string(), pa.large_string(), pa.string_view(), pa.binary(), pa.large_binary(),
        pa.binary_view(), pa.dictionary(pa.int8(), pa.string()),
        pa.dictionary(pa.int16(), pa.large_string()), pa.dictionary(pa.int32(), pa.string()),
        pa.dictionary(pa.int64(), pa.string()), pa.dictionary(pa.uint8(), pa.string())]
INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(),
            pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
NUMBERS = [*INTEGERS, pa.float16(), pa.float32(), pa.float64(),
           pa.dictionary(pa.int32(), pa.int64())]
CATEGORIES = ["female", "male", "other"]


def _as(values: list[Any], kind: pa.DataType) -> pa.Array:
    """``values`` (Python ints or str, None for null) as an array of ``kind``."""
    if pa.types.is_dictionary(kind):
        return _as(values, kind.value_type).dictionary_encode().cast(kind)
    if pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return pa.array(values, pa.int64()).cast(kind)
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or not (
            pa.types.is_integer(kind)):
        text = pa.array([None if v is None else str(v) for v in values], pa.string())
        return text.cast(kind)
    return pa.array(values, kind)


@st.composite
def tables(draw: st.DrawFn) -> tuple[dict[str, list[Any]], dict[str, pa.DataType],
                                      dict[str, Any]]:
    """Rows of the schema, an Arrow type per column, and the writer's options."""
    n = draw(st.integers(1, 40))
    int_ids = draw(st.booleans())
    id_type = draw(st.sampled_from(INTEGERS if int_ids else TEXT))
    low = 0 if int_ids and str(id_type).startswith("uint") else -100
    ids = draw(st.lists(st.integers(low, 120), min_size=n, max_size=n, unique=True))
    values = {
        "patient_id": ids if int_ids else [f"p{i}" for i in ids],
        "phq9": draw(st.lists(st.one_of(st.none(), st.integers(0, 27)), min_size=n,
                              max_size=n)),
        "sex": draw(st.lists(st.sampled_from(CATEGORIES), min_size=n, max_size=n)),
        "prior_crisis": draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)),
        "crisis_30d": draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)),
    }
    if draw(st.integers(0, 9)) == 0:  # now and then a missing outcome: refused alike
        values["crisis_30d"][0] = None
    flags = [pa.bool_(), *NUMBERS, pa.string(), pa.large_string(), pa.string_view()]
    types = {"patient_id": id_type,
             "phq9": draw(st.sampled_from([*NUMBERS, *TEXT[:3], TEXT[6]])),
             "sex": draw(st.sampled_from(TEXT)),
             "prior_crisis": draw(st.sampled_from(flags)),
             "crisis_30d": draw(st.sampled_from(flags))}
    options = {"use_dictionary": draw(st.booleans()),
               "compression": draw(st.sampled_from(["snappy", "zstd", "gzip", "none"])),
               "data_page_version": draw(st.sampled_from(["1.0", "2.0"])),
               "row_group_size": draw(st.sampled_from([3, 7, 1000])),
               "write_statistics": draw(st.booleans())}
    return values, types, options


def _plain(name: str, values: list[Any]) -> pa.Array:
    text = name in ("patient_id", "sex")
    return pa.array([None if v is None else str(v) for v in values] if text else values,
                    pa.string() if text else pa.int64())


def _load(path: Path) -> tuple[Any, ...]:
    try:
        table = ingest.ingest_file(path, media_type=ingest.PARQUET, schema=SCHEMA)
    except ingest.TableInvalid as error:
        return ("invalid", error.extra["errors"], error.extra["total"])
    return ("loaded", table.features.tolist(), table.outcome.tolist(), table.ids.to_pylist(),
            {k: v.tolist() for k, v in table.attributes.items()}, table.imputed,
            table.fingerprint)


@settings(max_examples=60, deadline=None)
@given(tables())
def test_every_writer_layout_loads_as_the_plain_form(
        tmp_path_factory: pytest.TempPathFactory,
        drawn: tuple[dict[str, list[Any]], dict[str, pa.DataType], dict[str, Any]]) -> None:
    values, types, options = drawn
    directory = tmp_path_factory.mktemp("types")
    plain, typed = directory / "plain.parquet", directory / "typed.parquet"
    pq.write_table(pa.table({k: _plain(k, v) for k, v in values.items()}), plain)
    pq.write_table(pa.table({k: _as(v, types[k]) for k, v in values.items()}), typed,
                   **options)
    expected, got = _load(plain), _load(typed)
    assert got == expected, (types, options)
    if values["crisis_30d"][0] is not None and len(set(values["crisis_30d"])) == 2:
        assert got[0] == "loaded", got  # the drawn table is valid: it must load


@pytest.mark.parametrize("kind", [pa.large_string(), pa.string_view(), pa.large_binary()])
def test_pandas_large_string_ids_load(tmp_path: Path, kind: pa.DataType) -> None:
    """The case that was a 500: ids as ``large_string`` (pandas >= 2 with pyarrow strings)."""
    ids = [f"p{i}" for i in range(6)]
    table = pa.table({"patient_id": pa.array(ids).cast(kind), "phq9": np.arange(6),
                      "sex": CATEGORIES * 2, "prior_crisis": [0, 1] * 3,
                      "crisis_30d": [1, 0, 0, 1, 0, 0]})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=4)  # two row groups: two id chunks
    loaded = ingest.ingest_file(path, media_type=ingest.PARQUET, schema=SCHEMA)
    assert loaded.ids.to_pylist() == ids and loaded.ids.type == pa.string()


def test_a_full_int8_dictionary_with_null_rows_is_spread_by_index() -> None:
    """128 values fill int8 indices: the null rows' slot (index 128) must not overflow."""
    dictionary = pa.array([*CATEGORIES, *(f"c{i}" for i in range(125))])
    column = pa.DictionaryArray.from_arrays(pa.array([1, None, 127], pa.int8()), dictionary)
    text, bad = per_value(column, utf8_text)
    assert text.to_pylist() == ["male", None, "c124"] and not bad.any()
