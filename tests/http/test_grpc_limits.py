"""The per-principal bounds on gRPC too (issue 31 item 3): streams open (counted with the JSON bindings' streams),
tasks started a minute and bytes stored, each RESOURCE_EXHAUSTED with a message naming the limit, nothing stored, and
another principal unaffected; against a real `a2a-bridge serve --grpc-port 0` process."""

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.security_support import ALICE, ALICE_TOKEN, BOB_TOKEN, OPS_TOKEN, new_id, secured_server, start
from tests.security_support import message as json_message
from tests.support import ServerProcess

QUOTA = 30_000
LIMITS = ["--limit", "max_streams=1", "--limit", "max_tasks_per_minute=2", "--limit", f"max_stored_bytes={QUOTA}"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = secured_server(tmp_path_factory.mktemp("grpc-limits"), *LIMITS, "--grpc-port", "0", store="memory")
    yield process.start()
    process.stop()


def grpc_stub(stack: ExitStack, served: ServerProcess, agent: str) -> a2a_pb2_grpc.A2AServiceStub:
    card = httpx.get(f"{served.agent(agent)}/.well-known/agent-card.json", timeout=10).json()
    (url,) = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    return a2a_pb2_grpc.A2AServiceStub(stack.enter_context(grpc.insecure_channel(url)))


def caller(token: str) -> tuple[tuple[str, str], ...]:
    return (("a2a-version", "1.0"), ("authorization", f"Bearer {token}"))


def sent(text: str) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(message_id=new_id("grpc"), role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])
    )


def task_ids(stub: a2a_pb2_grpc.A2AServiceStub, token: str) -> list[str]:
    return sorted(task.id for task in stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=caller(token)).tasks)


def exhausted(raised: pytest.ExceptionInfo[grpc.RpcError], limit: str) -> bool:
    error = raised.value
    return error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and limit in error.details()  # type: ignore[attr-defined]


def test_tasks_started_past_the_rate_are_resource_exhausted(served: ServerProcess) -> None:
    with ExitStack() as stack:
        runner = grpc_stub(stack, served, "test-runner")
        for _ in range(2):
            runner.SendMessage(sent("Run the unit tests at commit 9f3c2e1"), metadata=caller(OPS_TOKEN))
        before = task_ids(runner, OPS_TOKEN)
        with pytest.raises(grpc.RpcError) as raised:
            runner.SendMessage(sent("Run the unit tests at commit 9f3c2e1"), metadata=caller(OPS_TOKEN))
        assert exhausted(raised, "max_tasks_per_minute = 2")
        with pytest.raises(grpc.RpcError) as streamed:
            list(runner.SendStreamingMessage(sent("Run the unit tests"), metadata=caller(OPS_TOKEN), timeout=10))
        assert exhausted(streamed, "max_tasks_per_minute")
        assert task_ids(runner, OPS_TOKEN) == before, "nothing stored"


def test_bytes_past_the_quota_are_resource_exhausted(served: ServerProcess) -> None:
    with ExitStack() as stack:
        reviewer = grpc_stub(stack, served, "code-reviewer")
        padded = "Review this diff of payments-api " + "z" * (QUOTA // 2)
        reviewer.SendMessage(sent(padded), metadata=caller(BOB_TOKEN))
        before = task_ids(reviewer, BOB_TOKEN)
        with pytest.raises(grpc.RpcError) as raised:
            reviewer.SendMessage(sent(padded), metadata=caller(BOB_TOKEN))
        assert exhausted(raised, f"max_stored_bytes = {QUOTA}")
        assert task_ids(reviewer, BOB_TOKEN) == before, "nothing stored"
        reviewer.SendMessage(sent(padded), metadata=caller(ALICE_TOKEN))


def test_streams_past_the_limit_are_resource_exhausted_across_bindings(served: ServerProcess) -> None:
    runner = served.agent("test-runner")
    task = start(runner, json_message("Run the full suite for payments-api at commit 4e1c2b7"), ALICE, immediately=True)
    with ExitStack() as stack:
        held = stack.enter_context(httpx.stream("GET", f"{runner}/tasks/{task['id']}/status/stream", headers=ALICE,
                                                timeout=30))
        assert held.status_code == 200
        stub = grpc_stub(stack, served, "test-runner")
        with pytest.raises(grpc.RpcError) as raised:
            list(stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=task["id"]), metadata=caller(ALICE_TOKEN),
                                      timeout=10))
        assert exhausted(raised, "max_streams = 1")
