"""The capture scenarios: what the kit's 01–19 show, plus Task Status, the claim view and a reconcile, run in order.

Each scenario drives the server step by step: an agent that would still be working is held at its next pause while
the driver sends what the scenario shows (04's GetTask while working, 10's cancel after two log files, 14's dropped
stream), and `settle` waits until no turn runs before the next step, so ids and clock readings come in one order.
17 writes the deployer card's signature worked through as text, 19 records the planner's own traffic and its log,
and 22 runs on a server of its own, on SQLite, that it stops and starts again.

Not captured: a Task Status long poll answered by a change. A transcript plays its requests one after another, so
the change would have to come from the agent's own progress while the poll waits, and a replay against a server that
paces its agents in real time would see another revision; 20 shows the long poll's two immediate answers (no change
within the wait: 304; an older ETag: 200 at once) and a change arriving on the status stream instead.
"""

import asyncio
import json
import tempfile
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from a2a.client import AuthInterceptor
from a2a.types import AgentCard
from a2a.utils import signing
from google.protobuf.json_format import ParseDict
from jwt import api_jws
from jwt.utils import base64url_decode, base64url_encode

from a2a_bridge.agents.catalog import DEPLOYER_SIGNING_KEY, DEPLOYER_TOKEN
from a2a_bridge.capture.driver import (
    KIT_HOSTS,
    OPERATOR_TOKEN,
    SEED,
    WAIT,
    Capture,
    Determinism,
    canonical,
    capture_server,
)
from a2a_bridge.capture.planner import APPROVAL_URL, BearerToken, Planner
from a2a_bridge.capture.transport import TITLE, RecordingTransport
from a2a_bridge.capture.writer import pretty, render
from a2a_bridge.store.stores import StoreConfig

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
    block, _ = await cap.send("test-runner", "GET /tasks/{id}/status?wait=1: no change within the wait", "GET",
                              f"/tasks/{task_id}/status?wait=1", [("If-None-Match", tag)])
    block.narration.append("A long poll: the server holds the request until the revision moves past If-None-Match, "
                           "or for `wait` seconds; this task has ended, so after 1 s it answers 304.")
    block, _ = await cap.send("test-runner", "GET /tasks/{id}/status?wait=30: an older ETag", "GET",
                              f"/tasks/{task_id}/status?wait=30", [("If-None-Match", '"1"')])
    block.narration.append("The caller's revision is behind, so the long poll answers at once.")
    parts = [{"text": "Review this diff of payments-api."}, {"raw": DIFF, "filename": "refunds.diff", "mediaType": "text/x-diff"}]
    params = {"message": message(cap, "", parts=parts)}
    _, reply = await cap.send("code-reviewer", "SendMessage: review a diff", "POST", RPC, JSON, rpc(1, "SendMessage", params))
    review = result_task(reply)
    await cap.settle()
    async with cap.stream("code-reviewer", "GET /tasks/{id}/status/stream", f"/tasks/{review['id']}/status/stream",
                          [("Accept", "text/event-stream")], method="GET") as events:
        await events.take(1)
        events.block.narration.append("The status stream sends the view now and at every change; the task waits for "
                                      "input. The client cancels it while the stream stays open.")
        cancel = cap.send("code-reviewer", "CancelTask", "POST", RPC, JSON, rpc(2, "CancelTask", {"id": review["id"]}))
        block, _ = await events.inside(cancel)
        block.narration.append("The stream sends the terminal view and closes.")
        await events.rest()
    await cap.settle()
    return ["The Task Status view of the task of 03: its ETag is its revision, If-None-Match answers 304, and `wait` "
            "makes it a long poll. Then the status stream of a review waiting for input, canceled while it is open."]


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


async def signed_card(cap: Capture, seen: dict[str, Any]) -> list[str]:
    """The deployer card of 01 worked through: canonical form, protected header, signature, verification."""
    _, served = await cap.send("deployer", "the card", "GET", "/.well-known/agent-card.json", [], record=False)
    card = ParseDict(served, AgentCard(), ignore_unknown_fields=True)
    [signature] = card.signatures
    form = signing._canonicalize_agent_card(card)
    header_json = base64url_decode(signature.protected.encode()).decode()
    payload = base64url_encode(form.encode()).decode()
    resigned = api_jws.encode(form.encode(), DEPLOYER_SIGNING_KEY, "HS256", headers=json.loads(header_json))
    verify = signing.create_signature_verifier(lambda kid, jku: DEPLOYER_SIGNING_KEY, ["HS256"])
    changed = AgentCard()
    changed.CopyFrom(card)
    changed.version = "9.9.9"
    wrong_key = signing.create_signature_verifier(lambda kid, jku: "another-key-of-32-bytes-or-more!!", ["HS256"])
    unsigned = canonical({key: value for key, value in served.items() if key != "signatures"})
    lines = [
        "# 17 · The deployer's signed card: canonical form, protected header, signature and verification.",
        "# Written by `a2a-bridge capture` from the card the deployer serves at http://localhost:41243 (01 #3), with",
        "# the SDK's canonicalization (a2a.utils.signing over RFC 8785 JCS, a2a.utils._jcs), PyJWT's HS256 and the",
        "# SDK's verifier (a2a.utils.signing.create_signature_verifier).",
        "",
        "## 1 · The card as served, without `signatures`",
        pretty(unsigned),
        "",
        f"## 2 · Canonical form: the card without `signatures` and without empty values, as JCS ({len(form.encode())} bytes)",
        form,
        "",
        "## 3 · Protected header",
        f"base64url: {signature.protected}",
        f"decoded:   {header_json}",
        "",
        "## 4 · Signature: HS256 over BASE64URL(protected header) . BASE64URL(canonical form)",
        f"key:           {DEPLOYER_SIGNING_KEY!r} (the demo key of agents/catalog.py: {len(DEPLOYER_SIGNING_KEY)} bytes, where"
        " HS256 wants 32 or more)",
        f"signing input: {signature.protected}.{payload}",
        f"signature:     {signature.signature}",
        f"signed again here with PyJWT: {'the same signature' if resigned.rsplit('.', 1)[1] == signature.signature else resigned}",
        "",
        "## 5 · In the card",
        pretty({"signatures": served["signatures"]}),
        "",
        "## 6 · Verification with the SDK's verifier (algorithms [\"HS256\"], key looked up by kid)",
        f"the card as served:                {_verdict(verify, card)}",
        f"the card with version 9.9.9:       {_verdict(verify, changed)}",
        f"the card checked with another key: {_verdict(wrong_key, card)}",
    ]
    cap.files["17-signed-card.txt"] = "\n".join(lines) + "\n"
    return []


def _verdict(verify: Callable[[AgentCard], None], card: AgentCard) -> str:
    """`valid`, or the verifier's error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            verify(card)
    except signing.SignatureVerificationError as error:
        return f"{type(error).__name__}: {error}"
    return "valid"


async def planner(cap: Capture, seen: dict[str, Any]) -> list[str]:
    """`a2a-bridge plan`'s Planner on the SDK client, its traffic recorded by the transport; the driver approves."""
    transport = RecordingTransport(cap.kit_bases, {host: agent for agent, host in KIT_HOSTS.items()})
    log: list[str] = []
    asked: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def say(line: str) -> None:
        log.append(line)
        if line.startswith("  it needs approval") and not asked.done():
            asked.set_result(line)

    async with httpx.AsyncClient(transport=transport, timeout=WAIT) as http:

        async def operator() -> None:
            link = APPROVAL_URL.search(await asked)
            assert link is not None
            await http.post(link.group(0), content=b"{}", headers={"Content-Type": "application/json"},
                            extensions={TITLE: "operator approves"})

        run = Planner(http, say, interceptors=[AuthInterceptor(BearerToken(DEPLOYER_TOKEN))], approval_timeout=WAIT,
                      message_id=cap.message_id)
        async with asyncio.timeout(WAIT * 2):
            completed, _ = await asyncio.gather(run.run(list(cap.kit_bases)), operator())
    assert completed, log
    approval = next(block for top in transport.blocks for _, block in top.inside if block.title == "operator approves")
    approval.narration.append("An operator approves, outside A2A, while the planner's subscription stays open; this "
                              "request is not the planner's.")
    await cap.settle()
    cap.blocks = transport.blocks
    cap.files["19-planner.log"] = "\n".join(log) + "\n"
    return ["The planner (`a2a-bridge plan`, on the SDK's client) reads the three cards and delegates run-tests, "
            "review-diff and deploy; its decisions are in 19-planner.log. JSON-RPC ids are numbered here."]


async def reconcile(cap: Capture, seen: dict[str, Any]) -> list[str]:
    """A deploy cut off by a restart, found in needs_reconciliation, and an operator's reconcile."""
    world = Determinism.seeded(SEED + 22)
    operator = [("Authorization", f"Bearer {OPERATOR_TOKEN}")]
    with tempfile.TemporaryDirectory(prefix="a2a-capture-") as folder:
        store = StoreConfig.parse(f"sqlite:///{Path(folder) / 'capture.db'}")
        async with capture_server(store, world) as first:
            params = {"message": message(first, "Deploy build 2026.10.06-1 to staging")}
            _, reply = await first.send("deployer", "SendMessage: deploy to staging", "POST", RPC, DEPLOYER,
                                        rpc(1, "SendMessage", params))
            task_id = result_task(reply)["id"]
            await first.settle()
            await first.pacer.hold()
            arrivals = first.pacer.arrivals
            block, _ = await first.send("deployer", "operator approves", "POST", f"/approve/{task_id}",
                                        [("Content-Type", "application/json")], raw="{}")
            await first.pacer.reach(arrivals + 1)
            block.narration.append("The rollout starts. The server stops before it ends, cutting the turn off and "
                                   "leaving its claim, and starts again on the same database.")
            blocks = first.blocks
        async with capture_server(store, world) as second:
            await second.pacer.free()
            second.blocks = blocks
            get = rpc(2, "GetTask", {"id": task_id, "historyLength": 0})
            block, _ = await second.send("deployer", "GetTask: after the restart", "POST", RPC, DEPLOYER, get)
            block.narration.append("Repeating a deploy is not safe, so the bridge does not run it again: an operator "
                                   "must find out what happened.")
            await second.send("deployer", "GET /tasks/{id}/claim", "GET", f"/tasks/{task_id}/claim", operator)
            outcome = {"outcome": "completed", "evidence": {"note": "build 2026.10.06-1 is live on staging",
                                                            "checked_by": "ops on call"}}
            await second.send("deployer", "POST /tasks/{id}/reconcile: completed", "POST", f"/tasks/{task_id}/reconcile",
                              [("Content-Type", "application/json"), *operator], outcome)
            await second.settle()
            await second.send("deployer", "GetTask: reconciled", "POST", RPC, DEPLOYER, rpc(3, "GetTask", {"id": task_id, "historyLength": 0}))
            cap.blocks = second.blocks
    return ["A deploy whose server restarts mid-rollout (on SQLite, a server of its own): its claim needs "
            "reconciliation, and an operator reports the outcome. Replaying it needs the same restart after #2."]


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
    ("17-signed-card", signed_card),
    ("18-extended-card", extended_card),
    ("19-planner", planner),
    ("20-task-status", task_status),
    ("21-claims", claims),
    ("22-reconcile", reconcile),
]
"""In the kit's order: 12 lists the tasks that 03–10 created."""


async def record(cap: Capture, started: Callable[[str], None] = lambda name: None) -> dict[str, str]:
    """Run every scenario in order (telling `started` each one's name); the text of each output file by name: the
    scenario's transcript when it recorded blocks, and any other file it wrote."""
    seen: dict[str, Any] = {}
    files: dict[str, str] = {}
    for name, scenario in SCENARIOS:
        started(name)
        cap.start()
        preamble = await scenario(cap, seen)
        if cap.blocks:
            files[f"{name}.http"] = render(cap.blocks, preamble)
        files.update(cap.files)
        cap.files = {}
    return files
