"""What `serve` prints once it has started (issue 32 item 5), through a real process: the version, each agent's card
URL and bindings with the gRPC ports `--grpc-port 0` picked (as the cards name them), the console, the store and the
anonymous demo mode; every line in the bridge's one format, uvicorn's too; a gRPC call's access line beside HTTP's."""

import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from a2a_bridge.cli.main import installed_version
from tests.support import ServerProcess, wait_for

AGENTS = ("test-runner", "code-reviewer", "deployer")
STAMPED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [a-z_.0-9]+ ")
"""The start of a line in the bridge's plain text format: time, level, logger (a record's further lines, the banner's
or a warning's source line, are indented)."""


def logged(log: Path, text: str) -> str | None:
    """The log so far once it holds `text`."""
    content = log.read_text(errors="replace")
    return content if text in content else None


def banner_of(log: Path) -> list[str]:
    """The banner's lines: its first (`… a2a_bridge.serve a2a-bridge VERSION serving …`) and the indented ones after."""
    lines = wait_for(lambda: logged(log, "a2a_bridge.serve a2a-bridge "), timeout=30, what="the banner").splitlines()
    first = next(i for i, line in enumerate(lines) if " a2a_bridge.serve a2a-bridge " in line)
    rest = lines[first + 1:]
    return [lines[first], *rest[: next((i for i, line in enumerate(rest) if not line.startswith("  ")), len(rest))]]


def grpc_port(card: dict) -> int:
    [url] = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    return int(url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """The three sample agents on a SQLite file, gRPC on ports picked by the system, logging at info."""
    folder = tmp_path_factory.mktemp("banner")
    log = folder / "serve.log"
    server = ServerProcess(f"sqlite:///{folder / 'b.db'}", extra=["--grpc-port", "0", "--log-level", "info"], log=log)
    server.start()
    yield server, log
    server.stop()


def test_the_banner_names_what_a_user_needs(demo: tuple[ServerProcess, Path]) -> None:
    server, log = demo
    banner = banner_of(log)
    assert banner[0].endswith(f"a2a-bridge {installed_version()} serving 3 agent(s) on {server.url}")
    text = "\n".join(banner)
    for name in AGENTS:
        card = httpx.get(f"{server.agent(name)}/.well-known/agent-card.json", timeout=10).json()
        assert f"card {server.agent(name)}/.well-known/agent-card.json" in text
        bindings = f"JSON-RPC {server.agent(name)}/a2a/jsonrpc, HTTP+JSON {server.agent(name)}/a2a/rest"
        assert f"{bindings}, gRPC 127.0.0.1:{grpc_port(card)}" in text
    assert f"console: {server.url}/console/ (operator token ops_demo_5b9e, the demo's)" in text
    assert f"store: SQLite file {log.parent / 'b.db'}" in text
    assert "callers: anonymous demo mode" in text
    assert logged(log, "a2a_bridge.serve") is not None and log.read_text().count("a2a_bridge.serve a2a-bridge ") == 1


def test_one_log_format_and_an_access_line_for_grpc(demo: tuple[ServerProcess, Path]) -> None:
    server, log = demo
    banner_of(log)
    card = httpx.get(f"{server.agent('code-reviewer')}/.well-known/agent-card.json", timeout=10).json()
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port(card)}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=[("a2a-version", "1.0")], timeout=10)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    grpc_line = wait_for(
        lambda: next((line for line in log.read_text().splitlines() if "GetTask" in line), None), what="gRPC's access line"
    )
    assert re.fullmatch(
        STAMPED.pattern + r'127\.0\.0\.1:\d+ - "gRPC /lf\.a2a\.v1\.A2AService/GetTask" NOT_FOUND', grpc_line
    ), grpc_line
    assert STAMPED.match(grpc_line)[1] == "INFO" and "a2a_bridge.grpc.access" in grpc_line  # type: ignore[index]
    lines = log.read_text().splitlines()
    assert [line for line in lines if not STAMPED.match(line) and not line.startswith("  ")] == []
    assert any(re.search(r" WARNING py\.warnings .*InsecureKeyLengthWarning", line) for line in lines)
    assert any(" uvicorn.error Uvicorn running on " in line for line in lines)
    assert any(re.search(r' uvicorn\.access 127\.0\.0\.1:\d+ - "GET /code-reviewer/\.well-known/agent-card\.json HTTP/1\.1" 200$', line) for line in lines)


def test_the_banner_of_a_server_that_requires_tokens_names_none(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    server = ServerProcess(
        "memory",
        extra=["--agent", "test-runner", "--require-auth", "--user-token", "secret_token_1=alice", "--log-level", "info"],
        env={"A2A_BRIDGE_OPERATOR_TOKEN": "secret_operator_2"},
        log=log,
    ).start()
    try:
        text = "\n".join(banner_of(log))
    finally:
        server.stop()
    assert "serving 1 agent(s)" in text and "gRPC" not in text
    assert "store: memory (nothing is kept across a restart)" in text
    assert "callers: a configured bearer token on every agent (--require-auth)" in text
    assert f"console: {server.url}/console/ (the operator's token)" in text
    assert not any(secret in text for secret in ("secret_token_1", "secret_operator_2", "ops_demo"))
