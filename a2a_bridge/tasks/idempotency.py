"""Idempotent retries: a message a caller sends again (same messageId) is answered from what its first send produced
(the same task, or the same direct reply) and never runs the agent a second time, also after a restart and whichever
replicas receive it: the row of a message names the session sending it, a retry waits while that session lives and
takes the message over (compare-and-set) only once it is gone."""

import asyncio
import hashlib
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types import Message, SendMessageRequest, Task
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToJson, Parse

from a2a_bridge.core import claims, errors
from a2a_bridge.core.auth import owner_context
from a2a_bridge.core.states import is_terminal
from a2a_bridge.store.ledger import SentMessage, TaskRecord
from a2a_bridge.store.store_faults import StoreUnavailable, transient
from a2a_bridge.tasks.event_log import SAFETY_NET
from a2a_bridge.tasks.live_tasks import Listener, TurnEnded
from a2a_bridge.tasks.task_host import TaskHost

REPLAYED = -1
"""The turn of a listener fed from what a message's first send left rather than from a running turn."""

Key = tuple[str, str]
"""(owner, messageId)"""


def fingerprint(message: Message) -> str:
    """A digest of a message as it was sent, its messageId aside: parts, role, taskId, contextId, metadata and the rest
    (the message encoded with its messageId cleared, then put back: no copy of it)."""
    message_id = message.message_id
    message.ClearField("message_id")
    try:
        content = message.SerializeToString(deterministic=True)
    finally:
        message.message_id = message_id
    return hashlib.sha256(content).hexdigest()


def conflict(message_id: str) -> InvalidParamsError:
    """-32602 naming message.messageId: the caller sent another message under a messageId it already used."""
    return errors.invalid_field(
        "message.messageId", f"messageId {message_id} was already sent with a different message; use a new messageId"
    )


def carries(task: Task, message: Message) -> bool:
    """Whether the task holds the message: a first message always opens its task, a follow-up enters its history."""
    return not message.task_id or any(entry.message_id == message.message_id for entry in task.history)


class Retries:
    """Sends each (caller, messageId) of one agent once; what a retry gets is the same task or reply."""

    def __init__(self, host: TaskHost) -> None:
        self.host = host
        self._busy: dict[Key, asyncio.Event] = {}
        host.on_reply = self._keep_reply

    async def _enter(self, key: Key) -> asyncio.Event:
        """One decision at a time per message in this process: wait for the one under way, then take the key (hand
        the event back to `_leave`)."""
        while (busy := self._busy.get(key)) is not None:
            await busy.wait()
        done = self._busy[key] = asyncio.Event()
        return done

    def _leave(self, key: Key, done: asyncio.Event) -> None:
        del self._busy[key]
        done.set()

    async def send(self, request: SendMessageRequest, context: ServerCallContext, listener: Listener) -> str:
        """TaskHost.send for a message not sent before; for a retry, the listener gets what the first send produced
        (its turn, on whichever replica it runs). Returns the task id."""
        message = request.message
        key = (context.user.user_name, message.message_id)
        digest = fingerprint(message)
        task_id = message.task_id or self.host.new_id()
        session = self.host.env.session
        if self.host.session_lost:
            raise errors.no_session()
        while True:
            done = await self._enter(key)
            try:
                try:
                    sent = await self.host.ledger.remember(self.host.agent, *key, SentMessage(digest, task_id, None, session))
                except Exception as error:
                    if transient(error):
                        raise StoreUnavailable() from error
                    raise
                if sent is None:
                    return await self.host.send(request, context, listener, new_task_id=task_id)
                if sent.fingerprint != digest:
                    raise conflict(message.message_id)
                changed = self.host.changed(sent.task_id or "")
                answered = await self._answer(sent, request, context, listener)
                if answered is not None:
                    return answered
                job = self.host.sending.get(key)
            finally:
                self._leave(key, done)
            await self._wait(job, changed)

    async def _answer(
        self, sent: SentMessage, request: SendMessageRequest, context: ServerCallContext, listener: Listener
    ) -> str | None:
        """Feed the listener for a retry and return the task id; None while the first send is still on its way to its
        task, here or on a replica that lives. A turn on another replica that ended between the read and the join is
        answered as it ended, not as first read."""
        message = request.message
        if sent.reply is not None:
            listener.turn = REPLAYED
            listener.queue.put_nowait(Parse(sent.reply, Message()))
            listener.queue.put_nowait(TurnEnded(None))
            return sent.task_id or ""
        task_id = sent.task_id or ""
        key = (context.user.user_name, message.message_id)
        if self.host.follow(task_id, context, message.message_id, listener):
            return task_id
        if key in self.host.sending:
            return None
        found = await self.host.read(task_id, context)
        if found is not None and carries(found[1], message):
            record, task = found
            owner = owner_context(record.owner)
            if self.host.ledger.shared:
                if await self.host.replicas.join(task_id, owner, listener, message.message_id):
                    return task_id
                now = await self.host.read(task_id, context)
                if now is not None:
                    task = now[1]
            listener.turn = REPLAYED
            listener.queue.put_nowait(task)
            listener.queue.put_nowait(TurnEnded(task))
            return task_id
        if await self._sending_elsewhere(sent, found):
            return None
        session = self.host.env.session
        if sent.session != session and not await self.host.ledger.take_over(self.host.agent, *key, sent.session, session):
            return None
        return await self.host.send(request, context, listener, new_task_id=None if message.task_id else task_id)

    async def _sending_elsewhere(self, sent: SentMessage, found: tuple[TaskRecord, Task] | None) -> bool:
        """Whether another replica that still lives sent the message and may yet bring it to its task (a task that
        ended or waits for an operator would refuse it there as here)."""
        ledger = self.host.ledger
        if not ledger.shared or sent.session in (None, self.host.env.session):
            return False
        if found is not None:
            record, task = found
            if is_terminal(task.status.state) or record.claim.state == claims.NEEDS_RECONCILIATION:
                return False
        return await ledger.session_alive(sent.session or 0)

    async def _wait(self, job: asyncio.Future[Any] | None, changed: asyncio.Event) -> None:
        """Until the first send's turn here ends, its task changes, or a while has passed (a replica may die
        without a word)."""
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(changed.wait())]
        if job is not None:
            waits.append(job)
        try:
            await asyncio.wait(waits, timeout=SAFETY_NET, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waits[0].cancel()

    async def _keep_reply(self, owner: str, message_id: str, reply: Message) -> None:
        """Store an agent's direct reply with the message it answers, before the caller sees it."""
        await self.host.ledger.settle(self.host.agent, owner, message_id, None, MessageToJson(reply))
