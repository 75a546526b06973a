"""The replica protocol on a shared database: whose live turn holds a claim, cancel requests left for the replica
that runs a task, claims whose lease ran out, and the event log that subscribers on any replica follow."""

import asyncio
from collections.abc import Awaitable, Callable

from a2a.server.context import ServerCallContext
from a2a.types import StreamResponse, Task
from google.protobuf.json_format import Parse

from a2a_bridge import claims
from a2a_bridge.claims import Claim
from a2a_bridge.host_env import HostEnv
from a2a_bridge.ledger import Request, TaskRecord
from a2a_bridge.live_tasks import Listener, LiveTask, TaskTable, requester, snapshot
from a2a_bridge.states import is_terminal
from a2a_bridge.task_writer import TaskWriter

REPLICA_POLL = 0.1
"""Seconds between rereads of the shared database while waiting on another replica."""


class ReplicaLink:
    """What one agent's host does for and with the other replicas on its database."""

    def __init__(self, env: HostEnv, table: TaskTable, writer: TaskWriter) -> None:
        self.env = env
        self.table = table
        self.writer = writer
        self.tails: dict[Listener, asyncio.Future[None]] = {}

    def held_elsewhere(self, claim: Claim) -> bool:
        """Whether another replica's live turn holds the claim."""
        env = self.env
        return (
            env.ledger.shared
            and claim.state in (claims.CLAIMED, claims.CANCEL_REQUESTED)
            and claim.session_generation != env.session
            and claim.lease_until is not None
            and claim.lease_until > env.clock.now()
        )

    async def cancel_elsewhere(self, live: LiveTask, context: ServerCallContext) -> Task:
        """Leave a cancel request for the replica that runs the task, and answer once it has ended the task."""
        env = self.env
        await env.ledger.add_request(Request(live.task.id, "cancel", requester(context)), env.clock.now())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + env.settings.lease.total_seconds()
        while loop.time() < deadline:
            task = await env.store.get(live.task.id, live.owner)
            if task is not None and is_terminal(task.status.state):
                return task
            await asyncio.sleep(REPLICA_POLL)
        await self.writer.refresh(live)
        return snapshot(live.task)

    async def watch(
        self,
        cancel: Callable[[str, ServerCallContext], Awaitable[Task]],
        recover: Callable[[TaskRecord], Awaitable[None]],
    ) -> None:
        """Take cancel requests for turns running here, and recover claims whose lease ran out."""
        env = self.env
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while True:
            running = self.table.running()
            for request in await env.ledger.take_requests(list(running)):
                live = running.get(request.task_id)
                if live is not None and request.kind == "cancel":
                    env.spawn(cancel(request.task_id, live.owner))
            if loop.time() >= next_sweep:
                for record in await env.ledger.expired_claims(env.clock.now()):
                    if record.agent == env.agent and record.task_id not in running:
                        await recover(record)
                next_sweep = loop.time() + env.settings.lease.total_seconds() / 3
            await asyncio.sleep(REPLICA_POLL)

    def tail(self, task_id: str, revision: int, listener: Listener) -> None:
        """Feed a listener from the task's event log, after the revision its snapshot holds."""
        self.tails[listener] = asyncio.ensure_future(self._tail(task_id, revision, listener))

    async def _tail(self, task_id: str, seq: int, listener: Listener) -> None:
        while True:
            for seq, body in await self.env.ledger.events_after(task_id, seq):
                update = Parse(body, StreamResponse())
                listener.queue.put_nowait(getattr(update, update.WhichOneof("payload") or "task"))
            await asyncio.sleep(REPLICA_POLL)

    def untail(self, listener: Listener) -> None:
        tail = self.tails.pop(listener, None)
        if tail is not None:
            tail.cancel()
