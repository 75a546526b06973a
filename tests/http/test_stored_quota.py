"""`max_stored_bytes` counts what the store holds for a principal (issue 31 item 3), not what one process saw sent:
the quota holds after a restart on SQLite and across two replicas sharing PostgreSQL, against real `a2a-bridge serve`
processes; a refused message stores nothing, and another principal goes on."""

from pathlib import Path
from typing import Any

import httpx

from tests.security_support import ALICE, BOB, review_message, secured_server, write_config
from tests.support import A2A, ServerProcess, rpc

QUOTA = 30_000
PADDING = 8_000
"""Bytes of text each task starts with: three tasks fit the quota, a fourth does not."""


def padded_start(server: ServerProcess, headers: dict[str, str]) -> httpx.Response:
    """A review started with PADDING bytes of text (it waits for its base branch, holding them)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": review_message("Review this diff of payments-api " + "z" * PADDING)}}
    return httpx.post(f"{server.agent('code-reviewer')}/a2a/jsonrpc", json=body, headers={**A2A, **headers}, timeout=10)


def refused_for_bytes(reply: httpx.Response) -> bool:
    body: dict[str, Any] = reply.json()
    return reply.status_code == 429 and body["error"]["data"][0]["metadata"] == {"limit": "max_stored_bytes", "max": QUOTA}


def listed(server: ServerProcess, headers: dict[str, str]) -> list[str]:
    tasks = rpc(server.agent("code-reviewer"), "ListTasks", {}, headers=headers)["result"]["tasks"]
    return sorted(task["id"] for task in tasks)


def fill(server: ServerProcess) -> None:
    """Three padded tasks of bob's, each stored."""
    for _ in range(3):
        reply = padded_start(server, BOB)
        assert reply.status_code == 200 and "result" in reply.json(), reply.text


def test_the_quota_counts_what_is_stored_so_it_holds_after_a_restart(tmp_path: Path) -> None:
    server = secured_server(tmp_path, "--limit", f"max_stored_bytes={QUOTA}")
    server.start()
    try:
        fill(server)
        server.stop()
        server.start()
        before = listed(server, BOB)
        assert refused_for_bytes(padded_start(server, BOB)), "a new process reads what bob's tasks hold"
        assert listed(server, BOB) == before, "nothing stored"
        assert padded_start(server, ALICE).status_code == 200, "alice goes on"
    finally:
        server.stop()


def test_the_quota_is_shared_by_replicas_on_postgresql(tmp_path: Path, pg_database: str) -> None:
    config = write_config(tmp_path)
    extra = ["--config", str(config), "--require-auth", "--limit", f"max_stored_bytes={QUOTA}"]
    first, second = ServerProcess(pg_database, extra=extra), ServerProcess(pg_database, extra=extra)
    first.start()
    try:
        second.start()
        fill(first)
        before = listed(second, BOB)
        assert len(before) == 3
        assert refused_for_bytes(padded_start(second, BOB)), "the other replica reads what bob's tasks hold"
        assert listed(second, BOB) == before, "nothing stored"
        assert padded_start(second, ALICE).status_code == 200, "alice goes on"
    finally:
        second.stop()
        first.stop()
