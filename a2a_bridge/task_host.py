"""Runs the turns of one agent's tasks: one turn at a time per task, each under a claim, each event fenced, folded,
stored with the task's record and fanned out."""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import PushNotificationConfigStore, TaskStore
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToJson, Parse, ParseDict

from a2a_bridge import claims, errors
from a2a_bridge.auth import RESPONSIBLE_USER, caller_name, is_operator, may_see, owner_context, visible_to
from a2a_bridge.claims import Claim, ClaimError, Op
from a2a_bridge.clock import Clock
from a2a_bridge.ledger import ClaimEvent, Ledger, Request, TaskRecord
from a2a_bridge.observability import about_task, left_task
from a2a_bridge.push import PushDispatcher
from a2a_bridge.states import is_interrupted, is_terminal, row_for, state_name
from a2a_bridge.task_events import Event, add_user_input, apply_event, new_task, stamp_ids
from a2a_bridge.task_status import ANONYMOUS, WHO_MUST_ACT, next_notifications

log = logging.getLogger(__name__)

MAX_DEFERRED = 8
"""Events an agent sends back to back without yielding that wait for one save; the next is saved at once, so a
listener reads the first events while the agent still produces (never all of them at the end)."""

FAILED_TEXT = "The agent stopped with an internal error; the task has ended."
CANCELED_TEXT = "Canceled at the client's request."
RECONCILE_TEXT = (
    "The server stopped while this task was working, and repeating its work is not safe. "
    "An operator must reconcile it."
)
CANCEL_TURN = 0
"""The turn of the events an agent reports from cancel(): it speaks for the current claim."""
REPLICA_POLL = 0.1
"""Seconds between rereads of the shared database while waiting on another replica."""
MAX_QUEUE_WAIT = 3600.0
"""The longest a queued turn waits for another replica's turn to end."""
REQUESTED_BY = "requested_by"
"""The call context's state key naming who asked for a cancel made in the task owner's name (an operator)."""


@dataclass(frozen=True)
class TurnEnded:
    """The caller's turn is over; `task` is the task as that turn left it (None for a direct reply)."""

    task: Task | None


@dataclass(frozen=True)
class TurnFailed:
    """The agent raised during the caller's turn; the task (if any) is FAILED."""

    task_id: str


@dataclass(frozen=True)
class Refused:
    """The caller's queued turn could not run (the task ended before it)."""

    error: A2AError


FeedItem = Event | TurnEnded | TurnFailed | Refused


@dataclass(eq=False)
class Listener:
    """A queue fed with the events of one turn (a claim generation), or of every turn once `turn` is None."""

    turn: int | None = None
    snapshots: bool = False
    queue: asyncio.Queue[FeedItem] = field(default_factory=asyncio.Queue)

    def wants(self, turn: int | None) -> bool:
        return turn is None or self.turn is None or self.turn == turn


class BridgeRequestContext(RequestContext):
    """The SDK's request context, plus the signal that resumed the turn and the operation window of its claim."""

    def __init__(
        self,
        *args: Any,
        signal: str | None = None,
        window: Callable[[str, int], Coroutine[Any, Any, None]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.signal = signal
        self._window = window

    async def open_window(self, stage: str, seconds: int) -> None:
        """Extend this turn's lease for a named long step of 1 to 3,600 seconds."""
        if self._window is not None:
            await self._window(stage, seconds)


@dataclass(eq=False)
class LiveTask:
    """What this process holds for a task while a turn runs, a call waits or someone listens."""

    task: Task
    record: TaskRecord
    turn_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    save_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    listeners: list[Listener] = field(default_factory=list)
    running: asyncio.Future[None] | None = None
    running_turn: int | None = None
    fenced: set[int] = field(default_factory=set)
    canceling: asyncio.Event | None = None
    users: int = 0
    durable: tuple[Task, TaskRecord] | None = None
    """The task and record as last stored: what the status view shows, so a revision always names stored content."""
    claim_log: list[ClaimEvent] = field(default_factory=list)
    """Claim events posted but not yet stored; they are written with the record."""
    unsaved: list[tuple[int | None, FeedItem]] = field(default_factory=list)
    """Events folded into the task but not yet stored, with their turns: published once a save holds them."""
    flush_due: bool = False
    store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held from taking the unsaved events to publishing them, so they reach listeners in the order they were folded."""

    @property
    def owner(self) -> ServerCallContext:
        return owner_context(self.record.owner)


@dataclass(eq=False)
class Pending:
    """A task that exists only once its agent sends something other than a direct reply."""

    task: Task
    owner: ServerCallContext
    listener: Listener


class TurnQueue(EventQueue):
    """The event queue an executor writes to in one turn."""

    def __init__(self, host: "TaskHost", turn: int, live: LiveTask | None = None, pending: Pending | None = None) -> None:
        self.host = host
        self.turn = turn
        self.live = live
        self.pending = pending
        self.execution: asyncio.Future[None] | None = None
        self.replied = False

    async def enqueue_event(self, event: Event) -> None:
        if self.live is None:
            assert self.pending is not None
            if isinstance(event, Message):
                self.replied = True
                if self.host.on_reply is not None:
                    sent = self.pending.task.history[0]
                    await self.host.on_reply(self.pending.owner.user.user_name, sent.message_id, event)
                self.pending.listener.queue.put_nowait(event)
                self.pending.listener.queue.put_nowait(TurnEnded(None))
                return
            self.live = await self.host.open(self, event if isinstance(event, Task) else None)
            if isinstance(event, Task):
                return
        await self.host.apply(self.live, self.turn, event)


def evidence_of(event: Event) -> dict[str, Any]:
    """What an agent's status report shows: the state it reached and what it said."""
    if not isinstance(event, TaskStatusUpdateEvent):
        return {}
    status = event.status
    text = " ".join(p.text for p in status.message.parts if p.text) if status.HasField("message") else ""
    return {"a2a_state": state_name(status.state), "message": text}


@dataclass
class HostSettings:
    """How a host runs turns: its lease, the inactivity lifespan, and whether its agent's work may repeat."""

    lease: timedelta = claims.DEFAULT_LEASE
    idle_lifespan: timedelta | None = None
    repeat_safe: bool = True


class TaskHost:
    """One agent's tasks: its store and ledger, its executor, and the live tasks of this process."""

    def __init__(
        self,
        agent: str,
        executor: AgentExecutor,
        store: TaskStore,
        ledger: Ledger,
        push_store: PushNotificationConfigStore | None,
        push: PushDispatcher | None,
        clock: Clock,
        new_id: Callable[[], str],
        settings: HostSettings | None = None,
    ) -> None:
        self.agent = agent
        self.executor = executor
        self.store = store
        self.ledger = ledger
        self.push_store = push_store
        self.push = push
        self.clock = clock
        self.new_id = new_id
        self.settings = settings or HostSettings()
        self.session = 0
        self._live: dict[str, LiveTask] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self._changes: dict[str, asyncio.Event] = {}
        self._deadlines: dict[str, datetime] = {}
        self._tails: dict[Listener, asyncio.Future[None]] = {}
        self.sending: dict[tuple[str, str], asyncio.Future[Any]] = {}
        """The turn job of each message this process is sending, by (owner, messageId), until the turn ends."""
        self.on_reply: Callable[[str, str, Message], Coroutine[Any, Any, None]] | None = None
        """Called with (owner, messageId, reply) when an agent answers a message directly, before the caller sees it."""

    async def start(self, session: int) -> None:
        """Take this process's session generation, recover claims of older sessions, and watch idle deadlines."""
        self.session = session
        for record in await self.ledger.claimed_before(session):
            if record.agent == self.agent and not await self.ledger.session_alive(record.claim.session_generation):
                await self._recover(record)
        if self.ledger.shared:
            self._spawn(self._watch_replicas())
        if self.settings.idle_lifespan is not None:
            for record in await self.ledger.idle_deadlines():
                if record.agent == self.agent and record.idle_expires_at is not None:
                    self._deadlines[record.task_id] = record.idle_expires_at
            self._spawn(self._sweep_idle())

    async def stop(self) -> None:
        for job in list(self._background):
            job.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task as last stored, if the caller may see it (from memory while this process holds it)."""
        held = self._held(task_id)
        if held is not None:
            task, record = held
            return snapshot(task) if may_see(record.owner, record.responsible_user, context) else None
        task = await self.store.get(task_id, context)
        if task is not None or not caller_name(context):
            return task
        found = await self.task_and_record(task_id, context)
        return found[0] if found is not None else None

    async def task_and_record(self, task_id: str, context: ServerCallContext) -> tuple[Task, TaskRecord] | None:
        """The task and its record, if the caller may see it."""
        held = self._held(task_id)
        if held is not None:
            task, record = held
            return (snapshot(task), record.copy()) if may_see(record.owner, record.responsible_user, context) else None
        record = await self.ledger.get(task_id)
        if record is None or record.agent != self.agent or not may_see(record.owner, record.responsible_user, context):
            return None
        task = await self.store.get(task_id, owner_context(record.owner))
        return (task, record) if task is not None else None

    async def stored_record(self, task_id: str, caller: str) -> TaskRecord | None:
        """The record as last stored (not a copy: read only), if the caller (a principal name, '' for anonymous) may
        see the task; what a status poll compares its ETag with, without the task."""
        held = self._held(task_id)
        record = held[1] if held is not None else await self.ledger.get(task_id)
        if record is None or record.agent != self.agent:
            return None
        return record if visible_to(caller, record.owner, record.responsible_user) else None

    def _held(self, task_id: str) -> tuple[Task, TaskRecord] | None:
        """The task and record as last stored, from memory while this process holds the task (read only, not copies);
        None when it does not, or when another replica may have changed them since (no turn of ours runs)."""
        live = self._live.get(task_id)
        if live is None or (live.running is None and self.ledger.shared):
            return None
        return live.durable if live.durable is not None else (live.task, live.record)

    def changed(self, task_id: str) -> asyncio.Event:
        """An event set at the task's next change (its revision moves)."""
        return self._changes.setdefault(task_id, asyncio.Event())

    async def _acquire(self, task_id: str, context: ServerCallContext, operators: bool = False) -> LiveTask:
        """The live record of a task the caller may see (or, with `operators`, that an operator may act on), loaded
        from the store if needed; pair with _release."""
        live = self._live.get(task_id)
        if live is None:
            record = await self.ledger.get(task_id)
            allowed = record is not None and record.agent == self.agent and self._may_use(record, context, operators)
            task = await self.store.get(task_id, owner_context(record.owner)) if record and allowed else None
            if task is None or record is None:
                raise errors.task_not_found(task_id)
            live = self._live.setdefault(task_id, LiveTask(task=task, record=record, durable=(snapshot(task), record.copy())))
        elif not self._may_use(live.record, context, operators):
            raise errors.task_not_found(task_id)
        live.users += 1
        return live

    @staticmethod
    def _may_use(record: TaskRecord, context: ServerCallContext, operators: bool) -> bool:
        return may_see(record.owner, record.responsible_user, context) or (operators and is_operator(context))

    def _release(self, live: LiveTask) -> None:
        live.users -= 1
        self._evict_if_idle(live)

    def _evict_if_idle(self, live: LiveTask) -> None:
        if live.users <= 0 and live.running is None and not live.listeners and not live.unsaved:
            self._live.pop(live.task.id, None)

    async def open(self, queue: TurnQueue, agent_task: Task | None) -> LiveTask:
        """Store a new task under its first claim (merging what the agent sent) and publish its first snapshot."""
        pending = queue.pending
        assert pending is not None
        task = pending.task
        if agent_task is not None:
            if agent_task.history:
                del task.history[:]
                task.history.extend(agent_task.history)
            task.artifacts.extend(agent_task.artifacts)
            task.metadata.update(agent_task.metadata)
        now = self.clock.now()
        owner = pending.owner.user.user_name
        record = TaskRecord(
            task_id=task.id,
            agent=self.agent,
            owner=owner,
            responsible_user=pending.owner.state.get(RESPONSIBLE_USER) or owner or ANONYMOUS,
            created_at=now,
            state=state_name(task.status.state),
        )
        live = LiveTask(task=task, record=record, users=1)
        live.running, live.running_turn = queue.execution, queue.turn
        live.listeners.append(pending.listener)
        self._live[task.id] = live
        await self._post(live, Op("create"), {"message_id": task.history[0].message_id if task.history else ""})
        await self._post(live, Op("claim", session=self.session), {"turn": "first message"})
        live.unsaved.append((queue.turn, snapshot(task)))
        if self.settings.repeat_safe and not self.ledger.shared:
            self._defer(live)
        else:
            await self._store_unsaved(live)
        return live

    async def _post(self, live: LiveTask, op: Op, evidence: dict[str, Any]) -> Claim:
        """Apply one claim operation (raising ClaimError if refused) and record it with its evidence."""
        now = self.clock.now()
        claim = live.record.claim
        op = replace(
            op,
            generation=claim.claim_generation if op.generation is None else op.generation,
            session=op.session or claim.session_generation,
            evidence=evidence,
        )
        updated = claims.apply(claim, op, now, self.settings.lease)
        live.record.claim = updated
        live.claim_log.append(ClaimEvent(live.task.id, updated.claim_generation, op.operation, updated.state, evidence, now))
        return updated

    @staticmethod
    def _posted(live: LiveTask) -> list[ClaimEvent]:
        """The claim events posted since the last write, handed to the write that stores them."""
        posted, live.claim_log = live.claim_log, []
        return posted

    async def _commit_at_rest(self, live: LiveTask, expected: Claim) -> bool:
        """Store a claim change made while no turn runs, only if no other replica changed the claim first."""
        async with live.save_lock:
            stored = await self.ledger.put_if(live.record, expected, self._posted(live))
            if stored:
                self._stored_claim(live)
            return stored

    async def _refresh(self, live: LiveTask) -> None:
        """Reread a task that no turn of this process runs: another replica may have changed it."""
        if not self.ledger.shared or live.running is not None:
            return
        record = await self.ledger.get(live.task.id)
        task = await self.store.get(live.task.id, live.owner)
        if record is not None and task is not None:
            live.record, live.task = record, task

    async def _save(self, live: LiveTask, changes: int = 1) -> None:
        """Store the task and its record with the revision moved once per change it holds; a canceled turn does not
        interrupt the write."""
        await asyncio.shield(self._write(live, changes))

    async def _write(self, live: LiveTask, changes: int) -> None:
        async with live.save_lock:
            record = live.record
            record.revision += changes
            record.state = state_name(live.task.status.state)
            record.notifications = next_notifications(record.notifications, live.task, record.responsible_user, self.clock.now())
            lifespan = self.settings.idle_lifespan
            if lifespan is not None and row_for(live.task.status.state).phase == "idle":
                if record.idle_expires_at is None:
                    record.idle_expires_at = self.clock.now() + lifespan
                self._deadlines[record.task_id] = record.idle_expires_at
            else:
                record.idle_expires_at = None
                self._deadlines.pop(record.task_id, None)
            persisted = snapshot(live.task)
            await self.ledger.save(self.store, persisted, live.owner, record, self._posted(live))
            live.durable = (persisted, record.copy())
        change = self._changes.pop(live.task.id, None)
        if change is not None:
            change.set()

    async def _put_record(self, live: LiveTask) -> None:
        """Store a claim change that leaves the status view as it was (a lease renewal, an operation window)."""
        async with live.save_lock:
            await self.ledger.put(live.record, self._posted(live))
            self._stored_claim(live)

    @staticmethod
    def _stored_claim(live: LiveTask) -> None:
        """The claim just stored joins the stored view; the status fields and the task there are unchanged."""
        if live.durable is not None:
            task, record = live.durable
            live.durable = (task, replace(record, claim=live.record.claim, signal=live.record.signal))

    def _publish(self, live: LiveTask, turn: int | None, item: FeedItem) -> None:
        """Hand an item to each listener that follows this turn; blocking callers get a snapshot at interrupts."""
        at_rest = isinstance(item, TaskStatusUpdateEvent) and settled(item.status.state)
        for listener in live.listeners:
            if listener.wants(turn):
                listener.queue.put_nowait(snapshot(live.task) if at_rest and listener.snapshots else item)

    def _claim_ops(self, live: LiveTask, event: Event) -> tuple[str, ...]:
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
        self, live: LiveTask, turn: int | None, event: Event, claim_ops: tuple[str, ...] | None = None
    ) -> bool:
        """Fence, fold, store and fan out one event; turn None is the bridge's own event. False if it was dropped."""
        if isinstance(event, Task):
            log.warning("ignored a second Task snapshot from the agent for task %s", live.task.id)
            return False
        claim = live.record.claim
        if turn is not None and turn in live.fenced:
            log.warning("dropped an event of fenced turn %s of task %s", turn, live.task.id)
            return False
        if turn not in (None, CANCEL_TURN) and (
            turn != claim.claim_generation or claim.session_generation != self.session
        ):
            log.warning("dropped an event of stale claim %s of task %s (current %s)", turn, live.task.id, claim.claim_generation)
            return False
        if is_terminal(live.task.status.state):
            log.warning("dropped an event for ended task %s", live.task.id)
            return False
        stamp_ids(live.task, event)
        before = live.record.claim
        operations = self._claim_ops(live, event) if claim_ops is None else claim_ops
        try:
            for operation in operations:
                await self._post(live, Op(operation, local_operation_stopped=True), evidence_of(event))
        except ClaimError as refused:
            live.record.claim = before
            log.warning("dropped an event for task %s: %s (%s)", live.task.id, refused.detail, refused.reason)
            return False
        apply_event(live.task, event, self.clock.now())
        if isinstance(event, TaskStatusUpdateEvent):
            event.status.CopyFrom(live.task.status)
        live.unsaved.append((turn, event))
        if not operations and not self.ledger.shared and not at_rest(event) and len(live.unsaved) < MAX_DEFERRED:
            self._defer(live)
        else:
            await self._store_unsaved(live)
        return True

    def _defer(self, live: LiveTask) -> None:
        """Store what was folded in once the agent yields, so the events an agent sends back to back share one save;
        they are published only then. Deferred: events that post no claim operation (the claim that lets the agent
        run is stored already) and, for agents whose work may repeat, the new task with its first claim (a crash
        before that save leaves no task, and a retry of the message runs it again)."""
        if not live.flush_due:
            live.flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_due, live)

    def _flush_due(self, live: LiveTask) -> None:
        live.flush_due = False
        if live.unsaved:
            self._spawn(self._store_unsaved(live))

    async def _store_unsaved(self, live: LiveTask) -> None:
        """Save the task with what was folded into it since the last save, then publish it in order (a new task's
        first snapshot, then the agent's events, which also go to the shared event log and to webhooks)."""
        async with live.store_lock:
            await self._store_held(live)
        self._evict_if_idle(live)

    async def _store_held(self, live: LiveTask) -> None:
        if not live.unsaved:
            return
        events, live.unsaved = live.unsaved, []
        await self._save(live, len(events))
        for turn, event in events:
            if isinstance(event, Task):
                self._publish(live, turn, event)
                continue
            if self.ledger.shared:
                body = MessageToJson(to_stream_response(event))
                await self.ledger.append_event(live.task.id, live.record.revision, body)
            self._publish(live, turn, event)
            if self.push is not None and not isinstance(event, Message):
                self.push.notify(live.task.id, event)

    async def send(
        self, request: SendMessageRequest, context: ServerCallContext, listener: Listener, new_task_id: str | None = None
    ) -> str:
        """Start or queue the turn for a message; the listener receives that turn's events. Returns the task id
        (`new_task_id` when the message creates a task and the caller chose its id)."""
        message = request.message
        if not message.task_id:
            task_id = new_task_id or self.new_id()
            context_id = message.context_id or self.new_id()
            message.task_id, message.context_id = task_id, context_id
            pending = Pending(new_task(task_id, context_id, message, self.clock.now()), context, listener)
            listener.turn = 1
            self._track(context, message.message_id, self._spawn(self._first_turn(pending, request)))
            return task_id
        live = await self._acquire(message.task_id, context)
        try:
            if message.context_id and message.context_id != live.task.context_id:
                raise errors.invalid_field("message.contextId", "contextId does not match the task")
            if is_terminal(live.task.status.state):
                raise errors.task_is_terminal(live.task)
            if live.record.claim.state == claims.NEEDS_RECONCILIATION:
                raise errors.needs_reconciliation(live.task)
            message.context_id = live.task.context_id
        except A2AError:
            self._release(live)
            raise
        self._track(context, message.message_id, self._spawn(self._follow_up(live, request, context, listener)))
        return live.task.id

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        job = asyncio.ensure_future(coroutine)
        self._background.add(job)
        job.add_done_callback(self._background.discard)
        return job

    def _track(self, context: ServerCallContext, message_id: str, job: asyncio.Future[Any]) -> None:
        """Keep a message's turn job in `sending` until it ends."""
        key = (context.user.user_name, message_id)
        self.sending[key] = job

        def ended(_: asyncio.Future[Any]) -> None:
            if self.sending.get(key) is job:
                del self.sending[key]

        job.add_done_callback(ended)

    def follow(self, task_id: str, context: ServerCallContext, message_id: str, listener: Listener) -> bool:
        """Feed a listener the running turn of a task's latest user message, from a snapshot on; False if no such
        turn runs in this process, or while events are still to be published (the caller waits and asks again)."""
        live = self._live.get(task_id)
        if live is None or not self._may_use(live.record, context, False) or live.running_turn is None or live.unsaved:
            return False
        latest = last_user_message(live.task)
        if live.record.signal is not None or latest is None or latest.message_id != message_id:
            return False
        listener.turn = live.running_turn
        listener.queue.put_nowait(snapshot(live.task))
        live.listeners.append(listener)
        return True

    def _context(self, context: ServerCallContext, request: SendMessageRequest, live: LiveTask, signal: str | None) -> BridgeRequestContext:
        turn = live.record.claim.claim_generation

        async def window(stage: str, seconds: int) -> None:
            await self._open_window(live, turn, stage, seconds)

        return BridgeRequestContext(
            context,
            request=request,
            task_id=live.task.id,
            context_id=live.task.context_id,
            task=snapshot(live.task),
            signal=signal,
            window=window,
        )

    async def _first_turn(self, pending: Pending, request: SendMessageRequest) -> None:
        queue = TurnQueue(self, 1, pending=pending)
        task = pending.task

        async def window(stage: str, seconds: int) -> None:
            if queue.live is not None:
                await self._open_window(queue.live, 1, stage, seconds)

        ctx = BridgeRequestContext(pending.owner, request=request, task_id=task.id, context_id=task.context_id, window=window)
        await self._register_push(task.id, request, pending.owner)
        await self._run(queue, ctx)
        if queue.live is None and not queue.replied:
            queue.live = await self.open(queue, None)
        if queue.live is not None:
            await self._finish_turn(queue.live, queue.turn)
            self._release(queue.live)

    def _held_elsewhere(self, claim: Claim) -> bool:
        """Whether another replica's live turn holds the claim."""
        return (
            self.ledger.shared
            and claim.state in (claims.CLAIMED, claims.CANCEL_REQUESTED)
            and claim.session_generation != self.session
            and claim.lease_until is not None
            and claim.lease_until > self.clock.now()
        )

    async def _start_turn(self, live: LiveTask, evidence: dict[str, Any], operation: str = "resume") -> int:
        """Claim the task for a new turn (a new generation), queued behind a turn another replica runs; returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MAX_QUEUE_WAIT
        while True:
            await self._refresh(live)
            expected = live.record.claim
            if is_terminal(live.task.status.state):
                raise ClaimError("terminal", "the task has ended")
            if self._held_elsewhere(expected):
                if loop.time() > deadline:
                    raise ClaimError("busy", "another replica's turn still holds the task")
                await asyncio.sleep(REPLICA_POLL)
                continue
            if expected.state == claims.CLAIMED:
                await self._post(live, Op("ask", local_operation_stopped=True), {"turn_ended": True})
            claim = await self._post(live, Op(operation, session=self.session, local_operation_stopped=True), evidence)
            if await self._commit_at_rest(live, expected):
                return claim.claim_generation
            live.record.claim = expected

    async def _follow_up(
        self, live: LiveTask, request: SendMessageRequest, context: ServerCallContext, listener: Listener
    ) -> None:
        try:
            async with live.turn_lock:
                if live.canceling is not None:
                    await live.canceling.wait()
                try:
                    turn = await self._start_turn(live, {"message_id": request.message.message_id})
                except ClaimError as refused:
                    ended = is_terminal(live.task.status.state)
                    error = errors.task_is_terminal(live.task) if ended else errors.claim_refused(live.task, refused)
                    listener.queue.put_nowait(Refused(error))
                    return
                listener.turn = turn
                live.listeners.append(listener)
                live.record.signal = None
                add_user_input(live.task, request.message, self.clock.now())
                await self._save(live)
                self._publish(live, turn, snapshot(live.task))
                await self._register_push(live.task.id, request, context)
                await self._run(TurnQueue(self, turn, live=live), self._context(context, request, live, None))
                await self._finish_turn(live, turn)
        finally:
            self._release(live)

    def resume(
        self, task_id: str, context: ServerCallContext, signal: str, evidence: dict[str, Any] | None = None
    ) -> None:
        """Start, in the background, a turn that is not a user message (an operator's approval); `evidence` (who
        acted, the signal) goes with the claim's resume, else `{"signal": signal}`."""
        self._spawn(self._resume(task_id, context, signal, "resume", evidence))

    async def _resume(
        self, task_id: str, context: ServerCallContext, signal: str | None, operation: str, evidence: dict[str, Any] | None = None
    ) -> None:
        live = await self._acquire(task_id, context)
        scope = about_task(self.agent, task_id, lambda: live.record.claim.claim_generation)
        try:
            async with live.turn_lock:
                try:
                    turn = await self._start_turn(live, evidence or {"signal": signal or "continue"}, operation)
                except ClaimError as refused:
                    log.warning("could not resume task %s: %s", task_id, refused.detail)
                    return
                live.record.signal = signal
                await self._put_record(live)
                request = SendMessageRequest(message=last_user_message(live.task) or Message(
                    message_id=self.new_id(), role=Role.ROLE_USER, task_id=task_id,
                    context_id=live.task.context_id, parts=[Part(text=signal or "continue")],
                ))
                await self._run(TurnQueue(self, turn, live=live), self._context(context, request, live, signal))
                await self._finish_turn(live, turn)
        finally:
            self._release(live)
            left_task(scope)

    async def _register_push(self, task_id: str, request: SendMessageRequest, context: ServerCallContext) -> None:
        if self.push_store is None or not request.configuration.HasField("task_push_notification_config"):
            return
        config = request.configuration.task_push_notification_config
        config.task_id = task_id
        if not config.id:
            config.id = self.new_id()
        await self.push_store.set_info(task_id, config, context)

    async def _run(self, queue: TurnQueue, ctx: BridgeRequestContext) -> None:
        """Run execute() for one turn while renewing its lease; an exception fails the task with a generic message."""
        scope = about_task(self.agent, ctx.task_id or "", lambda: queue.turn, "turn started")
        execution = asyncio.ensure_future(self.executor.execute(ctx, queue))
        queue.execution = execution
        if queue.live is not None:
            queue.live.running, queue.live.running_turn = execution, queue.turn
        renewers: list[asyncio.Future[None]] = []
        interval = self.settings.lease.total_seconds() / 3
        timer = asyncio.get_running_loop().call_later(
            interval, lambda: renewers.append(asyncio.ensure_future(self._renew(queue, interval)))
        )
        try:
            await asyncio.shield(execution)
        except asyncio.CancelledError:
            if not execution.cancelled():
                execution.cancel()
                raise
        except Exception:
            log.exception("agent %s raised in turn %s", self.agent, queue.turn)
            await self._fail(queue)
        finally:
            timer.cancel()
            for renewer in renewers:
                renewer.cancel()
            if queue.live is not None:
                queue.live.running, queue.live.running_turn = None, None
            left_task(scope, "turn ended")

    async def _renew(self, queue: TurnQueue, interval: float) -> None:
        """Renew the turn's lease every `interval` (a third of its length) while the turn runs; started by a timer
        once the turn has run that long, so short turns start no renewer at all."""
        while True:
            live = queue.live
            if live is not None and not await self._renewed(live, queue.turn):
                return
            await asyncio.sleep(interval)

    async def _renewed(self, live: LiveTask, turn: int) -> bool:
        """Renew the turn's lease if it needs it; False once the turn no longer holds the claim."""
        claim = live.record.claim
        if claim.state != claims.CLAIMED or claim.claim_generation != turn:
            return False
        if claim.lease_until is not None and claim.lease_until - self.clock.now() > self.settings.lease:
            return True
        try:
            await self._post(live, Op("renew", session=self.session), {"renewed_by": "bridge"})
        except ClaimError as refused:
            log.warning("lease of task %s not renewed: %s", live.task.id, refused.detail)
            return False
        await self._put_record(live)
        return True

    async def _open_window(self, live: LiveTask, turn: int, stage: str, seconds: int) -> None:
        if live.record.claim.claim_generation != turn:
            raise ClaimError("stale_claim", "the turn's claim is no longer current")
        await self._post(
            live, Op("open_window", session=self.session, stage=stage, window_seconds=seconds), {"stage": stage, "seconds": seconds}
        )
        await self._put_record(live)

    async def _fail(self, queue: TurnQueue) -> None:
        if queue.live is None:
            if queue.replied:
                return
            queue.live = await self.open(queue, None)
        live = queue.live
        await self._store_unsaved(live)
        live.fenced.add(queue.turn)
        for listener in live.listeners:
            if listener.turn == queue.turn:
                listener.queue.put_nowait(TurnFailed(live.task.id))
        if not is_terminal(live.task.status.state):
            failed = agent_status(live.task, TaskState.TASK_STATE_FAILED, FAILED_TEXT, self.new_id())
            await self.apply(live, None, status_event_for(live.task, failed))

    async def _finish_turn(self, live: LiveTask, turn: int) -> None:
        """Tell the turn's listeners it is over; streams still open across AUTH_REQUIRED follow the task on."""
        await self._store_unsaved(live)
        if live.canceling is not None:
            await live.canceling.wait()
        self._publish(live, turn, TurnEnded(snapshot(live.task)))
        live.listeners = [
            listener
            for listener in live.listeners
            if listener.turn != turn or live.task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        ]
        for listener in live.listeners:
            if listener.turn == turn:
                listener.turn = None

    async def cancel(self, task_id: str, context: ServerCallContext) -> Task:
        """Record the cancel request, stop the running turn, let the agent report the cancel, end the task CANCELED.
        The task's owner, its responsible user and operators may cancel it."""
        live = await self._acquire(task_id, context, operators=True)
        scope = about_task(self.agent, task_id, lambda: live.record.claim.claim_generation, "cancel requested")
        try:
            if live.canceling is not None:
                await live.canceling.wait()
            await self._refresh(live)
            if is_terminal(live.task.status.state):
                raise errors.task_not_cancelable(live.task)
            if live.running is None and self._held_elsewhere(live.record.claim):
                return await self._cancel_elsewhere(live, context)
            if live.record.claim.state == claims.NEEDS_RECONCILIATION:
                await self._post(live, Op("request_cancel"), {"requested_by": requester(context)})
                await self._put_record(live)
                return snapshot(live.task)
            live.canceling = asyncio.Event()
            try:
                await self._post(live, Op("request_cancel"), {"requested_by": requester(context)})
                await self._put_record(live)
                running, turn = live.running, live.running_turn
                if running is not None and turn is not None:
                    live.fenced.add(turn)
                    running.cancel()
                    await asyncio.wait([running])
                ctx = BridgeRequestContext(context, task_id=task_id, context_id=live.task.context_id, task=snapshot(live.task))
                try:
                    await self.executor.cancel(ctx, TurnQueue(self, CANCEL_TURN, live=live))
                except Exception:
                    log.exception("agent %s raised while canceling task %s", self.agent, task_id)
                if not is_terminal(live.task.status.state):
                    canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, CANCELED_TEXT, self.new_id())
                    await self.apply(live, None, status_event_for(live.task, canceled))
            finally:
                live.canceling.set()
                live.canceling = None
            return snapshot(live.task)
        finally:
            self._release(live)
            left_task(scope)

    async def _cancel_elsewhere(self, live: LiveTask, context: ServerCallContext) -> Task:
        """Leave a cancel request for the replica that runs the task, and answer once it has ended the task."""
        request = Request(live.task.id, "cancel", requester(context))
        await self.ledger.add_request(request, self.clock.now())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.lease.total_seconds()
        while loop.time() < deadline:
            task = await self.store.get(live.task.id, live.owner)
            if task is not None and is_terminal(task.status.state):
                return task
            await asyncio.sleep(REPLICA_POLL)
        await self._refresh(live)
        return snapshot(live.task)

    async def _watch_replicas(self) -> None:
        """Shared database only: take cancel requests for turns running here, and recover claims whose lease ran out."""
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while True:
            running = {task_id: live for task_id, live in self._live.items() if live.running is not None}
            for request in await self.ledger.take_requests(list(running)):
                live = running.get(request.task_id)
                if live is not None and request.kind == "cancel":
                    self._spawn(self.cancel(request.task_id, live.owner))
            if loop.time() >= next_sweep:
                for record in await self.ledger.expired_claims(self.clock.now()):
                    if record.agent == self.agent and record.task_id not in running:
                        await self._recover(record)
                next_sweep = loop.time() + self.settings.lease.total_seconds() / 3
            await asyncio.sleep(REPLICA_POLL)

    async def _recover(self, record: TaskRecord) -> None:
        """A claim left by a process that stopped: fence it, then continue, cancel, or wait for an operator."""
        live = await self._acquire(record.task_id, owner_context(record.owner))
        scope = about_task(self.agent, record.task_id, lambda: live.record.claim.claim_generation, "recovering a claim")
        try:
            await self._refresh(live)
            expected = live.record.claim
            if expected != record.claim:
                return
            await self._post(live, Op("invalidate"), {"reason": "claim_lost", "session": record.claim.session_generation})
            if not await self._commit_at_rest(live, expected):
                live.record.claim = expected
                return
            if live.record.claim.cancellation_requested:
                await self._post(
                    live, Op("reconcile_cancelled", local_operation_stopped=True), {"reason": "the process running it stopped"}
                )
                canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, CANCELED_TEXT, self.new_id())
                await self.apply(live, None, status_event_for(live.task, canceled), claim_ops=())
            elif self.settings.repeat_safe:
                self._spawn(self._resume(record.task_id, live.owner, record.signal, "reconcile_continue"))
            else:
                waiting = agent_status(live.task, TaskState.TASK_STATE_AUTH_REQUIRED, RECONCILE_TEXT, self.new_id())
                ParseDict({WHO_MUST_ACT: {"actor": "operator", "action": "reconcile"}}, waiting.message.metadata)
                await self.apply(live, None, status_event_for(live.task, waiting), claim_ops=())
        finally:
            self._release(live)
            left_task(scope)

    async def reconcile(self, task_id: str, outcome: str, evidence: dict[str, Any]) -> TaskRecord:
        """An operator reports the actual outcome of a task in needs_reconciliation (the seed's four rows)."""
        record = await self.ledger.get(task_id)
        if record is None or record.agent != self.agent:
            raise errors.task_not_found(task_id)
        live = await self._acquire(task_id, owner_context(record.owner))
        scope = about_task(self.agent, task_id, lambda: live.record.claim.claim_generation, f"reconcile: {outcome}")
        try:
            operation = f"reconcile_{outcome}"
            if outcome == "continue":
                check = Op(operation, session=self.session, evidence=evidence, local_operation_stopped=True)
                claims.apply(live.record.claim, check, self.clock.now(), self.settings.lease)
                self._spawn(self._resume(task_id, live.owner, live.record.signal, operation, evidence))
                return live.record.copy()
            await self._post(live, Op(operation, local_operation_stopped=True), evidence)
            note = str(evidence.get("note") or "no note")
            if outcome == "completed":
                done = agent_status(live.task, TaskState.TASK_STATE_COMPLETED, f"Reconciled by an operator: {note}", self.new_id())
                await self.apply(live, None, status_event_for(live.task, done), claim_ops=())
            elif outcome == "cancelled":
                done = agent_status(live.task, TaskState.TASK_STATE_CANCELED, f"Canceled by an operator: {note}", self.new_id())
                await self.apply(live, None, status_event_for(live.task, done), claim_ops=())
            else:
                await self._put_record(live)
            return live.record.copy()
        finally:
            self._release(live)
            left_task(scope)

    async def _sweep_idle(self) -> None:
        """Cancel tasks whose inactivity lifespan ran out; bounded steps, ended with the host."""
        lifespan = self.settings.idle_lifespan
        assert lifespan is not None
        step = min(1.0, max(0.05, lifespan.total_seconds() / 4))
        while True:
            now = self.clock.now()
            for task_id, deadline in list(self._deadlines.items()):
                if deadline <= now:
                    self._deadlines.pop(task_id, None)
                    await self._expire(task_id)
            await asyncio.sleep(step)

    async def _expire(self, task_id: str) -> None:
        record = await self.ledger.get(task_id)
        if record is None:
            return
        live = await self._acquire(task_id, owner_context(record.owner))
        try:
            deadline = live.record.idle_expires_at
            if deadline is None or deadline > self.clock.now():
                return
            if live.running is not None or live.turn_lock.locked():
                self._deadlines.setdefault(task_id, deadline)  # input is starting a turn; look again at the next sweep
                return
            async with live.turn_lock:
                lifespan = self.settings.idle_lifespan.total_seconds() if self.settings.idle_lifespan else 0
                text = f"Canceled after {lifespan:g} seconds without input: the task's inactivity lifespan ran out."
                canceled = agent_status(live.task, TaskState.TASK_STATE_CANCELED, text, self.new_id())
                await self.apply(live, None, status_event_for(live.task, canceled))
        finally:
            self._release(live)

    async def subscribe(self, task_id: str, context: ServerCallContext) -> tuple[Task, Listener]:
        """A snapshot and a listener on every later event of a task that has not ended; pair with unsubscribe.

        On a shared database the listener follows the task's event log, whichever replica runs its turns."""
        live = await self._acquire(task_id, context)
        try:
            await self._refresh(live)
            if is_terminal(live.task.status.state):
                raise errors.task_is_terminal(live.task)
            listener = Listener()
            if self.ledger.shared:
                self._tails[listener] = asyncio.ensure_future(self._tail(task_id, live.record.revision, listener))
            else:
                live.listeners.append(listener)
            return snapshot(live.task), listener
        finally:
            self._release(live)

    async def _tail(self, task_id: str, seq: int, listener: Listener) -> None:
        """Feed a listener from the task's event log in the shared database."""
        while True:
            for seq, body in await self.ledger.events_after(task_id, seq):
                update = Parse(body, StreamResponse())
                listener.queue.put_nowait(getattr(update, update.WhichOneof("payload") or "task"))
            await asyncio.sleep(REPLICA_POLL)

    def unsubscribe(self, task_id: str, listener: Listener) -> None:
        """Stop feeding a listener (a stream ended or its client went away)."""
        tail = self._tails.pop(listener, None)
        if tail is not None:
            tail.cancel()
        live = self._live.get(task_id)
        if live is None:
            return
        with contextlib.suppress(ValueError):
            live.listeners.remove(listener)
        self._evict_if_idle(live)

    async def wait_idle(self) -> None:
        """Wait for every background turn (used at shutdown and by tests)."""
        while self._background:
            await asyncio.wait(list(self._background))


def requester(context: ServerCallContext) -> str:
    """Who asked: an operator acting in the owner's name (`REQUESTED_BY` in the context's state), else the caller."""
    return str(context.state.get(REQUESTED_BY) or context.user.user_name or ANONYMOUS)


def last_user_message(task: Task) -> Message | None:
    for entry in reversed(task.history):
        if entry.role == Role.ROLE_USER:
            return entry
    return None


def snapshot(task: Task) -> Task:
    copy = Task()
    copy.CopyFrom(task)
    return copy


def agent_status(task: Task, state: "TaskState.ValueType", text: str, message_id: str) -> TaskStatus:
    """A status with an agent message, as the bridge writes it when it ends a task itself."""
    status = TaskStatus(state=state)
    status.message.CopyFrom(
        Message(
            message_id=message_id,
            role=Role.ROLE_AGENT,
            task_id=task.id,
            context_id=task.context_id,
            parts=[Part(text=text)],
        )
    )
    return status


def status_event_for(task: Task, status: TaskStatus) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)


def ends_stream(state: "TaskState.ValueType") -> bool:
    """Streams close at a terminal state or INPUT_REQUIRED, and stay open through AUTH_REQUIRED."""
    return is_terminal(state) or state == TaskState.TASK_STATE_INPUT_REQUIRED


def at_rest(event: Event) -> bool:
    """A status event that ends a blocking call's wait (it always posts a claim operation too)."""
    return isinstance(event, TaskStatusUpdateEvent) and settled(event.status.state)


def settled(state: "TaskState.ValueType") -> bool:
    """A blocking call returns at a terminal or interrupted state."""
    return is_terminal(state) or is_interrupted(state)
