"""What the bridge stores beside the SDK's tasks: per-task records (status view and claim), claim events, sent messages,
sessions, replica requests and the event log; the ledger's contract (`Ledger`) and its in-memory form. The SQL form
(SQLite, PostgreSQL) is `sql_ledger.SqlLedger`."""

import asyncio
import collections
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import orjson
from mypy_extensions import mypyc_attr
from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import Task

from a2a_bridge.core.claims import TERMINAL, Claim
from a2a_bridge.core.task_status import Notification
from a2a_bridge.store.push_rows import Change, Delivery, Drop, Hold, PushAdded, Settle

Notice = Callable[[str, str, str], None]
"""Called with (kind, task id, detail) for a change a process (another, or this one) committed: "t" a task or its
record, "r" a request left for the replica that runs a task, "e" an event logged for a task (detail "<seq>:<body>")."""
Written = Callable[[list[str]], None]
"""Called with the ids of the tasks a committed write (this process's, or on PostgreSQL another replica's) may have
changed, once it is committed."""


class TaskExists(Exception):
    """A save of a new task found the task stored already (another replica opened it first)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} exists already")
        self.task_id = task_id


class Fenced(Exception):
    """A write refused because the stored record is not the one its writer holds: another writer (a replica that took
    the claim over, an operator, a cancel) wrote it since, or it has ended (a terminal task is never changed again).
    The writer wrote nothing, and must read the task again before it does anything more with it."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} was written by another writer, or has ended; this write is fenced")
        self.task_id = task_id


@dataclass(slots=True)
class TaskRecord:
    """The bridge's row for one task: who it is for, its status-view fields and its claim."""

    task_id: str
    agent: str
    owner: str
    responsible_user: str
    created_at: datetime
    state: str
    revision: int = 0
    notifications: list[Notification] = field(default_factory=list)
    idle_expires_at: datetime | None = None
    claim: Claim = field(default_factory=Claim)
    signal: str | None = None
    """What resumed the current turn when it was not a user message (an operator's approval)."""
    version: int = 0
    """How many times the record has been written (its fencing token): a write of version N is stored only where the
    stored record is at version N - 1, so a writer that read an older record (a paused replica, a claim taken over)
    writes nothing (`Fenced`)."""
    stored_bytes: int = 0
    """The task's size as its last save stored it (protobuf bytes): summed by owner for `max_stored_bytes`."""

    def copy(self) -> "TaskRecord":
        """A copy that shares no mutable part with this record."""
        return TaskRecord(
            self.task_id, self.agent, self.owner, self.responsible_user, self.created_at, self.state, self.revision,
            list(self.notifications), self.idle_expires_at, self.claim, self.signal, self.version, self.stored_bytes,
        )


class SentMessage(NamedTuple):
    """A message a caller already sent, for idempotent retries; `session` is the session sending it (None once no
    process is sending it)."""

    fingerprint: str
    task_id: str | None
    reply: str | None
    session: int | None = None


class ClaimEvent(NamedTuple):
    """One claim operation posted for a task, with its evidence, and the session and lease its claim had after it."""

    task_id: str
    claim_generation: int
    operation: str
    state: str
    evidence: dict[str, Any]
    at: datetime
    session_generation: int | None = None
    lease_until: datetime | None = None

    def row(self) -> dict[str, Any]:
        return self._asdict()

    def packed(self) -> bytes:
        """The event as one JSON line, its task id aside: how a memory store keeps it (a few hundred bytes less per
        event than its objects; JSON, as the SQL stores keep the evidence)."""
        return orjson.dumps(self[1:]) + b"\n"


def unpacked(lines: bytes) -> list[dict[str, Any]]:
    """The claim events `ClaimEvent.packed` wrote, as the rows `Ledger.claim_events` answers, in their order."""
    rows = []
    for line in lines.splitlines():
        generation, operation, state, evidence, at, session, lease = orjson.loads(line)
        rows.append({
            "claim_generation": generation, "operation": operation, "state": state, "evidence": evidence,
            "at": datetime.fromisoformat(at), "session_generation": session,
            "lease_until": datetime.fromisoformat(lease) if lease is not None else None,
        })
    return rows


@dataclass(frozen=True)
class Request:
    """A request another replica left for the replica that runs a task (a cancel)."""

    task_id: str
    kind: str
    requested_by: str


@dataclass(frozen=True)
class TaskQuery:
    """Which records a listing holds (newest first): one agent's, one A2A state's, and only those after a cursor
    (`after`: the created_at and task id of the last record of the page before)."""

    agent: str | None = None
    state: str | None = None
    after: tuple[datetime, str] | None = None

    def holds(self, record: TaskRecord) -> bool:
        if self.agent is not None and record.agent != self.agent:
            return False
        if self.state is not None and record.state != self.state:
            return False
        if self.after is None:
            return True
        created, task_id = self.after
        return record.created_at < created or (record.created_at == created and record.task_id > task_id)


class Ledger(Protocol):
    shared: bool
    """True where several server processes may share the database (PostgreSQL)."""
    writes_at_once: bool
    """Whether its writes finish without waiting for anything but a task's own locks (the memory ledger): a save
    then starts in the caller (`eager.shielded`) rather than in a task of its own."""

    async def start_session(self, now: datetime) -> int: ...
    async def session_alive(self, session: int) -> bool: ...
    async def store_time(self) -> datetime | None: ...
    def on_notice(self, notice: Notice) -> None: ...
    def on_lost(self, lost: Callable[[], None]) -> None: ...
    def on_written(self, written: Written) -> None: ...
    def changed(self) -> asyncio.Event: ...
    async def close(self) -> None: ...
    async def get(self, task_id: str) -> TaskRecord | None: ...
    async def read(
        self, task_id: str, store: TaskStore, owner: ServerCallContext, record: TaskRecord | None = None
    ) -> tuple[TaskRecord, Task] | None: ...
    async def recent(self, limit: int, query: TaskQuery = TaskQuery()) -> list[TaskRecord]: ...
    async def state_counts(self) -> dict[tuple[str, str], int]: ...
    async def stored_bytes(self, owner: str) -> int: ...
    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent],
        *, new: bool = False, log: Sequence[tuple[int, str]] = (), pushed: Sequence[PushAdded] = (),
    ) -> None: ...
    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None: ...
    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool: ...
    async def add_request(self, request: Request, at: datetime) -> None: ...
    async def take_requests(self, task_ids: list[str]) -> list[Request]: ...
    async def pending_requests(self, task_ids: list[str]) -> list[Request]: ...
    async def events_after(self, task_id: str, seq: int) -> list[tuple[int, str]]: ...
    async def expired_claims(self, now: datetime) -> list[TaskRecord]: ...
    async def held_by_others(self, agent: str, session: int) -> list[TaskRecord]: ...
    async def claim_events(self, task_id: str) -> list[dict[str, Any]]: ...
    async def claimed_before(self, session: int) -> list[TaskRecord]: ...
    async def idle_deadlines(self) -> list[TaskRecord]: ...
    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None: ...
    async def add_delivery(self, delivery: Delivery) -> None: ...
    async def due_deliveries(self, agent: str, now: datetime, limit: int) -> list[Delivery]: ...
    async def hold_delivery(self, delivery: Delivery, session: int, until: datetime) -> bool: ...
    async def settle_delivery(self, held: Delivery, settled: Delivery) -> bool: ...
    async def drop_delivery(self, delivery: Delivery) -> bool: ...
    def later(self, change: Change) -> asyncio.Future[bool]: ...
    async def deliveries(self, agent: str, *, task_id: str | None = None, dead: bool | None = None) -> list[Delivery]: ...
    async def redeliver(self, agent: str, task_id: str, config_id: str | None, now: datetime) -> int: ...
    async def take_over(self, agent: str, owner: str, message_id: str, sender: int | None, session: int) -> bool: ...
    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None: ...


HELD = ("claimed", "cancel_requested")
"""The claim states in which a turn holds the task."""


def ended(record: TaskRecord | None) -> bool:
    """Whether a stored record's claim is terminal: such a task is never written again."""
    return record is not None and record.claim.state in TERMINAL


def writable(stored: TaskRecord | None, written: TaskRecord) -> bool:
    """Whether a write of an existing task's record may be stored over the stored one (the fence every store applies
    in the write itself): the stored record is the version its writer holds (`TaskRecord.version`, one below the
    written), and it has not ended, unless the claim that ended it writes that end again (`rewrites_end`)."""
    if stored is None or stored.version != written.version - 1:
        return False
    return not ended(stored) or rewrites_end(stored, written)


def rewrites_end(stored: TaskRecord, written: TaskRecord) -> bool:
    """Whether a write of an ended task is the claim that ended it writing that end again: a save holds the record as
    it is when the save runs, so an earlier save may have stored the end that a later save (of the events folded
    before the end) stores once more. Nothing else may write an ended task."""
    a, b = stored.claim, written.claim
    same = (a.state, a.claim_generation, a.session_generation) == (b.state, b.claim_generation, b.session_generation)
    return same and stored.revision <= written.revision


async def read_consistently(
    get: Callable[[str], Any], store: TaskStore, task_id: str, owner: ServerCallContext, record: TaskRecord | None = None
) -> tuple[TaskRecord, Task] | None:
    """The record and the task of one revision: record, task, record again, until the revision did not move between
    the two record reads (both are written in one transaction, and every save moves the revision). `record`: the
    record the caller has just read, which stands for the first read."""
    while True:
        if record is None:
            record = await get(task_id)
            if record is None:
                return None
        task = await store.get(task_id, owner)
        again = await get(task_id)
        if task is None or again is None:
            return None
        if again.revision == record.revision:
            return again, task
        record = again


def interned(task_id: str | None) -> str | None:
    """The one string of a task id a memory store keeps (None stays None)."""
    return None if task_id is None else sys.intern(task_id)


def event_lines(events: list[ClaimEvent]) -> list[tuple[str, bytes]]:
    """Each event's task id and JSON line, made before a memory write changes anything (so that it fails whole)."""
    return [(sys.intern(event.task_id), event.packed()) for event in events]


@mypyc_attr(allow_interpreted_subclasses=True)
class MemoryLedger:
    """The ledger for `--store memory`: the same contract, in dictionaries, kept small (issue 18: the memory store's
    RSS per finished task at most the stock SDK's): a task's claim events as JSON lines, the claims of ended tasks
    shared (they never change), sent messages by (agent, owner) and then by message id, and one string per task id
    (interned, as `MemoryTaskStore` interns it: the sent message, the record, the keys and the task share it)."""

    shared = False
    writes_at_once = True

    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._events: dict[str, bytes] = {}
        self._ended_claims: dict[Claim, Claim] = {}
        self._messages: dict[tuple[str, str], dict[str, SentMessage]] = {}
        self._deliveries: dict[tuple[str, str], Delivery] = {}
        self._log: dict[str, list[tuple[int, str]]] = {}
        """The event log of the tasks that have push configs (the only ones a memory store logs: `save(log=)`)."""
        self._owned: dict[str, int] = {}
        self._sessions = 0
        self._changed: asyncio.Event | None = None
        self._written: list[Written] = []

    async def start_session(self, now: datetime) -> int:
        self._sessions += 1
        return self._sessions

    async def session_alive(self, session: int) -> bool:
        return False

    async def store_time(self) -> datetime | None:
        """One process holds a memory store: its own clock is the only one."""
        return None

    def on_notice(self, notice: Notice) -> None:
        """One process holds a memory store: every change is its own, so nothing is ever announced."""

    def on_lost(self, lost: Callable[[], None]) -> None:
        """A memory store has no connection to lose."""

    def on_written(self, written: Written) -> None:
        self._written.append(written)

    def changed(self) -> asyncio.Event:
        """An event set at the next write (made when first asked for: most writes have no one waiting)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    async def close(self) -> None:
        return None

    async def read(
        self, task_id: str, store: TaskStore, owner: ServerCallContext, record: TaskRecord | None = None
    ) -> tuple[TaskRecord, Task] | None:
        return await read_consistently(self.get, store, task_id, owner, record)

    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent],
        *, new: bool = False, log: Sequence[tuple[int, str]] = (), pushed: Sequence[PushAdded] = (),
    ) -> None:
        """The task and its record, and the outbox rows of the push configs `pushed` (their configs are the memory
        push store's); a new task only if absent (TaskExists), an existing one only over the version its writer holds
        and never once ended (Fenced)."""
        current = self._records.get(record.task_id)
        if new and current is not None:
            raise TaskExists(record.task_id)
        if not new and not writable(current, record):
            raise Fenced(record.task_id)
        lines = event_lines(events)
        await store.save(task, context)
        self._keep(record, lines)
        if log:
            self._log.setdefault(record.task_id, []).extend(log)
        for added in pushed:
            self._deliveries.setdefault((added.delivery.task_id, added.delivery.config_id), added.delivery)

    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool:
        current = self._records.get(record.task_id)
        if not writable(current, record) or current is None or ended(current) or (
            current.claim.claim_generation, current.claim.state
        ) != (expected.claim_generation, expected.state):
            return False
        self._keep(record, event_lines(events))
        return True

    async def add_request(self, request: Request, at: datetime) -> None:
        raise NotImplementedError("a memory store is never shared by replicas")

    async def take_requests(self, task_ids: list[str]) -> list[Request]:
        return []

    async def pending_requests(self, task_ids: list[str]) -> list[Request]:
        return []

    async def events_after(self, task_id: str, seq: int) -> list[tuple[int, str]]:
        return [(n, body) for n, body in self._log.get(task_id, ()) if n > seq]

    async def add_delivery(self, delivery: Delivery) -> None:
        self._deliveries.setdefault((delivery.task_id, delivery.config_id), delivery)

    async def due_deliveries(self, agent: str, now: datetime, limit: int) -> list[Delivery]:
        due = [
            d for d in self._deliveries.values()
            if d.agent == agent and not d.dead and (d.due_at is None or d.due_at <= now)
            and any(n > d.delivered for n, _ in self._log.get(d.task_id, ()))
        ]
        return sorted(due, key=lambda d: d.due_at or now)[:limit]

    async def hold_delivery(self, delivery: Delivery, session: int, until: datetime) -> bool:
        return self._change(Hold(delivery, session, until))

    async def settle_delivery(self, held: Delivery, settled: Delivery) -> bool:
        return self._change(Settle(held, settled))

    async def drop_delivery(self, delivery: Delivery) -> bool:
        return self._change(Drop(delivery))

    def later(self, change: Change) -> asyncio.Future[bool]:
        """A change of an outbox row, made at once (where the SQL ledgers wait for their next group commit)."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        answer.set_result(self._change(change))
        return answer

    def _change(self, change: Change) -> bool:
        """Make a change of an outbox row if the row is as the change read it; whether it was."""
        d = change.held if isinstance(change, Settle) else change.delivery
        key = (d.task_id, d.config_id)
        current = self._deliveries.get(key)
        if isinstance(change, Hold):
            if current is None or (current.delivered, current.holds, current.dead) != (d.delivered, d.holds, False):
                return False
            self._deliveries[key] = current._replace(holder=change.session, held_until=change.until, holds=d.holds + 1)
        elif isinstance(change, Settle):
            if current is None or (current.holder, current.holds) != (d.holder, d.holds):
                return False
            self._deliveries[key] = change.settled._replace(holder=None, held_until=None, holds=d.holds)
        else:
            if current is None or current.holds != d.holds:
                return False
            del self._deliveries[key]
            if not any(other[0] == d.task_id for other in self._deliveries):
                self._log.pop(d.task_id, None)
        return True

    async def deliveries(self, agent: str, *, task_id: str | None = None, dead: bool | None = None) -> list[Delivery]:
        return [
            d for d in self._deliveries.values()
            if d.agent == agent and (task_id is None or d.task_id == task_id) and (dead is None or d.dead == dead)
        ]

    async def redeliver(self, agent: str, task_id: str, config_id: str | None, now: datetime) -> int:
        again = [
            key for key, d in self._deliveries.items()
            if d.agent == agent and d.task_id == task_id and d.dead and config_id in (None, d.config_id)
        ]
        for key in again:
            self._deliveries[key] = self._deliveries[key]._replace(
                dead=False, attempts=0, failing_since=None, due_at=now, last_error=None
            )
        return len(again)

    async def expired_claims(self, now: datetime) -> list[TaskRecord]:
        held = self._records.values()
        return [r for r in held if r.claim.state in HELD and r.claim.lease_until is not None and r.claim.lease_until < now]

    async def get(self, task_id: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        return record.copy() if record is not None else None

    async def recent(self, limit: int, query: TaskQuery = TaskQuery()) -> list[TaskRecord]:
        held = [r for r in self._records.values() if query.holds(r)]
        newest = sorted(held, key=lambda r: (-r.created_at.timestamp(), r.task_id))[:limit]
        return [r.copy() for r in newest]

    async def state_counts(self) -> dict[tuple[str, str], int]:
        """How many tasks each (agent, A2A state) has."""
        return dict(collections.Counter((r.agent, r.state) for r in self._records.values()))

    async def stored_bytes(self, owner: str) -> int:
        """The `stored_bytes` of the owner's records, summed (kept as they are written)."""
        return self._owned.get(owner, 0)

    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None:
        if not writable(self._records.get(record.task_id), record):
            raise Fenced(record.task_id)
        self._keep(record, event_lines(events))

    async def held_by_others(self, agent: str, session: int) -> list[TaskRecord]:
        return []

    def _keep(self, record: TaskRecord, lines: list[tuple[str, bytes]]) -> None:
        kept = record.copy()
        kept.task_id = sys.intern(kept.task_id)
        if ended(kept):
            kept.claim = self._ended_claims.setdefault(kept.claim, kept.claim)
        before = self._records.get(kept.task_id)
        grown = kept.stored_bytes - (before.stored_bytes if before is not None else 0)
        self._owned[kept.owner] = self._owned.get(kept.owner, 0) + grown
        self._records[kept.task_id] = kept
        for written in self._written:
            written([record.task_id])
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        for task_id, line in lines:
            self._events[task_id] = self._events.get(task_id, b"") + line

    async def claim_events(self, task_id: str) -> list[dict[str, Any]]:
        return unpacked(self._events.get(task_id, b""))

    async def claimed_before(self, session: int) -> list[TaskRecord]:
        held = self._records.values()
        return [r for r in held if r.claim.state in HELD and r.claim.session_generation < session]

    async def idle_deadlines(self) -> list[TaskRecord]:
        return [r for r in self._records.values() if r.idle_expires_at is not None]

    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None:
        sent_by = self._messages.setdefault((agent, owner), {})
        if message_id in sent_by:
            return sent_by[message_id]
        sent_by[message_id] = SentMessage(sent.fingerprint, interned(sent.task_id), sent.reply, sent.session)
        return None

    async def take_over(self, agent: str, owner: str, message_id: str, sender: int | None, session: int) -> bool:
        """One process holds a memory store: the message is this process's to send."""
        sent_by = self._messages[(agent, owner)]
        sent = sent_by[message_id]
        sent_by[message_id] = SentMessage(sent.fingerprint, sent.task_id, sent.reply, session)
        return True

    async def settle(self, agent: str, owner: str, message_id: str, task_id: str | None, reply: str | None) -> None:
        sent_by = self._messages[(agent, owner)]
        sent = sent_by[message_id]
        sent_by[message_id] = SentMessage(sent.fingerprint, interned(task_id), reply, sent.session)

