"""Fronts a remote A2A agent (`serve --remote NAME=URL`): its card with the bridge's interfaces and extensions, and
`RemoteAgent`, an executor that forwards each turn with the SDK's client and mirrors the remote task into ours.

The link to the remote task (the remote URL, the remote task and context ids) is stored in our task's metadata under
`REMOTE_EXTENSION`, written by the executor's first event. Each forwarded message gets a messageId derived from our
task id and the caller's messageId, so a turn that runs again (recovery after a crash, a retry) finds its message in
the remote task's history and follows that task instead of sending it again. docs/remote.md has the whole contract."""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, cast

import httpx
from a2a.client import (
    A2AClientError,
    A2AClientTimeoutError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError, TaskNotCancelableError
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from a2a_bridge.core.states import UnknownStateError, is_interrupted, is_terminal, row_for
from a2a_bridge.remote.faults import Patience, RemoteFailure, classify
from a2a_bridge.tasks.live_tasks import canceled_text

REMOTE_EXTENSION = "urn:a2a-bridge:ext:remote:v1"
"""Our task's metadata key for its remote task: {url, taskId, contextId}."""
DEFAULT_TIMEOUT = 30.0
POLL_INTERVAL = 0.5
"""Seconds between two reads of a remote task that is followed by polling (or whose stream ended early)."""
MAX_TURN = 24 * 3600.0
"""The longest one turn follows a remote task that keeps answering."""
FORWARDED = uuid.UUID("6f1d2c1e-8a4b-4e0c-9a57-2f1b9d3c7e10")
"""Namespace of the messageIds the bridge forwards: uuid5 of (our task id, the caller's messageId)."""
MAX_REMOTES = 100
"""The most remote agents a configuration file may name."""


@dataclass(frozen=True)
class RemoteLink:
    """Where our task's turns go: the remote agent's URL (as `--remote` gave it) and the remote task's ids."""

    url: str
    task_id: str
    context_id: str

    def as_metadata(self) -> dict[str, Any]:
        return {REMOTE_EXTENSION: {"url": self.url, "taskId": self.task_id, "contextId": self.context_id}}

    @staticmethod
    def of(task: Task | None) -> "RemoteLink | None":
        """The link stored in a task's metadata, if any."""
        if task is None or REMOTE_EXTENSION not in task.metadata:
            return None
        raw = MessageToDict(task.metadata).get(REMOTE_EXTENSION)
        if not isinstance(raw, dict) or not isinstance(raw.get("taskId"), str) or not raw["taskId"]:
            return None
        return RemoteLink(str(raw.get("url", "")), raw["taskId"], str(raw.get("contextId", "")))


def forwarded_id(task_id: str, message_id: str) -> str:
    """The messageId under which the caller's message to our task is forwarded: the same on every attempt."""
    return str(uuid.uuid5(FORWARDED, f"{task_id}/{message_id}"))


def agent_message(text: str) -> Message:
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_AGENT, parts=[Part(text=text)])


def awaits(remote: Task, message_id: str) -> bool:
    """Whether the remote task waits for our message: it is interrupted and its history does not hold it."""
    return is_interrupted(remote.status.state) and all(entry.message_id != message_id for entry in remote.history)


class Mirror:
    """Writes what the remote task does into our task, each change once: our task id, the remote's content."""

    def __init__(self, queue: EventQueue, task_id: str, context_id: str, task: Task | None, url: str) -> None:
        self.queue = queue
        self.task_id = task_id
        self.context_id = context_id
        self.url = url
        self.link = RemoteLink.of(task)
        self.opened = task is not None
        self.state: TaskState.ValueType = task.status.state if task is not None else TaskState.TASK_STATE_SUBMITTED
        self.seen: set[str] = set()
        self.parts: dict[str, list[Part]] = {}
        self.progress = 0
        """Events received from the remote agent in this turn."""
        self.replied = False
        if task is not None:
            self.seen = {entry.message_id for entry in task.history}
            if task.status.HasField("message"):
                self.seen.add(task.status.message.message_id)
            self.parts = {artifact.artifact_id: list(artifact.parts) for artifact in task.artifacts}

    async def follow(self, stream: AsyncIterator[StreamResponse]) -> bool:
        """Mirror a remote stream; True once the turn is over (the stream is closed either way)."""
        async with contextlib.aclosing(cast(AsyncGenerator[StreamResponse], stream)) as events:
            async for response in events:
                self.progress += 1
                if await self.event(response):
                    return True
        return False

    async def event(self, response: StreamResponse) -> bool:
        kind = response.WhichOneof("payload")
        if kind == "task":
            return await self.snapshot(response.task)
        if kind == "message":
            return await self.message(response.message)
        if kind == "status_update":
            update = response.status_update
            await self.open(update.task_id, update.context_id)
            return await self.status(update.status)
        if kind == "artifact_update":
            update = response.artifact_update
            await self.open(update.task_id, update.context_id)
            await self.artifact(update.artifact, update.append, update.last_chunk)
            return False
        raise A2AClientError("an empty stream event")

    async def open(self, remote_task_id: str, remote_context_id: str) -> None:
        """Our task's first event: a Task carrying the link, which the host merges into the task it opens."""
        if self.link is not None:
            return
        if not remote_task_id:
            raise A2AClientError("a task event without a task id")
        self.link = RemoteLink(self.url, remote_task_id, remote_context_id)
        if self.opened:
            return
        task = Task(id=self.task_id, context_id=self.context_id)
        ParseDict(self.link.as_metadata(), task.metadata)
        await self.queue.enqueue_event(task)
        self.opened = True

    async def snapshot(self, remote: Task) -> bool:
        """Catch up with a whole remote task: new artifact parts, then its status when we have not shown it yet."""
        await self.open(remote.id, remote.context_id)
        for artifact in remote.artifacts:
            ours = self.parts.get(artifact.artifact_id)
            theirs = list(artifact.parts)
            if ours == theirs:
                continue
            if ours is not None and theirs[: len(ours)] == ours:
                chunk = Artifact()
                chunk.CopyFrom(artifact)
                del chunk.parts[:]
                chunk.parts.extend(theirs[len(ours):])
                await self.artifact(chunk, append=True, last_chunk=False)
            else:
                await self.artifact(artifact, append=False, last_chunk=False)
        force, self.replied = self.replied, False
        return await self.status(remote.status, force)

    async def status(self, status: TaskStatus, force: bool = False) -> bool:
        """Mirror a remote status we have not shown yet; True when it ends the turn (terminal or interrupted)."""
        row_for(status.state)
        if not force and not self.fresh(status):
            return False
        copy = TaskStatus()
        copy.CopyFrom(status)
        update = TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=copy)
        await self.queue.enqueue_event(update)
        self.state = status.state
        if status.HasField("message"):
            self.seen.add(status.message.message_id)
        return is_terminal(status.state) or is_interrupted(status.state)

    def fresh(self, status: TaskStatus) -> bool:
        """A status is new unless its message is one we already hold, or it repeats our state without a message."""
        if is_terminal(status.state):
            return not is_terminal(self.state)
        if status.HasField("message"):
            return status.message.message_id not in self.seen
        return status.state != self.state

    async def artifact(self, artifact: Artifact, append: bool, last_chunk: bool) -> None:
        parts = self.parts.get(artifact.artifact_id)
        if append and parts is not None:
            parts.extend(artifact.parts)
        else:
            self.parts[artifact.artifact_id] = list(artifact.parts)
        copy = Artifact()
        copy.CopyFrom(artifact)
        await self.queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=self.task_id, context_id=self.context_id, artifact=copy, append=append, last_chunk=last_chunk
            )
        )

    async def message(self, message: Message) -> bool:
        """A direct reply ends a first turn without a task; on a task it enters the history and the next read of the
        remote task decides how the turn ends."""
        reply = Message()
        reply.CopyFrom(message)
        reply.context_id = self.context_id
        if not self.opened:
            reply.task_id = ""
            await self.queue.enqueue_event(reply)
            return True
        reply.task_id = self.task_id
        self.seen.add(reply.message_id)
        self.replied = True
        await self.queue.enqueue_event(reply)
        return False

    async def end(self, state: "TaskState.ValueType", text: str) -> None:
        """Our own status when the remote agent cannot say (a failure, a cancel it could not confirm)."""
        message = agent_message(text)
        await self.queue.enqueue_event(
            TaskStatusUpdateEvent(
                task_id=self.task_id, context_id=self.context_id, status=TaskStatus(state=state, message=message)
            )
        )


class RemoteAgent(AgentExecutor):
    """Forwards each turn of our task to a remote A2A agent and mirrors the remote task into ours."""

    repeat_safe = True
    """A turn run again after a crash does not run the remote turn again: it finds its forwarded messageId in the
    remote task's history (or the remote task past waiting for it) and follows that task instead."""

    def __init__(self, name: str, card: AgentCard, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.name = name
        self.card = card
        self.url = url
        self.timeout = timeout
        self.streaming = card.capabilities.streaming

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        """The SDK's client for the remote card, on an HTTP client of this turn whose calls time out."""
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            config = ClientConfig(
                streaming=self.streaming,
                polling=not self.streaming,
                httpx_client=http,
                supported_protocol_bindings=[TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON],
            )
            client = ClientFactory(config).create(self.card)
            try:
                yield client
            finally:
                await client.close()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None and context.task_id is not None and context.context_id is not None
        mirror = Mirror(event_queue, context.task_id, context.context_id, context.current_task, self.url)
        outgoing = Message()
        outgoing.CopyFrom(message)
        outgoing.message_id = forwarded_id(context.task_id, message.message_id)
        del outgoing.reference_task_ids[:]
        try:
            async with self._client() as client:
                await self._turn(client, mirror, outgoing)
        except RemoteFailure as failure:
            await mirror.end(TaskState.TASK_STATE_FAILED, failure.text)

    async def _turn(self, client: Client, mirror: Mirror, outgoing: Message) -> None:
        """Send or find, then follow, until the remote task ends or waits; failures retried within Patience."""
        patience = Patience(self.name, self.timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MAX_TURN
        while loop.time() < deadline:
            if await patience.retry(self._attempt, client, mirror, outgoing, patience):
                return
            await asyncio.sleep(POLL_INTERVAL)
        raise RemoteFailure(f"The remote agent {self.name} did not finish the turn within {MAX_TURN:g} s.", "too long")

    async def _attempt(self, client: Client, mirror: Mirror, outgoing: Message, patience: Patience) -> bool:
        """One step, its failure judged: True once the turn is over; False when it is not, or when a transient failure
        came after progress (the next round of retries counts from there)."""
        progress = mirror.progress
        try:
            return await self._step(client, mirror, outgoing, patience)
        except (A2AError, httpx.HTTPError, ParseError, ValueError) as error:
            problem = classify(error, self.timeout)
            if problem.vanished and mirror.link is not None:
                raise RemoteFailure(
                    f"The remote agent {self.name} no longer has task {mirror.link.task_id}: the remote task "
                    "vanished, and with it the work of this turn.",
                    problem.detail,
                ) from None
            if mirror.link is None and problem.network and not problem.undelivered:
                raise RemoteFailure(
                    f"The remote agent {self.name} did not confirm the message ({problem.detail}); it was not "
                    "sent again, so that it cannot run twice.",
                    problem.detail,
                ) from None
            if mirror.link is None and not problem.undelivered:
                problem = replace(problem, transient=False)
            if problem.transient and mirror.progress != progress:
                return False
            raise patience.failure(problem) from None

    async def _step(self, client: Client, mirror: Mirror, outgoing: Message, patience: Patience) -> bool:
        """One attempt: send the message, or read the remote task and follow it; True once the turn is over."""
        call = ClientCallContext(timeout=patience.budget())
        link = mirror.link
        if link is None:
            outgoing.task_id = ""
            return await self._quiet(mirror, client.send_message(SendMessageRequest(message=outgoing), context=call))
        remote = await client.get_task(GetTaskRequest(id=link.task_id), context=call)
        if awaits(remote, outgoing.message_id):
            outgoing.task_id, outgoing.context_id = link.task_id, link.context_id
            return await self._quiet(mirror, client.send_message(SendMessageRequest(message=outgoing), context=call))
        if await mirror.snapshot(remote):
            return True
        if not self.streaming:
            return False
        return await self._quiet(mirror, client.subscribe(SubscribeToTaskRequest(id=link.task_id), context=call))

    @staticmethod
    async def _quiet(mirror: Mirror, stream: AsyncIterator[StreamResponse]) -> bool:
        """Follow a stream; once the remote task is known, a stream quiet for the whole timeout only ends the step
        (the next one reads the task, whose own timeout tells a busy remote agent from a gone one)."""
        try:
            return await mirror.follow(stream)
        except A2AClientTimeoutError:
            if mirror.link is None:
                raise
            return False

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Forward the cancel and mirror how the remote task ended; without a confirmation, say so in our status."""
        task = context.current_task
        link = RemoteLink.of(task)
        if task is None or link is None or context.task_id is None or context.context_id is None:
            return
        mirror = Mirror(event_queue, context.task_id, context.context_id, task, self.url)
        try:
            async with self._client() as client:
                remote = await self._cancel_remote(client, link)
            if is_terminal(remote.status.state):
                await mirror.snapshot(remote)
                return
            detail = f"its task is still {TaskState.Name(remote.status.state)}"
        except RemoteFailure as failure:
            detail = failure.detail
        except UnknownStateError:
            detail = "it reported a task state the bridge does not know"
        await mirror.end(
            TaskState.TASK_STATE_CANCELED,
            f"{canceled_text(context.call_context).removesuffix('.')}; the remote agent {self.name} did not confirm the"
            f" cancel: {detail}.",
        )

    async def _cancel_remote(self, client: Client, link: RemoteLink) -> Task:
        """CancelTask on the remote task; the task as it ended when it had ended first."""
        patience = Patience(self.name, self.timeout)

        async def attempt() -> Task:
            call = ClientCallContext(timeout=patience.budget())
            try:
                try:
                    return await client.cancel_task(CancelTaskRequest(id=link.task_id), context=call)
                except TaskNotCancelableError:
                    return await client.get_task(GetTaskRequest(id=link.task_id), context=call)
            except (A2AError, httpx.HTTPError, ParseError, ValueError) as error:
                raise patience.failure(classify(error, self.timeout)) from None

        return await patience.retry(attempt)
