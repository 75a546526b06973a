"""The inactivity lifespan against input that arrives as it runs out: either the input runs its turn, or the task
ends CANCELED and the input gets -32004 without entering the task; a finished task is never changed again."""

import asyncio
import base64
import itertools
from datetime import UTC, datetime, timedelta

import pytest
from a2a.auth.user import UnauthenticatedUser
from a2a.server.context import ServerCallContext
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import UnsupportedOperationError

from a2a_bridge.agents.catalog import sample_agents
from a2a_bridge.app import Bridge
from a2a_bridge.store.stores import StoreConfig, Stores
from a2a_bridge.tasks.host_env import HostSettings

LIFESPAN = timedelta(seconds=30)
DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1,1 +1,2 @@\n+print('hi')\n"
INTERLEAVINGS = 40
"""How many loop steps the expiry may start after the input: enough to cover the whole start of the input's turn."""


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.at = datetime(2026, 10, 6, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


def message(text: str, message_id: str, task_id: str = "", diff: bool = False) -> SendMessageRequest:
    parts = [Part(text=text)]
    if diff:
        parts.append(Part(raw=base64.b64encode(DIFF.encode()), media_type="text/x-diff"))
    return SendMessageRequest(message=Message(message_id=message_id, role=Role.ROLE_USER, task_id=task_id, parts=parts))


async def race(steps: int) -> tuple[Task, Task | Exception]:
    """Park a review, let its deadline pass, send the answer and start the expiry `steps` loop steps later."""
    ids = (f"id-{n}" for n in itertools.count())
    clock = ManualClock()
    bridge = Bridge(
        sample_agents(0.0, new_id=lambda: next(ids)),
        Stores(StoreConfig.parse("memory")),
        clock,
        lambda: next(ids),
        HostSettings(idle_lifespan=LIFESPAN),
    )
    agent = bridge.agents["code-reviewer"]
    caller = ServerCallContext(user=UnauthenticatedUser())
    parked = await agent.handler.on_message_send(message("Review this diff", "m-1", diff=True), caller)
    assert isinstance(parked, Task) and parked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    await agent.host.wait_idle()
    clock.at += LIFESPAN + timedelta(seconds=1)

    answering = asyncio.ensure_future(agent.handler.on_message_send(message("main", "m-2", parked.id), caller))
    for _ in range(steps):
        await asyncio.sleep(0)
    await agent.host.sweeps.expire(parked.id)
    outcome: Task | Exception
    try:
        outcome = await asyncio.wait_for(answering, 10)
    except UnsupportedOperationError as refused:
        outcome = refused
    await agent.host.wait_idle()
    final = await agent.host.get(parked.id, caller)
    assert final is not None
    return final, outcome


@pytest.mark.parametrize("steps", range(INTERLEAVINGS))
def test_input_at_the_deadline_either_runs_or_is_refused(steps: int) -> None:
    final, outcome = asyncio.run(race(steps))
    users = [m.message_id for m in final.history if m.role == Role.ROLE_USER]
    if final.status.state == TaskState.TASK_STATE_CANCELED:
        assert "inactivity lifespan" in final.status.message.parts[0].text
        assert isinstance(outcome, UnsupportedOperationError), outcome
        assert users == ["m-1"], "the refused input must not enter the task"
    else:
        assert final.status.state == TaskState.TASK_STATE_COMPLETED
        assert isinstance(outcome, Task) and outcome.status.state == TaskState.TASK_STATE_COMPLETED
        assert users == ["m-1", "m-2"]
