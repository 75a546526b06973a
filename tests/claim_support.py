"""Helpers of the claim, recovery, reconcile and idempotency tests: the operator's endpoints, tasks over JSON-RPC,
the deployer's ledger of rollouts, and deployer tasks left mid-rollout by a crash."""

import base64
import json
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support import DEPLOYER_TOKEN, DIFF, ServerProcess, rpc, user_message, wait_for

OPERATOR_TOKEN = "ops_demo_5b9e"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
DEPLOYER = {"Authorization": f"Bearer {DEPLOYER_TOKEN}"}
RECONCILE_TEXT = (
    "The server stopped while this task was working, and repeating its work is not safe. "
    "An operator must reconcile it."
)
FULL_SUITE = "Run the full suite for payments-api at commit 9f3c2e1"
UNIT_TESTS = "Run the unit tests for payments-api at commit 9f3c2e1"


def headers_for(agent: str) -> dict[str, str]:
    """What a caller of an agent sends: the deployer wants its bearer token."""
    return DEPLOYER if agent == "deployer" else {}


def review_message(message_id: str, text: str = "Review this diff of payments-api against main") -> dict[str, Any]:
    return {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": [{"text": text}, {"raw": base64.b64encode(DIFF.encode()).decode(), "mediaType": "text/x-diff"}],
    }


def deploy_message(message_id: str, build: str) -> dict[str, Any]:
    return user_message(f"Deploy build {build} to staging", message_id)


def start(server: ServerProcess, agent: str, message: dict[str, Any]) -> dict[str, Any]:
    """SendMessage with returnImmediately; the task as it started."""
    params = {"message": message, "configuration": {"returnImmediately": True}}
    reply = rpc(server.agent(agent), "SendMessage", params, headers=headers_for(agent))
    assert "result" in reply, reply
    return reply["result"]["task"]


def get_task(server: ServerProcess, agent: str, task_id: str) -> dict[str, Any]:
    reply = rpc(server.agent(agent), "GetTask", {"id": task_id}, headers=headers_for(agent))
    assert "result" in reply, reply
    return reply["result"]


def state_of(server: ServerProcess, agent: str, task_id: str) -> str:
    return str(get_task(server, agent, task_id)["status"]["state"])


def wait_state(server: ServerProcess, agent: str, task_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    """Poll GetTask until the task is in `state`; the task."""

    def reached() -> dict[str, Any] | None:
        task = get_task(server, agent, task_id)
        return task if task["status"]["state"] == state else None

    return wait_for(reached, timeout=timeout, what=f"{agent} task {task_id} to be {state}")


def status_text(task: dict[str, Any]) -> str:
    message = task["status"].get("message") or {}
    return " ".join(part.get("text", "") for part in message.get("parts", []))


def claim_view(server: ServerProcess, agent: str, task_id: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = httpx.get(f"{server.agent(agent)}/tasks/{task_id}/claim", headers=headers or OPERATOR, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def stored_claim_view(server: ServerProcess, agent: str, task_id: str) -> dict[str, Any]:
    """The claim view once the events of its state are stored: the view shows a live claim at once, and the events
    that led to it when the save that follows them is done."""

    def caught_up() -> dict[str, Any] | None:
        view = claim_view(server, agent, task_id)
        return view if view["events"] and view["events"][-1]["state"] == view["state"] else None

    return wait_for(caught_up, what=f"the claim events of {agent} task {task_id} to be stored")


def parse_iso(text: str) -> datetime:
    """A time of the claim view (ISO 8601 with Z) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def operations(view: dict[str, Any]) -> list[str]:
    return [event["operation"] for event in view["events"]]


def reconcile(server: ServerProcess, agent: str, task_id: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{server.agent(agent)}/tasks/{task_id}/reconcile",
        content=content,
        headers={"Content-Type": "application/json", **(OPERATOR if headers is None else headers)},
        timeout=10,
    )


def approve(server: ServerProcess, task_id: str) -> None:
    response = httpx.post(f"{server.agent('deployer')}/approve/{task_id}", headers=OPERATOR, timeout=10)
    assert response.status_code == 200, response.text


def rollouts(ledger: Path) -> Counter[str]:
    """How many times the deployer rolled out each task, from its ledger file."""
    if not ledger.exists():
        return Counter()
    return Counter(json.loads(line)["taskId"] for line in ledger.read_text().splitlines() if line.strip())


def rolling_out(server: ServerProcess, task_id: str) -> bool:
    """The approved turn of a deploy runs: WORKING with the rollout message, under a live claim."""
    task = get_task(server, "deployer", task_id)
    return task["status"]["state"] == "TASK_STATE_WORKING" and "Rolling out" in status_text(task)


def awaiting_approval(server: ServerProcess, task_id: str) -> bool:
    task = get_task(server, "deployer", task_id)
    return task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED" and "must approve" in status_text(task)


def start_deploys(server: ServerProcess, prefix: str, count: int) -> list[str]:
    """`count` staging deploys waiting for approval; their task ids."""
    ids = [start(server, "deployer", deploy_message(f"{prefix}-{n}", f"2026.10.06-{n}"))["id"] for n in range(count)]
    wait_for(lambda: all(awaiting_approval(server, t) for t in ids), timeout=30, what="the deploys to wait for approval")
    return ids


def message_ids(task: dict[str, Any]) -> set[str]:
    """Every message a task holds: its history and its status message."""
    held = {m["messageId"] for m in task.get("history", [])}
    if task["status"].get("message"):
        held.add(task["status"]["message"]["messageId"])
    return held


def error_fields(error: dict[str, Any]) -> set[str]:
    """The fields a -32602 names, in its google.rpc.BadRequest and its ErrorInfo metadata."""
    fields: set[str] = set()
    for detail in error.get("data") or []:
        fields |= {v["field"] for v in detail.get("fieldViolations", [])}
        fields |= {e["field"] for e in (detail.get("metadata") or {}).get("errors", [])}
    return fields


CRASH_PACE = 1.5
"""Seconds of each deployer step in a crash test: the rollout the crash interrupts lasts this long."""


def crash_mid_rollout(server: ServerProcess, prefix: str) -> str:
    """Approve one deploy on a server paced at CRASH_PACE, SIGKILL it mid-rollout, restart it; the deploy's task id."""
    [task_id] = start_deploys(server, prefix, 1)
    approved_at = time.monotonic()
    approve(server, task_id)
    wait_for(lambda: rolling_out(server, task_id), timeout=CRASH_PACE, what="the rollout to start")
    assert time.monotonic() - approved_at < CRASH_PACE, "the rollout may have ended before the crash"
    server.kill()
    server.start()
    return task_id
