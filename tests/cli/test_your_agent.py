"""`serve --agent MODULE:ATTRIBUTE` (docs/your-agent.md) through the wire: examples/hello_agent.py and an unchanged
SDK executor behind a factory, served by the console script from the checkout beside a built-in agent; each way a
reference can fail, one line and exit 2; and what a crash mid-turn does to a repeat-safe agent's task and to
another's."""

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext

from a2a_bridge import Agent, open_window, resume_signal
from a2a_bridge.agents.catalog import DOCUMENTED_AGENTS
from a2a_bridge.cli.agent_loading import AgentLoadError
from a2a_bridge.cli.main import chosen_agents, parser
from a2a_bridge.core.task_status import WHO_MUST_ACT
from tests.claim_support import RECONCILE_TEXT, claim_view, operations, reconcile, start, status_text, stored_claim_view, wait_state
from tests.support import A2A, CONSOLE_SCRIPT, ServerProcess, rpc, rpc_stream, user_message, wait_for
from tests.user_agents import RUNS, runs, steady

ROOT = Path(__file__).resolve().parents[2]
SERVED = ["examples.hello_agent:agent", "test-runner", "examples.wrapped_agent:make_agent"]


def agents(*references: str) -> list[str]:
    return [argument for reference in references for argument in ("--agent", reference)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The console script, run in the checkout, serving hello, test-runner and echo."""
    store = tmp_path_factory.mktemp("your-agent") / "b.db"
    process = ServerProcess(f"sqlite:///{store}", extra=agents(*SERVED), command=[str(CONSOLE_SCRIPT)], cwd=ROOT)
    process.start()
    yield process
    process.stop()


def rest(server: ServerProcess, agent: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.request(method, f"{server.agent(agent)}/a2a/rest{path}", json=body, headers=A2A, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def task_status(server: ServerProcess, agent: str, task_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server.agent(agent)}/tasks/{task_id}/status", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def texts(task: dict[str, Any]) -> list[str]:
    return [part["text"] for artifact in task.get("artifacts", []) for part in artifact["parts"] if "text" in part]


def test_the_index_lists_the_agents_in_the_order_named(server: ServerProcess) -> None:
    index = httpx.get(f"{server.url}/", timeout=10).json()
    assert [agent["name"] for agent in index["agents"]] == ["hello", "test-runner", "echo"]
    assert httpx.get(f"{server.agent('test-runner')}/.well-known/agent-card.json", timeout=10).json()["name"] == "test-runner"


def test_hello_has_its_card_with_the_bridges_interfaces(server: ServerProcess) -> None:
    card = httpx.get(f"{server.agent('hello')}/.well-known/agent-card.json", timeout=10).json()
    assert (card["name"], card["version"]) == ("hello", "1.0.0")
    assert [skill["id"] for skill in card["skills"]] == ["greet"]
    assert [e["uri"] for e in card["capabilities"]["extensions"]] == [WHO_MUST_ACT]
    assert {(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]} == {
        ("JSONRPC", f"{server.agent('hello')}/a2a/jsonrpc"),
        ("HTTP+JSON", f"{server.agent('hello')}/a2a/rest"),
    }


def test_hello_greets_over_json_rpc_under_an_operation_window(server: ServerProcess) -> None:
    reply = rpc(server.agent("hello"), "SendMessage", {"message": user_message("Ada", "hello-rpc-1")})
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(task) == ["Hello, Ada!"]
    status = task_status(server, "hello", task["id"])
    assert (status["agent"], status["status"]["phase"], status["status"]["terminal_reason"]) == ("hello", "terminal", "completed")
    view = stored_claim_view(server, "hello", task["id"])
    assert operations(view) == ["create", "claim", "open_window", "complete"]
    assert view["events"][2]["evidence"] == {"stage": "compose", "seconds": 120}


def test_hello_greets_over_http_json(server: ServerProcess) -> None:
    task = rest(server, "hello", "POST", "/message:send", {"message": user_message("Grace", "hello-rest-1")})["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(rest(server, "hello", "GET", f"/tasks/{task['id']}")) == ["Hello, Grace!"]


def test_hello_waits_for_the_users_review(server: ServerProcess) -> None:
    task = rpc(server.agent("hello"), "SendMessage", {"message": user_message("Bob, ask me first", "hello-review-1")})["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert task["status"]["message"]["metadata"][WHO_MUST_ACT] == {"actor": "user", "action": "review"}
    assert [n["kind"] for n in task_status(server, "hello", task["id"])["status"]["notifications"]] == ["review_required"]

    answer = httpx.post(f"{server.agent('hello')}/tasks/{task['id']}/review", json={"decision": "post"}, timeout=10)
    assert answer.json() == {"taskId": task["id"], "decision": "post", "signal": "review:post"}
    done = wait_state(server, "hello", task["id"], "TASK_STATE_COMPLETED")
    assert texts(done) == ["Hello, Bob!"]
    assert task_status(server, "hello", task["id"])["status"]["notifications"] == []


def test_an_unchanged_sdk_executor_behind_a_factory(server: ServerProcess) -> None:
    assert "a2a_bridge" not in (ROOT / "examples" / "sdk_executor.py").read_text()
    card = httpx.get(f"{server.agent('echo')}/.well-known/agent-card.json", timeout=10).json()
    assert card["name"] == "echo"
    task = rpc(server.agent("echo"), "SendMessage", {"message": user_message("ping", "echo-rpc-1")})["result"]["task"]
    assert (task["status"]["state"], texts(task)) == ("TASK_STATE_COMPLETED", ["ping"])
    frames = rpc_stream(server.agent("echo"), "SendStreamingMessage", {"message": user_message("pong", "echo-sse-1")})
    assert frames[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    streamed = rest(server, "echo", "GET", f"/tasks/{frames[0]['result']['task']['id']}")
    assert texts(streamed) == ["pong"]
    assert task_status(server, "echo", task["id"])["status"]["terminal_reason"] == "completed"


def test_outside_the_bridge_the_helpers_do_nothing() -> None:
    """An executor that uses them still runs under the SDK's own server or in a unit test."""
    context = RequestContext(ServerCallContext())
    assert resume_signal(context) is None
    assert asyncio.run(open_window(context, "compose", 60)) is None


def test_an_agent_is_checked_when_it_is_described() -> None:
    card, executor = steady.card, steady.executor
    with pytest.raises(ValueError, match="agent name 'Hello World'"):
        Agent("Hello World", card, executor)
    with pytest.raises(TypeError, match="card is a dict"):
        Agent("hello", {"name": "hello"}, executor)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="executor is a function"):
        Agent("hello", card, lambda: None)  # type: ignore[arg-type]
    assert Agent("hello", card, executor).safe_to_repeat
    assert not Agent("hello", card, executor, repeat_safe=False).safe_to_repeat


BROKEN_MODULES = {
    "your_agent_raises.py": 'raise RuntimeError("no credentials\\nfor the model")\n',
    "your_agent_syntax.py": "def agent(:\n",
    "your_agent_needs.py": "import no_such_dependency_of_yours\n",
    "your_agent_values.py": (
        "from a2a_bridge import Agent\n"
        "from tests.user_agents import steady\n"
        "agent = 42\n"
        "twin = Agent('steady', steady.card, steady.executor)\n"
        "def failing() -> Agent:\n    raise ValueError('card missing')\n"
        "def wrong() -> str:\n    return 'an agent'\n"
        "def needs_arguments(name: str) -> Agent:\n    raise AssertionError\n"
    ),
}
REFUSALS = [
    ("nowhere:agent", "no module named 'nowhere' (looked in {cwd} and the import path)"),
    ("your_agent_raises:agent", "module 'your_agent_raises' did not import: RuntimeError: no credentials for the model"),
    ("your_agent_syntax:agent", "module 'your_agent_syntax' did not import: SyntaxError: invalid syntax (your_agent_syntax.py, line 1)"),
    (
        "your_agent_needs:agent",
        "module 'your_agent_needs' did not import: ModuleNotFoundError: No module named 'no_such_dependency_of_yours'",
    ),
    ("your_agent_values:missing", "module 'your_agent_values' has no attribute 'missing'"),
    ("your_agent_values:agent", "a value of type int, not an a2a_bridge.Agent or a function returning one"),
    ("your_agent_values:failing", "the factory raised ValueError: card missing"),
    ("your_agent_values:wrong", "the factory returned a value of type str, not an a2a_bridge.Agent"),
    ("your_agent_values:needs_arguments", "a factory is called with no arguments, and this one needs some"),
    ("examples.sdk_executor:EchoExecutor", "an AgentExecutor, not an agent; serve a2a_bridge.Agent(name, card, executor) (docs/your-agent.md)"),
    ("your_agent_values", f"expected one of {', '.join(DOCUMENTED_AGENTS)}, or MODULE:ATTRIBUTE naming your agent"),
    ("your_agent_values:", "expected MODULE:ATTRIBUTE, e.g. examples.hello_agent:agent"),
]


@pytest.fixture
def in_broken_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The broken modules in the current directory, which the loader puts on the import path; the checkout there too
    (for `examples`), as when running from it. Imported modules and the path are put back afterwards."""
    for name, source in BROKEN_MODULES.items():
        (tmp_path / name).write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("your_agent_"):
            del sys.modules[name]


@pytest.mark.parametrize(("reference", "said"), REFUSALS)
def test_a_reference_that_cannot_be_served_says_why_in_one_line(in_broken_directory: Path, reference: str, said: str) -> None:
    args = parser().parse_args(["serve", "--agent", "test-runner", "--agent", reference])
    with pytest.raises(AgentLoadError) as refused:
        chosen_agents(args, remotes=False)
    assert str(refused.value) == f"--agent {reference}: {said.format(cwd=in_broken_directory)}"


def test_two_agents_of_one_name_are_refused(in_broken_directory: Path) -> None:
    args = parser().parse_args(["serve", *agents("tests.user_agents:steady", "your_agent_values:twin")])
    with pytest.raises(AgentLoadError) as refused:
        chosen_agents(args, remotes=False)
    assert str(refused.value) == "--agent: two agents are named steady; each agent needs a name of its own"


@pytest.mark.parametrize("reference", ["your_agent_raises:agent", "your_agent_values:failing", "nowhere:agent"])
def test_the_command_prints_the_refusal_alone_and_exits_2(tmp_path: Path, reference: str) -> None:
    for name, source in BROKEN_MODULES.items():
        (tmp_path / name).write_text(source)
    run = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--store", "memory", "--agent", "test-runner", "--agent", reference],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.startswith(f"a2a-bridge serve: --agent {reference}: ")
    assert run.stderr.count("\n") == 1 and run.stderr.endswith("\n"), run.stderr


def test_a_factory_in_the_current_directory_outside_the_checkout(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "from examples.wrapped_agent import make_agent\n"
        "def agent():\n    made = make_agent()\n    made.name = 'mine'\n    return made\n"
    )
    server = ServerProcess(
        "memory", extra=agents("mine:agent"), command=[str(CONSOLE_SCRIPT)], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}
    ).start()
    try:
        task = rpc(server.agent("mine"), "SendMessage", {"message": user_message("mine", "mine-1")})["result"]["task"]
        assert texts(task) == ["mine"]
    finally:
        server.stop()


def run_started(path: Path, task_id: str) -> bool:
    return runs(path, task_id) == 1


def test_a_crash_mid_turn_repeats_a_repeat_safe_turn_and_holds_the_other_for_an_operator(tmp_path: Path) -> None:
    notes = tmp_path / "runs.txt"
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'b.db'}",
        extra=agents("tests.user_agents:steady", "tests.user_agents:once"),
        command=[str(CONSOLE_SCRIPT)],
        cwd=ROOT,
        env={RUNS: str(notes)},
    ).start()
    try:
        steady = start(server, "steady", user_message("work", "crash-steady-1"))["id"]
        once = start(server, "once", user_message("work", "crash-once-1"))["id"]
        for agent, task_id in (("steady", steady), ("once", once)):
            wait_for(lambda t=task_id: run_started(notes, t), what=f"{agent}'s first run")
            assert stored_claim_view(server, agent, task_id)["state"] == "claimed"
        server.kill()
        server.start()

        done = wait_state(server, "steady", steady, "TASK_STATE_COMPLETED")
        assert (texts(done), runs(notes, steady)) == (["run 2"], 2)
        ops = operations(stored_claim_view(server, "steady", steady))
        assert ops[ops.index("invalidate") + 1] == "reconcile_continue", ops

        held = wait_state(server, "once", once, "TASK_STATE_AUTH_REQUIRED")
        assert status_text(held) == RECONCILE_TEXT
        assert held["status"]["message"]["metadata"][WHO_MUST_ACT] == {"actor": "operator", "action": "reconcile"}
        assert claim_view(server, "once", once)["state"] == "needs_reconciliation"
        assert runs(notes, once) == 1
        assert task_status(server, "once", once)["status"]["notifications"] == []

        answer = reconcile(server, "once", once, {"outcome": "continue", "evidence": {"checked_by": "ops"}})
        assert answer.status_code == 200, answer.text
        done = wait_state(server, "once", once, "TASK_STATE_COMPLETED")
        assert (texts(done), runs(notes, once)) == (["run 2"], 2)
    finally:
        server.stop()


def test_a_module_in_the_current_directory_never_shadows_the_servers_own(tmp_path: Path) -> None:
    """`uvloop.py` beside the user's agent: the server imports the installed uvloop (the file there is never run)."""
    ran = tmp_path / "shadow-ran"
    (tmp_path / "uvloop.py").write_text(f"open({str(ran)!r}, 'w').close()\nraise ImportError('shadowed')\n")
    (tmp_path / "mine.py").write_text(
        "from examples.wrapped_agent import make_agent\n"
        "def agent():\n    made = make_agent()\n    made.name = 'mine'\n    return made\n"
    )
    for command in ([str(CONSOLE_SCRIPT)], [sys.executable, "-m", "a2a_bridge"]):
        server = ServerProcess(
            "memory", extra=agents("mine:agent"), command=command, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}
        ).start()
        try:
            task = rpc(server.agent("mine"), "SendMessage", {"message": user_message("mine", "mine-1")})["result"]["task"]
            assert texts(task) == ["mine"]
        finally:
            server.stop()
        assert not ran.exists(), command


def test_an_agent_module_named_as_an_installed_one_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "uvloop.py").write_text("agent = None\n")
    run = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--store", "memory", "--agent", "uvloop:agent"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 2
    assert re.fullmatch(
        rf"a2a-bridge serve: --agent uvloop:agent: 'uvloop' in {re.escape(str(tmp_path))} has the name of an installed "
        r"module \(.+\), which the server imports first; rename yours\n", run.stderr
    ), run.stderr
