"""The gRPC binding over the wire: `serve --grpc-port 0` puts every agent on a gRPC port of its own, listed in its card,
answered by the same handler as the JSON bindings, with their callers, limits and the specification's status codes."""

from collections.abc import Iterator

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from a2a_bridge.agents.catalog import DEPLOYER_TOKEN
from tests.support import ServerProcess, rpc
from tests.ops.test_metrics import scrape, value

VERSION = (("a2a-version", "1.0"),)


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    agents = ["conformance", "conformance-required-extension", "deployer"]
    extra = [arg for name in agents for arg in ("--agent", name)]
    process = ServerProcess("memory", extra=[*extra, "--grpc-port", "0"], env={"A2A_BRIDGE_MAX_BODY_BYTES": "4096"})
    yield process.start()
    process.stop()


def grpc_url(served: ServerProcess, agent: str) -> str:
    card = httpx.get(f"{served.agent(agent)}/.well-known/agent-card.json", timeout=10).json()
    (url,) = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    return str(url)


@pytest.fixture(scope="module")
def stub(served: ServerProcess) -> Iterator[a2a_pb2_grpc.A2AServiceStub]:
    with grpc.insecure_channel(grpc_url(served, "conformance")) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def message(message_id: str, text: str = "hi") -> a2a_pb2.Message:
    return a2a_pb2.Message(message_id=message_id, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)])


def error_reason(error: grpc.RpcError) -> str:
    """The ErrorInfo reason of a rich gRPC status (grpc-status-details-bin)."""
    details = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(details)
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info.reason


def test_each_agent_lists_a_grpc_port_of_its_own(served: ServerProcess) -> None:
    urls = {grpc_url(served, name) for name in ("conformance", "conformance-required-extension", "deployer")}
    assert len(urls) == 3 and all(url.startswith("127.0.0.1:") for url in urls)


def test_a_task_sent_over_grpc_is_the_task_the_json_bindings_see(
    served: ServerProcess, stub: a2a_pb2_grpc.A2AServiceStub
) -> None:
    sent = stub.SendMessage(a2a_pb2.SendMessageRequest(message=message("tck-complete-task-grpc1")), metadata=VERSION)
    assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    seen = rpc(served.agent("conformance"), "GetTask", {"id": sent.task.id})["result"]
    assert seen["status"]["state"] == "TASK_STATE_COMPLETED"
    events = list(stub.SendStreamingMessage(a2a_pb2.SendMessageRequest(message=message("tck-stream-001-grpc")),
                                            metadata=VERSION, timeout=30))
    assert [e.WhichOneof("payload") for e in events] == ["task", "status_update", "artifact_update", "status_update"]


@pytest.mark.parametrize(
    ("call", "code", "reason"),
    [
        ("cancel finished", grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_CANCELABLE"),
        ("unknown task", grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        ("no version", grpc.StatusCode.UNIMPLEMENTED, "VERSION_NOT_SUPPORTED"),
        ("odd media type", grpc.StatusCode.INVALID_ARGUMENT, "CONTENT_TYPE_NOT_SUPPORTED"),
        ("no extended card", grpc.StatusCode.FAILED_PRECONDITION, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        ("NUL", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS"),
        ("NaN", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS"),
    ],
)
def test_errors_have_the_specifications_status_and_reason(
    stub: a2a_pb2_grpc.A2AServiceStub, call: str, code: grpc.StatusCode, reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        if call == "cancel finished":
            done = stub.SendMessage(a2a_pb2.SendMessageRequest(message=message("tck-complete-task-g2")), metadata=VERSION)
            stub.CancelTask(a2a_pb2.CancelTaskRequest(id=done.task.id), metadata=VERSION)
        elif call == "unknown task":
            stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=VERSION)
        elif call == "no version":
            stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"))
        elif call == "odd media type":
            odd = a2a_pb2.Message(message_id="odd-1", role=a2a_pb2.ROLE_USER,
                                  parts=[a2a_pb2.Part(raw=b"tck", media_type="application/x-unsupported")])
            stub.SendMessage(a2a_pb2.SendMessageRequest(message=odd), metadata=VERSION)
        elif call == "no extended card":
            stub.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(), metadata=VERSION)
        elif call == "NUL":
            stub.SendMessage(a2a_pb2.SendMessageRequest(message=message("nul-1", "a\x00b")), metadata=VERSION)
        else:
            odd_number = message("nan-1")
            odd_number.metadata["x"] = float("nan")
            stub.SendMessage(a2a_pb2.SendMessageRequest(message=odd_number), metadata=VERSION)
    assert raised.value.code() == code  # type: ignore[attr-defined]
    assert error_reason(raised.value) == reason


def test_a_message_over_the_body_limit_is_refused(stub: a2a_pb2_grpc.A2AServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        stub.SendMessage(a2a_pb2.SendMessageRequest(message=message("big-1", "x" * 8000)), metadata=VERSION)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]


def test_an_agent_that_needs_a_token_needs_it_on_grpc_too(served: ServerProcess) -> None:
    with grpc.insecure_channel(grpc_url(served, "deployer")) as channel:
        deployer = a2a_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            deployer.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=VERSION)
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        signed_in = (*VERSION, ("authorization", f"Bearer {DEPLOYER_TOKEN}"))
        with pytest.raises(grpc.RpcError) as missing:
            deployer.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=signed_in)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        card = deployer.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(), metadata=signed_in)
        assert "rollback" in [skill.id for skill in card.skills]
        assert "GRPC" in [i.protocol_binding for i in card.supported_interfaces]
        twice = (*signed_in, ("authorization", "Bearer nobody"))
        with pytest.raises(grpc.RpcError) as refused:
            deployer.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(), metadata=twice)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, "one principal per call"  # type: ignore[attr-defined]


def test_a_required_extension_must_be_named_on_grpc(served: ServerProcess) -> None:
    with grpc.insecure_channel(grpc_url(served, "conformance-required-extension")) as channel:
        required = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.SendMessageRequest(message=message("tck-complete-task-ext"))
        with pytest.raises(grpc.RpcError) as raised:
            required.SendMessage(request, metadata=VERSION)
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
        assert error_reason(raised.value) == "EXTENSION_SUPPORT_REQUIRED"
        named = (*VERSION, ("a2a-extensions", "urn:a2a:tck:required-extension"))
        assert required.SendMessage(request, metadata=named).task.status.state == a2a_pb2.TASK_STATE_COMPLETED


def test_grpc_calls_are_counted_in_the_metrics_as_the_json_bindings_calls_are(
    served: ServerProcess, stub: a2a_pb2_grpc.A2AServiceStub
) -> None:
    labels = {"agent": "conformance", "method": "GetTask", "outcome": "TaskNotFoundError"}
    before = value(scrape(served.url), "a2a_bridge_requests_total", **labels)
    with pytest.raises(grpc.RpcError):
        stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=VERSION)
    sent = stub.SendMessage(a2a_pb2.SendMessageRequest(message=message("tck-complete-task-metrics")), metadata=VERSION)
    assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    after = scrape(served.url)
    assert value(after, "a2a_bridge_requests_total", **labels) == before + 1
    assert value(after, "a2a_bridge_requests_total", agent="conformance", method="SendMessage", outcome="ok") >= 1
