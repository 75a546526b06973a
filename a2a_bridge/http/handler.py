"""The bridge's A2A request handler: the SDK's RequestHandler interface over a TaskHost."""

import asyncio
import functools
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Concatenate, ParamSpec, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.server.tasks import PushNotificationConfigStore
from a2a.types import (
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import ExtendedAgentCardNotConfiguredError, InvalidParamsError

from a2a_bridge.core import errors
from a2a_bridge.core.auth import RESPONSIBLE_USER
from a2a_bridge.core.config import Limits
from a2a_bridge.core.history_length import with_history_length
from a2a_bridge.core.states import is_terminal
from a2a_bridge.http.message_checks import MAX_ID, HistoryParams, check_history_length, check_message, history_length
from a2a_bridge.push.webhooks import WebhookPolicy
from a2a_bridge.store.store_faults import READ_ATTEMPTS, as_request
from a2a_bridge.tasks.delegation import responsible_user
from a2a_bridge.tasks.idempotency import Retries
from a2a_bridge.tasks.live_tasks import (
    Listener,
    Refused,
    TurnEnded,
    TurnFailed,
    blocking_answer,
    ends_stream,
    status_event_for,
)
from a2a_bridge.tasks.task_host import TaskHost


HTTP_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
"""An HTTP authentication scheme name (RFC 9110 token)."""


def header_safe(value: str) -> bool:
    """Whether a value can be sent as an HTTP header value: printable ASCII, at most 4,096 characters."""
    return len(value) <= 4096 and all(" " <= c <= "~" for c in value)


P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[Concatenate["BridgeRequestHandler", P], Awaitable[R]]


def store_faults_answered(attempts: int = 1) -> Callable[[Method[P, R]], Method[P, R]]:
    """A handler method whose transient store failures answer "store unavailable" (`store_faults.as_request`); a
    method that only reads tries `attempts` times first."""

    def decorate(method: Method[P, R]) -> Method[P, R]:
        @functools.wraps(method)
        async def answer(self: "BridgeRequestHandler", *args: P.args, **kwargs: P.kwargs) -> R:
            return await as_request(lambda: method(self, *args, **kwargs), attempts)

        return answer

    return decorate


class BridgeRequestHandler(RequestHandler):
    """Serves one agent's A2A methods; every turn runs through the agent's TaskHost."""

    def __init__(
        self,
        card: AgentCard,
        host: TaskHost,
        extended_card: AgentCard | None = None,
        interfaces: Callable[[str], list[AgentInterface]] | None = None,
        retries: bool = True,
        limits: Limits | None = None,
        webhooks: WebhookPolicy | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.webhooks = webhooks or WebhookPolicy()
        self.card = card
        self.input_modes = frozenset(card.default_input_modes)
        """The media types the card takes (`defaultInputModes`), read once."""
        self.extended_card = extended_card
        self.interfaces = interfaces
        self.host = host
        self._push_configs_added = asyncio.Lock()
        """Held from counting a task's push configs to adding one, so that the count holds."""
        self.send = Retries(host).send if retries else host.send
        """Starts a message's turn: through the retry guard unless the agent turns retries off."""

    def _check_message(self, params: SendMessageRequest) -> None:
        check_message(params, self.limits, self.input_modes, self.card.capabilities.push_notifications)

    def _check_history_length(self, params: HistoryParams, name: str) -> None:
        check_history_length(params, name, self.limits.max_history)

    def _history(self, task: Task, params: HistoryParams | None) -> Task:
        """The task with the history asked for, and never more than the history limit."""
        return with_history_length(task, self._history_length(params))

    def _history_length(self, params: HistoryParams | None) -> int:
        """The most messages of history a reply holds: those asked for, and never more than the history limit."""
        return history_length(params, self.limits.max_history)

    async def _check_webhook(self, config: TaskPushNotificationConfig, prefix: str) -> None:
        """A webhook config the bridge will deliver to: an allowed URL, and authentication and token that fit in
        HTTP headers (the SDK sends nothing when the scheme or the credentials are missing)."""
        if not config.url:
            raise errors.invalid_field(f"{prefix}url", "url is required")
        if len(config.id) > MAX_ID:
            raise errors.invalid_field(f"{prefix}id", f"id may have at most {MAX_ID} characters")
        reason = await self.webhooks.refusal(config.url)
        if reason is not None:
            raise errors.invalid_field(f"{prefix}url", reason)
        if config.token and not header_safe(config.token):
            raise errors.invalid_field(f"{prefix}token", "token must be printable ASCII")
        if config.HasField("authentication"):
            auth = config.authentication
            if not auth.scheme or not HTTP_TOKEN.fullmatch(auth.scheme):
                raise errors.invalid_field(
                    f"{prefix}authentication.scheme", "scheme must be an HTTP scheme such as Bearer"
                )
            if not auth.credentials or not header_safe(auth.credentials):
                raise errors.invalid_field(
                    f"{prefix}authentication.credentials", "credentials are required, as printable ASCII"
                )

    async def _checked(self, params: SendMessageRequest, context: ServerCallContext) -> None:
        """Everything checked before a message is sent: its content, its webhook, and on whose behalf it is."""
        self._check_message(params)
        if params.configuration.HasField("task_push_notification_config"):
            config = params.configuration.task_push_notification_config
            if params.message.task_id and self.host.push_store is not None:
                await self._owned_task(params.message.task_id, context)
                await self._check_push_room(self.host.push_store, params.message.task_id, config.id, context)
            await self._check_webhook(config, "configuration.taskPushNotificationConfig.")
        if not params.message.task_id:
            person = await responsible_user(params.message, context, self.host.ledger)
            if person is not None:
                context.state[RESPONSIBLE_USER] = person

    @store_faults_answered()
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        await self._checked(params, context)
        immediate = params.configuration.return_immediately
        history = self._history_length(params.configuration)
        listener = Listener(snapshots=True, settled_only=not immediate, history=history if history >= 0 else None)
        task_id = await self.send(params, context, listener)
        try:
            answer = await blocking_answer(listener, immediate)
            return answer if isinstance(answer, Message) else with_history_length(answer, history)
        finally:
            self.host.unsubscribe(task_id, listener)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        self._check_streaming()
        await as_request(lambda: self._checked(params, context))
        listener = Listener()
        task_id = await as_request(lambda: self.send(params, context, listener))
        try:
            async for event in _stream(listener):
                yield self._history(event, None) if isinstance(event, Task) else event
        finally:
            self.host.unsubscribe(task_id, listener)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        self._check_streaming()
        task, listener = await as_request(lambda: self.host.subscribe(params.id, context), READ_ATTEMPTS)
        try:
            yield self._history(task, None)
            async for event in _stream(listener):
                yield self._history(event, None) if isinstance(event, Task) else event
        finally:
            self.host.unsubscribe(params.id, listener)

    def _check_streaming(self) -> None:
        """Streaming methods of an agent whose card declares no streaming are refused (specification 3.3.4)."""
        if not self.card.capabilities.streaming:
            raise errors.streaming_not_supported()

    @store_faults_answered(READ_ATTEMPTS)
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        self._check_history_length(params, "historyLength")
        task = await self.host.get(params.id, context)
        if task is None:
            raise errors.task_not_found(params.id)
        return self._history(task, params)

    @store_faults_answered(READ_ATTEMPTS)
    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        if params.page_size < 0 or params.page_size > 100:
            raise errors.invalid_field("pageSize", "pageSize must be between 1 and 100")
        self._check_history_length(params, "historyLength")
        if params.status not in TaskState.values():
            raise errors.invalid_field("status", "status is not a TaskState")
        try:
            response = await self.host.store.list(params, context)
        except InvalidParamsError as e:
            raise errors.invalid_field("pageToken", "pageToken is not one this server issued") from e
        for index, task in enumerate(response.tasks):
            response.tasks[index].CopyFrom(self._history(task, params))
        return response

    @store_faults_answered()
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        return await self.host.cancel(params.id, context)

    def _push_store(self) -> PushNotificationConfigStore:
        if not self.card.capabilities.push_notifications or self.host.push_store is None:
            raise errors.push_not_supported()
        return self.host.push_store

    async def _owned_task(self, task_id: str, context: ServerCallContext) -> Task:
        task = await self.host.get(task_id, context)
        if task is None:
            raise errors.task_not_found(task_id)
        return task

    @store_faults_answered()
    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        store = self._push_store()
        await self._owned_task(params.task_id, context)
        await self._check_webhook(params, "")
        config = TaskPushNotificationConfig()
        config.CopyFrom(params)
        config.tenant = ""
        if not config.id:
            config.id = self.host.new_id()
        async with self._push_configs_added:
            await self._check_push_room(store, params.task_id, config.id, context)
            await self.host.add_push_config(config, context)
        return config

    async def _check_push_room(
        self, store: PushNotificationConfigStore, task_id: str, config_id: str, context: ServerCallContext
    ) -> None:
        """A new config (an id the caller's configs of the task do not have yet) only while they are fewer than
        max_push_configs; the store keeps and lists a task's configs per owner, so each principal has its own."""
        configs = await store.get_info(task_id, context)
        limit = self.limits.max_push_configs
        if len(configs) >= limit and all(c.id != config_id for c in configs):
            raise errors.invalid_field(
                "taskId", f"a caller may set at most {limit} push notification configs on a task (max_push_configs)"
            )

    @store_faults_answered(READ_ATTEMPTS)
    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        store = self._push_store()
        await self._owned_task(params.task_id, context)
        for config in await store.get_info(params.task_id, context):
            if config.id == params.id:
                return config
        raise errors.task_not_found(params.task_id)

    @store_faults_answered(READ_ATTEMPTS)
    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        store = self._push_store()
        await self._owned_task(params.task_id, context)
        return ListTaskPushNotificationConfigsResponse(configs=await store.get_info(params.task_id, context))

    @store_faults_answered()
    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        store = self._push_store()
        await self._owned_task(params.task_id, context)
        await store.delete_info(params.task_id, context, params.id)

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        if self.extended_card is None:
            raise ExtendedAgentCardNotConfiguredError("Extended agent card is not configured")
        card = AgentCard()
        card.CopyFrom(self.extended_card)
        if self.interfaces is not None:
            card.supported_interfaces.extend(self.interfaces(context.state.get("base_url", "")))
        return card


async def _stream(listener: Listener) -> AsyncGenerator[Event]:
    """The frames of one stream: until a terminal state, INPUT_REQUIRED, a task that has ended (a retry of a finished
    message), or a turn that leaves nothing to wait for. A stream told its turn is over with the task ended (a turn
    fenced by the writer that ended it elsewhere) ends with the task's terminal status all the same."""
    while True:
        item = await listener.queue.get()
        if isinstance(item, Refused):
            raise item.error
        if isinstance(item, TurnFailed):
            raise errors.agent_failed(item.task_id)
        if isinstance(item, TurnEnded):
            if item.task is not None and is_terminal(item.task.status.state):
                yield status_event_for(item.task, item.task.status)
                return
            if item.task is None or listener.turn is not None:
                return
            continue
        yield item
        if isinstance(item, TaskStatusUpdateEvent) and ends_stream(item.status.state):
            return
        if isinstance(item, Task) and is_terminal(item.status.state):
            return
