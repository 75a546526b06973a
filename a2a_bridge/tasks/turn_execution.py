"""Running one turn: the agent's `execute()` with a `TurnQueue` as its event queue, the lease renewed while it runs,
operation windows, the turn failed when the agent raises, and its callers told when it ends."""

import asyncio
import logging
from types import TracebackType
from typing import Any

from a2a.server.agent_execution import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import Message, Task

from a2a_bridge.core import claims
from a2a_bridge.core.claims import ClaimError, Op
from a2a_bridge.core.observability import about_task, left_task
from a2a_bridge.core.task_events import Event
from a2a_bridge.store.store_faults import StoreUnavailable
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import LiveTask, Pending, TurnEnded, TurnFailed, Window
from a2a_bridge.tasks.task_writer import TaskWriter

log = logging.getLogger(__name__)


class BridgeRequestContext(RequestContext):
    """The SDK's request context, plus the signal that resumed the turn and the operation window of its claim."""

    def __init__(self, *args: Any, signal: str | None = None, window: Window | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.signal = signal
        self._window = window

    async def open_window(self, stage: str, seconds: int) -> None:
        """Extend this turn's lease for a named long step of 1 to 3,600 seconds."""
        if self._window is not None:
            await self._window(stage, seconds)


class TurnQueue(EventQueue):
    """The event queue an executor writes to in one turn."""

    def __init__(self, writer: TaskWriter, turn: int, live: LiveTask | None = None, pending: Pending | None = None) -> None:
        self.writer = writer
        self.turn = turn
        self.live = live
        self.pending = pending
        self.execution: asyncio.Future[None] | None = None
        self.replied = False
        self.dropped = False
        """The first message's task could not be stored: the turn may not go on."""
        self.raised_at: TracebackType | None = None
        """Where the agent's exception was raised, kept for the log (see `TurnExecution.execute`)."""

    async def enqueue_event(self, event: Event) -> None:
        if self.dropped:
            raise StoreUnavailable(self.pending.task.id if self.pending else None)
        if self.live is None:
            assert self.pending is not None
            if isinstance(event, Message):
                self.replied = True
                on_reply = self.writer.env.on_reply
                if on_reply is not None:
                    sent = self.pending.task.history[0]
                    await on_reply(self.pending.owner.user.user_name, sent.message_id, event)
                self.pending.listener.queue.put_nowait(event)
                self.pending.listener.queue.put_nowait(TurnEnded(None))
                return
            self.live = await self.open(event if isinstance(event, Task) else None)
            if isinstance(event, Task):
                return
        await self.writer.apply(self.live, self.turn, event)

    async def open(self, agent_task: Task | None = None) -> LiveTask:
        """The task of a first message, stored under its first claim."""
        assert self.pending is not None
        try:
            return await self.writer.open(self.pending, self.turn, self.execution, agent_task)
        except StoreUnavailable:
            self.dropped = True
            raise


class TurnExecution:
    """Runs the turns a `TurnRunner` has claimed."""

    def __init__(self, env: HostEnv, writer: TaskWriter) -> None:
        self.env = env
        self.writer = writer

    async def run(self, queue: TurnQueue, ctx: BridgeRequestContext) -> None:
        """Run execute() for one turn while renewing its lease; an exception fails the task with a generic message."""
        env = self.env
        turn = queue.turn
        # The scope goes into the execution's context: naming the queue there would make a cycle (queue, execution,
        # context) that keeps the whole task in memory until a full collection.
        scope = about_task(env.agent, ctx.task_id or "", lambda: turn, "turn started")
        execution = asyncio.ensure_future(self.execute(ctx, queue))
        queue.execution = execution
        if queue.live is not None:
            queue.live.running, queue.live.running_turn = execution, queue.turn
        renewers: list[asyncio.Future[None]] = []
        interval = env.settings.lease.total_seconds() / 3
        timer = asyncio.get_running_loop().call_later(
            interval, lambda: renewers.append(asyncio.ensure_future(self._renew(queue, interval)))
        )
        try:
            await asyncio.shield(execution)
        except asyncio.CancelledError:
            if not execution.cancelled():
                execution.cancel()
                raise
        except Exception as error:
            raised_at, queue.raised_at = queue.raised_at, None
            if isinstance(error, StoreUnavailable) and queue.dropped:
                log.warning("agent %s stopped: the task of turn %s could not be stored", env.agent, queue.turn)
            else:
                log.error("agent %s raised in turn %s", env.agent, queue.turn,
                          exc_info=(type(error), error, raised_at or error.__traceback__))
            await self._fail(queue, failure_of(error))
        finally:
            timer.cancel()
            for renewer in renewers:
                renewer.cancel()
            if queue.live is not None:
                queue.live.running, queue.live.running_turn = None, None
            left_task(scope, "turn ended")

    async def execute(self, ctx: BridgeRequestContext, queue: TurnQueue) -> None:
        """The agent's execute(), keeping the traceback of what it raises: that exception reaches `run` through the
        compiled turns.py, where mypyc throws it in without its traceback, so the log would lose the agent's frames."""
        try:
            await self.env.executor.execute(ctx, queue)
        except Exception as error:
            queue.raised_at = error.__traceback__
            raise

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
        if claim.lease_until is not None and claim.lease_until - self.env.clock.now() > self.env.settings.lease:
            return True
        try:
            self.writer.post(live, Op("renew", session=self.env.session), {"renewed_by": "bridge"})
        except ClaimError as refused:
            if refused.reason == "lease_expired":
                await self.writer.kept.fenced(live)
            else:
                log.warning("lease of task %s not renewed: %s", live.task.id, refused.detail)
            return False
        return await self.writer.store_claim(live)

    async def open_window(self, live: LiveTask, turn: int, stage: str, seconds: int) -> None:
        if live.record.claim.claim_generation != turn:
            raise ClaimError("stale_claim", "the turn's claim is no longer current")
        self.writer.post(
            live, Op("open_window", session=self.env.session, stage=stage, window_seconds=seconds), {"stage": stage, "seconds": seconds}
        )
        if live.durable is None:
            # A repeat-safe agent's new task, saved once the agent yields: saved now, with the window (a record written
            # ahead of it would make that first save find the task stored already).
            await self.writer.store_unsaved(live)
            return
        if not await self.writer.store_claim(live):
            raise ClaimError("stale_claim", "the turn's claim is no longer current")

    async def _fail(self, queue: TurnQueue, failure: dict[str, str]) -> None:
        """The agent raised: its turn's callers are told and the task ends FAILED (kept for the store if it is down)."""
        if queue.dropped or (queue.live is None and queue.replied):
            return
        try:
            if queue.live is None:
                queue.live = await queue.open()
            live = queue.live
            await self.writer.store_unsaved(live)
            live.fenced.add(queue.turn)
            for listener in live.listeners:
                if listener.turn == queue.turn:
                    listener.queue.put_nowait(TurnFailed(live.task.id))
            await self.writer.fail(live, failure=failure)
        except StoreUnavailable:
            log.warning("agent %s: turn %s failed while the store was unavailable", self.env.agent, queue.turn)

    async def finish_turn(self, live: LiveTask, turn: int) -> None:
        """Tell the turn's listeners it is over once its events are stored (at once, or by the retrier when the store
        is back)."""
        await self.writer.store_unsaved(live)
        if live.canceling is not None:
            await live.canceling.wait()
        if live.retrying is not None:
            live.ended_turns.append(turn)
        else:
            self.writer.end_turn(live, turn)


FAILURE_MESSAGE = 500
"""Characters of an exception's message kept in the claim's evidence."""


def failure_of(error: BaseException) -> dict[str, str]:
    """What the operator reads of a failed turn: the exception's type (qualified outside builtins) and message."""
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return {"type": name, "message": str(error)[:FAILURE_MESSAGE]}
