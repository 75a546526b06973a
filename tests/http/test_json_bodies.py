"""The direct path's JSON bodies are Starlette's `JSONResponse` bodies byte for byte, whether orjson or the standard
library writes them (the wire comparison with the SDK's dispatcher is tests/http/test_direct_rpc.py)."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.responses import JSONResponse

from a2a_bridge.http.json_bodies import json_headers, plain, render

SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text() | st.floats(
    allow_nan=False, allow_infinity=False
)
CONTENT = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                       max_leaves=20)


def starlette_body(content: Any) -> bytes | type[Exception]:
    try:
        return bytes(JSONResponse(content).body)
    except (UnicodeEncodeError, ValueError) as error:
        return type(error)


def our_body(content: Any) -> bytes | type[Exception]:
    try:
        return render(content)
    except (UnicodeEncodeError, ValueError) as error:
        return type(error)


@settings(max_examples=500, derandomize=True, deadline=None)
@given(CONTENT)
def test_any_content_renders_as_starlette_renders_it(content: Any) -> None:
    assert our_body(content) == starlette_body(content)


@pytest.mark.parametrize("content", [
    {"text": "".join(chr(code) for code in range(0x80)) + "é\u2028\u2029\U0001f600</script>"},
    {"numbers": [0, -1, 2**63 - 1, -(2**63), 2**64, True, False, None]},
    {"floats": [1e-07, 2.5e-05, 1e16, 0.1, -0.0, 123456789.125]},
    {"surrogate": "\ud800"},
    [{"nested": [[{"deep": "x"}]]}],
    {1: "integer key", "b": {True: 1, None: 2, 2.5: 3}},
])
def test_the_edges_of_each_writer_render_as_starlette_renders_them(content: Any) -> None:
    assert our_body(content) == starlette_body(content)


def test_only_float_free_content_is_plain() -> None:
    assert plain({"a": [1, "b", None, True, {"c": []}]})
    assert not plain({"a": [1.5]}) and not plain(("tuple",))


@pytest.mark.parametrize("content", [{"result": {"task": {"id": "t-1"}}, "id": 1, "jsonrpc": "2.0"}, {"é": "ü" * 300}])
def test_json_headers_are_the_headers_starlette_sends(content: Any) -> None:
    response = JSONResponse(content)
    assert json_headers(render(content)) == response.raw_headers
