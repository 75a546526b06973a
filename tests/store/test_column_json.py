"""store.column_json, the text of SQLite's JSON columns: every value reads back as what SQLAlchemy's default
(`json.dumps`) wrote, and what `json.dumps` refuses is refused."""

import json
import math
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_bridge.store.column_json import column_json

scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8)
    | st.sampled_from(["null", "\ud800", "é\u0000\u2028", "x" * 3])
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6) | st.integers(-3, 3) | st.booleans(), inner, max_size=3),
    max_leaves=10,
)


def same(a: Any, b: Any) -> bool:
    """Equal JSON values, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=600, deadline=None)
@given(values)
def test_every_value_reads_back_as_json_dumps_wrote_it(value: Any) -> None:
    assert same(json.loads(column_json(value)), json.loads(json.dumps(value)))


def test_plain_values_are_written_compact_and_non_finite_numbers_as_the_standard_library_writes_them() -> None:
    assert column_json({"a": [1, "é", 2.5, True]}) == '{"a":[1,"é",2.5,true]}'
    assert column_json({"a": float("nan")}) == json.dumps({"a": float("nan")})
    assert column_json([float("inf"), None]) == json.dumps([float("inf"), None])
    assert column_json({1: 2**65}) == json.dumps({1: 2**65})


class Colour(str, Enum):
    RED = "red"


def test_subclasses_are_written_and_datetimes_refused_as_json_dumps_does() -> None:
    assert json.loads(column_json({"c": Colour.RED})) == json.loads(json.dumps({"c": Colour.RED})) == {"c": "red"}
    with pytest.raises(TypeError):
        column_json({"at": datetime(2026, 1, 1, tzinfo=UTC)})
