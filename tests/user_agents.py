"""A user's own agents, served with `serve --agent tests.user_agents:NAME` by tests/cli/test_your_agent.py: `steady`
(repeat-safe, an `Agent`) and `once` (not repeat-safe, a factory); and by tests/tasks/test_replica_races.py `dies_at_cancel`
(repeat-safe), whose cancel() kills its own server; by tests/tasks/test_stream_ends.py `cleans_up`, whose cancel() reports an
artifact before the cancel. The first run of a task waits to be killed; a later run completes
at once. Each run is a line (the task id) in the file `$USER_AGENT_RUNS`. And by tests/tasks/test_agent_errors.py
`raising`, which raises from a function of its own (`fail`) at once, or in a task's second turn."""

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part

from a2a_bridge import Agent

RUNS = "USER_AGENT_RUNS"
FIRST_RUN_WAIT = 60.0
"""The longest a task's first run waits for the test to kill the server."""


def runs(path: Path, task_id: str) -> int:
    """How many runs of a task have started."""
    return path.read_text().split().count(task_id) if path.exists() else 0


class Marked(AgentExecutor):
    """Notes each run, then waits (the task's first run) or completes with `run N` (any later one)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        path = Path(os.environ[RUNS])
        run = runs(path, task_id) + 1
        await updater.start_work()
        with path.open("a", encoding="utf-8") as notes:
            notes.write(f"{task_id}\n")
        if run == 1:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.Event().wait(), FIRST_RUN_WAIT)
        await updater.add_artifact([Part(text=f"run {run}")], name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class DiesAtCancel(Marked):
    """Marked, but its cancel() kills its own server (SIGKILL): the process dies once the turn has stopped and before
    the cancel's end is stored."""

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def card(name: str) -> AgentCard:
    return AgentCard(
        name=name,
        description="Waits in its first run; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="work", name="Work", description="Works.", tags=["test"])],
    )


steady = Agent("steady", card("steady"), Marked(), repeat_safe=True)


def once() -> Agent:
    return Agent("once", card("once"), Marked(), repeat_safe=False)


dies_at_cancel = Agent("dies-at-cancel", card("dies-at-cancel"), DiesAtCancel(), repeat_safe=True)

CLEANED_UP = "the scratch space was removed"
"""The artifact `cleans_up` reports from cancel()."""


class CleansUp(Marked):
    """Marked, but its cancel() reports what it cleaned up (an artifact) before it reports the cancel."""

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.add_artifact([Part(text=CLEANED_UP)], name="cleanup")
        await updater.cancel()


cleans_up = Agent("cleans-up", card("cleans-up"), CleansUp(), repeat_safe=True)


RAISED = "the raising agent gave up"
"""The text of what `raising` raises."""


def fail() -> None:
    raise RuntimeError(RAISED)


class Raising(AgentExecutor):
    """Raises (through `fail`) on "raise now", and in any later turn; otherwise asks for input."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        if context.current_task is None and context.get_user_input() != "raise now":
            await updater.requires_input()
            return
        fail()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


raising = Agent("raising", card("raising"), Raising(), repeat_safe=True)
