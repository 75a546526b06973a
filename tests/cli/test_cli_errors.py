"""The command line's bad input: each mistake a newcomer met is one line on stderr and exit status 2, never a
traceback; and every option's help says what it does and its default."""

import argparse
import asyncio
import errno
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2a_bridge.capture.kit import KIT_PORTS
from a2a_bridge.cli.main import parser
from a2a_bridge.cli.preflight import CannotStart, check_store
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.support import free_port


def a2a_bridge(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "a2a_bridge", *args], capture_output=True, text=True, timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"},
    )


def one_line_exit_2(done: subprocess.CompletedProcess[str]) -> str:
    """The one line the command wrote on stderr, having exited 2 without a traceback."""
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["serve", "--store", "mysql://x/y"], "argument --store: unsupported store 'mysql://x/y'"),
        (["serve", "--port", "99999"], "argument --port: expected a port number from 0 to 65535, got 99999"),
        (["serve", "--grpc-port", "-1"], "argument --grpc-port: expected a port number"),
        (["serve", "--pace", "-1"], "argument --pace: expected 0 or a positive number of seconds, got -1"),
        (["serve", "--lease", "0"], "argument --lease: expected a positive number of seconds, got 0"),
        (["serve", "--idle-lifespan", "-5"], "argument --idle-lifespan: expected a positive number of seconds, got -5"),
        (["serve", "--lease", "nan"], "argument --lease: expected a number of seconds, got 'nan'"),
        (["serve", "--remote-timeout", "0"], "argument --remote-timeout: expected a positive number of seconds"),
        (["serve", "--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
        (["serve", "--agent", "nobody"], "--agent nobody: expected one of test-runner, code-reviewer, deployer"),
        (["serve", "--store", "memory", "--limit", "max_parts=0"], "max_parts must be a positive integer"),
        (["tasks", "--limit", "0"], "argument --limit: expected a whole number from 1, got 0"),
        (["plan", "--approval-timeout", "-1"], "argument --approval-timeout: expected a positive number of seconds"),
        (["replay", "--deadline", "0", "x.http"], "argument --deadline: expected a positive number of seconds, got 0"),
        (["plan", "--url", "http://127.0.0.1:99999"], "argument --url: 'http://127.0.0.1:99999' is not a URL with a valid"),
        (["tasks", "--url", "ftp://x"], "argument --url: expected an http:// or https:// URL with a host"),
        (["capture", "--out", __file__], "argument --out:"),
        (["nonsense"], "argument command: invalid choice: 'nonsense'"),
    ],
)
def test_a_nonsense_value_is_one_argparse_line(args: list[str], said: str) -> None:
    assert said in one_line_exit_2(a2a_bridge(*args))


def test_a_store_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "x.db"
    line = one_line_exit_2(a2a_bridge("serve", "--port", str(free_port()), "--store", f"sqlite:///{missing}"))
    assert line == f"a2a-bridge serve: cannot open the store sqlite:///{missing}: unable to open database file"
    assert not missing.parent.exists()


def test_a_store_that_does_not_open_leaves_no_sqlite_thread_behind(tmp_path: Path) -> None:
    """aiosqlite's worker thread of a connection that did not open has ended by the time the check refuses the store,
    so that it never reports to an event loop closed meanwhile (the "Event loop is closed" traceback beside the
    one-line error of `serve`, in about a third of the runs): left running in each of 20 runs before the fix."""

    async def refused() -> list[threading.Thread]:
        stores = Stores(StoreConfig.parse(f"sqlite:///{tmp_path / 'missing' / 'x.db'}"))
        try:
            with pytest.raises(CannotStart, match="unable to open database file"):
                await check_store(stores)
            return [thread for thread in threading.enumerate() if "_connection_worker_thread" in thread.name]
        finally:
            await stores.close()

    for _ in range(20):
        assert asyncio.run(refused()) == []


def test_an_unreachable_postgresql_is_one_line_without_its_password() -> None:
    port = free_port()
    line = one_line_exit_2(a2a_bridge("serve", "--port", str(free_port()), "--store", f"postgresql://u:hunter2@127.0.0.1:{port}/db"))
    assert line.startswith(f"a2a-bridge serve: cannot open the store postgresql://u:***@127.0.0.1:{port}/db: "), line
    assert "hunter2" not in line


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A free port, held by a listening socket during the test."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def taken_kit_port() -> Iterator[int]:
    """code-reviewer's kit port, held by a listening socket during the test, or already taken by another process (a
    `make run ARGS=--kit-ports` beside the tests), which takes it as well: the one fixed port a test binds."""
    port = KIT_PORTS["code-reviewer"]
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
        holder.listen()
    except OSError as error:
        assert error.errno == errno.EADDRINUSE
    try:
        yield port
    finally:
        holder.close()


def test_a_taken_kit_port_is_one_line(taken_kit_port: int) -> None:
    """Only code-reviewer is served, so that no other kit port is tried."""
    done = a2a_bridge("serve", "--port", str(free_port()), "--store", "memory", "--agent", "code-reviewer", "--kit-ports")
    line = one_line_exit_2(done)
    assert line == f"a2a-bridge serve: cannot listen on 127.0.0.1:{taken_kit_port} (code-reviewer's kit port): Address already in use"


def test_a_taken_port_is_one_line(taken_port: int) -> None:
    line = one_line_exit_2(a2a_bridge("serve", "--port", str(taken_port), "--store", "memory"))
    assert line == f"a2a-bridge serve: cannot listen on 127.0.0.1:{taken_port} (--port): Address already in use"


def test_grpc_ports_that_cannot_be_had_are_one_line(taken_port: int) -> None:
    """Every agent's gRPC port is counted before any is tried, so the one past 65535 is told without binding 65534."""
    port = free_port()
    line = one_line_exit_2(a2a_bridge("serve", "--store", "memory", "--port", str(port), "--grpc-port", str(port)))
    assert line == f"a2a-bridge serve: --grpc-port: one port per agent from it on takes {port}, an HTTP port"
    past = one_line_exit_2(a2a_bridge("serve", "--store", "memory", "--port", str(port), "--grpc-port", "65534"))
    assert past == "a2a-bridge serve: --grpc-port: one port per agent from it on passes 65535 (65536)"
    taken = one_line_exit_2(
        a2a_bridge("serve", "--store", "memory", "--port", str(port), "--agent", "code-reviewer", "--grpc-port", str(taken_port))
    )
    assert taken == f"a2a-bridge serve: cannot listen on 127.0.0.1:{taken_port} (code-reviewer's gRPC port): Address already in use"


def test_an_unknown_host_is_one_line() -> None:
    line = one_line_exit_2(a2a_bridge("serve", "--host", "no-such-host.invalid", "--port", str(free_port()), "--store", "memory"))
    assert line.startswith("a2a-bridge serve: cannot listen on no-such-host.invalid (--port): "), line


def test_plan_against_no_server_is_one_line() -> None:
    done = a2a_bridge("plan", "--url", "http://127.0.0.1:1")
    line = one_line_exit_2(done)
    assert line.startswith("a2a-bridge plan: ") and "http://127.0.0.1:1/test-runner/.well-known/agent-card.json" in line
    assert done.stdout == ""


def test_replay_checks_the_junit_file_before_the_run(tmp_path: Path) -> None:
    transcript = tmp_path / "never-read.http"
    junit = tmp_path / "missing" / "x.xml"
    line = one_line_exit_2(a2a_bridge("replay", str(transcript), "--junit", str(junit)))
    assert line.startswith(f"a2a-bridge replay: error: argument --junit: cannot write {junit}: the folder"), line
    assert "is a folder" in one_line_exit_2(a2a_bridge("replay", str(transcript), "--junit", str(tmp_path)))


def test_a_deploy_ledger_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    line = one_line_exit_2(a2a_bridge("serve", "--store", "memory", "--deploy-ledger", str(tmp_path / "missing" / "l")))
    assert "argument --deploy-ledger: cannot write" in line


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [commands] = [action for action in parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(commands.choices)


def test_every_option_has_help_and_help_shows_defaults() -> None:
    for name, command in subcommands().items():
        for action in command._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help"
    serve = a2a_bridge("serve", "--help")
    assert serve.returncode == 0
    text = " ".join(serve.stdout.split())
    for shown in ("(default: 127.0.0.1)", "(default: 8000)", "(default: info)", "(default: 0.25)", "(default: 300.0)",
                  "(default: sqlite:///./a2a-bridge.db)", "the least severe log lines shown"):
        assert shown in text, shown
    assert "bench" not in serve.stdout
    reconcile = " ".join(a2a_bridge("reconcile", "--help").stdout.split())
    assert "--outcome {completed,cancelled,continue,uncertain}" in reconcile and "what became of the work" in reconcile
    tasks = " ".join(a2a_bridge("tasks", "--help").stdout.split())
    assert "(default: 50)" in tasks and "(default: $A2A_BRIDGE_URL, else http://127.0.0.1:8000)" in tasks


def test_the_benchmark_agent_is_served_though_not_offered() -> None:
    assert parser().parse_args(["serve", "--agent", "bench"]).agents == ["bench"]
