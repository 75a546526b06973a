"""Fronting remote A2A agents (`serve --remote NAME=URL`, docs/remote.md): an @a2a-js/sdk agent (streaming and
polled) and a second a2a-bridge process, through a front bridge of ours: complete, stream, input, cancel and direct
replies with the Task Status right at every step; a front killed mid-turn that picks the remote task up again
without running it twice; a remote that stops or forgets its task, failing our task with a clear status."""

import contextlib
import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import AgentCard
from google.protobuf.json_format import ParseDict

from a2a_bridge.agents import test_runner
from a2a_bridge.core.config import ConfigError
from a2a_bridge.core.task_status import WHO_MUST_ACT
from a2a_bridge.remote.agent import REMOTE_EXTENSION, forwarded_id
from a2a_bridge.remote.config import file_remotes, front_card, pinned, remote_arg
from tests.claim_support import (
    FULL_SUITE,
    OPERATOR,
    UNIT_TESTS,
    claim_view,
    get_task,
    operations,
    review_message,
    start,
    status_text,
    wait_state,
)
from tests.js_support import node
from tests.remote_support import JsRemote, frame_name, link_of, phase, stream_frames, task_status
from tests.support import ServerProcess, free_port, rpc, user_message, wait_for

ASK_BASE = "Which base branch should I compare this diff against?"
TIMEOUT = 2.0
"""--remote-timeout of the fronts that test failures."""


def send(server: ServerProcess, agent: str, message: dict[str, Any]) -> dict[str, Any]:
    """A blocking SendMessage; its result (a task or a message)."""
    reply = rpc(server.agent(agent), "SendMessage", {"message": message})
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def parts_text(task: dict[str, Any], artifact_id: str) -> list[str]:
    artifact = next(a for a in task.get("artifacts", []) if a["artifactId"] == artifact_id)
    return [part["text"] for part in artifact["parts"]]


def artifact_parts(server: ServerProcess, agent: str, task_id: str) -> int:
    return sum(len(a["parts"]) for a in get_task(server, agent, task_id).get("artifacts", []))


def front_of(store: str, remotes: dict[str, str], timeout: float = 10.0) -> ServerProcess:
    extra = [arg for name, url in remotes.items() for arg in ("--remote", f"{name}={url}")]
    return ServerProcess(store, extra=[*extra, "--remote-timeout", str(timeout)])


@pytest.fixture(scope="module")
def js(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JsRemote]:
    with JsRemote(node(), tmp_path_factory.mktemp("js") / "executions.jsonl") as agent:
        yield agent


@pytest.fixture(scope="module")
def js_polled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JsRemote]:
    with JsRemote(node(), tmp_path_factory.mktemp("js-polled") / "executions.jsonl", streaming=False) as agent:
        yield agent


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory, js: JsRemote, js_polled: JsRemote) -> Iterator[ServerProcess]:
    """Fronts the streaming JS agent by its base URL and the polled one by its card URL."""
    db = tmp_path_factory.mktemp("front") / "front.db"
    process = front_of(f"sqlite:///{db}", {"js": js.url, "js-poll": f"{js_polled.url}/.well-known/agent-card.json"})
    yield process.start()
    process.stop()


@pytest.fixture(scope="module")
def remote_bridge() -> Iterator[ServerProcess]:
    process = ServerProcess("memory", pace=0.1).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def bridge_front(tmp_path_factory: pytest.TempPathFactory, remote_bridge: ServerProcess) -> Iterator[ServerProcess]:
    db = tmp_path_factory.mktemp("bridge-front") / "front.db"
    remotes = {"runner": remote_bridge.agent("test-runner"), "reviewer": remote_bridge.agent("code-reviewer")}
    process = front_of(f"sqlite:///{db}", remotes)
    yield process.start()
    process.stop()


def test_remote_arguments_and_forwarded_ids() -> None:
    assert remote_arg("js=http://127.0.0.1:9/a") == ("js", "http://127.0.0.1:9/a")
    for bad in ("js", "=http://127.0.0.1:9", "JS=http://127.0.0.1:9", "js=ftp://127.0.0.1", "a/b=http://127.0.0.1:9"):
        with pytest.raises(Exception, match="expected NAME=URL"):
            remote_arg(bad)
    assert forwarded_id("task-1", "m-1") == forwarded_id("task-1", "m-1")
    assert len({forwarded_id("task-1", "m-1"), forwarded_id("task-2", "m-1"), forwarded_id("task-1", "m-2")}) == 3


def test_the_front_card_keeps_the_remote_card_and_adds_our_extensions() -> None:
    card = front_card(test_runner.card())
    uris = [extension.uri for extension in card.capabilities.extensions]
    assert uris == [WHO_MUST_ACT, REMOTE_EXTENSION]
    assert (card.name, card.capabilities.streaming, list(card.supported_interfaces)) == ("test-runner", True, [])


def test_the_front_serves_the_remote_card_with_its_own_interfaces(front: ServerProcess, js: JsRemote) -> None:
    card = httpx.get(f"{front.agent('js')}/.well-known/agent-card.json", timeout=10).json()
    remote = httpx.get(f"{js.url}/.well-known/agent-card.json", timeout=10).json()
    assert (card["name"], card["skills"], card["defaultInputModes"]) == (remote["name"], remote["skills"], remote["defaultInputModes"])
    assert [i["url"] for i in card["supportedInterfaces"]] == [f"{front.agent('js')}/a2a/jsonrpc", f"{front.agent('js')}/a2a/rest"]
    assert [e["uri"] for e in card["capabilities"]["extensions"]] == [WHO_MUST_ACT, REMOTE_EXTENSION]
    assert card["capabilities"]["streaming"] is True
    index = httpx.get(front.url + "/", timeout=10).json()
    assert [agent["name"] for agent in index["agents"]] == ["js", "js-poll"]


def test_a_js_task_completes_through_the_front(front: ServerProcess, js: JsRemote) -> None:
    task = send(front, "js", user_message("count 3", "js-complete-1"))["task"]
    assert (task["status"]["state"], status_text(task)) == ("TASK_STATE_COMPLETED", "Counted to 3")
    assert parts_text(task, "count") == ["1\n", "2\n", "3\n"]
    link = link_of(task)
    assert link["taskId"] != task["id"] and link["url"] == js.url
    assert [e["text"] for e in js.executions(link["taskId"])] == ["count 3"]
    assert js.rpc("GetTask", {"id": link["taskId"]})["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    view = task_status(front.agent("js"), task["id"])
    assert (view["id"], view["agent"], view["status"]["phase"], view["status"]["terminal_reason"]) == (
        task["id"], "js", "terminal", "completed"
    )
    assert get_task(front, "js", task["id"]) == task


def test_a_js_task_streams_through_the_front(front: ServerProcess, js: JsRemote) -> None:
    names, phases = [], []
    task_id = ""
    for frame in stream_frames(front.agent("js"), {"message": user_message("count 4", "js-stream-1")}):
        names.append(frame_name(frame))
        task_id = task_id or frame["task"]["id"]
        phases.append(phase(front.agent("js"), task_id)[0])
    assert names == ["task", "statusUpdate:TASK_STATE_WORKING"] + ["artifactUpdate"] * 4 + ["statusUpdate:TASK_STATE_COMPLETED"]
    assert phases[0] == "processing" and phases[-1] == "terminal"
    assert phases == sorted(phases, key=["processing", "terminal"].index)
    done = get_task(front, "js", task_id)
    assert parts_text(done, "count") == ["1\n", "2\n", "3\n", "4\n"]
    assert len(js.executions(link_of(done)["taskId"])) == 1


def test_a_js_input_request_is_answered_through_the_front(front: ServerProcess, js: JsRemote) -> None:
    asked = send(front, "js", user_message("ask", "js-ask-1"))["task"]
    assert (asked["status"]["state"], status_text(asked)) == ("TASK_STATE_INPUT_REQUIRED", "What is your name?")
    assert phase(front.agent("js"), asked["id"]) == ("idle", None)
    done = send(front, "js", user_message("Ada", "js-ask-2", taskId=asked["id"]))["task"]
    assert (done["id"], done["status"]["state"], status_text(done)) == (asked["id"], "TASK_STATE_COMPLETED", "Hello, Ada")
    assert parts_text(done, "greeting") == ["Hello, Ada"]
    assert link_of(done) == link_of(asked)
    assert [e["text"] for e in js.executions(link_of(done)["taskId"])] == ["ask", "Ada"]
    assert [m["messageId"] for m in done["history"] if m["role"] == "ROLE_USER"] == ["js-ask-1", "js-ask-2"]
    assert phase(front.agent("js"), asked["id"]) == ("terminal", "completed")


def test_a_js_task_is_canceled_through_the_front(front: ServerProcess, js: JsRemote) -> None:
    task = start(front, "js", user_message("count 300", "js-cancel-1"))
    wait_for(lambda: artifact_parts(front, "js", task["id"]) >= 2, what="the count to start")
    assert phase(front.agent("js"), task["id"]) == ("processing", None)
    canceled = rpc(front.agent("js"), "CancelTask", {"id": task["id"]})["result"]
    assert (canceled["status"]["state"], status_text(canceled)) == ("TASK_STATE_CANCELED", "Canceled at the client's request.")
    link = link_of(canceled)
    assert js.rpc("GetTask", {"id": link["taskId"]})["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert phase(front.agent("js"), task["id"]) == ("terminal", "completed")
    counted = artifact_parts(front, "js", task["id"])
    time.sleep(0.5)
    assert artifact_parts(front, "js", task["id"]) == counted < 300
    assert len(js.executions(link["taskId"])) == 1


def test_a_direct_reply_passes_through_the_front(front: ServerProcess) -> None:
    reply = send(front, "js", user_message("hello", "js-reply-1"))
    assert list(reply) == ["message"]
    assert reply["message"]["parts"][0]["text"] == 'I count ("count 5") or greet ("ask").'


def test_a_polled_js_agent_completes_and_answers_through_the_front(front: ServerProcess, js_polled: JsRemote) -> None:
    task = send(front, "js-poll", user_message("count 3", "poll-complete-1"))["task"]
    assert (task["status"]["state"], status_text(task)) == ("TASK_STATE_COMPLETED", "Counted to 3")
    assert parts_text(task, "count") == ["1\n", "2\n", "3\n"]
    assert phase(front.agent("js-poll"), task["id"]) == ("terminal", "completed")
    asked = send(front, "js-poll", user_message("ask", "poll-ask-1"))["task"]
    assert (asked["status"]["state"], phase(front.agent("js-poll"), asked["id"])) == ("TASK_STATE_INPUT_REQUIRED", ("idle", None))
    done = send(front, "js-poll", user_message("Grace", "poll-ask-2", taskId=asked["id"]))["task"]
    assert (done["status"]["state"], status_text(done)) == ("TASK_STATE_COMPLETED", "Hello, Grace")
    assert [e["text"] for e in js_polled.executions(link_of(done)["taskId"])] == ["ask", "Grace"]
    assert len(js_polled.executions(link_of(task)["taskId"])) == 1


def test_a_bridge_task_completes_through_the_front(bridge_front: ServerProcess, remote_bridge: ServerProcess) -> None:
    task = send(bridge_front, "runner", user_message(UNIT_TESTS, "runner-complete-1"))["task"]
    assert (task["status"]["state"], status_text(task)) == ("TASK_STATE_COMPLETED", "1 failed, 11 passed")
    assert [a["artifactId"] for a in task["artifacts"]] == ["test-log", "summary"]
    assert len(task["artifacts"][0]["parts"]) == 5
    remote = get_task(remote_bridge, "test-runner", link_of(task)["taskId"])
    assert remote["artifacts"] == task["artifacts"]
    assert phase(bridge_front.agent("runner"), task["id"]) == ("terminal", "completed")


def test_a_bridge_task_streams_through_the_front(bridge_front: ServerProcess) -> None:
    names, phases = [], []
    task_id = ""
    for frame in stream_frames(bridge_front.agent("runner"), {"message": user_message(UNIT_TESTS, "runner-stream-1")}):
        names.append(frame_name(frame))
        task_id = task_id or frame["task"]["id"]
        phases.append(phase(bridge_front.agent("runner"), task_id)[0])
    assert names == ["task", "statusUpdate:TASK_STATE_WORKING"] + ["artifactUpdate"] * 6 + ["statusUpdate:TASK_STATE_COMPLETED"]
    assert phases[-1] == "terminal"
    assert phases == sorted(phases, key=["processing", "terminal"].index)


def test_a_bridge_input_request_is_answered_through_the_front(bridge_front: ServerProcess, remote_bridge: ServerProcess) -> None:
    asked = send(bridge_front, "reviewer", review_message("review-ask-1", "Review this diff of payments-api"))["task"]
    assert (asked["status"]["state"], status_text(asked)) == ("TASK_STATE_INPUT_REQUIRED", ASK_BASE)
    assert phase(bridge_front.agent("reviewer"), asked["id"]) == ("idle", None)
    done = send(bridge_front, "reviewer", user_message("main", "review-ask-2", taskId=asked["id"]))["task"]
    assert (done["status"]["state"], status_text(done)) == ("TASK_STATE_COMPLETED", "2 findings")
    assert phase(bridge_front.agent("reviewer"), asked["id"]) == ("terminal", "completed")
    remote = get_task(remote_bridge, "code-reviewer", link_of(done)["taskId"])
    forwarded = [m["messageId"] for m in remote["history"] if m["role"] == "ROLE_USER"]
    assert forwarded == [forwarded_id(asked["id"], "review-ask-1"), forwarded_id(asked["id"], "review-ask-2")]


def test_a_bridge_task_is_canceled_through_the_front(bridge_front: ServerProcess, remote_bridge: ServerProcess) -> None:
    task = start(bridge_front, "runner", user_message(FULL_SUITE, "runner-cancel-1"))
    wait_for(lambda: artifact_parts(bridge_front, "runner", task["id"]) >= 1, what="the full suite to start")
    assert phase(bridge_front.agent("runner"), task["id"]) == ("processing", None)
    canceled = rpc(bridge_front.agent("runner"), "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    remote = get_task(remote_bridge, "test-runner", link_of(canceled)["taskId"])
    assert remote["status"]["state"] == "TASK_STATE_CANCELED"
    assert status_text(canceled) == status_text(remote)
    assert phase(bridge_front.agent("runner"), task["id"]) == ("terminal", "completed")


@pytest.mark.parametrize("streaming", [True, False], ids=["subscribed", "polled"])
def test_a_front_killed_mid_turn_follows_the_js_task_without_running_it_again(tmp_path: Path, streaming: bool) -> None:
    with JsRemote(node(), tmp_path / "executions.jsonl", streaming=streaming) as js:
        front = front_of(f"sqlite:///{tmp_path}/front.db", {"js": js.url}).start()
        try:
            task = start(front, "js", user_message("count 60", "js-crash-1"))
            wait_for(lambda: artifact_parts(front, "js", task["id"]) >= 3, what="the count to start")
            front.kill()
            front.start()
            done = wait_state(front, "js", task["id"], "TASK_STATE_COMPLETED")
            assert status_text(done) == "Counted to 60"
            assert parts_text(done, "count") == [f"{i}\n" for i in range(1, 61)]
            assert len(js.executions(link_of(done)["taskId"])) == 1
            assert len(js.executions()) == 1
            assert phase(front.agent("js"), task["id"]) == ("terminal", "completed")
            assert "reconcile_continue" in operations(claim_view(front, "js", task["id"], OPERATOR))
        finally:
            front.stop()


def test_a_front_killed_mid_turn_follows_the_bridge_task_without_running_it_again(tmp_path: Path) -> None:
    remote = ServerProcess("memory", pace=0.4).start()
    front = front_of(f"sqlite:///{tmp_path}/front.db", {"runner": remote.agent("test-runner")}).start()
    try:
        task = start(front, "runner", user_message(FULL_SUITE, "runner-crash-1"))
        wait_for(lambda: artifact_parts(front, "runner", task["id"]) >= 1, what="the full suite to start")
        front.kill()
        front.start()
        done = wait_state(front, "runner", task["id"], "TASK_STATE_COMPLETED")
        remote_id = link_of(done)["taskId"]
        finished = get_task(remote, "test-runner", remote_id)
        assert done["artifacts"] == finished["artifacts"]
        assert status_text(done) == status_text(finished)
        view = claim_view(remote, "test-runner", remote_id, OPERATOR)
        assert (view["claim_generation"], operations(view).count("claim")) == (1, 1)
        assert "resume" not in operations(view)
        assert len([m for m in finished["history"] if m["role"] == "ROLE_USER"]) == 1
        assert phase(front.agent("runner"), task["id"]) == ("terminal", "completed")
    finally:
        front.stop()
        remote.stop()


def test_a_remote_stopped_mid_turn_fails_the_task_within_the_timeout(tmp_path: Path) -> None:
    with JsRemote(node(), tmp_path / "executions.jsonl") as js:
        front = front_of(f"sqlite:///{tmp_path}/front.db", {"js": js.url}, timeout=TIMEOUT).start()
        try:
            task = start(front, "js", user_message("count 500", "js-stop-1"))
            wait_for(lambda: artifact_parts(front, "js", task["id"]) >= 2, what="the count to start")
            js.kill()
            stopped = time.monotonic()
            failed = wait_state(front, "js", task["id"], "TASK_STATE_FAILED", timeout=TIMEOUT + 10)
            assert time.monotonic() - stopped < TIMEOUT + 2
            assert status_text(failed) == (
                "The remote agent js is unreachable: the connection could not be made (retried for 2 s)."
            )
            assert phase(front.agent("js"), task["id"]) == ("terminal", "errored")
            new = send(front, "js", user_message("count 3", "js-stop-2"))["task"]
            assert new["status"]["state"] == "TASK_STATE_FAILED"
            assert status_text(new).startswith("The remote agent js is unreachable: the connection could not be made")
        finally:
            front.stop()


def test_a_remote_task_that_vanished_fails_the_task(tmp_path: Path) -> None:
    with JsRemote(node(), tmp_path / "executions.jsonl") as js:
        front = front_of(f"sqlite:///{tmp_path}/front.db", {"js": js.url}, timeout=TIMEOUT).start()
        try:
            asked = send(front, "js", user_message("ask", "js-vanish-1"))["task"]
            js.kill()
            js.start()
            failed = send(front, "js", user_message("Ada", "js-vanish-2", taskId=asked["id"]))["task"]
            assert failed["status"]["state"] == "TASK_STATE_FAILED"
            assert status_text(failed) == (
                f"The remote agent js no longer has task {link_of(asked)['taskId']}: the remote task vanished, "
                "and with it the work of this turn."
            )
            assert phase(front.agent("js"), asked["id"]) == ("terminal", "errored")
        finally:
            front.stop()


def test_a_cancel_the_remote_cannot_confirm_still_cancels_and_says_so(tmp_path: Path) -> None:
    with JsRemote(node(), tmp_path / "executions.jsonl") as js:
        front = front_of(f"sqlite:///{tmp_path}/front.db", {"js": js.url}, timeout=TIMEOUT).start()
        try:
            asked = send(front, "js", user_message("ask", "js-unconfirmed-1"))["task"]
            js.kill()
            canceled = rpc(front.agent("js"), "CancelTask", {"id": asked["id"]})["result"]
            assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
            assert status_text(canceled) == (
                "Canceled at the client's request; the remote agent js did not confirm the cancel: "
                "the connection could not be made."
            )
            assert phase(front.agent("js"), asked["id"]) == ("terminal", "completed")
        finally:
            front.stop()


def test_the_configuration_file_names_remote_agents(tmp_path: Path, remote_bridge: ServerProcess) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(f'[remote]\ntimeout = 7\n\n[remote.agents]\nrunner = "{remote_bridge.agent("test-runner")}"\n')
    assert file_remotes(config) == ([("runner", remote_bridge.agent("test-runner"))], 7.0)
    front = ServerProcess(f"sqlite:///{tmp_path}/front.db", extra=["--config", str(config)]).start()
    try:
        task = send(front, "runner", user_message(UNIT_TESTS, "config-run-1"))["task"]
        assert (task["status"]["state"], status_text(task)) == ("TASK_STATE_COMPLETED", "1 failed, 11 passed")
        assert link_of(task)["url"] == remote_bridge.agent("test-runner")
    finally:
        front.stop()
    config.write_text('[remote]\nagents = { "Bad Name" = "http://127.0.0.1:9" }\n')
    with pytest.raises(ConfigError, match=r"\[remote\]: expected NAME=URL"):
        file_remotes(config)


def test_serve_does_not_start_without_the_remote_card() -> None:
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "serve", "--port", str(free_port()), "--store", "memory",
         "--remote", f"gone=http://127.0.0.1:{port}", "--remote-timeout", "1"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert f"no card from the remote agent gone at http://127.0.0.1:{port}: the connection could not be made" in proc.stderr
    clash = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "serve", "--port", str(free_port()), "--store", "memory",
         "--agent", "test-runner", "--remote", f"test-runner=http://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )
    assert clash.returncode != 0
    assert "a remote agent's name is already served: test-runner" in clash.stderr


class Recording(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the server's `card` (JSON) and records every request's path."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = json.dumps(self.server.card).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *_: Any) -> None:
        pass


@contextlib.contextmanager
def recording(host: str, card: dict[str, Any]) -> Iterator[http.server.ThreadingHTTPServer]:
    """A server on `host` that serves `card` and records what it is asked; stopped afterwards."""
    server = http.server.ThreadingHTTPServer((host, 0), Recording)
    server.paths = []  # type: ignore[attr-defined]
    server.card = card  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def card_naming(*urls: str) -> dict[str, Any]:
    return {
        "name": "hostile", "description": "Names where turns go.", "version": "1.0.0",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"} for url in urls],
        "capabilities": {"streaming": False}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "x", "name": "x", "description": "x", "tags": ["x"]}],
    }


def test_a_remote_card_that_names_another_origin_is_refused_and_nothing_is_sent_there() -> None:
    with recording("127.0.0.2", {}) as internal:
        admin = f"http://127.0.0.2:{internal.server_address[1]}/internal-admin/api"
        with recording("127.0.0.1", card_naming(admin)) as remote:
            configured = f"http://127.0.0.1:{remote.server_address[1]}"
            proc = subprocess.run(
                [sys.executable, "-m", "a2a_bridge", "serve", "--port", str(free_port()), "--store", "memory",
                 "--remote", f"hostile={configured}", "--remote-timeout", "5"],
                capture_output=True, text=True, timeout=60,
            )
        assert internal.paths == []  # type: ignore[attr-defined]
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.startswith("a2a-bridge serve:")] == [
        f"a2a-bridge serve: the remote agent hostile's card names no interface at {configured}, where it is "
        f"configured (it names http://127.0.0.2:{internal.server_address[1]}); a fronted agent is reached only at its "
        "configured origin"
    ]


def test_a_remote_card_keeps_only_its_interfaces_at_the_configured_origin() -> None:
    card = ParseDict(card_naming("http://127.0.0.2:9/internal-admin/api", "http://LOCALHOST:80/a2a/jsonrpc",
                                 "http://user@localhost/a2a", "http://localhost:81/a2a"), AgentCard())
    kept = pinned("hostile", "http://localhost/", card)
    assert [interface.url for interface in kept.supported_interfaces] == ["http://LOCALHOST:80/a2a/jsonrpc"]
    assert len(card.supported_interfaces) == 4, "the fetched card is left as it was"
