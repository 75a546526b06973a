"""Support for the security tests: a configuration file with named principals, a server that requires a token, and
calls normalised so that two answers can be compared whatever task id they name."""

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.support import A2A, ServerProcess, rpc, wait_for

ALICE_TOKEN = "usr_alice_5f1c"
BOB_TOKEN = "usr_bob_88e2"
OPS_TOKEN = "ops_sec_40a7"
PLANNER_TOKEN = "agt_planner_3b6d"
ALICE = {"Authorization": f"Bearer {ALICE_TOKEN}"}
BOB = {"Authorization": f"Bearer {BOB_TOKEN}"}
OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}
PLANNER = {"Authorization": f"Bearer {PLANNER_TOKEN}"}
CONFIG = f"""
[[principal]]
name = "alice"
kind = "user"
token = "{ALICE_TOKEN}"

[[principal]]
name = "bob"
kind = "user"
token = "{BOB_TOKEN}"

[[principal]]
name = "ops"
kind = "operator"
token = "{OPS_TOKEN}"

[[principal]]
name = "planner"
kind = "agent"
token = "{PLANNER_TOKEN}"
acts_for = ["alice"]

[webhooks]
allow_networks = ["127.0.0.1/32"]
"""
"""Two users, an operator, and an agent principal that acts for alice; webhooks may reach 127.0.0.1 (the tests'
receivers) and nothing else that is not public."""
DIFF = "--- a/payments/refunds.py\n+++ b/payments/refunds.py\n@@ -40,3 +40,4 @@\n+    amount = math.floor(amount)\n"
ID_MARK = "<task id>"


def write_config(directory: Path, extra: str = "") -> Path:
    path = directory / "security.toml"
    path.write_text(CONFIG + extra, encoding="utf-8")
    return path


def secured_server(directory: Path, *extra: str, pace: float = 0.2, store: str | None = None) -> ServerProcess:
    """A bridge that requires a token on every agent, with the principals of CONFIG."""
    config = write_config(directory)
    store = store or f"sqlite:///{directory / 'bridge.db'}"
    return ServerProcess(store, pace=pace, extra=["--config", str(config), "--require-auth", *extra])


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {"messageId": new_id("sec"), "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def review_message(text: str, **extra: Any) -> dict[str, Any]:
    diff = {"raw": base64.b64encode(DIFF.encode()).decode(), "mediaType": "text/x-diff"}
    return {"messageId": new_id("sec"), "role": "ROLE_USER", "parts": [{"text": text}, diff], **extra}


def start(base: str, body: dict[str, Any], headers: dict[str, str], immediately: bool = False) -> dict[str, Any]:
    """A SendMessage that starts a task; the task as the call left it."""
    params: dict[str, Any] = {"message": body}
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    reply = rpc(base, "SendMessage", params, headers=headers)
    assert "error" not in reply, reply
    return reply["result"]["task"]


def get_task(base: str, task_id: str, headers: dict[str, str]) -> dict[str, Any]:
    reply = rpc(base, "GetTask", {"id": task_id}, headers=headers)
    assert "error" not in reply, reply
    return reply["result"]


def wait_state(base: str, task_id: str, headers: dict[str, str], *states: str, timeout: float = 30) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        task = get_task(base, task_id, headers)
        return task if task["status"]["state"] in states else None

    return wait_for(reached, timeout=timeout, what=f"task {task_id} to reach {states}")


def status_body(base: str, task_id: str, headers: dict[str, str]) -> dict[str, Any]:
    response = httpx.get(f"{base}/tasks/{task_id}/status", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def normalized(response: httpx.Response, task_id: str) -> dict[str, Any]:
    """Status, media type and body of an answer, with the task id it names replaced by a mark."""
    text = response.text.replace(task_id, ID_MARK)
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    return {"status": response.status_code, "type": response.headers.get("content-type", ""), "body": body}


def jsonrpc(base: str, method: str, params: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    """One JSON-RPC call, the whole answer read (a stream until the server closes it)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    with httpx.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers={**A2A, **headers}, timeout=30) as response:
        response.read()
    return response


def rest(base: str, method: str, path: str, headers: dict[str, str], body: Any = None) -> httpx.Response:
    """One HTTP+JSON call under the agent's /a2a/rest, the whole answer read."""
    kwargs: dict[str, Any] = {"headers": {**A2A, **headers}, "timeout": 30}
    if body is not None:
        kwargs["json"] = body
    with httpx.stream(method, f"{base}/a2a/rest{path}", **kwargs) as response:
        response.read()
    return response
