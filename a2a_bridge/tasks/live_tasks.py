"""What this process holds for a task while a turn runs, a call waits or someone listens, what its listeners receive,
and the table of those tasks (`TaskTable`: acquire, release, evict)."""

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import (
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.types.a2a_pb2 import ROLE_AGENT, ROLE_USER, TASK_STATE_INPUT_REQUIRED
from a2a.utils.errors import A2AError

from a2a_bridge.core import errors
from a2a_bridge.core.auth import is_operator, may_see, owner_context
from a2a_bridge.core.clock import Clock
from a2a_bridge.core.history_length import copy_with_history
from a2a_bridge.core.states import is_interrupted, is_terminal, state_name
from a2a_bridge.core.task_events import Event
from a2a_bridge.core.task_status import ANONYMOUS
from a2a_bridge.store.ledger import ClaimEvent, Ledger, TaskRecord
from a2a_bridge.tasks.mailbox import Mailbox

REQUESTED_BY = "requested_by"
"""The call context's state key naming who asked for a cancel made in the task owner's name (an operator)."""
OPERATOR_REASON = "operator_reason"
"""The call context's state key holding the reason an operator gave for a cancel, kept in the claim's evidence."""


class TurnEnded(NamedTuple):
    """The caller's turn is over; `task` is the task as that turn left it (None for a direct reply)."""

    task: Task | None


class TurnFailed(NamedTuple):
    """The agent raised during the caller's turn; the task (if any) is FAILED."""

    task_id: str


class Refused(NamedTuple):
    """The caller's queued turn could not run (the task ended before it, or the store could not take it)."""

    error: A2AError


FeedItem: TypeAlias = Event | TurnEnded | TurnFailed | Refused


@dataclass(eq=False, slots=True)
class Listener:
    """A queue fed with the events of one turn (a claim generation), or of every turn once `turn` is None."""

    turn: int | None = None
    snapshots: bool = False
    queue: Mailbox[FeedItem] = field(default_factory=Mailbox)
    after: int = 0
    """The revision of the snapshot the listener started from: it gets only the events of later revisions."""
    settled_only: bool = False
    """A blocking call that returns once its turn settles: it is handed no event and no unsettled snapshot of the turn,
    only a message, a settled snapshot and the turn's end (and what refuses or fails it)."""
    history: int | None = None
    """The most messages of history the listener's caller is answered with: the snapshots it is handed hold no more
    (None: all)."""

    def wants(self, turn: int | None) -> bool:
        return turn is None or self.turn is None or self.turn == turn

    def takes(self, item: "FeedItem") -> bool:
        """Whether a published item is for this listener (see `settled_only`)."""
        if not self.settled_only:
            return True
        if isinstance(item, Task):
            return settled(item.status.state)
        return not isinstance(item, TaskStatusUpdateEvent | TaskArtifactUpdateEvent)


@dataclass(eq=False, slots=True)
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
    retrying: asyncio.Future[None] | None = None
    """The job that stores what the store refused, with backoff, until it is back; None while nothing waits."""
    ended_turns: list[int] = field(default_factory=list)
    """Turns that ended while their events waited for the store: their listeners are told once those are stored."""

    bytes: int | None = None
    """The task's size as stored (protobuf bytes), counted once and then grown by each event folded in."""
    shared: bool = False
    """`task` is also the copy a save holds or has stored (`durable`): it is changed only once copied (`own`)."""

    @property
    def owner(self) -> ServerCallContext:
        return owner_context(self.record.owner)

    def own(self) -> Task:
        """The task, to change: copied first where a save holds it, so that what is stored never changes under it."""
        if self.shared:
            self.task, self.shared = snapshot(self.task), False
        return self.task

    def size(self) -> int:
        if self.bytes is None:
            self.bytes = self.task.ByteSize()
        return self.bytes


@dataclass(eq=False, slots=True)
class Pending:
    """A task that exists only once its agent sends something other than a direct reply."""

    task: Task
    owner: ServerCallContext
    listener: Listener


class TaskTable:
    """The live tasks of one agent in this process: loaded on first use, forgotten when nothing holds them."""

    def __init__(self, agent: str, store: TaskStore, ledger: Ledger, clock: Clock) -> None:
        self.agent = agent
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.live: dict[str, LiveTask] = {}

    async def acquire(self, task_id: str, context: ServerCallContext, operators: bool = False) -> LiveTask:
        """The live record of a task the caller may see (or, with `operators`, that an operator may act on), loaded
        from the store if needed; pair with release."""
        live = self.live.get(task_id)
        if live is None:
            record = await self.ledger.get(task_id)
            allowed = record is not None and record.agent == self.agent and may_use(record, context, operators)
            task = await self.store.get(task_id, owner_context(record.owner)) if record and allowed else None
            if task is None or record is None:
                raise errors.task_not_found(task_id)
            loaded = LiveTask(task=task, record=record, durable=(task, record.copy()), shared=True)
            live = self.live.setdefault(task_id, loaded)
        elif not may_use(live.record, context, operators):
            raise errors.task_not_found(task_id)
        live.users += 1
        return live

    def release(self, live: LiveTask) -> None:
        live.users -= 1
        self.evict_if_idle(live)

    def evict_if_idle(self, live: LiveTask) -> None:
        if live.users <= 0 and live.running is None and not live.listeners and not live.unsaved and live.retrying is None:
            if self.live.get(live.task.id) is live:
                del self.live[live.task.id]

    def held(self, task_id: str) -> tuple[Task, TaskRecord] | None:
        """The task and record as last stored, from memory while this process holds the task (read only, not copies);
        None when it does not, or when another replica may have changed them since (no turn of ours runs)."""
        live = self.live.get(task_id)
        if live is None or not self.trusted(live):
            return None
        return live.durable if live.durable is not None else (live.task, live.record)

    def trusted(self, live: LiveTask) -> bool:
        """Whether this process's copy of a task is the stored one without reading it again: always on a store no
        other process writes; on a shared one only while a turn of ours runs it within its lease (past the lease this
        process may have been paused, a GC pause or a frozen VM, while another replica took the claim over)."""
        if not self.ledger.shared:
            return True
        lease_until = live.record.claim.lease_until
        return live.running is not None and lease_until is not None and lease_until > self.clock.now()

    def running(self) -> dict[str, LiveTask]:
        """The tasks whose turn runs in this process."""
        return {task_id: live for task_id, live in self.live.items() if live.running is not None}


def may_use(record: TaskRecord, context: ServerCallContext, operators: bool) -> bool:
    return may_see(record.owner, record.responsible_user, context) or (operators and is_operator(context))


CANCELED_TEXT = "Canceled at the client's request."
OPERATOR_CANCELED_TEXT = "Canceled by the operator."


def canceled_text(context: ServerCallContext | None) -> str:
    """A cancel's status text: the operator's when an operator canceled in the owner's name, else the client's."""
    return OPERATOR_CANCELED_TEXT if context is not None and context.state.get(REQUESTED_BY) else CANCELED_TEXT


def requester(context: ServerCallContext) -> str:
    """Who asked: an operator acting in the owner's name (`REQUESTED_BY` in the context's state), else the caller."""
    return str(context.state.get(REQUESTED_BY) or context.user.user_name or ANONYMOUS)


def cancel_evidence(context: ServerCallContext) -> dict[str, Any]:
    """What a cancel request's claim event records: who asked, and the operator's reason when one was given."""
    reason = context.state.get(OPERATOR_REASON)
    return {"requested_by": requester(context), **({"reason": str(reason)} if reason else {})}


def last_user_message(task: Task) -> Message | None:
    for entry in reversed(task.history):
        if entry.role == ROLE_USER:
            return entry
    return None


def snapshot(task: Task, history: int | None = None) -> Task:
    """A copy of the task, with no more than `history` messages of its history (None: all of it): a caller answered
    with part of a large task's history is handed no copy of the rest."""
    if history is not None and 0 <= history < len(task.history):
        return copy_with_history(task, history)
    copy = Task()
    copy.CopyFrom(task)
    return copy


def agent_status(task: Task, state: "TaskState.ValueType", text: str, message_id: str) -> TaskStatus:
    """A status with an agent message, as the bridge writes it when it ends a task itself."""
    status = TaskStatus(state=state)
    status.message.CopyFrom(
        Message(
            message_id=message_id,
            role=ROLE_AGENT,
            task_id=task.id,
            context_id=task.context_id,
            parts=[Part(text=text)],
        )
    )
    return status


def status_event_for(task: Task, status: TaskStatus) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)


def evidence_of(event: Event) -> dict[str, Any]:
    """What an agent's status report shows: the state it reached and what it said."""
    if not isinstance(event, TaskStatusUpdateEvent):
        return {}
    status = event.status
    text = " ".join(p.text for p in status.message.parts if p.text) if status.HasField("message") else ""
    return {"a2a_state": state_name(status.state), "message": text}


def ends_stream(state: "TaskState.ValueType") -> bool:
    """Streams close at a terminal state or INPUT_REQUIRED, and stay open through AUTH_REQUIRED."""
    return is_terminal(state) or state == TASK_STATE_INPUT_REQUIRED


def at_rest(event: Event) -> bool:
    """A status event that ends a blocking call's wait (it always posts a claim operation too)."""
    return isinstance(event, TaskStatusUpdateEvent) and settled(event.status.state)


def settled(state: "TaskState.ValueType") -> bool:
    """A blocking call returns at a terminal or interrupted state."""
    return is_terminal(state) or is_interrupted(state)


Window = Callable[[str, int], Coroutine[Any, Any, None]]
"""Opens an operation window on a turn's claim: (stage, seconds)."""


async def blocking_answer(listener: Listener, immediate: bool) -> Task | Message:
    """What a blocking SendMessage answers from its listener: the agent's direct reply, the task once settled (at
    once under `immediate`), or the task as the turn left it; raises the refusal of a turn that could not run and
    -32603 for one whose agent raised."""
    while True:
        item = await listener.queue.get()
        if isinstance(item, Message):
            return item
        if isinstance(item, Refused):
            raise item.error
        if isinstance(item, TurnFailed):
            raise errors.agent_failed(item.task_id)
        if isinstance(item, Task) and (immediate or settled(item.status.state)):
            return item
        if isinstance(item, TurnEnded) and item.task is not None:
            return item.task
