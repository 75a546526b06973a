"""Writes the store refused, kept: a retrier per task stores them with backoff once the store takes writes again
(telling the waiting callers "store unavailable" once the grace period has passed, and ending the turns that ended
meanwhile), and a write refused for good takes the task back as stored: ended elsewhere, or content the store cannot
hold (the turn then ends FAILED)."""

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from a2a.server.context import ServerCallContext

from a2a_bridge.core.states import is_terminal
from a2a_bridge.store.ledger import Fenced
from a2a_bridge.store.store_faults import StoreUnavailable, backoff
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import Listener, LiveTask, Refused, TaskTable, TurnEnded, TurnFailed, snapshot

log = logging.getLogger(__name__)


class Writer(Protocol):
    """What kept writes need of the task writer that keeps them (`task_writer.TaskWriter`)."""

    env: HostEnv
    table: TaskTable
    join_winner: Callable[[str, ServerCallContext, Listener], None] | None

    async def store_held(self, live: LiveTask) -> None: ...

    async def fail(self, live: LiveTask, text: str = ...) -> None: ...

    def end_turn(self, live: LiveTask, turn: int) -> None: ...


class KeptWrites:
    """What a `TaskWriter` does with a write the store refused."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer

    def keep(self, live: LiveTask) -> None:
        """Store what the store refused once it takes writes again (one retrier per task)."""
        if live.retrying is None:
            log.warning("store unavailable: task %s keeps what it has not stored and retries with backoff", live.task.id)
            live.retrying = self.writer.env.spawn(self._retry(live))

    async def _retry(self, live: LiveTask) -> None:
        """Store what the store refused, with backoff, until it is back; tell the waiting callers once the grace
        period has passed; then end the turns that ended meanwhile."""
        loop = asyncio.get_running_loop()
        tell_at = loop.time() + self.writer.env.settings.store_grace
        refused: Exception | None = None
        try:
            for delay in backoff():
                await asyncio.sleep(delay)
                async with live.store_lock:
                    try:
                        await self.writer.store_held(live)
                    except StoreUnavailable:
                        if loop.time() >= tell_at:
                            tell_store_down(live)
                        continue
                    except Exception as error:
                        refused = error
                    break
        finally:
            live.retrying = None
        if refused is not None:
            await self.refused(live, refused)
        else:
            log.info("store available again: task %s is stored", live.task.id)
        for turn in live.ended_turns:
            self.writer.end_turn(live, turn)
        live.ended_turns.clear()
        self.writer.table.evict_if_idle(live)

    async def refused(self, live: LiveTask, error: Exception) -> None:
        """A write the store refused for good: fenced (another writer wrote the task, or it ended), or its content
        cannot be stored."""
        if isinstance(error, Fenced):
            await self.fenced(live)
        else:
            log.error("the events of task %s cannot be stored (%s); the turn ends FAILED", live.task.id, type(error).__name__)
            await self._unstorable(live)

    async def fenced(self, live: LiveTask) -> None:
        """The stored record is not the one this process holds: another replica took the claim over or ended the task,
        or an operator acted. Drop what this process folded since, stop its turn (one log line, no error to anyone),
        take the task as stored, and hand its callers on: to the turn that now holds it, else the task as stored."""
        held = live.record.claim
        stopping = live.running_turn is not None and live.running_turn not in live.fenced
        live.unsaved.clear()
        live.claim_log.clear()
        if live.running_turn is not None:
            live.fenced.add(live.running_turn)
        env = self.writer.env
        found = await env.ledger.read(live.task.id, env.store, live.owner)
        if found is not None:
            live.record, live.task = found
            live.durable, live.bytes = (snapshot(live.task), live.record.copy()), None
        stored = live.record.claim
        log.log(
            logging.WARNING if stopping else logging.INFO,
            "task %s was written elsewhere (stored claim: generation %s of session %s, %s; this process held "
            "generation %s of session %s)%s",
            live.task.id, stored.claim_generation, stored.session_generation, stored.state, held.claim_generation,
            held.session_generation, ": this process's turn of it stops" if stopping else "",
        )
        listeners, live.listeners = live.listeners, []
        handing_on = env.ledger.shared and not is_terminal(live.task.status.state) and self.writer.join_winner is not None
        for listener in listeners:
            if handing_on and self.writer.join_winner is not None:
                self.writer.join_winner(live.task.id, live.owner, listener)
            else:
                listener.queue.put_nowait(TurnEnded(snapshot(live.task)))
        if live.running is not None:
            live.running.cancel()

    async def _unstorable(self, live: LiveTask) -> None:
        """Events the store cannot hold: put the task back as last stored and end its turn FAILED (a task never
        stored is dropped, its callers told)."""
        live.unsaved.clear()
        live.claim_log.clear()
        if live.running_turn is not None:
            live.fenced.add(live.running_turn)
        if live.durable is None:
            self.writer.table.live.pop(live.task.id, None)
            tell_store_down(live)
            return
        task, record = live.durable
        live.task, live.record, live.bytes = snapshot(task), record.copy(), None
        for listener in live.listeners:
            if listener.turn is not None:
                listener.queue.put_nowait(TurnFailed(live.task.id))
        await self.writer.fail(live)


def tell_store_down(live: LiveTask) -> None:
    """Answer every caller waiting on the task: what they wait for is not stored."""
    for listener in live.listeners:
        listener.queue.put_nowait(Refused(StoreUnavailable(live.task.id)))
    live.listeners.clear()

