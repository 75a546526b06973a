"""The capture scenarios: what the kit's 01–18 show, plus Task Status and the claim view, run in order on one server.

Each scenario drives the server step by step: an agent that would still be working is held at its next pause while
the driver sends what the scenario shows (04's GetTask while working, 10's cancel after two log files, 14's dropped
stream), and `settle` waits until no turn runs before the next step, so ids and clock readings come in one order.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from capture.driver import OPERATOR_TOKEN, Capture
from capture.writer import Recorded

JSON = [("Content-Type", "application/json"), ("A2A-Version", "1.0")]
DEPLOYER = [*JSON, ("Authorization", "Bearer dpl_test_7c1e4b")]
STREAM = [("Accept", "text/event-stream")]
REST = [("A2A-Version", "1.0"), ("Content-Type", "application/a2a+json")]
RPC = "/a2a/jsonrpc"
RUN_TESTS = "Run the unit tests for payments-api at commit 9f3c2e1"
FULL_SUITE = "Run the full suite for payments-api at commit 9f3c2e1"
DIFF = (
    "LS0tIGEvcGF5bWVudHMvcmVmdW5kcy5weQorKysgYi9wYXltZW50cy9yZWZ1bmRzLnB5CkBAIC00MCwzICs0MCw0IEBAIGRlZiBwYXJ0aWFsX3Jl"
    "ZnVuZChjaGFyZ2UsIGFtb3VudCk6Ci0gICAgbmV0ID0gYW1vdW50IC0gZmVlKGNoYXJnZSkKKyAgICBuZXQgPSBpbnQoYW1vdW50KSAtIGZlZShj"
    "aGFyZ2UpCg=="
)
NO_TASK = "00000000-0000-4000-8000-000000000000"

Scenario = Callable[[Capture, dict[str, Any]], Awaitable[list[str]]]
"""Records one transcript's blocks into the capture; returns its opening narration. The dict carries what later
scenarios need from earlier ones (task ids)."""


def rpc(number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": number, "method": method, "params": params}


def message(cap: Capture, text: str, task: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A user message; `task` makes it a follow-up on that task."""
    body: dict[str, Any] = {"messageId": cap.message_id()}
    if task is not None:
        body.update(contextId=task["contextId"], taskId=task["id"])
    return {**body, "role": "ROLE_USER", "parts": extra.pop("parts", [{"text": text}]), **extra}


def result_task(reply: Any) -> dict[str, Any]:
    result = reply["result"]
    return dict(result.get("task", result))


async def agent_cards(cap: Capture, seen: dict[str, Any]) -> list[str]:
    for agent in ("test-runner", "code-reviewer", "deployer"):
        await cap.send(agent, f"discover {agent}", "GET", "/.well-known/agent-card.json", [("Accept", "application/json")])
    return ["The three cards; the deployer's is signed (HS256 with the demo key)."]


async def message_reply(cap: Capture, seen: dict[str, Any]) -> list[str]:
    params = {"message": message(cap, "What languages can you review?")}
    await cap.send("code-reviewer", "SendMessage: a question", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    return []


async def blocking_task(cap: Capture, seen: dict[str, Any]) -> list[str]:
    params = {"message": message(cap, RUN_TESTS)}
    _, reply = await cap.send("test-runner", "SendMessage: run the tests", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    seen["blocking"] = result_task(reply)
    await cap.settle()
    return []


async def polling(cap: Capture, seen: dict[str, Any]) -> list[str]:
    await cap.pacer.hold()
    arrivals = cap.pacer.arrivals
    params = {"message": message(cap, RUN_TESTS), "configuration": {"returnImmediately": True}}
    _, reply = await cap.send("test-runner", "SendMessage: return immediately", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    task = result_task(reply)
    await cap.pacer.reach(arrivals + 1)
    get = {"id": task["id"], "historyLength": 0}
    await cap.send("test-runner", "GetTask: still working", "POST", RPC, JSON, rpc(2, "GetTask", get))
    await cap.pacer.free()
    await cap.settle()
    await cap.send("test-runner", "GetTask: completed", "POST", RPC, JSON, rpc(3, "GetTask", get))
    return []


async def streaming(cap: Capture, seen: dict[str, Any]) -> list[str]:
    params = {"message": message(cap, RUN_TESTS)}
    async with cap.stream("test-runner", "SendStreamingMessage: run the tests", RPC, JSON + STREAM,
                          rpc(1, "SendStreamingMessage", params)) as events:
        await events.rest()
    await cap.settle()
    return []


async def input_required(cap: Capture, seen: dict[str, Any]) -> list[str]:
    parts = [{"text": "Review this diff of payments-api."}, {"raw": DIFF, "filename": "refunds.diff", "mediaType": "text/x-diff"}]
    params = {"message": message(cap, "", parts=parts)}
    _, reply = await cap.send("code-reviewer", "SendMessage: review a diff", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    task = result_task(reply)
    await cap.settle()
    answer = {"message": message(cap, "main", task)}
    await cap.send("code-reviewer", "SendMessage: answer the question", "POST", RPC, JSON, rpc(2, "SendMessage", answer))
    await cap.settle()
    seen["review"] = task
    return []


async def auth_required(cap: Capture, seen: dict[str, Any]) -> list[str]:
    params = {"message": message(cap, "Deploy build 2026.10.06-1 to staging")}
    async with cap.stream("deployer", "SendStreamingMessage: deploy to staging", RPC, DEPLOYER + STREAM,
                          rpc(1, "SendStreamingMessage", params)) as events:
        first = await events.take(3)
        events.block.narration.append("The stream stays open. An operator opens the approval link, outside A2A.")
        await cap.settle()
        task_id = first[0]["result"]["task"]["id"]
        approve = cap.send("deployer", "operator approves", "POST", f"/approve/{task_id}",
                           [("Content-Type", "application/json")], raw="{}")
        block, _ = await events.inside(approve)
        block.narration.append("The same stream continues.")
        await events.rest()
    await cap.settle()
    return []


async def rejected(cap: Capture, seen: dict[str, Any]) -> list[str]:
    params = {"message": message(cap, "Deploy build 2026.10.06-1 to production")}
    await cap.send("deployer", "SendMessage: deploy to production", "POST", RPC, DEPLOYER, rpc(1, "SendMessage", params))
    await cap.settle()
    return []


async def failed(cap: Capture, seen: dict[str, Any]) -> list[str]:
    params = {"message": message(cap, "Run the unit tests for payments-api at commit deadbee")}
    await cap.send("test-runner", "SendMessage: a commit that does not exist", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    await cap.settle()
    return []


async def cancel(cap: Capture, seen: dict[str, Any]) -> list[str]:
    await cap.pacer.hold()
    arrivals = cap.pacer.arrivals
    params = {"message": message(cap, FULL_SUITE), "configuration": {"returnImmediately": True}}
    _, reply = await cap.send("test-runner", "SendMessage: the full suite", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    task = result_task(reply)
    await cap.pacer.reach(arrivals + 1)
    await cap.pacer.step(2)
    await cap.send("test-runner", "CancelTask", "POST", RPC, JSON, rpc(2, "CancelTask", {"id": task["id"]}))
    await cap.pacer.free()
    await cap.settle()
    await cap.send("test-runner", "CancelTask: again", "POST", RPC, JSON, rpc(3, "CancelTask", {"id": task["id"]}))
    again = {"message": message(cap, "Try again", task)}
    await cap.send("test-runner", "SendMessage: to the canceled task", "POST", RPC, JSON, rpc(4, "SendMessage", again))
    await cap.settle()
    return ["The full suite is canceled after it has logged two files."]


async def errors(cap: Capture, seen: dict[str, Any]) -> list[str]:
    await cap.send("test-runner", "GetTask: an id that does not exist", "POST", RPC, JSON, rpc(1, "GetTask", {"id": NO_TASK}))
    params = {"message": message(cap, "Run the unit tests")}
    await cap.send("test-runner", "SendMessage: no A2A-Version header", "POST", RPC, JSON[:1], rpc(2, "SendMessage", params))
    params = {"message": message(cap, "Run the unit tests")}
    await cap.send("test-runner", "SendMessage: a v0.3 method name", "POST", RPC, JSON, rpc(3, "message/send", params))
    params = {"message": {"role": "ROLE_USER", "parts": [{"text": "Run the unit tests"}]}}
    await cap.send("test-runner", "SendMessage: no messageId", "POST", RPC, JSON, rpc(4, "SendMessage", params))
    image = [{"url": "https://example.com/screenshot.png", "mediaType": "image/png"}]
    params = {"message": message(cap, "", parts=image)}
    await cap.send("code-reviewer", "SendMessage: an image part", "POST", RPC, JSON, rpc(5, "SendMessage", params))
    push = {"taskId": NO_TASK, "url": "http://localhost:41250/a2a-events"}
    await cap.send("code-reviewer", "CreateTaskPushNotificationConfig: not supported", "POST", RPC, JSON,
                   rpc(6, "CreateTaskPushNotificationConfig", push))
    await cap.send("test-runner", "a malformed body", "POST", RPC, JSON, raw='{"jsonrpc": "2.0", "method": ')
    return []


async def list_tasks(cap: Capture, seen: dict[str, Any]) -> list[str]:
    first = {"pageSize": 2, "historyLength": 0}
    _, reply = await cap.send("test-runner", "ListTasks: first page", "POST", RPC, JSON, rpc(1, "ListTasks", first))
    token = reply["result"]["nextPageToken"]
    await cap.send("test-runner", "ListTasks: next page", "POST", RPC, JSON,
                   rpc(2, "ListTasks", {"pageSize": 2, "pageToken": token, "historyLength": 0}))
    await cap.send("test-runner", "ListTasks: only canceled tasks", "POST", RPC, JSON,
                   rpc(3, "ListTasks", {"status": "TASK_STATE_CANCELED"}))
    return ["test-runner's tasks so far: those of 03, 04, 05, 09 and 10, newest first."]


async def history(cap: Capture, seen: dict[str, Any]) -> list[str]:
    task_id = seen["review"]["id"]
    await cap.send("code-reviewer", "GetTask: full history", "POST", RPC, JSON, rpc(1, "GetTask", {"id": task_id}))
    await cap.send("code-reviewer", "GetTask: last message only", "POST", RPC, JSON,
                   rpc(2, "GetTask", {"id": task_id, "historyLength": 1}))
    return ["The reviewed task of 06."]


async def resubscribe(cap: Capture, seen: dict[str, Any]) -> list[str]:
    await cap.pacer.hold()
    arrivals = cap.pacer.arrivals
    params = {"message": message(cap, FULL_SUITE)}
    async with cap.stream("test-runner", "SendStreamingMessage: the full suite", RPC, JSON + STREAM,
                          rpc(1, "SendStreamingMessage", params)) as events:
        first = await events.take(2)
        await cap.pacer.reach(arrivals + 1)
        await cap.pacer.step(2)
        await events.take(2)
        events.block.narration.append("the client closes the connection after 4 events")
    task_id = first[0]["result"]["task"]["id"]
    await cap.pacer.step(2)
    async with cap.stream("test-runner", "SubscribeToTask: pick the stream back up", RPC, JSON + STREAM,
                          rpc(2, "SubscribeToTask", {"id": task_id})) as events:
        await events.take(1)
        await cap.pacer.free()
        await events.rest()
    await cap.settle()
    await cap.send("test-runner", "SubscribeToTask: a finished task", "POST", RPC, JSON + STREAM,
                   rpc(3, "SubscribeToTask", {"id": task_id}))
    return []


async def push(cap: Capture, seen: dict[str, Any]) -> list[str]:
    await cap.pacer.hold()
    arrivals = cap.pacer.arrivals
    received = len(cap.hooks.received)
    config = {
        "url": f"{cap.webhook_url}/a2a-events",
        "token": "planner-run-0006",
        "authentication": {"scheme": "Bearer", "credentials": "hook_secret_91d2"},
    }
    params = {"message": message(cap, RUN_TESTS), "configuration": {"returnImmediately": True, "taskPushNotificationConfig": config}}
    _, reply = await cap.send("test-runner", "SendMessage: with a webhook", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    task_id = result_task(reply)["id"]
    await cap.pacer.reach(arrivals + 1)
    _, configs = await cap.send("test-runner", "ListTaskPushNotificationConfigs", "POST", RPC, JSON,
                                rpc(2, "ListTaskPushNotificationConfigs", {"taskId": task_id}))
    config_id = configs["result"]["configs"][0]["id"]
    await cap.send("test-runner", "GetTaskPushNotificationConfig", "POST", RPC, JSON,
                   rpc(3, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id}))
    await cap.pacer.free()
    await cap.settle()
    await cap.send("test-runner", "DeleteTaskPushNotificationConfig", "POST", RPC, JSON,
                   rpc(4, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id}))
    cap.webhooks(received)
    return ["The webhook blocks at the end are the requests the client's receiver got while the task ran."]


async def rest_binding(cap: Capture, seen: dict[str, Any]) -> list[str]:
    base = "/a2a/rest"
    _, reply = await cap.send("test-runner", "POST /message:send", "POST", f"{base}/message:send", REST,
                              {"message": message(cap, RUN_TESTS)})
    task_id = reply["task"]["id"]
    await cap.settle()
    seen["rest"] = reply["task"]
    await cap.send("test-runner", "GET /tasks/{id}", "GET", f"{base}/tasks/{task_id}?historyLength=0", REST[:1])
    await cap.send("test-runner", "GET /tasks/{id}: not found", "GET", f"{base}/tasks/{NO_TASK}", REST[:1])
    await cap.send("test-runner", "POST /tasks/{id}:cancel: already completed", "POST", f"{base}/tasks/{task_id}:cancel",
                   REST, {})
    return []


async def extended_card(cap: Capture, seen: dict[str, Any]) -> list[str]:
    await cap.send("deployer", "GetExtendedAgentCard: no token", "POST", RPC, JSON, rpc(1, "GetExtendedAgentCard", {}))
    await cap.send("deployer", "GetExtendedAgentCard: with a token", "POST", RPC, DEPLOYER, rpc(2, "GetExtendedAgentCard", {}))
    return []


async def task_status(cap: Capture, seen: dict[str, Any]) -> list[str]:
    task_id = seen["blocking"]["id"]
    block, _ = await cap.send("test-runner", "GET /tasks/{id}/status", "GET", f"/tasks/{task_id}/status", [])
    assert block.response is not None
    tag = block.response.headers.get("etag") or ""
    await cap.send("test-runner", "GET /tasks/{id}/status: unchanged", "GET", f"/tasks/{task_id}/status",
                   [("If-None-Match", tag)])
    await cap.send("test-runner", "GET /tasks/{id}/status: not found", "GET", f"/tasks/{NO_TASK}/status", [])
    return ["The Task Status view of the task of 03: its ETag is its revision, and If-None-Match answers 304."]


async def claims(cap: Capture, seen: dict[str, Any]) -> list[str]:
    task_id = seen["blocking"]["id"]
    await cap.send("test-runner", "GET /tasks/{id}/claim", "GET", f"/tasks/{task_id}/claim", [])
    outcome = {"outcome": "completed", "evidence": {"note": "checked by hand"}}
    json_only = [("Content-Type", "application/json")]
    await cap.send("test-runner", "POST /tasks/{id}/reconcile: not an operator", "POST", f"/tasks/{task_id}/reconcile",
                   json_only, outcome)
    operator = [*json_only, ("Authorization", f"Bearer {OPERATOR_TOKEN}")]
    await cap.send("test-runner", "POST /tasks/{id}/reconcile: nothing to reconcile", "POST",
                   f"/tasks/{task_id}/reconcile", operator, outcome)
    return ["The claim view of the task of 03, and reconcile refused: only an operator may report an outcome, and "
            "only for a task whose claim needs reconciliation."]


SCENARIOS: list[tuple[str, Scenario]] = [
    ("01-agent-cards", agent_cards),
    ("02-message-reply", message_reply),
    ("03-blocking-task", blocking_task),
    ("04-polling", polling),
    ("05-streaming", streaming),
    ("06-input-required", input_required),
    ("07-auth-required", auth_required),
    ("08-rejected", rejected),
    ("09-failed", failed),
    ("10-cancel", cancel),
    ("11-errors", errors),
    ("12-list-tasks", list_tasks),
    ("13-history", history),
    ("14-resubscribe", resubscribe),
    ("15-push", push),
    ("16-rest-binding", rest_binding),
    ("18-extended-card", extended_card),
    ("20-task-status", task_status),
    ("21-claims", claims),
]
"""In the kit's order: 12 lists the tasks that 03–10 created. 17 (the signed card) is shown by 01's deployer card,
which our tests verify with the demo key; 19 (the planner) waits for `a2a-bridge plan`."""


async def record(cap: Capture) -> dict[str, tuple[list[Recorded], list[str]]]:
    """Run every scenario in order; each file's blocks and opening narration."""
    seen: dict[str, Any] = {}
    files: dict[str, tuple[list[Recorded], list[str]]] = {}
    for name, scenario in SCENARIOS:
        cap.start()
        preamble = await scenario(cap, seen)
        files[name] = (cap.blocks, preamble)
    return files
