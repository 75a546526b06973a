"""The push outbox's endpoints of one agent: a task's deliveries (its owner or an operator), the agent's dead letters
and their redelivery (operators)."""

from collections.abc import Callable
from typing import Any

from a2a.server.context import ServerCallContext
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from a2a_bridge.core.auth import may_see
from a2a_bridge.core.clock import iso
from a2a_bridge.http.bridge_routes import Caller, not_found, problem
from a2a_bridge.store.ledger import Delivery
from a2a_bridge.tasks.task_host import TaskHost


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery as the endpoints and the console show it."""
    return {
        "taskId": delivery.task_id,
        "configId": delivery.config_id,
        "deliveredRevision": delivery.delivered,
        "attempts": delivery.attempts,
        "nextAttempt": iso(delivery.due_at) if delivery.due_at is not None and not delivery.dead else None,
        "failingSince": iso(delivery.failing_since) if delivery.failing_since is not None else None,
        "dead": delivery.dead,
        "lastError": delivery.last_error,
    }


class WebhookEndpoints:
    """`GET /tasks/{id}/webhooks`, `POST /tasks/{id}/webhooks/redeliver` and `GET /webhooks/dead`."""

    def __init__(self, host: TaskHost, caller: Caller, is_operator: Callable[[ServerCallContext], bool]) -> None:
        self.host = host
        self.caller = caller
        self.is_operator = is_operator

    def routes(self) -> list[BaseRoute]:
        if self.host.push is None:
            return []
        return [
            Route("/tasks/{task_id}/webhooks", self.task_deliveries, methods=["GET"]),
            Route("/tasks/{task_id}/webhooks/redeliver", self.redeliver, methods=["POST"]),
            Route("/webhooks/dead", self.dead_letters, methods=["GET"]),
        ]

    async def task_deliveries(self, request: Request) -> Response:
        """A task's deliveries, one per push config that still has events to deliver or gave them up."""
        task_id = request.path_params["task_id"]
        context = self.caller(request)
        record = await self.host.ledger.get(task_id)
        visible = record is not None and record.agent == self.host.agent and (
            may_see(record.owner, record.responsible_user, context) or self.is_operator(context)
        )
        if not visible or self.host.push is None:
            return not_found(task_id)
        found = await self.host.ledger.deliveries(self.host.agent, task_id=task_id)
        return JSONResponse({"taskId": task_id, "deliveries": [delivery_view(d) for d in found]})

    async def redeliver(self, request: Request) -> Response:
        """An operator delivers a task's dead letters again (`{"configId": ...}` for one config's), from where they
        stopped."""
        task_id = request.path_params["task_id"]
        if not self.is_operator(self.caller(request)) or self.host.push is None:
            return not_found(task_id)
        try:
            body = await request.json() if await request.body() else {}
        except ValueError:
            return problem(400, "INVALID_ARGUMENT", "the body must be a JSON object")
        config_id = body.get("configId") if isinstance(body, dict) else None
        if config_id is not None and not isinstance(config_id, str):
            return problem(400, "INVALID_ARGUMENT", "configId must be a string")
        again = await self.host.push.redeliver(task_id, config_id)
        if not again:
            return problem(409, "FAILED_PRECONDITION", "No dead letter of this task to deliver again", taskId=task_id)
        return JSONResponse({"taskId": task_id, "redelivering": again})

    async def dead_letters(self, request: Request) -> Response:
        """The agent's dead letters (operators only; anyone else is told there is nothing here)."""
        if not self.is_operator(self.caller(request)) or self.host.push is None:
            return problem(404, "NOT_FOUND", "Not found")
        return JSONResponse({"deadLetters": [delivery_view(d) for d in await self.host.push.dead_letters()]})
