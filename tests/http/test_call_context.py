"""`BridgeContextBuilder.build` reads the scope's headers in one pass: the context it builds is the SDK's
`DefaultServerCallContextBuilder`'s (state headers, auth, requested extensions), with the caller's principal, the
checked version and the base URL."""

import pytest
from a2a.auth.user import UnauthenticatedUser
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.utils.errors import A2AError
from starlette.requests import Request

from a2a_bridge.core.auth import BridgeContextBuilder, Principal

ALICE = Principal("alice")


def request(headers: list[tuple[bytes, bytes]], method: str = "POST", query: bytes = b"", **extra: object) -> Request:
    scope = {
        "type": "http", "method": method, "scheme": "http", "path": "/agent/a2a/jsonrpc", "raw_path": b"/agent/a2a/jsonrpc",
        "root_path": "", "query_string": query, "headers": headers, "server": ("127.0.0.1", 8000), **extra,
    }
    return Request(scope)


CASES = [
    [(b"host", b"127.0.0.1:8000"), (b"a2a-version", b"1.0")],
    [(b"host", b"example.test"), (b"a2a-version", b"1.0"), (b"authorization", b"Bearer t-alice"),
     (b"a2a-extensions", b"https://x.test/a, https://x.test/b"), (b"a2a-extensions", b" https://x.test/c ,,"),
     (b"x-dup", b"first"), (b"x-dup", b"second"), (b"a2a-version", b"0.3")],
    [(b"a2a-version", b"1.0"), (b"authorization", b"Bearer unknown"), (b"authorization", b"Bearer t-alice")],
    [(b"host", b""), (b"a2a-version", b"1.0"), (b"a2a-extensions", b"")],
]


@pytest.mark.parametrize("headers", CASES)
def test_the_context_is_the_sdk_builders_with_the_version_and_base_url(headers: list[tuple[bytes, bytes]]) -> None:
    builder = BridgeContextBuilder({"t-alice": ALICE}, "/agent")
    built = builder.build(request(headers))
    sdk = DefaultServerCallContextBuilder().build(request(headers))
    assert built.state["headers"] == {**sdk.state["headers"], "a2a-version": "1.0"}
    assert built.requested_extensions == sdk.requested_extensions
    host = sdk.state["headers"].get("host")
    assert built.state["base_url"] == (f"http://{host}/agent" if host else "http://127.0.0.1:8000/agent")


def test_the_first_authorization_value_names_the_caller() -> None:
    builder = BridgeContextBuilder({"t-alice": ALICE}, "/agent")
    assert builder.build(request(CASES[1])).user == ALICE
    assert isinstance(builder.build(request(CASES[2])).user, UnauthenticatedUser)


def test_auth_in_the_scope_is_kept_as_the_sdk_keeps_it() -> None:
    headers = [(b"a2a-version", b"1.0")]
    built = BridgeContextBuilder({}, "/agent").build(request(headers, auth="credentials"))
    assert built.state["auth"] == "credentials"
    assert "auth" not in BridgeContextBuilder({}, "/agent").build(request(headers)).state


def test_the_version_comes_from_the_header_and_only_on_get_and_delete_from_the_query() -> None:
    builder = BridgeContextBuilder({}, "/agent", public_url="https://public.test")
    assert builder.build(request([], "GET", b"A2A-Version=1.0")).state["base_url"] == "https://public.test/agent"
    for refused in (request([], "POST", b"A2A-Version=1.0"), request([(b"a2a-version", b"0.3")]), request([])):
        with pytest.raises(A2AError):
            builder.build(refused)
