"""The id rules' byte-level fast paths (``app.datasets.intake.id_rules``) flag exactly what their
regexes flag, on any text, sliced arrays and nulls included."""

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from app.datasets.intake import id_rules

CHARS = st.one_of(st.characters(), st.sampled_from(list("=+-@ 0123456789abc\x00\x7f\u202e")))
VALUES = st.lists(st.one_of(st.none(), st.text(CHARS, max_size=6)), max_size=30)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(values=VALUES, start=st.integers(0, 5))
def test_fast_paths_equal_the_regexes(values: list[str | None], start: int) -> None:
    text = pa.array(values, pa.string()).slice(min(start, len(values)))
    assert id_rules._refused(text).tolist() == id_rules._flags(text, id_rules._REFUSED).tolist()
    assert (id_rules._formula_start(text).tolist()
            == id_rules._flags(text, id_rules._FORMULA).tolist())


def test_a_printable_batch_skips_the_regex_and_one_refused_byte_does_not() -> None:
    clean = pa.array([f"pt-{k}" for k in range(1000)])
    assert not id_rules._refused(clean).any()
    dirty = pa.array(["pt-1", "pt\u202e2", "pt-3"])
    assert id_rules._refused(dirty).tolist() == [False, True, False]
