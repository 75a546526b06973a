"""A task's persistence: claim operations posted, events fenced and folded into the task, the task and its record
saved (back-to-back events share one save), and only what is stored published to listeners, the event log and
webhooks."""

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types import Task, TaskState, TaskStatusUpdateEvent

from a2a_bridge.core import claims
from a2a_bridge.core.auth import RESPONSIBLE_USER, store_context
from a2a_bridge.core.claims import Claim, ClaimError, Op
from a2a_bridge.core.states import is_terminal, row_for, state_name
from a2a_bridge.core.task_events import Event, apply_event, stamp_ids
from a2a_bridge.core.task_status import ANONYMOUS, next_notifications
from a2a_bridge.push.logged_events import logged_body
from a2a_bridge.store.ledger import ClaimEvent, Fenced, TaskExists, TaskRecord
from a2a_bridge.store.store_faults import StoreUnavailable, transient
from a2a_bridge.tasks import eager
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.kept_writes import KeptWrites, tell_store_down
from a2a_bridge.tasks.live_tasks import (
    FeedItem,
    Listener,
    LiveTask,
    Pending,
    TaskTable,
    TurnEnded,
    agent_status,
    at_rest,
    evidence_of,
    settled,
    snapshot,
    status_event_for,
)

log = logging.getLogger(__name__)

MAX_DEFERRED = 8
"""Events an agent sends back to back without yielding that wait for one save; the next is saved at once, and the
agent waits a turn of the event loop, so a listener reads the first events while the agent still produces (never all
of them at the end: a save on the memory store finishes without waiting)."""
FAILED_TEXT = "The agent stopped with an internal error; the task has ended."
LOST_CLAIM = frozenset({"lease_expired", "stale_claim"})
"""The refusals of an agent's event that say its turn no longer holds the claim: the turn is fenced, and stops."""
CANCEL_TURN = 0
"""The turn of the events an agent reports from cancel(): it speaks for the current claim."""


class TaskWriter:
    """Posts claim operations, folds events, saves tasks with their records and publishes what is stored."""

    def __init__(self, env: HostEnv, table: TaskTable) -> None:
        self.env = env
        self.table = table
        self.kept = KeptWrites(self)
        self.join_winner: Callable[[str, ServerCallContext, Listener], None] | None = None
        """Hands the listener of a first turn that lost its task to another replica to that replica's turn."""

    async def open(self, pending: Pending, turn: int, execution: asyncio.Future[None] | None, agent_task: Task | None) -> LiveTask:
        """Store a new task under its first claim (merging what the agent sent) and publish its first snapshot."""
        env = self.env
        task = pending.task
        if agent_task is not None:
            if agent_task.history:
                del task.history[:]
                task.history.extend(agent_task.history[:])
            task.artifacts.extend(agent_task.artifacts[:])
            if agent_task.HasField("metadata"):
                task.metadata.update(agent_task.metadata)
        owner = pending.owner.user.user_name
        record = TaskRecord(
            task_id=task.id,
            agent=env.agent,
            owner=owner,
            responsible_user=pending.owner.state.get(RESPONSIBLE_USER) or owner or ANONYMOUS,
            created_at=env.clock.now(),
            state=state_name(task.status.state),
        )
        live = LiveTask(task=task, record=record, users=1)
        live.running, live.running_turn = execution, turn
        live.listeners.append(pending.listener)
        self.table.live[task.id] = live
        self.post(live, Op("create"), {"message_id": task.history[0].message_id if task.history else ""})
        self.post(live, Op("claim", session=env.session), {"turn": "first message"})
        live.unsaved.append((turn, snapshot(task)))
        if env.settings.repeat_safe and not env.ledger.shared:
            self.defer(live)
            return live
        try:
            await self._store_first(live)
        except TaskExists:
            self._lost(live, turn, pending)
        return live

    async def _store_first(self, live: LiveTask) -> None:
        """A new task whose agent must not act before it is stored: stored now, or dropped with its callers told, and
        StoreUnavailable raised to the agent (TaskExists when another replica stored it first)."""
        async with live.store_lock:
            try:
                await self.store_held(live)
                return
            except TaskExists:
                raise
            except Exception as error:
                log.warning("task %s not created: %s", live.task.id, type(error).__name__)
        self.table.live.pop(live.task.id, None)
        live.unsaved.clear()
        live.claim_log.clear()
        tell_store_down(live)
        raise StoreUnavailable(live.task.id)

    def _lost(self, live: LiveTask, turn: int, pending: Pending) -> None:
        """Another replica stored this task first: fence this turn, write nothing, stop the agent, and let the caller
        follow the winner's turn."""
        log.warning("task %s was opened by another replica first; this turn is fenced", live.task.id)
        live.fenced.add(turn)
        live.unsaved.clear()
        live.claim_log.clear()
        live.listeners.remove(pending.listener)
        if self.table.live.get(live.task.id) is live:
            del self.table.live[live.task.id]
        if live.running is not None:
            live.running.cancel()
        if self.join_winner is not None:
            self.join_winner(live.task.id, pending.owner, pending.listener)

    def post(self, live: LiveTask, op: Op, evidence: dict[str, Any]) -> Claim:
        """Apply one claim operation (raising ClaimError if refused) and record it with its evidence."""
        now = self.env.clock.now()
        claim = live.record.claim
        op = Op(
            op.operation,
            claim.claim_generation if op.generation is None else op.generation,
            op.session or claim.session_generation,
            evidence,
            op.local_operation_stopped,
            op.window_seconds,
            op.stage,
        )
        updated = claims.apply(claim, op, now, self.env.settings.lease)
        live.record.claim = updated
        live.claim_log.append(ClaimEvent(
            live.task.id, updated.claim_generation, op.operation, updated.state, evidence, now,
            updated.session_generation, updated.lease_until,
        ))
        return updated

    @staticmethod
    def _posted(live: LiveTask) -> list[ClaimEvent]:
        """The claim events posted since the last write, handed to the write that stores them."""
        posted, live.claim_log = live.claim_log, []
        return posted

    async def commit_at_rest(self, live: LiveTask, expected: Claim) -> bool:
        """Store a claim change made while no turn runs, only if no other replica changed the claim first; raises
        StoreUnavailable (the claim back as `expected`) when the store does not answer."""
        async with live.save_lock:
            live.record.version += 1
            try:
                stored = await self.env.ledger.put_if(live.record, expected, self._posted(live))
            except Exception as error:
                live.record.claim = expected
                live.record.version -= 1
                raise self._fault(live, error) from error
            if stored:
                self._stored_claim(live)
            else:
                live.record.version -= 1
            return stored

    async def refresh(self, live: LiveTask) -> None:
        """Reread a task whose copy here may be stale: no turn of this process runs it (another replica may have
        changed it), or the lease of the turn that runs it has passed (this process may have been paused while another
        replica took the claim over). Its record first: the task changes only with the record's version."""
        if not self.env.ledger.shared or live.retrying is not None or self.table.trusted(live):
            return
        async with live.save_lock:
            stored = await self.env.ledger.get(live.task.id)
            if stored is not None and stored.version == live.record.version:
                return
            if live.running is None:
                found = await self.env.ledger.read(live.task.id, self.env.store, live.owner)
                if found is not None:
                    live.record, live.task = found
                    live.durable, live.bytes = (snapshot(live.task), live.record.copy()), None
                return
        await self.kept.fenced(live)

    async def save(self, live: LiveTask, changes: int = 1, items: Sequence[FeedItem] = ()) -> int:
        """Store the task and its record with the revision moved once per change it holds (`items`, when given, are
        those changes: on a shared database each event among them goes to the event log under the revision it
        produced); a canceled turn does not interrupt the write. The task is stored as it is at this call, which holds
        exactly those changes (anything folded later belongs to a later revision, into a copy: `LiveTask.own`).
        Returns the revision before the save. If the store refuses it, the record is as before and the claim events
        wait for the next write: StoreUnavailable when the store is down, the store's own error when the content
        cannot be stored."""
        live.shared = True
        write = self._write(live, changes, items, live.task, live.size())
        if self.env.ledger.writes_at_once:
            return await eager.shielded(write)
        return await eager.shield(write)

    async def _write(self, live: LiveTask, changes: int, items: Sequence[FeedItem], persisted: Task, size: int) -> int:
        """Store `persisted` (the task when the save was asked for, `size` protobuf bytes) and the record with it."""
        env = self.env
        async with live.save_lock:
            record = live.record
            before = record.revision
            stored = (record.state, record.notifications, record.idle_expires_at, record.stored_bytes)
            record.revision += changes
            record.stored_bytes = size
            record.version += 1
            record.state = state_name(persisted.status.state)
            record.notifications = next_notifications(record.notifications, persisted, record.responsible_user, env.clock.now())
            lifespan = env.settings.idle_lifespan
            idle = lifespan is not None and row_for(persisted.status.state).phase == "idle"
            if idle and record.idle_expires_at is None and lifespan is not None:
                record.idle_expires_at = env.clock.now() + lifespan
            elif not idle:
                record.idle_expires_at = None
            logs = env.ledger.shared or (env.push is not None and env.push.logs(record.task_id))
            logged = [
                (before + offset, logged_body(item))
                for offset, item in enumerate(items, 1)
                if not isinstance(item, Task)
            ] if logs else []
            posted = self._posted(live)
            pushed = env.push.taken(record.task_id) if env.push is not None else []
            try:
                owner = store_context(record.owner)
                await env.ledger.save(
                    env.store, persisted, owner, record, posted, new=live.durable is None, log=logged, pushed=pushed
                )
            except Exception as error:
                if not (isinstance(error, Fenced) and await self._landed(record)):
                    record.revision = before
                    record.version -= 1
                    record.state, record.notifications, record.idle_expires_at, record.stored_bytes = stored
                    live.claim_log[:0] = posted
                    if env.push is not None:
                        env.push.restore(record.task_id, pushed)
                    raise self._fault(live, error) from error
            if env.push is not None and (pushed or logs):
                env.push.saved(record.task_id, pushed, before, record.revision, logged)
            live.durable = (persisted, record.copy())
            if record.idle_expires_at is not None:
                env.deadlines[record.task_id] = record.idle_expires_at
            else:
                env.deadlines.pop(record.task_id, None)
        env.signal_change(live.task.id)
        return before

    async def put_record(self, live: LiveTask) -> None:
        """Store a claim change that leaves the status view as it was (a lease renewal, an operation window). When
        the store is down the change is kept, stored by the retrier once it is back, and StoreUnavailable raised."""
        async with live.save_lock:
            posted = self._posted(live)
            live.record.version += 1
            try:
                await self.env.ledger.put(live.record, posted)
            except Fenced as fenced:
                if not await self._landed(live.record):
                    live.record.version -= 1
                    raise fenced
            except Exception as error:
                live.record.version -= 1
                live.claim_log[:0] = posted
                fault = self._fault(live, error)
                self.kept.keep(live)
                raise fault from error
            self._stored_claim(live)

    async def store_claim(self, live: LiveTask) -> bool:
        """`put_record` for a caller that goes on whatever the store says (a renewal, a window, a claim handed back):
        a store that is down keeps the change for the retrier; False when the write was fenced (the task is then as
        stored and this process's turn of it stopped: `KeptWrites.fenced`)."""
        try:
            await self.put_record(live)
        except StoreUnavailable:
            return True
        except Fenced:
            await self.kept.fenced(live)
            return False
        return True

    async def _landed(self, written: TaskRecord) -> bool:
        """Whether a write refused as fenced had in fact been stored by an earlier attempt whose answer was lost (a
        connection that failed at commit): the stored record is the very one written."""
        stored = await self.env.ledger.get(written.task_id)
        return stored is not None and (stored.version, stored.revision, stored.claim) == (
            written.version, written.revision, written.claim
        )

    @staticmethod
    def _fault(live: LiveTask, error: Exception) -> Exception:
        """StoreUnavailable for a store that is down or full; the error itself for content the store refuses."""
        if isinstance(error, StoreUnavailable):
            return error
        if transient(error):
            return StoreUnavailable(live.task.id)
        return error

    @staticmethod
    def _stored_claim(live: LiveTask) -> None:
        """The claim just stored joins the stored view; the status fields and the task there are unchanged."""
        if live.durable is not None:
            task, record = live.durable
            live.durable = (task, replace(record, claim=live.record.claim, signal=live.record.signal, version=live.record.version))

    @staticmethod
    def publish(live: LiveTask, turn: int | None, item: FeedItem, revision: int | None = None) -> None:
        """Hand an item to each listener that follows this turn and takes it (`Listener.takes`); an item of the cancel
        (`CANCEL_TURN`, which speaks for the current claim) to every listener, as the bridge's own, so a stream of the
        canceled turn gets the task's end before the turn's; blocking callers get a snapshot at interrupts. An item of
        a `revision` is skipped by a listener whose snapshot already holds that revision."""
        rest = isinstance(item, TaskStatusUpdateEvent) and settled(item.status.state)
        everyone = turn == CANCEL_TURN
        copies: dict[int | None, Task] = {}
        for listener in live.listeners:
            if (everyone or listener.wants(turn)) and (revision is None or revision > listener.after):
                if rest and listener.snapshots:
                    copy = copies.get(listener.history)
                    if copy is None:
                        copy = copies[listener.history] = snapshot(live.task, listener.history)
                    listener.queue.put_nowait(copy)
                elif listener.takes(item):
                    listener.queue.put_nowait(item)

    def publish_snapshot(self, live: LiveTask, turn: int, revision: int) -> None:
        """`publish` a snapshot of the task, copied only where a listener takes it (a blocking call takes none of an
        unsettled task: a large task was copied for no one)."""
        takers = (listener.wants(turn) and revision > listener.after and listener.takes(live.task) for listener in live.listeners)
        if any(takers):
            self.publish(live, turn, snapshot(live.task), revision)

    @staticmethod
    def _claim_ops(live: LiveTask, event: Event) -> tuple[str, ...]:
        """The claim operations an event posts: reaching an interrupted or terminal state reports it."""
        if not isinstance(event, TaskStatusUpdateEvent):
            return ()
        target = row_for(event.status.state).claim_state
        operation = claims.REACHED_BY.get(target)
        if operation is None:
            return ()
        if operation == "report_cancelled" and not live.record.claim.cancellation_requested:
            return ("request_cancel", operation)
        return (operation,)

    async def apply(
        self, live: LiveTask, turn: int | None, event: Event, claim_ops: tuple[str, ...] | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> bool:
        """Fence, fold, store and fan out one event; turn None is the bridge's own event. False if it was dropped.
        `evidence` goes with the claim operations the event posts, beside what the event shows."""
        if isinstance(event, Task):
            log.warning("ignored a second Task snapshot from the agent for task %s", live.task.id)
            return False
        claim = live.record.claim
        if turn is not None and turn in live.fenced:
            log.warning("dropped an event of fenced turn %s of task %s", turn, live.task.id)
            return False
        if turn not in (None, CANCEL_TURN) and (turn != claim.claim_generation or claim.session_generation != self.env.session):
            log.warning("dropped an event of stale claim %s of task %s (current %s)", turn, live.task.id, claim.claim_generation)
            return False
        if is_terminal(live.task.status.state):
            log.warning("dropped an event for ended task %s", live.task.id)
            return False
        stamp_ids(live.task, event)
        grows = event.ByteSize()
        if turn is not None and live.size() + grows > self.env.settings.max_task_bytes:
            log.warning("task %s reached max_task_bytes (%d): its turn ends FAILED", live.task.id, self.env.settings.max_task_bytes)
            live.fenced.add(turn)
            limit = f"It reached its size limit of {self.env.settings.max_task_bytes} bytes."
            await self.fail(live, f"{FAILED_TEXT} {limit}", {"type": "max_task_bytes", "message": limit})
            if live.running is not None:
                live.running.cancel()
            return False
        before = live.record.claim
        operations = self._claim_ops(live, event) if claim_ops is None else claim_ops
        try:
            for operation in operations:
                self.post(live, Op(operation, local_operation_stopped=True), {**evidence_of(event), **(evidence or {})})
        except ClaimError as refused:
            live.record.claim = before
            log.warning("dropped an event for task %s: %s (%s)", live.task.id, refused.detail, refused.reason)
            if turn not in (None, CANCEL_TURN) and refused.reason in LOST_CLAIM:
                await self.kept.fenced(live)
            return False
        apply_event(live.own(), event, self.env.clock.now())
        live.bytes = live.size() + grows
        if isinstance(event, TaskStatusUpdateEvent):
            event.status.CopyFrom(live.task.status)
        live.unsaved.append((turn, event))
        deferrable = not operations and not at_rest(event)
        if deferrable and len(live.unsaved) < MAX_DEFERRED:
            self.defer(live)
            return True
        await self.store_unsaved(live)
        if deferrable:
            await asyncio.sleep(0)
        return True

    def defer(self, live: LiveTask) -> None:
        """Store what was folded in once the agent yields, so the events an agent sends back to back share one save;
        they are published only then. Deferred: events that post no claim operation (the claim that lets the agent
        run is stored already), on every store; and, for agents whose work may repeat, the new task with its first
        claim where no other process writes the store (a crash before that save leaves no task, and a retry of the
        message runs it again; on a shared database the task is stored first, so a message sent to two replicas runs
        once)."""
        if not live.flush_due:
            live.flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_due, live)

    def _flush_due(self, live: LiveTask) -> None:
        live.flush_due = False
        if live.unsaved:
            self.env.spawn(self.store_unsaved(live))

    async def store_unsaved(self, live: LiveTask) -> bool:
        """Save the task with what was folded into it since the last save, then publish it in order (a new task's
        first snapshot, then the agent's events, which also go to the shared event log and to webhooks). False when
        the store is down: the events are kept and a retrier stores and publishes them once it is back."""
        if not live.unsaved and not live.claim_log and live.retrying is None and not live.store_lock.locked():
            self.table.evict_if_idle(live)
            return True
        return await eager.shielded(self._store_unsaved(live))

    async def _store_unsaved(self, live: LiveTask) -> bool:
        """`store_unsaved`'s write and what follows it, which a cancel of the caller does not interrupt (a turn stopped
        by a lost session or a cancel while its events are being saved): the events saved are published, those the
        store refused are kept for the retrier, so what this process holds and answers never runs ahead of the store."""
        refused: Exception | None = None
        async with live.store_lock:
            if live.retrying is not None:
                return False
            try:
                await self.store_held(live)
            except StoreUnavailable:
                self.kept.keep(live)
                return False
            except TaskExists:
                raise
            except Exception as error:
                refused = error
        if refused is not None:
            await self.kept.refused(live, refused)
        self.table.evict_if_idle(live)
        return True

    async def store_held(self, live: LiveTask) -> None:
        if not live.unsaved:
            if live.claim_log:
                await self.put_record(live)
            return
        events, live.unsaved = live.unsaved, []
        try:
            before = await self.save(live, len(events), [event for _, event in events])
        except Exception:
            live.unsaved[:0] = events
            raise
        for revision, (turn, event) in enumerate(events, before + 1):
            self.publish(live, turn, event, revision)
        push = self.env.push
        if push is not None and push.logs(live.task.id):  # ended once the saved events hold the end (none left)
            push.stored(live.task.id, is_terminal(live.task.status.state) and not live.unsaved)

    async def fail(self, live: LiveTask, text: str = FAILED_TEXT, failure: dict[str, str] | None = None) -> None:
        """End a task FAILED with the generic message (the agent raised, or what it sent cannot be stored); `failure`
        (the error's type and message) is kept in the claim's evidence, for the operator only."""
        if not is_terminal(live.task.status.state):
            failed = agent_status(live.task, TaskState.TASK_STATE_FAILED, text, self.env.new_id())
            await self.apply(live, None, status_event_for(live.task, failed), evidence={"failure": failure} if failure else None)

    def end_turn(self, live: LiveTask, turn: int) -> None:
        """Tell the turn's listeners it is over; streams still open across AUTH_REQUIRED follow the task on."""
        lengths = [listener.history for listener in live.listeners if listener.wants(turn)]
        if lengths:
            history = None if None in lengths else max(length for length in lengths if length is not None)
            self.publish(live, turn, TurnEnded(snapshot(live.task, history)))
        live.listeners = [
            listener
            for listener in live.listeners
            if listener.turn != turn or live.task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        ]
        for listener in live.listeners:
            if listener.turn == turn:
                listener.turn = None
