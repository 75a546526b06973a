"""The host's lifecycle work outside turns: recovering claims left by a process that stopped, an operator's
reconcile, and canceling tasks whose inactivity lifespan ran out."""

import asyncio
import logging
from typing import Any

from a2a.types import TaskState
from google.protobuf.json_format import ParseDict

from a2a_bridge.core import claims, errors
from a2a_bridge.core.auth import owner_context
from a2a_bridge.core.claims import ClaimError, Op
from a2a_bridge.core.observability import about_task, left_task
from a2a_bridge.core.task_status import WHO_MUST_ACT
from a2a_bridge.store.ledger import Fenced, TaskRecord
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import CANCELED_TEXT, LiveTask, TaskTable, agent_status, status_event_for
from a2a_bridge.tasks.task_writer import TaskWriter
from a2a_bridge.tasks.turns import TurnRunner

log = logging.getLogger(__name__)

RECONCILE_TEXT = (
    "The server stopped while this task was working, and repeating its work is not safe. "
    "An operator must reconcile it."
)


class Sweeps:
    """Recovery, reconcile and idle expiry for one agent's tasks."""

    def __init__(self, env: HostEnv, table: TaskTable, writer: TaskWriter, runner: TurnRunner) -> None:
        self.env = env
        self.table = table
        self.writer = writer
        self.runner = runner

    async def recover_stopped(self) -> None:
        """Recover the claims of older sessions whose process no longer runs."""
        env = self.env
        for record in await env.ledger.claimed_before(env.session):
            if record.agent == env.agent and not await env.ledger.session_alive(record.claim.session_generation):
                await self.recover(record)

    async def recover(self, record: TaskRecord) -> None:
        """A claim left by a process that stopped or whose lease ran out: fence it, then cancel it (a cancel is
        pending), continue it (its work is safe to repeat), or wait for an operator."""
        env, writer = self.env, self.writer
        live = await self.table.acquire(record.task_id, owner_context(record.owner))
        scope = about_task(env.agent, record.task_id, lambda: live.record.claim.claim_generation, "recovering a claim")
        try:
            if live.canceling is not None:
                return
            await writer.refresh(live)
            expected = live.record.claim
            if expected != record.claim:
                return
            writer.post(live, Op("invalidate"), {"reason": "claim_lost", "session": record.claim.session_generation})
            if not await writer.commit_at_rest(live, expected):
                live.record.claim = expected
                return
            if live.record.claim.cancellation_requested:
                await self._end_canceled(live, "the process running it stopped")
            elif env.settings.repeat_safe:
                env.spawn(self._continue(record))
            else:
                waiting = agent_status(live.task, TaskState.TASK_STATE_AUTH_REQUIRED, RECONCILE_TEXT, env.new_id())
                ParseDict({WHO_MUST_ACT: {"actor": "operator", "action": "reconcile"}}, waiting.message.metadata)
                await writer.apply(live, None, status_event_for(live.task, waiting), claim_ops=())
        finally:
            self.table.release(live)
            left_task(scope)

    async def _continue(self, record: TaskRecord) -> None:
        """Run a recovered claim's work again; a cancel recorded meanwhile, which refuses that turn, ends it CANCELED."""
        owner = owner_context(record.owner)
        if await self.runner.resume_turn(record.task_id, owner, record.signal, "reconcile_continue"):
            return
        live = await self.table.acquire(record.task_id, owner)
        try:
            async with live.turn_lock:
                await self.writer.refresh(live)
                claim = live.record.claim
                if claim.state == claims.NEEDS_RECONCILIATION and claim.cancellation_requested:
                    await self._end_canceled(live, "a cancel was requested before its work was run again")
        finally:
            self.table.release(live)

    async def _end_canceled(self, live: LiveTask, reason: str) -> None:
        """End a task whose claim was lost (needs_reconciliation) CANCELED, honouring the cancel recorded on it."""
        self.writer.post(live, Op("reconcile_cancelled", local_operation_stopped=True), {"reason": reason})
        canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, CANCELED_TEXT, self.env.new_id())
        await self.writer.apply(live, None, status_event_for(live.task, canceled), claim_ops=())

    async def reconcile(self, task_id: str, outcome: str, evidence: dict[str, Any]) -> TaskRecord:
        """An operator reports the actual outcome of a task in needs_reconciliation (the seed's four rows)."""
        env, writer = self.env, self.writer
        record = await env.ledger.get(task_id)
        if record is None or record.agent != env.agent:
            raise errors.task_not_found(task_id)
        live = await self.table.acquire(task_id, owner_context(record.owner))
        scope = about_task(env.agent, task_id, lambda: live.record.claim.claim_generation, f"reconcile: {outcome}")
        try:
            await writer.refresh(live)
            operation = f"reconcile_{outcome}"
            if outcome == "continue":
                check = Op(operation, session=env.session, evidence=evidence, local_operation_stopped=True)
                claims.apply(live.record.claim, check, env.clock.now(), env.settings.lease)
                await self.runner.resume_turn(task_id, live.owner, live.record.signal, operation, evidence, background=True)
                return live.record.copy()
            target = writer.post(live, Op(operation, local_operation_stopped=True), evidence)
            note = str(evidence.get("note") or "no note")
            if outcome == "completed":
                done = agent_status(live.task, TaskState.TASK_STATE_COMPLETED, f"Reconciled by an operator: {note}", env.new_id())
                await writer.apply(live, None, status_event_for(live.task, done), claim_ops=())
            elif outcome == "cancelled":
                done = agent_status(live.task, TaskState.TASK_STATE_CANCELED, f"Canceled by an operator: {note}", env.new_id())
                await writer.apply(live, None, status_event_for(live.task, done), claim_ops=())
            else:
                try:
                    await writer.put_record(live)
                except Fenced:
                    await writer.kept.fenced(live)
            if live.record.claim != target:
                raise ClaimError("fenced", "another writer changed the task first: nothing was reconciled; read it again")
            return live.record.copy()
        finally:
            self.table.release(live)
            left_task(scope)

    async def sweep_leases(self) -> None:
        """Every third of a lease, recover the claims whose lease ran out while no turn of this process holds them
        (a turn whose end the store did not take, a claim left behind); a store that does not answer is tried again
        at the next sweep."""
        env = self.env
        while True:
            await asyncio.sleep(env.settings.lease.total_seconds() / 3)
            try:
                expired = await env.ledger.expired_claims(env.clock.now())
            except Exception as error:  # noqa: BLE001 - the store is down: the next sweep looks again
                log.warning("lease sweep skipped: %s", type(error).__name__)
                continue
            held = self.table.live
            for record in expired:
                live = held.get(record.task_id)
                if record.agent != env.agent or (live is not None and (live.running or live.unsaved or live.retrying)):
                    continue
                try:
                    await self.recover(record)
                except Exception:
                    log.exception("could not recover task %s; the next sweep tries again", record.task_id)

    async def load_idle_deadlines(self) -> None:
        env = self.env
        for record in await env.ledger.idle_deadlines():
            if record.agent == env.agent and record.idle_expires_at is not None:
                env.deadlines[record.task_id] = record.idle_expires_at

    async def sweep_idle(self) -> None:
        """Cancel tasks whose inactivity lifespan ran out; bounded steps, ended with the host."""
        env = self.env
        lifespan = env.settings.idle_lifespan
        assert lifespan is not None
        step = min(1.0, max(0.05, lifespan.total_seconds() / 4))
        while True:
            now = env.clock.now()
            for task_id, deadline in list(env.deadlines.items()):
                if deadline <= now:
                    env.deadlines.pop(task_id, None)
                    await self.expire(task_id)
            await asyncio.sleep(step)

    async def expire(self, task_id: str) -> None:
        env = self.env
        record = await env.ledger.get(task_id)
        if record is None:
            return
        live = await self.table.acquire(task_id, owner_context(record.owner))
        try:
            await self.writer.refresh(live)
            deadline = live.record.idle_expires_at
            if deadline is None or deadline > env.clock.now() or self.runner.held_elsewhere(live.record.claim):
                return
            if live.running is not None or live.turn_lock.locked():
                env.deadlines.setdefault(task_id, deadline)  # input is starting a turn; look again at the next sweep
                return
            async with live.turn_lock:
                lifespan = env.settings.idle_lifespan.total_seconds() if env.settings.idle_lifespan else 0
                text = f"Canceled after {lifespan:g} seconds without input: the task's inactivity lifespan ran out."
                canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, text, env.new_id())
                await self.writer.apply(live, None, status_event_for(live.task, canceled))
        finally:
            self.table.release(live)
