"""The SDK's own Python client against a real bridge: it resolves each agent's card and talks to the interface the
card lists, blocking, streaming, answering an input request, canceling, and with a bearer token."""

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import httpx
import pytest
from a2a.client import AuthInterceptor, Client, ClientCallInterceptor, ClientConfig, CredentialService, create_client
from a2a.client.client import ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.signing import create_signature_verifier

from a2a_bridge.agents.catalog import DEPLOYER_SIGNING_KEY
from tests.support import DEPLOYER_TOKEN, DIFF, ServerProcess, wait_for

R = TypeVar("R")

RUN_UNIT = "Run the unit tests for payments-api at commit 9f3c2e1"
RUN_FULL = "Run the full suite for payments-api at commit 9f3c2e1"


def message(*parts: Part, task: Task | None = None) -> Message:
    """A user message; on an existing task it carries that task's id and context id."""
    msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=list(parts))
    if task is not None:
        msg.task_id, msg.context_id = task.id, task.context_id
    return msg


def run(
    base: str,
    body: Callable[[Client], Awaitable[R]],
    config: ClientConfig | None = None,
    credentials: CredentialService | None = None,
    signature_verifier: Callable[[AgentCard], None] | None = None,
) -> R:
    """Resolve the agent's card into a client, run `body` with it, and close it."""

    async def main() -> R:
        interceptors: list[ClientCallInterceptor] | None = [AuthInterceptor(credentials)] if credentials else None
        client = await create_client(
            base, config or ClientConfig(streaming=False), interceptors=interceptors, signature_verifier=signature_verifier
        )
        async with client:
            return await body(client)

    return asyncio.run(main())


async def only_task(responses: AsyncIterator[StreamResponse]) -> Task:
    """The single task a non-streaming send yields."""
    items = [response async for response in responses]
    assert len(items) == 1 and items[0].HasField("task"), items
    return items[0].task


def status_text(task: Task) -> str:
    return " ".join(part.text for part in task.status.message.parts)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_blocking_send_completes_a_test_run(server: ServerProcess, binding: str) -> None:
    config = ClientConfig(streaming=False, supported_protocol_bindings=[binding], use_client_preference=True)

    async def body(client: Client) -> tuple[Task, Task]:
        done = await only_task(client.send_message(SendMessageRequest(message=message(Part(text=RUN_UNIT)))))
        return done, await client.get_task(GetTaskRequest(id=done.id))

    done, fetched = run(server.agent("test-runner"), body, config)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done) == "1 failed, 11 passed"
    assert [a.artifact_id for a in done.artifacts] == ["test-log", "summary"]
    assert fetched == done


def test_code_reviewer_asks_for_the_base_branch_and_completes_on_the_answer(server: ServerProcess) -> None:
    diff = Part(raw=DIFF.encode(), media_type="text/x-diff")

    async def body(client: Client) -> tuple[Task, Task]:
        asked = await only_task(
            client.send_message(SendMessageRequest(message=message(Part(text="Review this diff of payments-api"), diff)))
        )
        answered = await only_task(client.send_message(SendMessageRequest(message=message(Part(text="main"), task=asked))))
        return asked, answered

    asked, answered = run(server.agent("code-reviewer"), body)
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(asked) == "Which base branch should I compare this diff against?"
    assert (answered.id, answered.context_id) == (asked.id, asked.context_id)
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(answered) == "2 findings"
    assert answered.history[0].parts[1].raw == DIFF.encode()


def test_streaming_a_test_run_yields_its_events_in_order(server: ServerProcess) -> None:
    async def body(client: Client) -> list[StreamResponse]:
        return [r async for r in client.send_message(SendMessageRequest(message=message(Part(text=RUN_UNIT))))]

    events = run(server.agent("test-runner"), body, ClientConfig(streaming=True))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds == ["task", "status_update"] + ["artifact_update"] * 6 + ["status_update"], kinds
    first, working, *artifacts, completed = events
    task_id = first.task.id
    assert first.task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert working.status_update.status.state == TaskState.TASK_STATE_WORKING
    log = [a.artifact_update for a in artifacts[:5]]
    assert [u.artifact.artifact_id for u in log] == ["test-log"] * 5
    assert log[0].artifact.name == "test-log.txt"
    assert [u.append for u in log] == [False, True, True, True, True]
    assert [u.last_chunk for u in log] == [False, False, False, False, True]
    summary = artifacts[5].artifact_update
    assert (summary.artifact.artifact_id, summary.artifact.name, summary.last_chunk) == ("summary", "summary.json", True)
    assert summary.artifact.parts[0].data.struct_value["failed"] == 1
    assert completed.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert {e.status_update.task_id for e in (working, completed)} | {a.artifact_update.task_id for a in artifacts} == {task_id}


def test_cancel_stops_a_full_suite_run(server: ServerProcess) -> None:
    async def body(client: Client) -> tuple[Task, Task, Task]:
        request = SendMessageRequest(
            message=message(Part(text=RUN_FULL)), configuration=SendMessageConfiguration(return_immediately=True)
        )
        started = await only_task(client.send_message(request))
        canceled = await client.cancel_task(CancelTaskRequest(id=started.id))
        return started, canceled, await client.get_task(GetTaskRequest(id=started.id))

    started, canceled, fetched = run(server.agent("test-runner"), body)
    assert started.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert status_text(canceled) == "Canceled at the client's request."
    assert fetched == canceled
    log = [a for a in canceled.artifacts if a.artifact_id == "test-log"]
    assert not log or len(log[0].parts) < 8


class DeployerToken(CredentialService):
    """The deployer's bearer token, for the security scheme its card names."""

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return DEPLOYER_TOKEN if security_scheme_name == "bearer" else None


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_deployer_with_a_bearer_token_and_a_signed_card(server: ServerProcess) -> None:
    deployer = server.agent("deployer")
    verify = create_signature_verifier(lambda kid, jku: DEPLOYER_SIGNING_KEY, ["HS256"])

    async def body(client: Client) -> Task:
        return await only_task(
            client.send_message(SendMessageRequest(message=message(Part(text="Deploy build 2026.10.06-1 to staging"))))
        )

    waiting = run(deployer, body, credentials=DeployerToken(), signature_verifier=verify)
    assert waiting.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    approve_url = f"{deployer}/approve/{waiting.id}"
    assert approve_url in status_text(waiting)
    assert httpx.post(approve_url, timeout=10).status_code == 200

    def completed() -> Task | None:
        task = run(deployer, lambda c: c.get_task(GetTaskRequest(id=waiting.id)), credentials=DeployerToken())
        return task if task.status.state == TaskState.TASK_STATE_COMPLETED else None

    done = wait_for(completed, interval=0.1, what="the approved deploy to complete")
    assert status_text(done) == "Build 2026.10.06-1 is live on staging"


def test_deployer_without_a_token_is_refused(server: ServerProcess) -> None:
    async def body(client: Client) -> Task:
        return await only_task(client.send_message(SendMessageRequest(message=message(Part(text="Deploy build 1 to staging")))))

    with pytest.raises(A2AClientError, match="401"):
        run(server.agent("deployer"), body)
