"""Cancel: record the request on the claim, stop the running turn (here, or by a request to the replica that runs
it), let the agent report the cancel, and end the task CANCELED."""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from a2a.server.context import ServerCallContext
from a2a.types import Task, TaskState

from a2a_bridge.core import claims, errors
from a2a_bridge.core.auth import is_operator
from a2a_bridge.core.claims import Claim, Op
from a2a_bridge.core.observability import about_task, left_task
from a2a_bridge.core.states import ENDED_BY_CLAIM, is_terminal
from a2a_bridge.store.ledger import Fenced, TaskRecord
from a2a_bridge.store.store_faults import StoreUnavailable
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import (
    REQUESTED_BY,
    LiveTask,
    TaskTable,
    agent_status,
    cancel_evidence,
    canceled_text,
    may_use,
    requester,
    snapshot,
    status_event_for,
)
from a2a_bridge.tasks.task_writer import CANCEL_TURN, TaskWriter
from a2a_bridge.tasks.turn_execution import BridgeRequestContext, TurnQueue

log = logging.getLogger(__name__)

FENCED_ATTEMPTS = 5
"""Attempts at a cancel whose writes another writer fenced (each on the task read again)."""


class Canceller:
    """Cancels one agent's tasks: the owner's, the responsible user's and operators' requests."""

    def __init__(
        self,
        env: HostEnv,
        table: TaskTable,
        writer: TaskWriter,
        held_elsewhere: Callable[[Claim], bool],
        cancel_elsewhere: Callable[[TaskRecord, ServerCallContext], Awaitable[Task]],
    ) -> None:
        self.env = env
        self.table = table
        self.writer = writer
        self.held_elsewhere = held_elsewhere
        self.cancel_elsewhere = cancel_elsewhere

    async def cancel(self, task_id: str, context: ServerCallContext, request_stored: bool = False) -> Task:
        """Record the cancel request, stop the running turn, let the agent report the cancel, end the task CANCELED.
        The task's owner, its responsible user and operators may cancel it. `request_stored`: another replica's
        request for it is stored (`bridge_requests`) and stays until this cancel is over, so the claim's record of
        the request is stored with the task's end instead of ahead of the agent's cancel()."""
        loaded = task_id not in self.table.live
        if loaded and self.env.ledger.shared:
            stored = await self.env.ledger.get(task_id)
            if stored is not None and stored.agent == self.env.agent and may_use(stored, context, operators=True):
                if self.held_elsewhere(stored.claim):
                    return await self.cancel_elsewhere(stored, context)
        live = await self.table.acquire(task_id, context, operators=True)
        scope = about_task(self.env.agent, task_id, lambda: live.record.claim.claim_generation, "cancel requested")
        try:
            if live.canceling is not None:
                await live.canceling.wait()
            if not loaded:
                await self.writer.refresh(live)
            if is_terminal(live.task.status.state):
                raise errors.task_not_cancelable(live.task)
            for _ in range(FENCED_ATTEMPTS):
                if is_terminal(live.task.status.state):
                    break
                if live.running is None and self.held_elsewhere(live.record.claim):
                    return await self.cancel_elsewhere(live.record.copy(), context)
                live.canceling = asyncio.Event()
                try:
                    await self._end(live, context, request_stored)
                except Fenced:
                    await self.writer.kept.fenced(live)
                    continue
                finally:
                    live.canceling.set()
                    live.canceling = None
                if is_terminal(live.task.status.state) or live.retrying is not None or self._waits_for_operator(live, context):
                    break
            return snapshot(live.task)
        finally:
            self.table.release(live)
            left_task(scope)

    def _waits_for_operator(self, live: LiveTask, context: ServerCallContext) -> bool:
        """Whether the cancel is recorded on a task that only an operator may end: its turn's outcome is unknown
        (needs_reconciliation) and repeating or dropping its work is not safe, and the caller is not an operator."""
        claim = live.record.claim
        return claim.state == claims.NEEDS_RECONCILIATION and not self.env.settings.repeat_safe and not by_operator(context)

    async def _end(self, live: LiveTask, context: ServerCallContext, request_stored: bool) -> None:
        """One attempt at the cancel on the task as this process holds it (Fenced when another writer changed it
        first: the caller reads it again and tries once more)."""
        if live.record.claim.state in claims.TERMINAL:
            await self._end_as_claimed(live)
            return
        if live.record.claim.state != claims.NEEDS_RECONCILIATION:
            await self._stop_turn(live, context, request_stored)
            return
        if not live.record.claim.cancellation_requested:
            self.writer.post(live, Op("request_cancel"), cancel_evidence(context))
        if self._waits_for_operator(live, context):
            await self.writer.put_record(live)
            return
        evidence = {"requested_by": requester(context), "reason": "no turn holds the task: its claim was lost"}
        self.writer.post(live, Op("reconcile_cancelled", local_operation_stopped=True), evidence)
        canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, canceled_text(context), self.env.new_id())
        if not await self.writer.apply(live, None, status_event_for(live.task, canceled), claim_ops=()):
            raise Fenced(live.task.id)

    async def _end_as_claimed(self, live: LiveTask) -> None:
        """A task whose claim has ended while the task itself was never told (a store left so by a writer that was not
        fenced, before fencing): the task ends in the state its claim names, which is what happened."""
        state = TaskState.Value(ENDED_BY_CLAIM[live.record.claim.state])
        log.warning("task %s: its claim ended %s but the task had not; it ends so now", live.task.id, live.record.claim.state)
        ended = agent_status(live.task, state, "Ended as its claim records it.", self.env.new_id())
        if not await self.writer.apply(live, None, status_event_for(live.task, ended), claim_ops=()):
            raise Fenced(live.task.id)

    async def _stop_turn(self, live: LiveTask, context: ServerCallContext, request_stored: bool) -> None:
        """Stop the turn and end the task CANCELED; what the store does not take now is kept for it (and the caller
        told StoreUnavailable). The agent's cancel() runs once the request is stored: on the claim first, unless
        `request_stored` (a replica that dies before the end is stored leaves the request to its recovery)."""
        self.writer.post(live, Op("request_cancel"), cancel_evidence(context))
        recorded = None if request_stored else asyncio.ensure_future(self._record(live))
        running, turn = live.running, live.running_turn
        if running is not None and turn is not None:
            live.fenced.add(turn)
            running.cancel()
            await asyncio.wait([running])
        if recorded is not None:
            await recorded
        ctx = BridgeRequestContext(context, task_id=live.task.id, context_id=live.task.context_id, task=snapshot(live.task))
        try:
            await self.env.executor.cancel(ctx, TurnQueue(self.writer, CANCEL_TURN, live=live))
        except Exception:
            log.exception("agent %s raised while canceling task %s", self.env.agent, live.task.id)
        if not is_terminal(live.task.status.state):
            canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, canceled_text(context), self.env.new_id())
            await self.writer.apply(live, None, status_event_for(live.task, canceled))
        if live.retrying is not None:
            raise StoreUnavailable(live.task.id)

    async def _record(self, live: LiveTask) -> None:
        """Store the cancel request on the claim while the turn stops (kept for the store if it is down; Fenced when
        another writer changed the task first)."""
        with contextlib.suppress(StoreUnavailable):
            await self.writer.put_record(live)


def by_operator(context: ServerCallContext) -> bool:
    """Whether an operator asks: the operator principal, or an operator acting in the owner's name."""
    return is_operator(context) or bool(context.state.get(REQUESTED_BY))
