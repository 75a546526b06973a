"""The turn runner: one turn at a time per task, each a claim generation.

A turn moves through these steps, each posting the claim operation `claims.TRANSITIONS` names:

| step | claim operation | where |
|---|---|---|
| a new message's first event opens the task | `create`, `claim` (generation 1) | `TurnQueue.enqueue_event` -> `TaskWriter.open` |
| a follow-up, an approval or a recovery takes the task | `ask` if the claim was still held, then `resume` / `reconcile_continue` | `start_turn`, queued on `turn_lock` behind the running turn (and by compare-and-set behind another replica's) |
| the lease is renewed while the agent runs | `renew` (a third of the lease), `open_window` (a named long step) | `TurnExecution._renew`, `TurnExecution.open_window` |
| the agent reaches an interrupted or terminal state | `ask`, `complete`, `fail`, `report_cancelled` | `TaskWriter.apply` |
| the agent raises | `fail` | `TurnExecution._fail` |
| the store does not take a follow-up | `ask` (the claim handed back, the task as stored) | `_put_back` |
| a cancel stops the turn | `request_cancel`, then `report_cancelled` | `cancels.Canceller` |

An event of a turn that is not the claim's current generation in this session, or of a fenced (canceled) turn, is
dropped by `TaskWriter.apply`."""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types import Message, Part, Role, SendMessageRequest
from a2a.utils.errors import A2AError

from a2a_bridge.core import claims, errors
from a2a_bridge.core.claims import ClaimError, Op
from a2a_bridge.core.observability import about_task, left_task
from a2a_bridge.core.states import is_terminal
from a2a_bridge.core.task_events import add_user_input, new_task
from a2a_bridge.store.store_faults import StoreUnavailable, transient
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import (
    Listener,
    LiveTask,
    Pending,
    Refused,
    TaskTable,
    last_user_message,
    may_use,
    snapshot,
)
from a2a_bridge.tasks.task_writer import TaskWriter
from a2a_bridge.tasks.turn_execution import BridgeRequestContext, TurnExecution, TurnQueue

log = logging.getLogger(__name__)

MAX_QUEUE_WAIT = 3600.0
"""The longest a queued turn waits for another replica's turn to end."""
RELEASE_POLL = 1.0
"""Seconds a turn queued behind another replica's waits for that replica's notice before it reads the claim anyway."""


def too_large(limit: int) -> A2AError:
    """-32602: the message would take its task past max_task_bytes."""
    return errors.invalid_field("message", f"the task would hold more than max_task_bytes ({limit} bytes)")


class TurnRunner:
    """Starts, queues and runs the turns of one agent's tasks."""

    def __init__(
        self, env: HostEnv, table: TaskTable, writer: TaskWriter, held_elsewhere: Callable[[claims.Claim], bool]
    ) -> None:
        self.env = env
        self.table = table
        self.writer = writer
        self.held_elsewhere = held_elsewhere
        self.execution = TurnExecution(env, writer)
        self.sending: dict[tuple[str, str], asyncio.Future[Any]] = {}
        """The turn job of each message this process is sending, by (owner, messageId), until the turn ends."""

    async def send(
        self, request: SendMessageRequest, context: ServerCallContext, listener: Listener, new_task_id: str | None = None
    ) -> str:
        """Start or queue the turn for a message; the listener receives that turn's events. Returns the task id
        (`new_task_id` when the message creates a task and the caller chose its id)."""
        env = self.env
        message = request.message
        limit = env.settings.max_task_bytes
        if not message.task_id:
            if message.ByteSize() > limit:
                raise too_large(limit)
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
            if live.size() + message.ByteSize() > limit:
                raise too_large(limit)
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
            await self.execution.open_window(live, turn, stage, seconds)

        return BridgeRequestContext(
            context, request=request, task_id=live.task.id, context_id=live.task.context_id, task=snapshot(live.task),
            signal=signal, window=window,
        )

    async def _first_turn(self, pending: Pending, request: SendMessageRequest) -> None:
        queue = TurnQueue(self.writer, 1, pending=pending)
        task = pending.task

        async def window(stage: str, seconds: int) -> None:
            if queue.live is not None:
                await self.execution.open_window(queue.live, 1, stage, seconds)

        ctx = BridgeRequestContext(pending.owner, request=request, task_id=task.id, context_id=task.context_id, window=window)
        try:
            await self._register_push(task.id, request, pending.owner, 0)
            await self.execution.run(queue, ctx)
            if queue.live is None and not queue.replied and not queue.dropped:
                queue.live = await queue.open()
            if queue.live is not None:
                await self.execution.finish_turn(queue.live, queue.turn)
        except StoreUnavailable as down:
            pending.listener.queue.put_nowait(Refused(down))
        finally:
            if self.env.push is not None and (queue.live is None or queue.live.durable is None):
                self.env.push.detach(task.id, created=False)
            if queue.live is not None:
                self.table.release(queue.live)

    async def start_turn(
        self, live: LiveTask, evidence: dict[str, Any], operation: str = "resume", signal: str | None = None
    ) -> int:
        """Claim the task for a new turn (a new generation) resumed by `signal` (None for a user message), queued
        behind a turn another replica runs; returns it once stored (StoreUnavailable, nothing changed, if not)."""
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
                self.writer.post(live, Op("ask", local_operation_stopped=True), {"turn_ended": True})
            claim = self.writer.post(live, Op(operation, session=self.env.session, local_operation_stopped=True), evidence)
            previous, live.record.signal = live.record.signal, signal
            try:
                if await self.writer.commit_at_rest(live, expected):
                    return claim.claim_generation
            except StoreUnavailable:
                live.record.signal = previous
                raise
            live.record.signal = previous
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
                except StoreUnavailable as down:
                    listener.queue.put_nowait(Refused(down))
                    return
                try:
                    await self._register_push(live.task.id, request, context, live.record.revision)
                    add_user_input(live.own(), request.message, self.env.clock.now())
                    live.bytes = None
                    before = await self.writer.save(live)
                except Exception as error:
                    if self.env.push is not None:
                        self.env.push.detach(live.task.id, created=True)
                    listener.queue.put_nowait(Refused(await self._put_back(live, error)))
                    return
                listener.turn = turn
                live.listeners.append(listener)
                self.writer.publish_snapshot(live, turn, before + 1)
                await self.execution.run(TurnQueue(self.writer, turn, live=live), self._context(context, request, live, None))
                await self.execution.finish_turn(live, turn)
        finally:
            self.table.release(live)

    async def _put_back(self, live: LiveTask, error: Exception) -> A2AError:
        """Input the store did not take: the task as last stored, its claim handed back (stored now or by the retrier
        once the store is back); what the caller is told."""
        if live.durable is not None:
            live.task, live.bytes = snapshot(live.durable[0]), None
        self.writer.post(live, Op("ask", local_operation_stopped=True), {"turn_ended": True, "reason": "input not stored"})
        await self.writer.store_claim(live)
        if isinstance(error, A2AError):
            return error
        if transient(error):
            return StoreUnavailable(live.task.id)
        log.error("the input to task %s cannot be stored: %s", live.task.id, type(error).__name__)
        return errors.invalid_field("message", "the message cannot be stored")

    async def resume(self, task_id: str, context: ServerCallContext, signal: str, evidence: dict[str, Any] | None = None) -> None:
        """Start a turn that is not a user message (an operator's approval, a user's answer): returns once its claim is
        stored (StoreUnavailable if the store does not take it, ClaimError if the claim refuses it); the turn runs on
        in the background."""
        await self.resume_turn(task_id, context, signal, "resume", evidence, background=True)

    async def resume_turn(
        self,
        task_id: str,
        context: ServerCallContext,
        signal: str | None,
        operation: str,
        evidence: dict[str, Any] | None = None,
        background: bool = False,
    ) -> bool:
        """Claim the task for a turn resumed by `signal`, then run it: here, or (`background`) in a job of its own, once
        the claim is stored. False when the claim refused the turn (raised instead with `background`)."""
        live = await self.table.acquire(task_id, context)
        try:
            await live.turn_lock.acquire()
            try:
                turn = await self.start_turn(live, evidence or {"signal": signal or "continue"}, operation, signal)
            except ClaimError as refused:
                if background:
                    raise
                log.warning("could not resume task %s: %s", task_id, refused.detail)
                live.turn_lock.release()
                self.table.release(live)
                return False
        except BaseException:
            if live.turn_lock.locked():
                live.turn_lock.release()
            self.table.release(live)
            raise
        run = self._run_resumed(live, turn, context, signal)
        if background:
            self.env.spawn(run)
        else:
            await run
        return True

    async def _run_resumed(self, live: LiveTask, turn: int, context: ServerCallContext, signal: str | None) -> None:
        """Run a resumed turn whose claim is stored; releases the turn lock and the task."""
        env = self.env
        scope = about_task(env.agent, live.task.id, lambda: live.record.claim.claim_generation)
        try:
            request = SendMessageRequest(message=last_user_message(live.task) or Message(
                message_id=env.new_id(), role=Role.ROLE_USER, task_id=live.task.id,
                context_id=live.task.context_id, parts=[Part(text=signal or "continue")],
            ))
            await self.execution.run(TurnQueue(self.writer, turn, live=live), self._context(context, request, live, signal))
            await self.execution.finish_turn(live, turn)
        finally:
            live.turn_lock.release()
            self.table.release(live)
            left_task(scope)

    async def _register_push(self, task_id: str, request: SendMessageRequest, context: ServerCallContext, after: int) -> None:
        """The message's push config, delivered the task's events after revision `after`: stored with the task's next
        save (`Outbox.attach`)."""
        push = self.env.push
        if push is None or not request.configuration.HasField("task_push_notification_config"):
            return
        config = request.configuration.task_push_notification_config
        config.task_id = task_id
        if not config.id:
            config.id = self.env.new_id()
        await push.attach(config, context, after)
