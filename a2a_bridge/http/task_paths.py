"""Under `serve --log-json`, a request whose path names a task (`/{agent}/tasks/{id}/…`, `/{agent}/approve/{id}`,
`/{agent}/a2a/rest/tasks/{id}…`, `/console/api/tasks/{id}`) runs in that task's log scope, so the server's request
log line carries the task's fields (`a2a_bridge.core.observability`)."""

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core.observability import about_task, left_task
from a2a_bridge.store.ledger import Ledger

TASK_PATH = re.compile(r"^/(?:console/api/tasks|(?P<agent>[^/]+)/(?:tasks|approve|a2a/rest/tasks))/(?P<task>[^/:?]+)")
"""A path that names a task: an agent's bridge endpoints and REST task methods, and the console's task."""


class TaskPaths:
    """ASGI middleware: a request whose path names a task runs in that task's scope, with the claim generation the
    ledger holds when the request arrives."""

    def __init__(self, app: ASGIApp, ledger: Ledger) -> None:
        self.app = app
        self.ledger = ledger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = TASK_PATH.match(str(scope.get("path", ""))) if scope["type"] == "http" else None
        record = await self.ledger.get(match["task"]) if match is not None else None
        if match is None or record is None or match["agent"] not in (None, record.agent):
            await self.app(scope, receive, send)
            return
        generation = record.claim.claim_generation
        token = about_task(record.agent, record.task_id, lambda: generation)
        try:
            await self.app(scope, receive, send)
        finally:
            left_task(token)
