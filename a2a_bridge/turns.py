"""The turn runner: one turn at a time per task, each a claim generation.

A turn moves through these steps, each posting the claim operation `claims.TRANSITIONS` names:

| step | claim operation | where |
|---|---|---|
| a new message's first event opens the task | `create`, `claim` (generation 1) | `TurnQueue.enqueue_event` -> `TaskWriter.open` |
| a follow-up, an approval or a recovery takes the task | `ask` if the claim was still held, then `resume` / `reconcile_continue` | `start_turn`, queued on `turn_lock` behind the running turn (and by compare-and-set behind another replica's) |
| the lease is renewed while the agent runs | `renew` (a third of the lease), `open_window` (a named long step) | `_renew`, `_open_window` |
| the agent reaches an interrupted or terminal state | `ask`, `complete`, `fail`, `report_cancelled` | `TaskWriter.apply` |
| the agent raises | `fail` | `_fail` |
| a cancel stops the turn | `request_cancel`, then `report_cancelled` | `cancels.Canceller` |

An event of a turn that is not the claim's current generation in this session, or of a fenced (canceled) turn, is
dropped by `TaskWriter.apply`."""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import A2AError

from a2a_bridge import claims, errors
from a2a_bridge.claims import ClaimError, Op
from a2a_bridge.host_env import HostEnv
from a2a_bridge.live_tasks import (
    Listener,
    LiveTask,
    Pending,
    Refused,
    TaskTable,
    TurnEnded,
    TurnFailed,
    Window,
    agent_status,
    last_user_message,
    may_use,
    snapshot,
    status_event_for,
)
from a2a_bridge.observability import about_task, left_task
from a2a_bridge.states import is_terminal
from a2a_bridge.task_events import Event, add_user_input, new_task
from a2a_bridge.task_writer import TaskWriter

log = logging.getLogger(__name__)

FAILED_TEXT = "The agent stopped with an internal error; the task has ended."
MAX_QUEUE_WAIT = 3600.0
"""The longest a queued turn waits for another replica's turn to end."""
RELEASE_POLL = 1.0
"""Seconds a turn queued behind another replica's waits for that replica's notice before it reads the claim anyway."""


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

    async def enqueue_event(self, event: Event) -> None:
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
        return await self.writer.open(self.pending, self.turn, self.execution, agent_task)


class TurnRunner:
    """Starts, queues and runs the turns of one agent's tasks."""

    def __init__(
        self, env: HostEnv, table: TaskTable, writer: TaskWriter, held_elsewhere: Callable[[claims.Claim], bool]
    ) -> None:
        self.env = env
        self.table = table
        self.writer = writer
        self.held_elsewhere = held_elsewhere
        self.sending: dict[tuple[str, str], asyncio.Future[Any]] = {}
        """The turn job of each message this process is sending, by (owner, messageId), until the turn ends."""

    async def send(
        self, request: SendMessageRequest, context: ServerCallContext, listener: Listener, new_task_id: str | None = None
    ) -> str:
        """Start or queue the turn for a message; the listener receives that turn's events. Returns the task id
        (`new_task_id` when the message creates a task and the caller chose its id)."""
        env = self.env
        message = request.message
        if not message.task_id:
            task_id = new_task_id or env.new_id()
            context_id = message.context_id or env.new_id()
            message.task_id, message.context_id = task_id, context_id
            pending = Pending(new_task(task_id, context_id, message, env.clock.now()), context, listener)
            listener.turn = 1
            self._track(context, message.message_id, env.spawn(self._first_turn(pending, request)))
            return task_id
        live = await self.table.acquire(message.task_id, context)
        try:
            if message.context_id and message.context_id != live.task.context_id:
                raise errors.invalid_field("message.contextId", "contextId does not match the task")
            if is_terminal(live.task.status.state):
                raise errors.task_is_terminal(live.task)
            if live.record.claim.state == claims.NEEDS_RECONCILIATION:
                raise errors.needs_reconciliation(live.task)
            message.context_id = live.task.context_id
        except A2AError:
            self.table.release(live)
            raise
        self._track(context, message.message_id, env.spawn(self._follow_up(live, request, context, listener)))
        return live.task.id

    def _track(self, context: ServerCallContext, message_id: str, job: asyncio.Future[Any]) -> None:
        """Keep a message's turn job in `sending` until it ends."""
        key = (context.user.user_name, message_id)
        self.sending[key] = job

        def ended(_: asyncio.Future[Any]) -> None:
            if self.sending.get(key) is job:
                del self.sending[key]

        job.add_done_callback(ended)

    def follow(self, task_id: str, context: ServerCallContext, message_id: str, listener: Listener) -> bool:
        """Feed a listener the running turn of a task's latest user message, from the task as stored on (the events of
        later revisions follow); False if no such turn runs in this process, or while events are still to be published
        (the caller waits and asks again)."""
        live = self.table.live.get(task_id)
        if live is None or not may_use(live.record, context, False) or live.running_turn is None or live.unsaved:
            return False
        latest = last_user_message(live.task)
        if live.record.signal is not None or latest is None or latest.message_id != message_id or live.durable is None:
            return False
        task, record = live.durable
        listener.turn, listener.after = live.running_turn, record.revision
        listener.queue.put_nowait(snapshot(task))
        live.listeners.append(listener)
        return True

    def _context(self, context: ServerCallContext, request: SendMessageRequest, live: LiveTask, signal: str | None) -> BridgeRequestContext:
        turn = live.record.claim.claim_generation

        async def window(stage: str, seconds: int) -> None:
            await self._open_window(live, turn, stage, seconds)

        return BridgeRequestContext(
            context, request=request, task_id=live.task.id, context_id=live.task.context_id, task=snapshot(live.task),
            signal=signal, window=window,
        )

    async def _first_turn(self, pending: Pending, request: SendMessageRequest) -> None:
        queue = TurnQueue(self.writer, 1, pending=pending)
        task = pending.task

        async def window(stage: str, seconds: int) -> None:
            if queue.live is not None:
                await self._open_window(queue.live, 1, stage, seconds)

        ctx = BridgeRequestContext(pending.owner, request=request, task_id=task.id, context_id=task.context_id, window=window)
        await self._register_push(task.id, request, pending.owner)
        await self._run(queue, ctx)
        if queue.live is None and not queue.replied:
            queue.live = await queue.open()
        if queue.live is not None:
            await self.finish_turn(queue.live, queue.turn)
            self.table.release(queue.live)

    async def start_turn(self, live: LiveTask, evidence: dict[str, Any], operation: str = "resume") -> int:
        """Claim the task for a new turn (a new generation), queued behind a turn another replica runs; returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MAX_QUEUE_WAIT
        while True:
            released = self.env.changed(live.task.id)
            await self.writer.refresh(live)
            expected = live.record.claim
            if is_terminal(live.task.status.state):
                raise ClaimError("terminal", "the task has ended")
            if self.held_elsewhere(expected):
                if loop.time() > deadline:
                    raise ClaimError("busy", "another replica's turn still holds the task")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(released.wait(), RELEASE_POLL)
                continue
            if expected.state == claims.CLAIMED:
                await self.writer.post(live, Op("ask", local_operation_stopped=True), {"turn_ended": True})
            claim = await self.writer.post(live, Op(operation, session=self.env.session, local_operation_stopped=True), evidence)
            if await self.writer.commit_at_rest(live, expected):
                return claim.claim_generation
            live.record.claim = expected

    async def _follow_up(self, live: LiveTask, request: SendMessageRequest, context: ServerCallContext, listener: Listener) -> None:
        try:
            async with live.turn_lock:
                if live.canceling is not None:
                    await live.canceling.wait()
                try:
                    turn = await self.start_turn(live, {"message_id": request.message.message_id})
                except ClaimError as refused:
                    ended = is_terminal(live.task.status.state)
                    error = errors.task_is_terminal(live.task) if ended else errors.claim_refused(live.task, refused)
                    listener.queue.put_nowait(Refused(error))
                    return
                listener.turn = turn
                live.listeners.append(listener)
                live.record.signal = None
                add_user_input(live.task, request.message, self.env.clock.now())
                before = await self.writer.save(live)
                self.writer.publish(live, turn, snapshot(live.task), before + 1)
                await self._register_push(live.task.id, request, context)
                await self._run(TurnQueue(self.writer, turn, live=live), self._context(context, request, live, None))
                await self.finish_turn(live, turn)
        finally:
            self.table.release(live)

    def resume(self, task_id: str, context: ServerCallContext, signal: str) -> None:
        """Start, in the background, a turn that is not a user message (an operator's approval)."""
        self.env.spawn(self.resume_turn(task_id, context, signal, "resume"))

    async def resume_turn(
        self, task_id: str, context: ServerCallContext, signal: str | None, operation: str, evidence: dict[str, Any] | None = None
    ) -> None:
        env = self.env
        live = await self.table.acquire(task_id, context)
        scope = about_task(env.agent, task_id, lambda: live.record.claim.claim_generation)
        try:
            async with live.turn_lock:
                try:
                    turn = await self.start_turn(live, evidence or {"signal": signal or "continue"}, operation)
                except ClaimError as refused:
                    log.warning("could not resume task %s: %s", task_id, refused.detail)
                    return
                live.record.signal = signal
                await self.writer.put_record(live)
                request = SendMessageRequest(message=last_user_message(live.task) or Message(
                    message_id=env.new_id(), role=Role.ROLE_USER, task_id=task_id,
                    context_id=live.task.context_id, parts=[Part(text=signal or "continue")],
                ))
                await self._run(TurnQueue(self.writer, turn, live=live), self._context(context, request, live, signal))
                await self.finish_turn(live, turn)
        finally:
            self.table.release(live)
            left_task(scope)

    async def _register_push(self, task_id: str, request: SendMessageRequest, context: ServerCallContext) -> None:
        push_store = self.env.push_store
        if push_store is None or not request.configuration.HasField("task_push_notification_config"):
            return
        config = request.configuration.task_push_notification_config
        config.task_id = task_id
        if not config.id:
            config.id = self.env.new_id()
        await push_store.set_info(task_id, config, context)

    async def _run(self, queue: TurnQueue, ctx: BridgeRequestContext) -> None:
        """Run execute() for one turn while renewing its lease; an exception fails the task with a generic message."""
        env = self.env
        scope = about_task(env.agent, ctx.task_id or "", lambda: queue.turn, "turn started")
        execution = asyncio.ensure_future(env.executor.execute(ctx, queue))
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
        except Exception:
            log.exception("agent %s raised in turn %s", env.agent, queue.turn)
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
        if claim.lease_until is not None and claim.lease_until - self.env.clock.now() > self.env.settings.lease:
            return True
        try:
            await self.writer.post(live, Op("renew", session=self.env.session), {"renewed_by": "bridge"})
        except ClaimError as refused:
            log.warning("lease of task %s not renewed: %s", live.task.id, refused.detail)
            return False
        await self.writer.put_record(live)
        return True

    async def _open_window(self, live: LiveTask, turn: int, stage: str, seconds: int) -> None:
        if live.record.claim.claim_generation != turn:
            raise ClaimError("stale_claim", "the turn's claim is no longer current")
        await self.writer.post(
            live, Op("open_window", session=self.env.session, stage=stage, window_seconds=seconds), {"stage": stage, "seconds": seconds}
        )
        await self.writer.put_record(live)

    async def _fail(self, queue: TurnQueue) -> None:
        if queue.live is None:
            if queue.replied:
                return
            queue.live = await queue.open()
        live = queue.live
        await self.writer.store_unsaved(live)
        live.fenced.add(queue.turn)
        for listener in live.listeners:
            if listener.turn == queue.turn:
                listener.queue.put_nowait(TurnFailed(live.task.id))
        if not is_terminal(live.task.status.state):
            failed = agent_status(live.task, TaskState.TASK_STATE_FAILED, FAILED_TEXT, self.env.new_id())
            await self.writer.apply(live, None, status_event_for(live.task, failed))

    async def finish_turn(self, live: LiveTask, turn: int) -> None:
        """Tell the turn's listeners it is over; streams still open across AUTH_REQUIRED follow the task on."""
        await self.writer.store_unsaved(live)
        if live.canceling is not None:
            await live.canceling.wait()
        self.writer.publish(live, turn, TurnEnded(snapshot(live.task)))
        live.listeners = [
            listener
            for listener in live.listeners
            if listener.turn != turn or live.task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
        ]
        for listener in live.listeners:
            if listener.turn == turn:
                listener.turn = None
