"""Following a task's event log on a shared database: one reader per task in this process however many listeners
follow it (SubscribeToTask streams, retries joined to a turn that runs on another replica). Each event is logged under
the revision it produced, in the transaction of its save; a listener gets exactly the events after the revision of the
snapshot it started from. The reader wakes at the task's change (a NOTIFY from the replica that wrote it) and reads
anyway every `SAFETY_NET` seconds; while the store does not answer it reads again every `SAFETY_NET` seconds, and its
followers get what was logged meanwhile once it answers."""

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from a2a.server.context import ServerCallContext
from a2a.types import StreamResponse
from a2a.utils.errors import InternalError
from google.protobuf.json_format import Parse

from a2a_bridge.core.task_events import Event
from a2a_bridge.store.event_rows import row_events
from a2a_bridge.store.ledger import HELD
from a2a_bridge.store.store_faults import OUTAGE, transient
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import Listener, Refused, TurnEnded

log = logging.getLogger(__name__)

SAFETY_NET = 1.0
"""Seconds a wait on another replica's notice lasts before the database is read anyway."""


async def until(changed: asyncio.Event, seconds: float) -> None:
    """Wait for a change, or `seconds` at most."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(changed.wait(), seconds)


@dataclass(eq=False)
class Feed:
    """One task's log as this process reads it: what was read since `start`, and who follows it (with the turn a
    joined retry waits for, None for a subscriber)."""

    task_id: str
    owner: ServerCallContext
    start: int
    seq: int
    backlog: list[tuple[int, Event]] = field(default_factory=list)
    followers: dict[Listener, int | None] = field(default_factory=dict)
    reader: asyncio.Future[None] | None = None


class LogFeeds:
    """The feeds of one agent's tasks in this process."""

    def __init__(self, env: HostEnv) -> None:
        self.env = env
        self.feeds: dict[str, Feed] = {}
        self.following: dict[Listener, str] = {}

    async def follow(self, task_id: str, owner: ServerCallContext, listener: Listener, turn: int | None = None) -> None:
        """Feed the listener the events logged after `listener.after`; with a `turn`, until that turn no longer holds
        the task, then the task as it stored it (TurnEnded). Pair with unfollow."""
        feed = self.feeds.get(task_id)
        if feed is None:
            feed = self.feeds[task_id] = Feed(task_id, owner, listener.after, listener.after)
            feed.reader = asyncio.ensure_future(self._read(feed))
        earlier = await self._rows(task_id, listener.after) if listener.after < feed.start else []
        if self.feeds.get(task_id) is not feed:
            return await self.follow(task_id, owner, listener, turn)
        for seq, event in earlier + feed.backlog:
            if seq > listener.after:
                give(listener, event)
                listener.after = seq
        feed.followers[listener] = turn
        self.following[listener] = task_id

    def unfollow(self, listener: Listener) -> None:
        task_id = self.following.pop(listener, None)
        feed = self.feeds.get(task_id or "")
        if feed is None:
            return
        feed.followers.pop(listener, None)
        if not feed.followers:
            del self.feeds[feed.task_id]
            if feed.reader is not None:
                feed.reader.cancel()

    def heard(self, task_id: str, detail: str) -> None:
        """Events logged by some replica, announced with their row ("<seq>:<body>", `event_rows`): each handed on at
        once when it is the next one a feed of this process waits for (the reader's next read skips it)."""
        feed = self.feeds.get(task_id)
        seq, _, body = detail.partition(":")
        if feed is None or not seq.isdigit():
            return
        for revision, text in row_events(int(seq), body):
            if revision == feed.seq + 1:
                self._hand_on(feed, revision, event_of(text))

    async def _rows(self, task_id: str, seq: int) -> list[tuple[int, Event]]:
        rows = await self.env.ledger.events_after(task_id, seq)
        return [(seq, event_of(body)) for seq, body in rows]

    async def _read(self, feed: Feed) -> None:
        """The feed's reader, until its last follower goes: a transient failure of the store is read past (the
        outage noted); any other ends every follower with an internal error naming the task."""
        while True:
            changed = self.env.changed(feed.task_id)
            try:
                await self._read_once(feed)
            except Exception as error:
                if not transient(error):
                    log.exception("the event log of task %s cannot be read; its followers are ended", feed.task_id)
                    self._end(feed)
                    return
                OUTAGE.failed(error)
            await until(changed, SAFETY_NET)

    async def _read_once(self, feed: Feed) -> None:
        """Hand on what was logged since the last read; the followers waiting for a turn that no longer holds the
        task get the task as that turn stored it."""
        env = self.env
        await self._dispatch(feed)
        turns = {turn for turn in feed.followers.values() if turn is not None}
        if not turns:
            return
        record = await env.ledger.get(feed.task_id)
        held = record.claim.claim_generation if record is not None and record.claim.state in HELD else None
        ended = [listener for listener, turn in feed.followers.items() if turn is not None and turn != held]
        if ended:
            await self._dispatch(feed)
            found = await env.ledger.read(feed.task_id, env.store, feed.owner)
            for listener in ended:
                del feed.followers[listener]
                listener.queue.put_nowait(TurnEnded(found[1] if found is not None else None))

    def _end(self, feed: Feed) -> None:
        """Drop a feed that cannot be read; each of its followers is answered an internal error naming the task."""
        for listener in feed.followers:
            self.following.pop(listener, None)
            listener.queue.put_nowait(Refused(InternalError("Internal error", data={"taskId": feed.task_id})))
        feed.followers.clear()
        if self.feeds.get(feed.task_id) is feed:
            del self.feeds[feed.task_id]

    async def _dispatch(self, feed: Feed) -> None:
        """Read what was logged since the last read and hand it to the followers."""
        for seq, event in await self._rows(feed.task_id, feed.seq):
            if seq > feed.seq:
                self._hand_on(feed, seq, event)

    @staticmethod
    def _hand_on(feed: Feed, seq: int, event: Event) -> None:
        feed.backlog.append((seq, event))
        feed.seq = seq
        for listener in feed.followers:
            if seq > listener.after:
                give(listener, event)
                listener.after = seq


def event_of(body: str) -> Event:
    update = Parse(body, StreamResponse())
    return getattr(update, update.WhichOneof("payload") or "task")  # type: ignore[no-any-return]


def give(listener: Listener, event: Event) -> None:
    """A stream gets each event; a blocking caller waits for the end of the turn instead."""
    if not listener.snapshots:
        listener.queue.put_nowait(event)
