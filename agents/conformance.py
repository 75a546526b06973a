"""conformance: the system under test of the A2A TCK for protocol 1.0. What it does on each turn is named by the
prefix of the user message's `messageId` (docs/conformance.md lists them and the TCK version they follow)."""

import asyncio
import ipaddress
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from a2a.server.agent_execution import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentProvider,
    AgentSkill,
    Message,
    Part,
    Role,
    TaskState,
)

from a2a_bridge.agents.base import Emitter, KitAgent, Pause, data_part
from a2a_bridge.push.webhooks import Address, Network, WebhookPolicy

DEFAULT_STREAMING_TIMEOUT = 2.0
"""The TCK's default `TCK_STREAMING_TIMEOUT`, in seconds."""
FILE_URL = "https://example.com/output.txt"
FILE_NAME = "output.txt"
FILE_BYTES = b"tck"
DATA = {"key": "value", "count": 42}
REQUIRED_EXTENSION = "urn:a2a:tck:required-extension"
"""The extension the TCK looks for, marked required, to check ExtensionSupportRequiredError (CORE-CAP-004)."""

LOOPBACK: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))

Behaviour = Callable[["Conformance", Emitter, RequestContext, EventQueue], Awaitable[None]]


def streaming_timeout() -> float:
    """`TCK_STREAMING_TIMEOUT` from the environment, as the TCK's SUT requirements ask a server to honour."""
    return float(os.environ.get("TCK_STREAMING_TIMEOUT") or DEFAULT_STREAMING_TIMEOUT)


@dataclass(frozen=True)
class Variant:
    """What a served conformance agent declares. The TCK checks some requirements only against a card that lacks a
    capability (CORE-CAP-001, -002) or declares one no other test can live with (a required extension fails every
    request that does not name it), so each such card is an agent of its own."""

    streaming: bool = True
    push_notifications: bool = True
    extended_card: bool = False
    """An extended card, declared and configured (CARD-EXT-001, -002)."""
    required_extension: bool = False
    """The TCK's required extension (CORE-CAP-004)."""


VARIANTS: dict[str, Variant] = {
    "conformance": Variant(),
    "conformance-extended-card": Variant(extended_card=True),
    "conformance-required-extension": Variant(required_extension=True),
    "conformance-minimal": Variant(streaming=False, push_notifications=False),
}
"""The conformance agent and its variants, by the name each is served under (docs/conformance.md)."""


def card(name: str = "conformance") -> AgentCard:
    variant = VARIANTS[name]
    capabilities = AgentCapabilities(streaming=variant.streaming, push_notifications=variant.push_notifications)
    if variant.extended_card:
        capabilities.extended_agent_card = True
    if variant.required_extension:
        capabilities.extensions.append(
            AgentExtension(uri=REQUIRED_EXTENSION, description="Required by the TCK's CORE-CAP-004", required=True)
        )
    return AgentCard(
        name=name,
        description="The system under test of the A2A TCK: each messageId prefix selects one scripted behaviour.",
        provider=AgentProvider(url="https://github.com/a2aproject/a2a-tck", organization="a2a-bridge"),
        version="1.0.0",
        capabilities=capabilities,
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="tck",
                name="TCK conformance",
                description="Answers the TCK's messages with the behaviour their messageId prefix names.",
                tags=["tck", "conformance"],
            )
        ],
    )


def extended_card(name: str) -> AgentCard | None:
    """The extended card of a variant that declares one: its card with one more skill."""
    if not VARIANTS[name].extended_card:
        return None
    extended = card(name)
    extended.skills.add(
        id="tck-extended",
        name="TCK extended card",
        description="Shown only in the extended agent card.",
        tags=["tck", "extended"],
    )
    return extended


async def loopback_resolver(_host: str, _port: int) -> list[str]:
    """Every webhook host taken as this machine: the TCK's receiver runs beside the server, and the placeholder URLs
    its configuration tests store (https://example.com/...) must be accepted without any traffic leaving it."""
    return ["127.0.0.1"]


@dataclass(frozen=True)
class LoopbackWebhooks(WebhookPolicy):
    """The conformance agent's webhook policy: loopback addresses only, host names resolved to 127.0.0.1."""

    allowed_networks: tuple[Network, ...] = LOOPBACK
    resolve: Callable[[str, int], Awaitable[list[str]]] | None = loopback_resolver

    def allows(self, address: Address) -> bool:
        return any(address in network for network in self.allowed_networks if address.version == network.version)


def text_part(text: str) -> Part:
    return Part(text=text)


def file_part() -> Part:
    return Part(raw=FILE_BYTES, media_type="text/plain", filename=FILE_NAME)


def file_url_part() -> Part:
    return Part(url=FILE_URL, media_type="text/plain", filename=FILE_NAME)


class Conformance(KitAgent):
    """Runs the behaviour the longest matching messageId prefix names; any other message completes the task."""

    repeat_safe = True

    def __init__(
        self,
        timeout: float = DEFAULT_STREAMING_TIMEOUT,
        pause: Pause = asyncio.sleep,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(0.0, pause, new_id)
        self.timeout = timeout
        """The TCK's streaming timeout: the delayed behaviours wait one or two of it."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message_id = context.message.message_id if context.message is not None else ""
        prefix = behaviour_for(message_id)
        out = self.emitter(event_queue, context)
        if prefix is None:
            await out.status(TaskState.TASK_STATE_COMPLETED, f"Unhandled messageId prefix: {message_id}")
            return
        await BEHAVIOURS[prefix](self, out, context, event_queue)

    async def wait(self, timeouts: float) -> None:
        """Wait a number of streaming timeouts."""
        await self.pause(self.timeout * timeouts)

    async def complete_task(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_COMPLETED, "Hello from TCK")

    async def delayed_complete(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_WORKING)
        await self.wait(1)
        await out.status(TaskState.TASK_STATE_COMPLETED, "Done after delay")

    async def long_running(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_WORKING)
        await self.wait(2)
        await out.status(TaskState.TASK_STATE_COMPLETED)

    async def message_response(self, _out: Emitter, context: RequestContext, queue: EventQueue) -> None:
        await queue.enqueue_event(
            Message(
                message_id=self.new_id(),
                context_id=context.context_id or "",
                role=Role.ROLE_AGENT,
                parts=[text_part("Direct message response")],
            )
        )

    async def input_required(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_INPUT_REQUIRED)

    async def auth_required(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_AUTH_REQUIRED)

    async def reject_task(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_REJECTED, "rejected")

    async def chunked(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        artifact_id = self.new_id()
        await out.status(TaskState.TASK_STATE_WORKING)
        await out.artifact(artifact_id, [text_part("chunk-1 ")])
        await out.artifact(artifact_id, [text_part("chunk-2")], append=True, last_chunk=True)
        await out.status(TaskState.TASK_STATE_COMPLETED)

    async def stream_completed(self, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_COMPLETED)


def completes_with(part: Callable[[], Part]) -> Behaviour:
    """Add one artifact holding `part`, then complete."""

    async def behaviour(agent: Conformance, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.artifact(agent.new_id(), [part()], last_chunk=True)
        await out.status(TaskState.TASK_STATE_COMPLETED)

    return behaviour


def streams(part: Callable[[], Part]) -> Behaviour:
    """Working, one artifact holding `part`, then completed: one event each on a stream."""

    async def behaviour(agent: Conformance, out: Emitter, _context: RequestContext, _queue: EventQueue) -> None:
        await out.status(TaskState.TASK_STATE_WORKING)
        await out.artifact(agent.new_id(), [part()], last_chunk=True)
        await out.status(TaskState.TASK_STATE_COMPLETED)

    return behaviour


BEHAVIOURS: dict[str, Behaviour] = {
    "tck-complete-task": Conformance.complete_task,
    "tck-delayed-complete": Conformance.delayed_complete,
    "tck-artifact-text": completes_with(lambda: text_part("Generated text content")),
    "tck-artifact-file": completes_with(file_part),
    "tck-artifact-file-url": completes_with(file_url_part),
    "tck-artifact-data": completes_with(lambda: data_part(DATA)),
    "tck-message-response": Conformance.message_response,
    "tck-input-required": Conformance.input_required,
    "tck-auth-required": Conformance.auth_required,
    "tck-reject-task": Conformance.reject_task,
    "tck-stream-001": streams(lambda: text_part("Stream hello from TCK")),
    "tck-stream-002": Conformance.stream_completed,
    "tck-stream-003": streams(lambda: text_part("Stream task lifecycle")),
    "tck-stream-ordering-001": streams(lambda: text_part("Ordered output")),
    "tck-stream-artifact-text": streams(lambda: text_part("Streamed text content")),
    "tck-stream-artifact-file": streams(file_part),
    "tck-stream-artifact-chunked": Conformance.chunked,
    "test-resubscribe-message-id": Conformance.long_running,
}
"""Each messageId prefix of the TCK's scenarios and what the agent does for it."""


def behaviour_for(message_id: str) -> str | None:
    """The longest prefix in BEHAVIOURS that `message_id` starts with (tck-artifact-file-url, not tck-artifact-file)."""
    matches = [prefix for prefix in BEHAVIOURS if message_id.startswith(prefix)]
    return max(matches, key=len, default=None)
