"""The replica protocol on a shared database: whose live turn holds a claim (a replica lives while its session's lock
is held), cancel requests left for the replica that runs a task, the claims of replicas that died (recovered within
seconds, a pending cancel honoured), and the event log that subscribers and joined retries on any replica follow.
Wake-ups come from the other replicas' NOTIFY (`Ledger.on_notice`); the rereads on a timer are only a safety net."""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from a2a.server.context import ServerCallContext
from a2a.types import Task
from a2a.utils.errors import A2AError

from a2a_bridge.core import errors
from a2a_bridge.core.auth import owner_context
from a2a_bridge.core.claims import Claim, Op
from a2a_bridge.core.states import is_terminal
from a2a_bridge.store.ledger import HELD, Request, TaskRecord, ended
from a2a_bridge.store.store_faults import OUTAGE, StoreUnavailable, transient
from a2a_bridge.tasks.event_log import SAFETY_NET, LogFeeds, until
from a2a_bridge.tasks.host_env import HostEnv
from a2a_bridge.tasks.live_tasks import Listener, LiveTask, TaskTable, TurnEnded, last_user_message, requester
from a2a_bridge.tasks.task_writer import TaskWriter

log = logging.getLogger(__name__)

LIVENESS = 1.0
"""Seconds between checks of the sessions that hold this agent's claims: a replica that died is known within two."""


class ReplicaLink:
    """What one agent's host does for and with the other replicas on its database."""

    def __init__(self, env: HostEnv, table: TaskTable, writer: TaskWriter) -> None:
        self.env = env
        self.table = table
        self.writer = writer
        self.feeds = LogFeeds(env)
        self.joining: dict[Listener, asyncio.Future[None]] = {}
        self.dead: set[int] = set()
        """Sessions whose replica is gone: their claims are held by no one."""
        self.dying: set[int] = set()
        """Sessions found without their lock once; dead at the next check unless a cancel needed them at once."""
        self.requests = asyncio.Event()
        self.stopping: set[str] = set()
        """Tasks whose turn here a cancel request is stopping."""
        self.cancel: Callable[[str, ServerCallContext, bool], Awaitable[Task]] | None = None
        self.recover: Callable[[TaskRecord], Awaitable[None]] | None = None
        env.ledger.on_notice(self._heard)

    def _heard(self, kind: str, task_id: str, detail: str) -> None:
        if kind == "e":
            self.feeds.heard(task_id, detail)
        if kind in ("t", "e"):
            self.env.signal_change(task_id)
        elif kind == "r" and task_id in self.table.live:
            live = self.table.live[task_id]
            if live.running is not None:
                self._stop_here(task_id, live)

    def _stop_here(self, task_id: str, live: LiveTask) -> None:
        """Cancel a turn running here that another replica was asked to cancel (once, however often it is asked). The
        request stays stored, standing for the claim's record of it, until the cancel has stored the task's end; it
        is removed only then."""
        if self.cancel is None or task_id in self.stopping:
            return
        self.stopping.add(task_id)
        cancel = self.cancel

        async def stop() -> None:
            try:
                await cancel(task_id, live.owner, True)
            except StoreUnavailable:
                return  # the end is not stored yet: the request stays for the recovery of the task
            except A2AError:
                pass  # the task ended before the cancel
            finally:
                self.stopping.discard(task_id)
            try:
                await self.env.ledger.take_requests([task_id])
            except Exception:  # noqa: BLE001 - a database fault: the request is left for a task that has ended
                log.warning("cancel requests of task %s not removed; the task has ended", task_id)

        self.env.spawn(stop())

    def held_elsewhere(self, claim: Claim) -> bool:
        """Whether another replica's live turn holds the claim."""
        env = self.env
        return (
            env.ledger.shared
            and claim.state in HELD
            and claim.session_generation != env.session
            and claim.session_generation not in self.dead
            and claim.lease_until is not None
            and claim.lease_until > env.clock.now()
        )

    async def cancel_elsewhere(self, record: TaskRecord, context: ServerCallContext) -> Task:
        """Leave a cancel request for the replica that runs the task (recovering the task, the request honoured, once
        that replica is gone or its lease has run out: a paused replica's turn is not waited for), and answer once the
        task has ended: its record is reread at each notice, the task only once the record has ended."""
        env = self.env
        task_id, owner = record.task_id, owner_context(record.owner)
        await env.ledger.add_request(Request(task_id, "cancel", requester(context)), env.clock.now())
        session = record.claim.session_generation
        if not await env.ledger.session_alive(session):
            self.dead.add(session)
            await self._recover_claim(record)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * env.settings.lease.total_seconds() + SAFETY_NET
        while loop.time() < deadline:
            changed = env.changed(task_id)
            stored = await env.ledger.get(task_id)
            if ended(stored):
                task = await env.store.get(task_id, owner)
                if task is not None and is_terminal(task.status.state):
                    return task
            elif stored is not None and stored.claim.state in HELD and not self.held_elsewhere(stored.claim):
                await self._recover_claim(stored)
            await until(changed, SAFETY_NET)
        task = await env.store.get(task_id, owner)
        if task is None:
            raise errors.task_not_found(task_id)
        return task

    async def watch(
        self,
        cancel: Callable[[str, ServerCallContext, bool], Awaitable[Task]],
        recover: Callable[[TaskRecord], Awaitable[None]],
    ) -> None:
        """Honour cancel requests for turns running here (their notice starts the cancel; each round looks for those
        whose notice was missed; the request is removed once the cancel is over), recover the claims of replicas that
        died, and claims whose lease ran out."""
        env = self.env
        self.cancel, self.recover = cancel, recover
        loop = asyncio.get_running_loop()
        next_liveness = next_sweep = loop.time()
        while True:
            self.requests.clear()
            try:
                running = self.table.running()
                for request in await env.ledger.pending_requests(list(running)):
                    live = running.get(request.task_id)
                    if live is not None and request.kind == "cancel":
                        self._stop_here(request.task_id, live)
                if env.session and loop.time() >= next_liveness:
                    await self.sweep_sessions()
                    next_liveness = loop.time() + LIVENESS
                if env.session and loop.time() >= next_sweep:
                    for record in await env.ledger.expired_claims(env.clock.now()):
                        if record.agent == env.agent and record.task_id not in running:
                            await self._recover_claim(record)
                    next_sweep = loop.time() + env.settings.lease.total_seconds() / 3
            except Exception as error:  # noqa: BLE001 - a database fault: the next round tries again
                if transient(error):
                    OUTAGE.failed(error)
                else:
                    log.exception("replica watch of agent %s failed; trying again", env.agent)
            await until(self.requests, min(SAFETY_NET, max(0.0, next_liveness - loop.time())))

    async def sweep_sessions(self, at_start: bool = False) -> None:
        """Check the sessions that hold this agent's claims; recover the claims of those found gone twice in a row
        (at once `at_start`: a session that is gone when this one begins never comes back)."""
        env = self.env
        records = await env.ledger.held_by_others(env.agent, env.session)
        for session in sorted({record.claim.session_generation for record in records} - self.dead):
            if await env.ledger.session_alive(session):
                self.dying.discard(session)
            elif at_start or session in self.dying:
                log.warning("replica session %s is gone: recovering its claims of agent %s", session, env.agent)
                self.dying.discard(session)
                self.dead.add(session)
            else:
                self.dying.add(session)
        running = self.table.running()
        for record in records:
            if record.claim.session_generation in self.dead and record.task_id not in running:
                await self._recover_claim(record)

    async def _recover_claim(self, record: TaskRecord) -> None:
        """Recover a claim whose replica is gone or whose lease ran out, with the cancel requests left for it recorded on
        the claim first (so that the recovery honours them instead of running the work again)."""
        env = self.env
        live = await self.table.acquire(record.task_id, owner_context(record.owner))
        try:
            if live.canceling is not None:
                return
            await self.writer.refresh(live)
            expected = live.record.claim
            if expected.state not in HELD or live.running is not None or self.held_elsewhere(expected):
                return
            pending = [request for request in await env.ledger.take_requests([record.task_id]) if request.kind == "cancel"]
            if pending and not expected.cancellation_requested:
                self.writer.post(live, Op("request_cancel"), {"requested_by": pending[0].requested_by})
                if not await self.writer.commit_at_rest(live, expected):
                    live.record.claim = expected
                    for request in pending:
                        await env.ledger.add_request(request, env.clock.now())
                    return
            found = live.record.copy()
        finally:
            self.table.release(live)
        if self.recover is not None and found.claim.state in HELD:
            await self.recover(found)

    async def tail(self, task_id: str, owner: ServerCallContext, listener: Listener) -> None:
        """Feed a listener from the task's event log, after the revision its snapshot holds (`listener.after`)."""
        await self.feeds.follow(task_id, owner, listener)

    async def join(self, task_id: str, owner: ServerCallContext, listener: Listener, message_id: str | None) -> bool:
        """Feed a listener the turn of a message (any turn, without one) that holds the task on some replica: the task
        as stored, then the events after it, then the end of that turn. False if no such turn holds the task."""
        found = await self.env.ledger.read(task_id, self.env.store, owner)
        if found is None:
            return False
        record, task = found
        latest = last_user_message(task)
        if record.claim.state not in HELD or (
            message_id is not None and (record.signal is not None or latest is None or latest.message_id != message_id)
        ):
            return False
        listener.turn, listener.after = record.claim.claim_generation, record.revision
        listener.queue.put_nowait(task)
        await self.feeds.follow(task_id, owner, listener, record.claim.claim_generation)
        return True

    def join_winner(self, task_id: str, owner: ServerCallContext, listener: Listener) -> None:
        """The caller of a first turn that another replica opened first follows that replica's turn instead."""
        self.joining[listener] = asyncio.ensure_future(self._join_or_end(task_id, owner, listener))

    async def _join_or_end(self, task_id: str, owner: ServerCallContext, listener: Listener) -> None:
        if await self.join(task_id, owner, listener, None):
            return
        found = await self.env.ledger.read(task_id, self.env.store, owner)
        task = found[1] if found is not None else None
        if task is not None:
            listener.queue.put_nowait(task)
        listener.queue.put_nowait(TurnEnded(task))

    def untail(self, listener: Listener) -> None:
        joining = self.joining.pop(listener, None)
        if joining is not None:
            joining.cancel()
        self.feeds.unfollow(listener)
