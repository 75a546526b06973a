"""The operator console in headless Chromium (Debian's `chromium`, driven by `playwright-core` from tests/browser/):
a deploy shown live up to AUTH_REQUIRED and approved with a click, a running task canceled (and shown as canceled beside
its Task Status reason), a deploy left in needs_reconciliation by a crash reconciled from its page, the list paged,
filtered and searched and its actions reachable in a narrow window, a `javascript:` URL planted in a message, an
artifact and a remote agent's artifact that never runs, and dead-lettered webhooks listed and delivered again with a
click, from the list and from a task's page. Screenshots go to build/console/."""

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TaskState

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.js_support import node as js_node
from tests.remote_support import JsRemote

from tests.claim_support import (
    CRASH_PACE,
    OPERATOR,
    UNIT_TESTS,
    claim_view,
    crash_mid_rollout,
    get_task,
    rollouts,
)
from tests.support import ServerProcess, rpc, serve_in_thread, user_message, wait_for
from tests.ops.test_operator_cli import DEAD_LETTERS, hooked
from tests.push.test_push_outbox import Receiver, check_order_and_ids

ROOT = Path(__file__).resolve().parents[2]
BROWSER_DIR = ROOT / "tests" / "browser"
PLAYWRIGHT = BROWSER_DIR / "node_modules" / "playwright-core"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = ROOT / "build" / "console"


@pytest.fixture(scope="module")
def node() -> str:
    """`node` with playwright-core installed and Chromium present; skips locally without them, fails under CI."""
    executable = shutil.which("node")
    missing = [
        what
        for what, present in (
            ("node", executable is not None),
            (f"{PLAYWRIGHT} (run: npm ci --prefix tests/browser)", PLAYWRIGHT.is_dir()),
            (f"{CHROMIUM} (apt-get install chromium)", CHROMIUM.is_file()),
        )
        if not present
    ]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"missing {', '.join(missing)}; .ci/run installs them")
        pytest.skip(f"missing {', '.join(missing)}")
    assert executable is not None
    return executable


def drive(node: str, *args: str) -> dict[str, dict[str, Any]]:
    """Run tests/browser/console.mjs; each step it reports, by name."""
    proc = subprocess.run(
        [node, "console.mjs", *args], cwd=BROWSER_DIR, capture_output=True, text=True, timeout=180,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    errors = [line for line in lines if "error" in line or line.get("step") == "page-error"]
    assert proc.returncode == 0 and not errors, proc.stdout + proc.stderr
    return {line["step"]: line for line in lines}


@pytest.fixture(scope="module")
def live_run(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """The `live` scenario once, against a bridge whose agents take a second a step, so each state shows."""
    server = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('console') / 'b.db'}", pace=1.0).start()
    try:
        yield drive(node, "live", server.url, str(SCREENSHOTS))
    finally:
        server.stop()


def test_sign_in_points_to_the_demo_token_without_showing_it_and_refuses_another(
    live_run: dict[str, dict[str, Any]],
) -> None:
    sign_in = live_run["sign-in"]
    assert "ops_demo_5b9e" not in sign_in["hint"], "the page never shows a token"
    assert "demo operator token" in sign_in["hint"] and "--operator-token" in sign_in["hint"]
    assert sign_in["refused"] == "The server did not accept that token."
    assert sign_in["stored"] == "ops_demo_5b9e"


def test_sign_out_shows_only_once_signed_in(live_run: dict[str, dict[str, Any]]) -> None:
    assert live_run["sign-in"]["signOutBefore"] is False, "Sign out showed on the sign-in page"
    assert live_run["sign-in"]["signOutAfter"] is True


def test_a_deploy_shows_up_live_and_completes_once_approved(live_run: dict[str, dict[str, Any]]) -> None:
    step = live_run["approve"]
    seen = [state for state in step["states"] if state not in ("SUBMITTED", "WORKING")]
    assert seen == ["AUTH_REQUIRED", "COMPLETED"], step["states"]
    assert "WORKING" in step["states"], "the row never showed the deploy working"
    assert step["waiting"] == {
        "phase": "processing→ operator: approve", "mustAct": "operator", "claim": "awaiting_reply", "generation": "1",
        "actions": ["approve", "cancel"],
    }, "the row says who must act"
    assert step["done"] == {"phase": "terminal: completed", "claim": "completed", "generation": "2", "actions": []}
    assert step["notice"].startswith("Approved ")
    assert "goes on at once" in step["consequence"] and step["task"] in step["consequence"], "the dialog names the consequence"
    assert step["sameDocument"] is True


def test_the_task_page_shows_history_artifacts_and_claim_events(live_run: dict[str, dict[str, Any]]) -> None:
    page = live_run["task-page"]
    assert page["state"] == "COMPLETED"
    assert page["history"] == 4
    assert page["artifacts"] == ["deploy-report"]
    assert json.loads(page["report"])["environment"] == "staging"
    assert page["operations"] == ["create", "claim", "ask", "resume", "open_window", "complete"]
    [approval] = page["operator"]
    assert "resume" in approval and "change window 14:00-15:00" in approval, "the operator's reason is on the timeline"


def test_a_running_task_is_canceled_with_a_click(live_run: dict[str, dict[str, Any]]) -> None:
    step = live_run["cancel"]
    assert step["states"][0] in ("SUBMITTED", "WORKING") and step["states"][-1] == "CANCELED", step["states"]
    assert step["claim"] == "cancelled"
    assert step["ended"] == "canceled" and step["terminalReason"] == "completed"
    assert step["phase"] == "terminal: canceled", "the A2A end, never the Task Status' grouping under \"completed\""
    assert step["message"] == "Canceled by the operator."
    assert step["actions"] == []
    assert step["sameDocument"] is True


def test_a_deploy_interrupted_by_a_crash_is_reconciled_from_its_page(node: str, tmp_path: Path) -> None:
    ledger = tmp_path / "deploys.jsonl"
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=CRASH_PACE, extra=["--deploy-ledger", str(ledger)]).start()
    try:
        task_id = crash_mid_rollout(server, "console-crash")
        step = drive(node, "reconcile", server.url, str(SCREENSHOTS), task_id)["reconcile"]
        assert step["before"]["state"] == "AUTH_REQUIRED"
        assert step["before"]["claim"] == "needs reconciliation"
        assert "An operator must reconcile it" in step["before"]["message"]
        assert step["after"]["state"] == "COMPLETED"
        assert step["after"]["claim"] == "completed"
        assert step["after"]["message"] == "Reconciled by an operator: staging serves build 2026.10.06-0"
        evidence = {"note": "staging serves build 2026.10.06-0", "checked_by": "console test", "health": "3 of 3 passing"}
        assert step["after"]["evidence"] == evidence
        assert step["after"]["reconcileForm"] is False
        assert get_task(server, "deployer", task_id)["status"]["state"] == "TASK_STATE_COMPLETED"
        assert claim_view(server, "deployer", task_id)["events"][-1]["evidence"] == evidence
        assert rollouts(ledger)[task_id] == 0
    finally:
        server.stop()


DEPLOYER = {"Authorization": "Bearer dpl_test_7c1e4b"}


def test_the_list_pages_filters_searches_and_keeps_its_actions_in_reach(node: str, tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.01).start()
    try:
        runs = [
            rpc(server.agent("test-runner"), "SendMessage", {"message": user_message("Run the unit tests at commit 9f3c2e1", f"page-{i}-{uuid.uuid4()}")})
            for i in range(51)
        ]
        assert all(run["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" for run in runs)
        deploy = {"message": user_message("Deploy build 2026.10.06-7 to staging", f"deploy-{uuid.uuid4()}")}
        canceled = rpc(server.agent("deployer"), "SendMessage", deploy, headers=DEPLOYER)["result"]["task"]
        assert rpc(server.agent("deployer"), "CancelTask", {"id": canceled["id"]}, headers=DEPLOYER)["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        deploy = {"message": user_message("Deploy build 2026.10.06-8 to staging", f"deploy-{uuid.uuid4()}")}
        waiting = rpc(server.agent("deployer"), "SendMessage", deploy, headers=DEPLOYER)["result"]["task"]
        assert waiting["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
        arg = json.dumps({"canceled": canceled["id"], "waiting": waiting["id"], "context": canceled["contextId"], "total": 53})
        step = drive(node, "list", server.url, str(SCREENSHOTS), arg)["list"]
    finally:
        server.stop()
    everything = {run["result"]["task"]["id"] for run in runs} | {canceled["id"], waiting["id"]}
    assert len(step["first"]) == 50 and len(step["second"]) == 3
    assert set(step["first"]) | set(step["second"]) == everything, "two pages hold every task once"
    assert step["first"][0] == waiting["id"] and step["back"] == step["first"]
    assert step["firstPager"] == {"label": "Page 1", "newer": False, "older": True}
    assert step["secondPager"] == {"label": "Page 2", "newer": True, "older": False}
    assert step["phase"]["ended"] == "canceled" and step["phase"]["terminalReason"] == "completed"
    assert step["phase"]["reason"] is None and "completed" not in step["phase"]["text"]
    assert sorted(step["deployerRows"]) == sorted([canceled["id"], waiting["id"]])
    assert step["found"] == [canceled["id"]]
    for width, seen in step["narrow"].items():
        assert seen["onTop"] and 0 <= seen["left"] and seen["right"] <= int(width), (width, seen)
        assert seen["cut"] == [] and seen["table"]["width"] <= seen["table"]["shown"], (width, seen)
    assert step["icon"] == {"href": "favicon.svg", "status": 200, "type": "image/svg+xml"}


PAYLOAD = 'javascript:void(document.title=sessionStorage.getItem("a2a-bridge.operator-token"))'
"""The payload of issue 15: one click on it as a link would have put the operator's token in the page's title."""
ALERT = "javascript:alert(document.domain)"
SAFE_LINK = "http://127.0.0.1:1/build.log"
"""An http URL, shown as a link (never clicked: the tests reach no other address)."""
URL_PARTS = [{"url": url, "mediaType": "text/plain"} for url in (PAYLOAD, ALERT, SAFE_LINK)]


class EchoLinks(AgentExecutor):
    """A test-only agent whose artifact repeats the URL parts of the message it was sent, as written."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        links = [Part(url=part.url, media_type=part.media_type) for part in context.message.parts if part.url]
        await out.status(TaskState.TASK_STATE_WORKING, "Collecting the links")
        await out.artifact("links", links, name="links", last_chunk=True)
        await out.status(TaskState.TASK_STATE_COMPLETED, "Here are the links")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await Emitter(event_queue, context, lambda: str(uuid.uuid4())).status(TaskState.TASK_STATE_CANCELED)


class NamedLinks(EchoLinks):
    """EchoLinks whose artifact is named by the message's text."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        links = [Part(url=part.url, media_type=part.media_type) for part in context.message.parts if part.url]
        name = next(part.text for part in context.message.parts if part.text)
        await out.artifact("links", links, name=name, last_chunk=True)
        await out.status(TaskState.TASK_STATE_COMPLETED, "Here are the links")


def echo_links_spec() -> AgentSpec:
    card = AgentCard(
        name="echo-links",
        description="Repeats the links it is sent in an artifact; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo links", description="Echoes links.", tags=["test"])],
    )
    return AgentSpec("echo-links", card, EchoLinks())


def assert_nothing_ran(steps: dict[str, dict[str, Any]], tasks: list[str], token: str) -> None:
    """Every planted URL shown as text, never as a javascript: link; nothing ran, and the CSP refuses one anyway."""
    csp = steps["csp"]
    for task_id in tasks:
        step = steps[f"task:{task_id}"]
        assert step["javascriptLinks"] == 0, step["parts"]
        shown = {part["text"]: part for part in step["parts"]}
        assert shown[PAYLOAD]["tag"] == "code" and shown[PAYLOAD]["href"] is None, step["parts"]
        assert step["title"] == csp["title"] == "a2a-bridge · operator console"
        assert step["token"] == token and step["violations"] == []
    assert csp["titleAfter"] == csp["title"] and csp["dialogs"] == []
    assert csp["violations"] and all(v.startswith("script-src") for v in csp["violations"]), csp


def test_a_javascript_url_in_a_message_or_a_remote_agents_artifact_never_runs(node: str, tmp_path: Path) -> None:
    with JsRemote(js_node(), tmp_path / "executions.jsonl") as remote:
        server = ServerProcess(
            f"sqlite:///{tmp_path / 'b.db'}", extra=["--agent", "test-runner", "--remote", f"js={remote.url}"]
        ).start()
        try:
            message = user_message("Run the unit tests at commit 9f3c2e1", f"xss-{uuid.uuid4()}")
            message["parts"] += URL_PARTS
            sent = rpc(server.agent("test-runner"), "SendMessage", {"message": message})
            linked = rpc(server.agent("js"), "SendMessage", {"message": user_message(f"link {PAYLOAD}", f"xss-{uuid.uuid4()}")})
            tasks = [sent["result"]["task"]["id"], linked["result"]["task"]["id"]]
            artifact = linked["result"]["task"]["artifacts"][0]["parts"][0]
            assert artifact["url"] == PAYLOAD, "the remote agent's artifact carries the payload"
            arg = json.dumps({"token": "ops_demo_5b9e", "tasks": tasks, "payload": PAYLOAD})
            steps = drive(node, "xss", server.url, str(SCREENSHOTS), arg)
        finally:
            server.stop()
    assert_nothing_ran(steps, tasks, "ops_demo_5b9e")
    shown = {part["text"]: part for part in steps[f"task:{tasks[0]}"]["parts"]}
    assert shown[ALERT]["tag"] == "code"
    assert shown[SAFE_LINK]["tag"] == "a" and shown[SAFE_LINK]["href"] == SAFE_LINK
    assert "noopener" in shown[SAFE_LINK]["rel"]


def test_a_javascript_url_in_an_agents_artifact_never_runs(node: str) -> None:
    token = "ops_xss_7d21"
    bridge = Bridge(
        [echo_links_spec()], Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4()),
        principals={token: Principal("operator", kind="operator")},
    )
    with serve_in_thread(bridge.app()) as base:
        message = user_message("Keep these links", f"xss-{uuid.uuid4()}")
        message["parts"] += URL_PARTS
        reply = rpc(f"{base}/echo-links", "SendMessage", {"message": message})
        task = reply["result"]["task"]
        assert [part["url"] for part in task["artifacts"][0]["parts"]] == [PAYLOAD, ALERT, SAFE_LINK]
        arg = json.dumps({"token": token, "tasks": [task["id"]], "payload": PAYLOAD})
        steps = drive(node, "xss", base, str(SCREENSHOTS), arg)
    assert_nothing_ran(steps, [task["id"]], token)


def dead_letters_of(server: ServerProcess, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    """test-runner's dead letters (its own endpoint, not the console's), by task, once these tasks all have one."""

    def listed() -> dict[str, dict[str, Any]] | None:
        answer = httpx.get(f"{server.agent('test-runner')}/webhooks/dead", headers=OPERATOR, timeout=10).json()
        letters = {letter["taskId"]: letter for letter in answer["deadLetters"]}
        return letters if letters.keys() >= set(task_ids) else None

    return wait_for(listed, timeout=30, interval=0.1, what="the dead letters")


HOSTILE_CONFIG = "<img src=x onerror=\"document.title='owned'\">"
"""A push config id, chosen by the caller, that would run as script if the page wrote it as HTML."""


def test_a_dead_letter_is_listed_and_delivered_again_with_a_click(node: str, tmp_path: Path) -> None:
    """Three webhooks answered 500 past --webhook-give-up: the console lists them; with the receiver answering 200, one
    is delivered again from the list, one another operator delivered first fails to with the server's reason, and one
    is delivered again from its task's page; the receiver gets each task's terminal state."""
    receiver = Receiver(answer=500)
    receiver.up()
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=DEAD_LETTERS).start()
    try:
        listed = hooked(server, "test-runner", UNIT_TESTS, receiver.url, HOSTILE_CONFIG)
        stale = hooked(server, "test-runner", UNIT_TESTS, receiver.url, "stale-hook")
        on_page = hooked(server, "test-runner", UNIT_TESTS, receiver.url, "page-hook")
        letters = dead_letters_of(server, [listed, stale, on_page])
        receiver.answer = 200
        arg = json.dumps({"listed": listed, "stale": stale, "onPage": on_page})
        steps = drive(node, "dead-letters", server.url, str(SCREENSHOTS), arg)
        wait_for(lambda: receiver.ended([listed, stale, on_page]), timeout=30, what="the terminal states delivered again")
        check_order_and_ids(receiver.got(), [listed, stale, on_page])
    finally:
        server.stop()
        receiver.down()
    step = steps["dead-letters"]
    rows = {row["task"]: row for row in step["rows"]}
    assert set(rows) == {listed, stale, on_page}
    letter = letters[listed]
    assert rows[listed] == {
        "task": listed,
        "link": f"#/tasks/{listed}",
        "agent": "test-runner",
        "config": HOSTILE_CONFIG,
        "revision": str(letter["deliveredRevision"]),
        "attempts": str(letter["attempts"]),
        "lastError": "HTTP 500",
        "failingSince": letter["failingSince"].replace("T", " ")[:19] + " UTC",
        "buttons": ["Deliver again"],
    }
    assert step["planted"] == 0 and step["title"] == "a2a-bridge · operator console", "the config id stayed text"
    assert step["current"] == "dead-letters"
    assert step["refused"] == "Deliver again failed: No dead letter of this task to deliver again"
    assert step["delivering"] == f"Delivering webhook {HOSTILE_CONFIG} of {listed[:8]} again."
    assert step["left"] == [on_page]
    page = steps["task-dead-letter"]
    assert page["before"]["config"] == "page-hook"
    assert page["before"]["cells"][:2] == ["page-hook", "dead letter"] and "HTTP 500" in page["before"]["cells"]
    assert page["notice"] == f"Delivering webhook page-hook of {on_page[:8]} again."


OVERRIDE = "\u202e"
"""RIGHT-TO-LEFT OVERRIDE, left unclosed (no U+202C after it)."""


def test_an_unclosed_right_to_left_override_reorders_nothing_after_it(node: str) -> None:
    """An artifact named `report<U+202E>` whose first link ends in an unclosed override: the links after it show their
    characters left to right, as written, and every part and the name are isolated."""
    token = "ops_bidi_3c81"
    spec = echo_links_spec()
    bridge = Bridge(
        [AgentSpec("echo-links", spec.card, NamedLinks())], Stores(StoreConfig.parse("memory")), SystemClock(),
        lambda: str(uuid.uuid4()), principals={token: Principal("operator", kind="operator")},
    )
    with serve_in_thread(bridge.app()) as base:
        message = user_message(f"report{OVERRIDE}", f"bidi-{uuid.uuid4()}")
        urls = (f"https://example.com/a{OVERRIDE}", "https://example.com/next", "https://example.com/last")
        message["parts"] += [{"url": url, "mediaType": "text/plain"} for url in urls]
        task = rpc(f"{base}/echo-links", "SendMessage", {"message": message})["result"]["task"]
        steps = drive(node, "bidi", base, str(SCREENSHOTS), json.dumps({"token": token, "task": task["id"]}))
    shown = steps["bidi"]
    assert shown["name"] == f"report{OVERRIDE}"
    assert shown["followers"] == [True, True], "the links after an unclosed override show as written"
    assert shown["isolated"] and set(shown["isolated"]) == {"isolate"}, shown["isolated"]
