"""The stock a2a-sdk server (its DefaultRequestHandler and routes, no bridge code), to show the SDK defects the bridge fixes."""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Task, TaskState, TaskStatus
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

ASK = "Which base branch should I compare this diff against?"
SECRET = "secret path /etc/x"
JSONRPC_PATH = "/a2a/jsonrpc"


def card(name: str) -> AgentCard:
    """A minimal card; the interface URL is not used because tests call the JSON-RPC path directly."""
    return AgentCard(
        name=name,
        description=f"{name}: a trivial agent on the stock SDK",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="demo", name="Demo", description="Shows one SDK behaviour.", tags=["demo"])],
        supported_interfaces=[AgentInterface(url=f"http://127.0.0.1{JSONRPC_PATH}", protocol_binding="JSONRPC", protocol_version="1.0")],
    )


async def open_task(context: RequestContext, event_queue: EventQueue) -> TaskUpdater:
    """Enqueue the Task the stock handler needs before any status update, and return an updater for it."""
    task_id, context_id = context.task_id or "", context.context_id or ""
    if context.current_task is None:
        assert context.message is not None
        await event_queue.enqueue_event(
            Task(id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED), history=[context.message])
        )
    return TaskUpdater(event_queue, task_id, context_id)


class AskThenAnswer(AgentExecutor):
    """First turn asks for the base branch (INPUT_REQUIRED); the answer completes the task."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        first_turn = context.current_task is None
        updater = await open_task(context, event_queue)
        if first_turn:
            await updater.requires_input(updater.new_agent_message([Part(text=ASK)]))
            return
        await updater.complete(updater.new_agent_message([Part(text=f"Reviewed against {context.get_user_input()}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class RaiseAfterWorking(AgentExecutor):
    """Creates its task, reports WORKING, then raises an exception whose text must never reach a client."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = await open_task(context, event_queue)
        await updater.start_work()
        raise RuntimeError(SECRET)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def stock_app(executor: AgentExecutor, sqlite_path: Path | None = None) -> Starlette:
    """The SDK's own JSON-RPC server for one agent, as its documentation composes it; on SQLite when a path is given."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{sqlite_path}") if sqlite_path is not None else None
    store = DatabaseTaskStore(engine) if engine is not None else InMemoryTaskStore()
    agent_card = card(type(executor).__name__)
    handler = DefaultRequestHandler(executor, store, agent_card)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        if engine is not None:
            await engine.dispose()

    routes = create_agent_card_routes(agent_card) + create_jsonrpc_routes(handler, JSONRPC_PATH)
    return Starlette(routes=routes, lifespan=lifespan)
