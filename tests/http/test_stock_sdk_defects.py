"""SDK defects the bridge fixes: one executor and one exchange, run on the stock a2a-sdk server (a strict xfail that
expects the correct behaviour) and on the bridge (which must pass)."""

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.server.agent_execution import AgentExecutor

from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.stock_sdk import SECRET, AskThenAnswer, RaiseAfterWorking, card, stock_app
from tests.support import rpc, rpc_stream, serve_in_thread, user_message

# The SDK builds each custom-named table model from a class statement named TaskModel, which SQLAlchemy warns about.
pytestmark = pytest.mark.filterwarnings("ignore:This declarative base already contains a class:sqlalchemy.exc.SAWarning")

DEFECT_2 = (
    "a2a-sdk 1.3 defect 2: a follow-up with taskId and no contextId after a restart fails with -32602 "
    "and marks the task FAILED (the request context draws a new context id before reading the stored task)"
)
DEFECT_5 = "a2a-sdk 1.3 defect 5: an exception in execute() reaches the client as -32603 with its text and no task id"


class StockDefect(AssertionError):
    """The server showed the defect: the only failure the strict xfails accept, so a broken setup still fails."""


def expect(condition: bool, description: str) -> None:
    """Assert the correct behaviour, failing with StockDefect."""
    if not condition:
        raise StockDefect(description)


def servers(defect: str) -> list[object]:
    """The stock server, expected to show the defect, and the bridge, expected not to."""
    stock = pytest.param(
        "stock", marks=[pytest.mark.stock_sdk, pytest.mark.xfail(strict=True, raises=StockDefect, reason=defect)]
    )
    return [stock, "bridge"]


@contextlib.contextmanager
def serve(kind: str, executor: AgentExecutor, sqlite_path: Path | None = None) -> Iterator[str]:
    """One agent on the stock server or the bridge, in memory or on a SQLite file; yields the agent's base URL."""
    if kind == "stock":
        with serve_in_thread(stock_app(executor, sqlite_path)) as base:
            yield base
        return
    store = f"sqlite:///{sqlite_path}" if sqlite_path is not None else "memory"
    name = type(executor).__name__.lower()
    bridge = Bridge([AgentSpec(name, card(name), executor)], Stores(StoreConfig.parse(store)), SystemClock(), lambda: str(uuid.uuid4()))
    with serve_in_thread(bridge.app()) as base:
        yield f"{base}/{name}"


def ask_then_restart(kind: str, db: Path) -> dict:
    """Leave a task INPUT_REQUIRED on a server over SQLite and stop that server; returns the task."""
    with serve(kind, AskThenAnswer(), db) as base:
        reply = rpc(base, "SendMessage", {"message": user_message("Review my diff", "ask-1")})
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


@pytest.mark.parametrize("kind", servers(DEFECT_2))
def test_follow_up_without_context_id_after_restart_completes(kind: str, tmp_path: Path) -> None:
    task = ask_then_restart(kind, tmp_path / "store.db")
    with serve(kind, AskThenAnswer(), tmp_path / "store.db") as base:
        reply = rpc(base, "SendMessage", {"message": user_message("main", "ask-2", taskId=task["id"])})
    expect("error" not in reply, f"the follow-up was refused: {reply.get('error')}")
    expect(reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", "the follow-up did not complete the task")
    expect(reply["result"]["task"]["contextId"] == task["contextId"], "the reply changed the task's contextId")


@pytest.mark.parametrize("kind", servers(DEFECT_2))
def test_follow_up_without_context_id_after_restart_does_not_fail_the_task(kind: str, tmp_path: Path) -> None:
    task = ask_then_restart(kind, tmp_path / "store.db")
    with serve(kind, AskThenAnswer(), tmp_path / "store.db") as base:
        rpc(base, "SendMessage", {"message": user_message("main", "ask-2", taskId=task["id"])})
        stored = rpc(base, "GetTask", {"id": task["id"]})["result"]
    expect(stored["status"]["state"] != "TASK_STATE_FAILED", "the follow-up failed the task")


def error_info(error: dict) -> dict:
    """The metadata of the google.rpc.ErrorInfo detail of a JSON-RPC error (empty when there is none)."""
    for detail in error.get("data") or []:
        if detail.get("@type") == "type.googleapis.com/google.rpc.ErrorInfo":
            return detail.get("metadata") or {}
    return {}


def raise_blocking(kind: str) -> dict:
    """The JSON-RPC error a blocking SendMessage gets from an agent that raises after WORKING."""
    with serve(kind, RaiseAfterWorking()) as base:
        reply = rpc(base, "SendMessage", {"message": user_message("Do the thing", "raise-1")})
    assert reply["error"]["code"] == -32603
    return reply["error"]


@pytest.mark.parametrize("kind", servers(DEFECT_5))
def test_agent_exception_text_stays_on_the_server(kind: str) -> None:
    error = raise_blocking(kind)
    expect(SECRET not in str(error), f"the exception text reached the client: {error}")


@pytest.mark.parametrize("kind", servers(DEFECT_5))
def test_agent_exception_error_names_the_task(kind: str) -> None:
    error = raise_blocking(kind)
    expect(bool(error_info(error).get("taskId")), f"the error does not name the task: {error}")


@pytest.mark.parametrize("kind", servers(DEFECT_5))
def test_streamed_agent_exception_text_stays_on_the_server(kind: str) -> None:
    with serve(kind, RaiseAfterWorking()) as base:
        frames = rpc_stream(base, "SendStreamingMessage", {"message": user_message("Do the thing", "raise-2")})
    errors = [frame["error"] for frame in frames if "error" in frame]
    assert errors and errors[-1]["code"] == -32603
    expect(SECRET not in str(errors), f"the exception text reached the client: {errors}")
