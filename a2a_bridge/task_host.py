"""Runs the turns of one agent's tasks: one turn at a time per task, each event fenced, folded, stored and fanned out."""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import PushNotificationConfigStore, TaskStore
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError

from a2a_bridge import errors
from a2a_bridge.clock import Clock
from a2a_bridge.push import PushDispatcher
from a2a_bridge.states import is_interrupted, is_terminal
from a2a_bridge.task_events import Event, add_user_input, apply_event, new_task, set_status, stamp_ids

log = logging.getLogger(__name__)

FAILED_TEXT = "The agent stopped with an internal error; the task has ended."
CANCELED_TEXT = "Canceled at the client's request."


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
    """A queue fed with the events of one turn, or of every turn once `turn` is None."""

    turn: int | None = None
    snapshots: bool = False
    queue: asyncio.Queue[FeedItem] = field(default_factory=asyncio.Queue)

    def wants(self, turn: int | None) -> bool:
        return turn is None or self.turn is None or self.turn == turn


class BridgeRequestContext(RequestContext):
    """The SDK's request context, plus the signal that resumed the turn (None for a user message)."""

    def __init__(self, *args: object, signal: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.signal = signal


@dataclass(eq=False)
class LiveTask:
    """What this process holds for a task while a turn runs, a call waits or someone listens."""

    task: Task
    owner: ServerCallContext
    turn_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    save_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    listeners: list[Listener] = field(default_factory=list)
    turns: int = 0
    running: asyncio.Task[None] | None = None
    running_turn: int | None = None
    fenced: set[int] = field(default_factory=set)
    canceling: asyncio.Event | None = None
    users: int = 0


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
        self.execution: asyncio.Task[None] | None = None
        self.replied = False

    async def enqueue_event(self, event: Event) -> None:
        if self.live is None:
            assert self.pending is not None
            if isinstance(event, Message):
                self.replied = True
                self.pending.listener.queue.put_nowait(event)
                self.pending.listener.queue.put_nowait(TurnEnded(None))
                return
            self.live = await self.host.open(self, event if isinstance(event, Task) else None)
            if isinstance(event, Task):
                return
        await self.host.apply(self.live, self.turn, event)


class TaskHost:
    """One agent's tasks: its store, its executor, and the live tasks of this process."""

    def __init__(
        self,
        agent: str,
        executor: AgentExecutor,
        store: TaskStore,
        push_store: PushNotificationConfigStore | None,
        push: PushDispatcher | None,
        clock: Clock,
        new_id: Callable[[], str],
    ) -> None:
        self.agent = agent
        self.executor = executor
        self.store = store
        self.push_store = push_store
        self.push = push
        self.clock = clock
        self.new_id = new_id
        self._live: dict[str, LiveTask] = {}
        self._background: set[asyncio.Task[object]] = set()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The freshest copy of a task that the caller may see."""
        live = self._live.get(task_id)
        if live is not None:
            return snapshot(live.task) if same_owner(live.owner, context) else None
        return await self.store.get(task_id, context)

    async def _acquire(self, task_id: str, context: ServerCallContext) -> LiveTask:
        """The live record of a task, loaded from the store if needed; pair with _release."""
        live = self._live.get(task_id)
        if live is None:
            task = await self.store.get(task_id, context)
            if task is None:
                raise errors.task_not_found(task_id)
            live = self._live.setdefault(task_id, LiveTask(task=task, owner=context))
        elif not same_owner(live.owner, context):
            raise errors.task_not_found(task_id)
        live.users += 1
        return live

    def _release(self, live: LiveTask) -> None:
        live.users -= 1
        self._evict_if_idle(live)

    def _evict_if_idle(self, live: LiveTask) -> None:
        if live.users <= 0 and live.running is None and not live.listeners:
            self._live.pop(live.task.id, None)

    async def open(self, queue: TurnQueue, agent_task: Task | None) -> LiveTask:
        """Store a new task (merging what the agent sent) and publish its first snapshot."""
        pending = queue.pending
        assert pending is not None
        task = pending.task
        if agent_task is not None:
            if agent_task.history:
                del task.history[:]
                task.history.extend(agent_task.history)
            task.artifacts.extend(agent_task.artifacts)
            task.metadata.update(agent_task.metadata)
        live = LiveTask(task=task, owner=pending.owner, turns=queue.turn, users=1)
        live.running, live.running_turn = queue.execution, queue.turn
        live.listeners.append(pending.listener)
        self._live[task.id] = live
        await self._save(live)
        self._publish(live, queue.turn, snapshot(task))
        return live

    async def _save(self, live: LiveTask) -> None:
        """Store the task; canceling the turn that saves does not interrupt the write (SQLite stayed locked)."""
        await asyncio.shield(self._write(live))

    async def _write(self, live: LiveTask) -> None:
        async with live.save_lock:
            await self.store.save(live.task, live.owner)

    def _publish(self, live: LiveTask, turn: int | None, item: FeedItem) -> None:
        """Hand an item to each listener that follows this turn; blocking callers get a snapshot at interrupts."""
        at_rest = isinstance(item, TaskStatusUpdateEvent) and settled(item.status.state)
        for listener in live.listeners:
            if listener.wants(turn):
                listener.queue.put_nowait(snapshot(live.task) if at_rest and listener.snapshots else item)

    async def apply(self, live: LiveTask, turn: int | None, event: Event) -> None:
        """Fence, fold, store and fan out one event; turn None is the bridge's own event."""
        if turn in live.fenced:
            log.warning("dropped an event of fenced turn %s of task %s", turn, live.task.id)
            return
        if isinstance(event, Task):
            log.warning("ignored a second Task snapshot from the agent for task %s", live.task.id)
            return
        stamp_ids(live.task, event)
        if not apply_event(live.task, event, self.clock.now()):
            log.warning("dropped an event for ended task %s", live.task.id)
            return
        if isinstance(event, TaskStatusUpdateEvent):
            event.status.CopyFrom(live.task.status)
        await self._save(live)
        self._publish(live, turn, event)
        if self.push is not None and not isinstance(event, Message):
            self.push.notify(live.task.id, event)

    async def send(self, request: SendMessageRequest, context: ServerCallContext, listener: Listener) -> str:
        """Start or queue the turn for a message; the listener receives that turn's events. Returns the task id."""
        message = request.message
        if not message.task_id:
            task_id = self.new_id()
            context_id = message.context_id or self.new_id()
            message.task_id, message.context_id = task_id, context_id
            pending = Pending(new_task(task_id, context_id, message, self.clock.now()), context, listener)
            listener.turn = 1
            self._spawn(self._first_turn(pending, request))
            return task_id
        live = await self._acquire(message.task_id, context)
        try:
            if message.context_id and message.context_id != live.task.context_id:
                raise errors.invalid_field("message.contextId", "contextId does not match the task")
            if is_terminal(live.task.status.state):
                raise errors.task_is_terminal(live.task)
            message.context_id = live.task.context_id
        except A2AError:
            self._release(live)
            raise
        self._spawn(self._follow_up(live, request, context, listener))
        return live.task.id

    def _spawn(self, coroutine: "asyncio.Future[object] | object") -> None:
        job = asyncio.ensure_future(coroutine)  # type: ignore[arg-type]
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    async def _first_turn(self, pending: Pending, request: SendMessageRequest) -> None:
        queue = TurnQueue(self, 1, pending=pending)
        task = pending.task
        ctx = BridgeRequestContext(pending.owner, request=request, task_id=task.id, context_id=task.context_id)
        await self._register_push(task.id, request, pending.owner)
        await self._run(queue, ctx)
        if queue.live is None and not queue.replied:
            queue.live = await self.open(queue, None)
        if queue.live is not None:
            await self._finish_turn(queue.live, queue.turn)
            self._release(queue.live)

    async def _follow_up(
        self, live: LiveTask, request: SendMessageRequest, context: ServerCallContext, listener: Listener
    ) -> None:
        try:
            async with live.turn_lock:
                if live.canceling is not None:
                    await live.canceling.wait()
                if is_terminal(live.task.status.state):
                    listener.queue.put_nowait(Refused(errors.task_is_terminal(live.task)))
                    return
                live.turns += 1
                listener.turn = live.turns
                live.listeners.append(listener)
                add_user_input(live.task, request.message, self.clock.now())
                await self._save(live)
                self._publish(live, listener.turn, snapshot(live.task))
                await self._register_push(live.task.id, request, context)
                ctx = BridgeRequestContext(
                    context,
                    request=request,
                    task_id=live.task.id,
                    context_id=live.task.context_id,
                    task=snapshot(live.task),
                )
                await self._run(TurnQueue(self, listener.turn, live=live), ctx)
                await self._finish_turn(live, listener.turn)
        finally:
            self._release(live)

    def resume(self, task_id: str, context: ServerCallContext, signal: str) -> None:
        """Start, in the background, a turn that is not a user message (an operator's approval)."""
        self._spawn(self._resume(task_id, context, signal))

    async def _resume(self, task_id: str, context: ServerCallContext, signal: str) -> None:
        live = await self._acquire(task_id, context)
        try:
            async with live.turn_lock:
                if is_terminal(live.task.status.state):
                    return
                live.turns += 1
                turn = live.turns
                request = SendMessageRequest(
                    message=Message(
                        message_id=self.new_id(),
                        role=Role.ROLE_USER,
                        task_id=task_id,
                        context_id=live.task.context_id,
                        parts=[Part(text=signal)],
                    )
                )
                ctx = BridgeRequestContext(
                    context,
                    request=request,
                    task_id=task_id,
                    context_id=live.task.context_id,
                    task=snapshot(live.task),
                    signal=signal,
                )
                await self._run(TurnQueue(self, turn, live=live), ctx)
                await self._finish_turn(live, turn)
        finally:
            self._release(live)

    async def _register_push(self, task_id: str, request: SendMessageRequest, context: ServerCallContext) -> None:
        if self.push_store is None or not request.configuration.HasField("task_push_notification_config"):
            return
        config = request.configuration.task_push_notification_config
        config.task_id = task_id
        if not config.id:
            config.id = self.new_id()
        await self.push_store.set_info(task_id, config, context)

    async def _run(self, queue: TurnQueue, ctx: BridgeRequestContext) -> None:
        """Run execute() for one turn; an exception fails the task with a generic status message."""
        execution = asyncio.ensure_future(self.executor.execute(ctx, queue))
        queue.execution = execution
        if queue.live is not None:
            queue.live.running, queue.live.running_turn = execution, queue.turn
        try:
            await asyncio.wait([execution])
            execution.result()
        except asyncio.CancelledError:
            if not execution.cancelled():
                execution.cancel()
                raise
        except Exception:
            log.exception("agent %s raised in turn %s", self.agent, queue.turn)
            await self._fail(queue)
        finally:
            if queue.live is not None:
                queue.live.running, queue.live.running_turn = None, None

    async def _fail(self, queue: TurnQueue) -> None:
        if queue.live is None:
            if queue.replied:
                return
            queue.live = await self.open(queue, None)
        live = queue.live
        live.fenced.add(queue.turn)
        for listener in live.listeners:
            if listener.turn == queue.turn:
                listener.queue.put_nowait(TurnFailed(live.task.id))
        if not is_terminal(live.task.status.state):
            failed = agent_status(live.task, TaskState.TASK_STATE_FAILED, FAILED_TEXT, self.new_id())
            await self.apply(live, None, status_event_for(live.task, failed))

    async def _finish_turn(self, live: LiveTask, turn: int) -> None:
        """Tell the turn's listeners it is over; streams still open across AUTH_REQUIRED follow the task on."""
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
        """Stop the running turn, let the agent report the cancel, and end the task CANCELED."""
        live = await self._acquire(task_id, context)
        try:
            if live.canceling is not None:
                await live.canceling.wait()
            if is_terminal(live.task.status.state):
                raise errors.task_not_cancelable(live.task)
            live.canceling = asyncio.Event()
            try:
                running, turn = live.running, live.running_turn
                if running is not None and turn is not None:
                    live.fenced.add(turn)
                    running.cancel()
                    await asyncio.wait([running])
                ctx = BridgeRequestContext(
                    context, task_id=task_id, context_id=live.task.context_id, task=snapshot(live.task)
                )
                try:
                    await self.executor.cancel(ctx, TurnQueue(self, 0, live=live))
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

    async def subscribe(self, task_id: str, context: ServerCallContext) -> tuple[Task, Listener]:
        """A snapshot and a listener on every later event of a task that has not ended; pair with unsubscribe."""
        live = await self._acquire(task_id, context)
        if is_terminal(live.task.status.state):
            self._release(live)
            raise errors.task_is_terminal(live.task)
        listener = Listener()
        live.listeners.append(listener)
        self._release(live)
        return snapshot(live.task), listener

    def unsubscribe(self, task_id: str, listener: Listener) -> None:
        """Stop feeding a listener (a stream ended or its client went away)."""
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


def same_owner(owner: ServerCallContext, caller: ServerCallContext) -> bool:
    return owner.user.user_name == caller.user.user_name


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


def settled(state: "TaskState.ValueType") -> bool:
    """A blocking call returns at a terminal or interrupted state."""
    return is_terminal(state) or is_interrupted(state)
