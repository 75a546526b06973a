"""One agent's tasks in this process: the facade the handler, the bridge's endpoints and the console call. It wires
the host's parts (docs/architecture.md): the table of live tasks, the writer that stores and publishes, the turn
runner, cancels, the lifecycle sweeps and the replica protocol."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from a2a.server.agent_execution import AgentExecutor
from a2a.server.context import ServerCallContext
from a2a.server.tasks import PushNotificationConfigStore, TaskStore
from a2a.types import SendMessageRequest, Task, TaskPushNotificationConfig

from a2a_bridge.core import errors
from a2a_bridge.core.auth import caller_name, may_see, owner_context, visible_to
from a2a_bridge.core.clock import Clock
from a2a_bridge.core.states import is_terminal
from a2a_bridge.push.outbox import Outbox
from a2a_bridge.store.ledger import Ledger, TaskRecord
from a2a_bridge.store.sql_task_store import SqlTaskStore
from a2a_bridge.store.stored_tasks import StoredTasks
from a2a_bridge.tasks.cancels import Canceller
from a2a_bridge.tasks.host_env import HostEnv, HostSettings, ReplyHook
from a2a_bridge.tasks.live_tasks import Listener, TaskTable, snapshot
from a2a_bridge.tasks.replicas import ReplicaLink
from a2a_bridge.tasks.sweeps import Sweeps
from a2a_bridge.tasks.task_writer import TaskWriter
from a2a_bridge.tasks.turns import TurnRunner


class TaskHost:
    """One agent's tasks: its store and ledger, its executor, and the live tasks of this process."""

    def __init__(
        self,
        agent: str,
        executor: AgentExecutor,
        store: TaskStore,
        ledger: Ledger,
        push_store: PushNotificationConfigStore | None,
        push: Outbox | None,
        clock: Clock,
        new_id: Callable[[], str],
        settings: HostSettings | None = None,
    ) -> None:
        self.env = HostEnv(agent, executor, store, ledger, push_store, push, clock, new_id, settings or HostSettings())
        self.table = TaskTable(agent, store, ledger, clock)
        self.writer = TaskWriter(self.env, self.table)
        self.replicas = ReplicaLink(self.env, self.table, self.writer)
        self.turns = TurnRunner(self.env, self.table, self.writer, self.replicas.held_elsewhere)
        self.cancels = Canceller(self.env, self.table, self.writer, self.replicas.held_elsewhere, self.replicas.cancel_elsewhere)
        self.sweeps = Sweeps(self.env, self.table, self.writer, self.turns)
        self.agent, self.store, self.ledger, self.new_id = agent, store, ledger, new_id
        self.push_store, self.push, self.settings = push_store, push, self.env.settings
        self.writer.join_winner = self.replicas.join_winner
        self.session_lost = False
        """Set while this process has lost its session: it takes no turn."""
        self.sending = self.turns.sending
        self.follow = self.turns.follow
        self.resume = self.turns.resume
        self.cancel = self.cancels.cancel
        self.reconcile = self.sweeps.reconcile
        self.changed = self.env.changed
        self._watchers: list[asyncio.Future[None]] = []
        self.finished = StoredTasks() if isinstance(store, SqlTaskStore) else StoredTasks(max_tasks=0)
        """Finished tasks read from a database, kept for GetTask and the Task Status (a memory store needs none, nor
        the ids its writes forget)."""
        if isinstance(store, SqlTaskStore):
            ledger.on_written(self.finished.forget)
            ledger.on_written(store.written)

    @property
    def on_reply(self) -> ReplyHook | None:
        return self.env.on_reply

    @on_reply.setter
    def on_reply(self, callback: ReplyHook | None) -> None:
        self.env.on_reply = callback

    async def start(self, session: int) -> None:
        """Take this process's session generation, recover claims of older sessions, and watch idle deadlines."""
        env = self.env
        env.session = session
        if self.push is not None:
            await self.push.start(session)
        if self.ledger.shared:
            await self.replicas.sweep_sessions(at_start=True)
        else:
            await self.sweeps.recover_stopped()
        if self.ledger.shared:
            self._watch(self.replicas.watch(self.cancel, self.sweeps.recover))
        else:
            self._watch(self.sweeps.sweep_leases())
        if env.settings.idle_lifespan is not None:
            await self.sweeps.load_idle_deadlines()
            self._watch(self.sweeps.sweep_idle())

    def _watch(self, loop: Coroutine[Any, Any, None]) -> None:
        """Run one of the host's endless loops (sweeps, the replica watch) until it stops."""
        self._watchers.append(asyncio.ensure_future(loop))

    async def stop(self, grace: float) -> None:
        """Stop within `grace` seconds: the loops end, running agents are stopped (their claims stay, recovered by
        the next process or another replica), and what their turns folded is stored if the store takes it."""
        if self.push is not None:
            await self.push.stop(grace / 2)
        for watcher in self._watchers:
            watcher.cancel()
        for live in self.table.running().values():
            if live.running is not None:
                live.running.cancel()
        jobs = set(self.env.background) | set(self._watchers)
        if jobs:
            _, late = await asyncio.wait(jobs, timeout=grace)
            for job in late:
                job.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def lose_session(self) -> None:
        """This process no longer holds its session: take no turn, and fence the turns running (their claims are
        recovered by the replicas, or here once a new session is taken)."""
        self.env.session = 0
        self.session_lost = True
        if self.push is not None:
            self.push.session = 0
        for live in self.table.running().values():
            if live.running is not None and live.running_turn is not None:
                live.fenced.add(live.running_turn)
                live.running.cancel()

    def regain_session(self, session: int) -> None:
        """A new session generation after a lost one; the old session's claims are recovered like a dead replica's."""
        self.env.session = session
        self.session_lost = False
        if self.push is not None:
            self.push.session = session

    async def send(
        self, request: SendMessageRequest, context: ServerCallContext, listener: Listener, new_task_id: str | None = None
    ) -> str:
        """TurnRunner.send, refused while this process holds no session."""
        if self.session_lost:
            raise errors.no_session()
        return await self.turns.send(request, context, listener, new_task_id)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task as last stored, if the caller may see it (from memory while this process holds it or once it has
        finished); a task the caller may not see takes the same path as one that does not exist, so the answer's
        time tells nothing."""
        held = self.table.held(task_id)
        if held is not None and may_see(held[1].owner, held[1].responsible_user, context):
            return snapshot(held[0])
        found = self._finished(task_id, context)
        if found is not None:
            return snapshot(found[0])
        since = self.finished.epoch()
        task = await self.store.get(task_id, context)
        if task is not None:
            if self.finished.active and is_terminal(task.status.state):
                record = await self.ledger.get(task_id)
                if record is not None and record.agent == self.agent:
                    self.finished.keep(snapshot(task), record, since)
            return task
        if not caller_name(context):
            return None
        found = await self.task_and_record(task_id, context)
        return found[0] if found is not None else None

    def _finished(self, task_id: str, context: ServerCallContext) -> tuple[Task, TaskRecord] | None:
        """A finished task and its record as kept (read only), if the caller may see it: one it may not see goes the
        store's way, as an unknown id does."""
        found = self.finished.get(task_id)
        if found is None or found[1].agent != self.agent:
            return None
        return found if may_see(found[1].owner, found[1].responsible_user, context) else None

    async def task_and_record(self, task_id: str, context: ServerCallContext) -> tuple[Task, TaskRecord] | None:
        """The task and its record of one revision, if the caller may see it."""
        held = self.table.held(task_id)
        if held is not None and may_see(held[1].owner, held[1].responsible_user, context):
            return snapshot(held[0]), held[1].copy()
        found = self._finished(task_id, context)
        if found is not None:
            return snapshot(found[0]), found[1].copy()
        since = self.finished.epoch()
        stored = await self.read(task_id, context)
        if stored is None:
            return None
        record, task = stored
        self.finished.keep(task, record, since)
        return snapshot(task), record.copy()

    async def read(self, task_id: str, context: ServerCallContext) -> tuple[TaskRecord, Task] | None:
        """The stored record and task of one revision, if the caller may see the task (the record read for that check
        is the consistent read's first)."""
        record = await self.ledger.get(task_id)
        if record is None or record.agent != self.agent or not may_see(record.owner, record.responsible_user, context):
            return None
        return await self.ledger.read(task_id, self.store, owner_context(record.owner), record)

    async def stored_record(self, task_id: str, caller: str) -> TaskRecord | None:
        """The record as last stored (not a copy: read only), if the caller (a principal name, '' for anonymous) may
        see the task; what a status poll compares its ETag with, without the task."""
        held = self.table.held(task_id)
        kept = self.finished.get(task_id) if held is None else None
        record = held[1] if held is not None else kept[1] if kept is not None else await self.ledger.get(task_id)
        if record is None or record.agent != self.agent:
            return None
        return record if visible_to(caller, record.owner, record.responsible_user) else None

    async def subscribe(self, task_id: str, context: ServerCallContext) -> tuple[Task, Listener]:
        """A snapshot and a listener on every later event of a task that has not ended; pair with unsubscribe.

        The snapshot is the task as stored, and the listener gets only the events of later revisions, so the two
        never overlap nor leave a gap. On a shared database the listener follows the task's event log, whichever
        replica runs its turns."""
        live = await self.table.acquire(task_id, context)
        try:
            await self.writer.refresh(live)
            while live.durable is None:
                await self.env.changed(task_id).wait()
            task, record = live.durable
            if is_terminal(task.status.state):
                raise errors.task_is_terminal(task)
            listener = Listener(after=record.revision)
            if self.ledger.shared:
                await self.replicas.tail(task_id, live.owner, listener)
            else:
                live.listeners.append(listener)
            return snapshot(task), listener
        finally:
            self.table.release(live)

    def unsubscribe(self, task_id: str, listener: Listener) -> None:
        """Stop feeding a listener (a stream ended or its client went away)."""
        self.replicas.untail(listener)
        live = self.table.live.get(task_id)
        if live is None:
            return
        try:
            live.listeners.remove(listener)
        except ValueError:
            pass
        self.table.evict_if_idle(live)

    async def add_push_config(self, config: TaskPushNotificationConfig, context: ServerCallContext) -> None:
        """A push config for a task the caller may see: delivered the task's events after its stored revision."""
        if self.push is None:
            raise errors.push_not_supported()
        record = await self.ledger.get(config.task_id)
        await self.push.add(config, context, record.revision if record is not None else 0)

    async def wait_idle(self) -> None:
        """Wait for every background turn (used at shutdown and by tests)."""
        while self.env.background:
            await asyncio.wait(list(self.env.background))

