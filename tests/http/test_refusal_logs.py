"""A refused request is one log line beside uvicorn's access line, never a traceback, on both bindings and the
bridge's endpoints (the SDK logged a traceback of up to 400 lines for a parse error); bad query values on the console
API and the bridge's endpoints are a 400 JSON answer, never a plain-text 500."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import A2A, ServerProcess, wait_for

OPERATOR = {"Authorization": "Bearer ops_demo_5b9e"}
DEEP = b'{"a":' * 60 + b"1" + b"}" * 60
MESSAGE = b'{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": {"a": %s}}'
REFUSED = [
    ("POST", "/test-runner/a2a/jsonrpc", b"{not json"),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "1.0", "id": {"x": 1}, "method": 5}'),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}}'),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": 5}}}'),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}'),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": %s}}' % (MESSAGE % b"NaN")),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "GetTask", "params": {}}'),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": %s}}' % (MESSAGE % DEEP)),
    ("POST", "/test-runner/a2a/jsonrpc", b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": [{"text": "%s"}], "role": 9}}}' % (b"x" * 5000)),
    ("POST", "/test-runner/a2a/rest/message:send", b'{"message": '),
    ("POST", "/test-runner/a2a/rest/message:send", b'{"message": {"parts": 5}}'),
    ("POST", "/test-runner/a2a/rest/message:send", b'{"message": %s}' % (MESSAGE % b"1e400")),
    ("POST", "/test-runner/a2a/rest/message:send", b'{"message": %s}' % (MESSAGE % DEEP)),
    ("GET", "/test-runner/a2a/rest/tasks/x?historyLength=%C2%B2", b""),
    ("POST", "/test-runner/tasks/x/reconcile", b"{not json"),
    ("POST", "/code-reviewer/tasks/x/review", b"\xff\xfe"),
    ("GET", "/test-runner/tasks/x/status?wait=abc", b""),
]
BAD_QUERIES = [
    "/console/api/tasks?limit=%C2%B2",
    "/console/api/tasks?limit=%D9%A3",
    "/console/api/tasks?limit=-1",
    "/console/api/tasks?limit=1e3",
    "/console/api/tasks?limit=%ff",
    "/console/api/tasks?limit=" + "9" * 5000,
    "/console/api/tasks?limit=",
    "/console/api/stream?limit=%C2%B2",
    "/test-runner/tasks/{id}/status?wait=nan",
    "/test-runner/tasks/{id}/status?wait=%C2%B2",
    "/test-runner/tasks/{id}/status?wait=1e999",
    "/test-runner/tasks/{id}/status?wait=-inf",
    "/test-runner/tasks/{id}/status?wait=%ff",
    "/console/api/tasks/{id}/status?wait=inf",
]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("refusal-logs") / "server.log"
    server = ServerProcess("memory", pace=0.01, extra=["--log-level", "info"], log=log).start()
    yield server
    server.stop()


def lines_of(server: ServerProcess, request: tuple[str, str, bytes]) -> tuple[httpx.Response, list[str]]:
    """The answer to one request, and the log lines it adds: those before the access line of a marker request sent
    after it."""
    assert server.log is not None
    before = len(server.log.read_text(errors="replace").splitlines())
    verb, path, body = request
    response = httpx.request(verb, server.url + path, content=body, headers={**A2A, **OPERATOR}, timeout=10)
    assert response.status_code < 500, (response.status_code, response.text[:300])
    marker = f"/marker-{uuid.uuid4().hex}"
    httpx.get(server.url + marker, timeout=10)

    def added() -> list[str] | None:
        lines = server.log.read_text(errors="replace").splitlines()[before:]  # type: ignore[union-attr]
        ends = [index for index, line in enumerate(lines) if marker in line]
        return lines[: ends[0]] if ends else None

    return response, wait_for(added, timeout=10, what="the marker's access line")


@pytest.mark.parametrize("request_", REFUSED, ids=[f"{verb} {path[:40]} {body[:24]!r}" for verb, path, body in REFUSED])
def test_a_refused_request_is_one_line_without_a_traceback(logged: ServerProcess, request_: tuple[str, str, bytes]) -> None:
    _, lines = lines_of(logged, request_)
    access = [line for line in lines if '"%s /' % request_[0] in line and "HTTP/1.1" in line]
    others = [line for line in lines if line not in access]
    assert len(access) == 1 and len(others) <= 1, lines
    assert not any("Traceback" in line or "ERROR" in line for line in lines), lines
    assert all(len(line) < 1000 for line in lines), "a refusal's line stays short"


@pytest.mark.parametrize("path", BAD_QUERIES)
def test_a_bad_query_value_is_a_400_json_answer(logged: ServerProcess, path: str) -> None:
    created = httpx.post(
        f"{logged.agent('test-runner')}/a2a/jsonrpc", headers=A2A, timeout=10,
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
              "params": {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}}},
    ).json()["result"]["task"]["id"]
    response, lines = lines_of(logged, ("GET", path.format(id=created), b""))
    assert not any("Traceback" in line for line in lines), lines
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_the_server_logged_no_traceback(logged: ServerProcess) -> None:
    assert logged.log is not None
    assert "Traceback" not in Path(logged.log).read_text(errors="replace")
