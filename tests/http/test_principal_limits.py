"""What one principal may hold and do (issue 31 item 3): long polls open at once (`max_waits`), messages that may
start a task a minute (`max_tasks_per_minute`) and bytes its tasks hold (`max_stored_bytes`), each refused with
429 (JSON-RPC -32600) naming the limit, for that principal only; against a real `a2a-bridge serve` process."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.security_support import ALICE, BOB, OPS, message, review_message, secured_server, start
from tests.support import A2A, ServerProcess, rpc, wait_for

LIMITS = ["--limit", "max_waits=2", "--limit", "max_tasks_per_minute=3", "--limit", "max_stored_bytes=12000"]
HELD = 5.0
"""Seconds each held long poll waits on a task that does not change."""


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = secured_server(tmp_path_factory.mktemp("principal-limits"), *LIMITS, store="memory").start()
    yield process
    process.stop()


def waiting_task(server: ServerProcess, headers: dict[str, str]) -> str:
    """A review that asks for its base branch: a task that does not change while polled."""
    task = start(server.agent("code-reviewer"), review_message("Review this diff of payments-api"), headers)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return str(task["id"])


def long_poll(base: str, task_id: str, headers: dict[str, str], wait: float) -> httpx.Response:
    etag = httpx.get(f"{base}/tasks/{task_id}/status", headers=headers, timeout=10).headers["etag"]
    return httpx.get(
        f"{base}/tasks/{task_id}/status", params={"wait": str(wait)}, headers={**headers, "If-None-Match": etag},
        timeout=30,
    )


def held_poll(base: str, task_id: str, headers: dict[str, str]) -> httpx.Response:
    """A long poll of HELD seconds, sent again while the probe of the test holds the principal's last slot."""
    return wait_for(
        lambda: (r := long_poll(base, task_id, headers, HELD)).status_code != 429 and (r,), timeout=HELD,
        what="a slot for a held long poll",
    )[0]


def limit_of(reply: dict[str, Any]) -> dict[str, Any]:
    """The limit a JSON-RPC refusal names."""
    assert reply["error"]["code"] == -32600, reply
    return dict(reply["error"]["data"][0]["metadata"])


def test_long_polls_past_the_principals_limit_are_429_and_free_again_once_answered(limited: ServerProcess) -> None:
    reviewer = limited.agent("code-reviewer")
    alices, bobs = waiting_task(limited, ALICE), waiting_task(limited, BOB)
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(held_poll, reviewer, alices, ALICE) for _ in range(2)]
        (refused,) = wait_for(
            lambda: (r := long_poll(reviewer, alices, ALICE, 0.2)).status_code == 429 and (r,),
            timeout=HELD, what="a third long poll of alice's to be refused",
        )
        assert refused.json()["error"] == {
            "code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Too many open long polls", "limit": "max_waits",
            "max": 2,
        }
        assert httpx.get(f"{reviewer}/tasks/{alices}/status", headers=ALICE, timeout=10).status_code == 200
        assert long_poll(reviewer, bobs, BOB, 0.2).status_code == 304, "another principal polls on"
        assert [future.result().status_code for future in held] == [304, 304]
    assert long_poll(reviewer, alices, ALICE, 0.2).status_code == 304


def test_tasks_started_past_the_principals_rate_are_refused_naming_the_limit(limited: ServerProcess) -> None:
    runner = limited.agent("test-runner")
    for _ in range(3):
        assert "result" in rpc(runner, "SendMessage", {"message": message("Run the unit tests at commit 9f3c2e1")},
                               headers=OPS)
    listed = rpc(runner, "ListTasks", {}, headers=OPS)["result"]["tasks"]
    body = {"jsonrpc": "2.0", "id": 3, "method": "SendMessage",
            "params": {"message": message("Run the unit tests at commit 9f3c2e1")}}
    refused = httpx.post(f"{runner}/a2a/jsonrpc", json=body, headers={**A2A, **OPS}, timeout=10)
    assert refused.status_code == 429
    assert limit_of(refused.json()) == {"limit": "max_tasks_per_minute", "max": 3}
    rest = httpx.post(f"{runner}/a2a/rest/message:send", json={"message": message("Run the unit tests")},
                      headers={**A2A, **OPS}, timeout=10)
    assert rest.status_code == 429 and rest.json()["error"]["limit"] == "max_tasks_per_minute"
    assert rpc(runner, "ListTasks", {}, headers=OPS)["result"]["tasks"] == listed, "nothing stored"


def test_bytes_sent_past_the_principals_quota_are_refused_naming_the_limit(limited: ServerProcess) -> None:
    reviewer = limited.agent("code-reviewer")
    bobs = waiting_task(limited, BOB)
    padded = {"message": {**message("main", taskId=bobs), "parts": [{"text": "main " + "z" * 5000}]}}
    body = {"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": padded}
    refused = None
    for _ in range(4):
        refused = httpx.post(f"{reviewer}/a2a/jsonrpc", json=body, headers={**A2A, **BOB}, timeout=10)
        if refused.status_code == 429:
            break
    assert refused is not None and refused.status_code == 429
    assert limit_of(refused.json()) == {"limit": "max_stored_bytes", "max": 12000}
    assert "result" in rpc(reviewer, "GetTask", {"id": waiting_task(limited, ALICE)}, headers=ALICE), "alice goes on"
