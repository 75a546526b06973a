"""Push notifications: the SDK's sender, delivering each task's updates in order as application/a2a+json."""

import asyncio
import logging

import httpx
from a2a.server.tasks import BasePushNotificationSender, PushNotificationConfigStore
from a2a.types import TaskArtifactUpdateEvent, TaskStatusUpdateEvent

log = logging.getLogger(__name__)

A2A_JSON = "application/a2a+json"

Update = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


async def _a2a_content_type(request: httpx.Request) -> None:
    """Webhooks carry the A2A media type, as the specification says; the SDK sends application/json."""
    request.headers["Content-Type"] = A2A_JSON


def webhook_client(timeout: float = 10.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, event_hooks={"request": [_a2a_content_type]})


class PushDispatcher:
    """Queues each task's updates and delivers them one after another, off the request path."""

    def __init__(self, sender: BasePushNotificationSender) -> None:
        self._sender = sender
        self._queues: dict[str, asyncio.Queue[Update]] = {}
        self._workers: set[asyncio.Task[None]] = set()

    @classmethod
    def over(cls, client: httpx.AsyncClient, store: PushNotificationConfigStore) -> "PushDispatcher":
        return cls(BasePushNotificationSender(client, store))

    def notify(self, task_id: str, event: Update) -> None:
        queue = self._queues.get(task_id)
        if queue is None:
            queue = self._queues[task_id] = asyncio.Queue()
            worker = asyncio.create_task(self._drain(task_id, queue))
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)
        queue.put_nowait(event)

    async def _drain(self, task_id: str, queue: "asyncio.Queue[Update]") -> None:
        while not queue.empty():
            event = queue.get_nowait()
            await self._sender.send_notification(task_id, event)
        self._queues.pop(task_id, None)

    async def drain(self) -> None:
        """Wait until every queued notification has been attempted."""
        while self._workers:
            await asyncio.wait(list(self._workers))
