"""What the A2A TCK checks of the bindings themselves, over the wire against `a2a-bridge serve --agent conformance`
and its variants: binding paths with a trailing slash, the specification's error table on HTTP+JSON, request media
types and the answer's, the agent card's HTTP caching, push notifications to loopback, DeleteTaskPushNotificationConfig
answering `{}`, required extensions, and capabilities a card does not declare."""

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from a2a.utils.errors import A2A_ERROR_REASONS

from a2a_bridge.capture.kit import KIT_PORTS
from a2a_bridge.capture.replay import Delivery, WebhookReceiver
from a2a_bridge.http.error_codes import SPEC_TABLE
from a2a_bridge.http.rest_errors import spec_status
from tests.kit_ports import serve_on_kit_ports
from tests.support import A2A, ServerProcess, free_port, rpc, wait_for

VARIANTS = ("conformance", "conformance-extended-card", "conformance-required-extension", "conformance-minimal")
REQUIRED = "urn:a2a:tck:required-extension"
STREAMING = {"TCK_STREAMING_TIMEOUT": "0.5"}


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    """The conformance agent and its variants, on a free port."""
    args = [arg for name in VARIANTS for arg in ("--agent", name)]
    process = ServerProcess("memory", extra=args, env=STREAMING).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The conformance agent also at the root of its kit port, the TCK's default 9999 (skipped while it is taken)."""
    process = serve_on_kit_ports("memory", ["conformance"], tmp_path_factory.mktemp("kit") / "server.log", STREAMING)
    wait_for(kit_up, timeout=30, what="the kit port")
    yield process
    process.stop()


KIT = f"http://127.0.0.1:{KIT_PORTS['conformance']}"


def kit_up() -> bool:
    try:
        return httpx.get(f"{KIT}/.well-known/agent-card.json", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def message(prefix: str = "tck-complete-task") -> dict[str, Any]:
    return {"messageId": f"{prefix}-{uuid.uuid4().hex[:8]}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def envelope(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def rest(base: str, verb: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
    content = json.dumps(body).encode() if body is not None else None
    sent = {**A2A, **(headers or {})} if content is not None else {"A2A-Version": "1.0", **(headers or {})}
    return httpx.request(verb, f"{base}/a2a/rest{path}", content=content, headers=sent, timeout=30)


def reason(response: httpx.Response) -> str:
    return str(response.json()["error"]["details"][0]["reason"])


# 1. Binding paths with and without a trailing slash.


def test_both_bindings_answer_with_a_trailing_slash(served: ServerProcess) -> None:
    answers_with_a_trailing_slash(served.agent("conformance"))


def test_both_bindings_answer_with_a_trailing_slash_at_the_kit_port(kit: ServerProcess) -> None:
    answers_with_a_trailing_slash(KIT)


def answers_with_a_trailing_slash(base: str) -> None:
    rpc_answer = httpx.post(f"{base}/a2a/jsonrpc/", json=envelope("SendMessage", {"message": message()}), headers=A2A)
    assert rpc_answer.status_code == 200
    task = rpc_answer.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    got = httpx.get(f"{base}/a2a/rest/tasks/{task['id']}/", headers={"A2A-Version": "1.0"}, timeout=30)
    assert got.status_code == 200 and got.json()["id"] == task["id"]
    sent = httpx.post(f"{base}/a2a/rest/message:send/", json={"message": message()}, headers=A2A, timeout=30)
    assert sent.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_slash_does_not_reach_other_paths(served: ServerProcess) -> None:
    assert httpx.get(f"{served.agent('conformance')}/.well-known/agent-card.json/", timeout=10).status_code == 404
    assert httpx.post(f"{served.agent('conformance')}/a2a/jsonrpcx/", json={}, headers=A2A).status_code == 404


# 2. HTTP+JSON errors per the specification's table; a request body that is not JSON.


def test_the_error_table_names_every_a2a_error_of_the_sdk() -> None:
    a2a_specific = {name for name in A2A_ERROR_REASONS.values() if name in SPEC_TABLE}
    assert len(SPEC_TABLE) == 9 and a2a_specific == set(SPEC_TABLE)
    assert SPEC_TABLE["TASK_NOT_CANCELABLE"].http == 409 and SPEC_TABLE["CONTENT_TYPE_NOT_SUPPORTED"].http == 415
    assert SPEC_TABLE["INVALID_AGENT_RESPONSE"].http == 502


def test_an_invalid_agent_response_is_502_internal() -> None:
    error = {"code": 500, "status": "INTERNAL", "message": "Invalid agent response",
             "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "INVALID_AGENT_RESPONSE"}]}
    body, status = spec_status({"error": error}, 500)
    assert status == 502 and body["error"]["code"] == 502 and body["error"]["status"] == "INTERNAL"


def test_task_not_cancelable_is_409(served: ServerProcess) -> None:
    base = served.agent("conformance")
    task = rest(base, "POST", "/message:send", {"message": message()}).json()["task"]
    answer = rest(base, "POST", f"/tasks/{task['id']}:cancel", {})
    assert answer.status_code == 409 and answer.reason_phrase == "Conflict"
    assert answer.json()["error"]["code"] == 409 and answer.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert reason(answer) == "TASK_NOT_CANCELABLE"


def test_task_not_found_is_404(served: ServerProcess) -> None:
    answer = rest(served.agent("conformance"), "GET", f"/tasks/{uuid.uuid4()}")
    assert (answer.status_code, answer.json()["error"]["status"], reason(answer)) == (404, "NOT_FOUND", "TASK_NOT_FOUND")


def test_unsupported_operation_and_version_are_400_unimplemented(served: ServerProcess) -> None:
    base = served.agent("conformance")
    task = rest(base, "POST", "/message:send", {"message": message()}).json()["task"]
    follow_up = {"message": {**message(), "taskId": task["id"]}}
    ended = rest(base, "POST", "/message:send", follow_up)
    assert (ended.status_code, ended.json()["error"]["status"], reason(ended)) == (400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION")
    version = rest(base, "POST", "/message:send", {"message": message()}, headers={"A2A-Version": "99.0"})
    assert (version.status_code, version.json()["error"]["status"]) == (400, "UNIMPLEMENTED")
    assert reason(version) == "VERSION_NOT_SUPPORTED"


def test_an_unsupported_part_media_type_is_415(served: ServerProcess) -> None:
    odd = {**message(), "parts": [{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}]}
    answer = rest(served.agent("conformance"), "POST", "/message:send", {"message": odd})
    assert (answer.status_code, answer.json()["error"]["status"]) == (415, "INVALID_ARGUMENT")
    assert reason(answer) == "CONTENT_TYPE_NOT_SUPPORTED"
    over_rpc = rpc(served.agent("conformance"), "SendMessage", {"message": odd})
    assert over_rpc["error"]["code"] == -32005


def test_push_not_supported_is_400_unimplemented(served: ServerProcess) -> None:
    answer = rest(served.agent("conformance-minimal"), "POST", "/tasks/t/pushNotificationConfigs",
                  {"url": "https://example.com/hook"})
    assert (answer.status_code, answer.json()["error"]["status"]) == (400, "UNIMPLEMENTED")
    assert reason(answer) == "PUSH_NOTIFICATION_NOT_SUPPORTED"


def test_extended_card_not_configured_is_400(served: ServerProcess) -> None:
    answer = rest(served.agent("conformance"), "GET", "/extendedAgentCard")
    assert (answer.status_code, answer.json()["error"]["status"]) == (400, "FAILED_PRECONDITION")
    assert reason(answer) == "EXTENDED_AGENT_CARD_NOT_CONFIGURED"


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", None])
def test_a_body_that_is_not_json_is_content_type_not_supported(served: ServerProcess, content_type: str | None) -> None:
    base = served.agent("conformance")
    headers = {"A2A-Version": "1.0", **({"Content-Type": content_type} if content_type else {})}
    body = json.dumps({"message": message()}).encode()
    answer = httpx.post(f"{base}/a2a/rest/message:send", content=body, headers=headers, timeout=30)
    assert answer.status_code == 415 and reason(answer) == "CONTENT_TYPE_NOT_SUPPORTED"
    payload = str(envelope("SendMessage", {"message": message()})).encode()
    over_rpc = httpx.post(f"{base}/a2a/jsonrpc", content=payload, headers=headers, timeout=30)
    assert over_rpc.status_code == 200 and over_rpc.json()["error"]["code"] == -32005


def test_json_with_parameters_and_either_json_type_is_accepted(served: ServerProcess) -> None:
    base = served.agent("conformance")
    for content_type in ("application/json; charset=utf-8", "Application/A2A+JSON"):
        body = json.dumps({"message": message()}).encode()
        answer = httpx.post(f"{base}/a2a/rest/message:send", content=body,
                            headers={"A2A-Version": "1.0", "Content-Type": content_type}, timeout=30)
        assert answer.status_code == 200, answer.text


# 3. The answer's media type: Accept, else the request's Content-Type, else application/json.


@pytest.mark.parametrize(
    ("sent", "accept", "answered"),
    [
        ("application/json", None, "application/json"),
        ("application/a2a+json", None, "application/a2a+json"),
        ("application/json", "application/a2a+json", "application/a2a+json"),
        ("application/a2a+json", "application/json", "application/json"),
        ("application/a2a+json", "application/json;q=0.5, application/a2a+json", "application/a2a+json"),
        ("application/a2a+json", "*/*", "application/a2a+json"),
    ],
)
def test_the_answer_has_the_type_the_request_asked_for(
    served: ServerProcess, sent: str, accept: str | None, answered: str
) -> None:
    base = served.agent("conformance")
    headers = {"A2A-Version": "1.0", "Content-Type": sent, **({"Accept": accept} if accept else {})}
    body = json.dumps(envelope("SendMessage", {"message": message()})).encode()
    over_rpc = httpx.post(f"{base}/a2a/jsonrpc", content=body, headers=headers, timeout=30)
    assert over_rpc.headers["content-type"] == answered
    missing = httpx.post(f"{base}/a2a/rest/tasks/{uuid.uuid4()}:cancel", content=b"{}", headers=headers, timeout=30)
    assert missing.status_code == 404 and missing.headers["content-type"] == answered


def test_a_request_that_names_no_type_gets_application_json(served: ServerProcess) -> None:
    answer = httpx.get(f"{served.agent('conformance')}/a2a/rest/tasks/{uuid.uuid4()}", headers={"A2A-Version": "1.0"})
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/json"
    asked = httpx.get(f"{served.agent('conformance')}/a2a/rest/tasks/{uuid.uuid4()}",
                      headers={"A2A-Version": "1.0", "Accept": "application/a2a+json"})
    assert asked.headers["content-type"] == "application/a2a+json"


# 4. The agent card's HTTP caching.


def test_the_card_has_cache_control_an_etag_and_last_modified(served: ServerProcess) -> None:
    url = f"{served.agent('conformance')}/.well-known/agent-card.json"
    first = httpx.get(url, timeout=10)
    assert first.status_code == 200 and "max-age=" in first.headers["cache-control"]
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    assert etag.startswith('W/"') and httpx.get(url, timeout=10).headers["etag"] == etag
    assert httpx.get(url, headers={"If-None-Match": etag.removeprefix("W/")}, timeout=10).status_code == 304
    again = httpx.get(url, headers={"If-None-Match": etag}, timeout=10)
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    since = httpx.get(url, headers={"If-Modified-Since": modified}, timeout=10)
    assert since.status_code == 304
    earlier = format_datetime(datetime.now(UTC) - timedelta(days=1), usegmt=True)
    assert httpx.get(url, headers={"If-Modified-Since": earlier}, timeout=10).status_code == 200
    stale = httpx.get(url, headers={"If-None-Match": '"other"', "If-Modified-Since": modified}, timeout=10)
    assert stale.status_code == 200 and stale.json()["name"] == "conformance"
    assert httpx.get(url, headers={"If-Modified-Since": "yesterday"}, timeout=10).status_code == 200


def test_the_kit_ports_card_has_the_prefixs_etag(kit: ServerProcess) -> None:
    etag = httpx.get(f"{kit.agent('conformance')}/.well-known/agent-card.json", timeout=10).headers["etag"]
    assert httpx.get(f"{KIT}/.well-known/agent-card.json", timeout=10).headers["etag"] == etag


def test_each_agent_card_has_its_own_etag(served: ServerProcess) -> None:
    tags = {httpx.get(f"{served.agent(name)}/.well-known/agent-card.json", timeout=10).headers["etag"] for name in VARIANTS}
    assert len(tags) == len(VARIANTS)


# 5. Push notifications on, to loopback only; the variants.


def test_push_notifications_reach_a_loopback_webhook(served: ServerProcess) -> None:
    base = served.agent("conformance")
    with WebhookReceiver() as hooks:
        task = rpc(base, "SendMessage", {"message": message("tck-input-required")})["result"]["task"]
        config = {"taskId": task["id"], "id": "hook-1", "url": f"{hooks.base}/webhook",
                  "authentication": {"scheme": "Bearer", "credentials": "tck-token"}}
        created = rpc(base, "CreateTaskPushNotificationConfig", config)
        assert created["result"]["url"] == config["url"], created
        follow_up = {**message("tck-complete-task"), "taskId": task["id"], "contextId": task["contextId"]}
        assert rpc(base, "SendMessage", {"message": follow_up})["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

        def completed() -> Delivery | None:
            return next((d for d in hooks.received() if b"TASK_STATE_COMPLETED" in d.body), None)

        delivery = wait_for(completed, timeout=20, what="the completed webhook")
    assert delivery.path == "/webhook" and delivery.headers.get("authorization") == "Bearer tck-token"


def test_the_conformance_webhooks_never_leave_loopback(served: ServerProcess) -> None:
    base = served.agent("conformance")
    task = rpc(base, "SendMessage", {"message": message()})["result"]["task"]
    public = rpc(base, "CreateTaskPushNotificationConfig",
                 {"taskId": task["id"], "id": "public", "url": "https://93.184.215.14/hook"})
    assert public["error"]["code"] == -32602
    placeholder = rpc(base, "CreateTaskPushNotificationConfig",
                      {"taskId": task["id"], "id": "named", "url": "https://example.com/tck-push-webhook"})
    assert placeholder["result"]["id"] == "named"


def test_delete_push_config_answers_an_empty_object(served: ServerProcess) -> None:
    base = served.agent("conformance")
    task = rpc(base, "SendMessage", {"message": message()})["result"]["task"]
    rpc(base, "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "id": "gone", "url": f"http://127.0.0.1:{free_port()}/hook"})
    deleted = rpc(base, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "gone"})
    assert deleted["result"] == {}, deleted
    listed = rpc(base, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})["result"]
    assert listed.get("configs", []) == []


def test_a_required_extension_must_be_named(served: ServerProcess) -> None:
    base = served.agent("conformance-required-extension")
    card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=10).json()
    assert {"uri": REQUIRED, "required": True}.items() <= card["capabilities"]["extensions"][0].items()
    refused = rpc(base, "SendMessage", {"message": message()})
    assert refused["error"]["code"] == -32008
    over_rest = rest(base, "POST", "/message:send", {"message": message()})
    assert over_rest.status_code == 400 and reason(over_rest) == "EXTENSION_SUPPORT_REQUIRED"
    named = rpc(base, "SendMessage", {"message": message()}, headers={"A2A-Extensions": REQUIRED})
    assert named["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_extended_card_variant_serves_its_extended_card(served: ServerProcess) -> None:
    base = served.agent("conformance-extended-card")
    card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=10).json()
    assert card["capabilities"]["extendedAgentCard"] is True
    extended = rpc(base, "GetExtendedAgentCard", {})["result"]
    assert [skill["id"] for skill in extended["skills"]] == ["tck", "tck-extended"]


def test_a_card_without_streaming_refuses_streams(served: ServerProcess) -> None:
    base = served.agent("conformance-minimal")
    card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=10).json()
    assert card["capabilities"] == {"streaming": False, "pushNotifications": False}
    answer = httpx.post(f"{base}/a2a/jsonrpc", json=envelope("SendStreamingMessage", {"message": message()}),
                        headers=A2A, timeout=30)
    assert answer.headers["content-type"] == "application/json" and answer.json()["error"]["code"] == -32004
    subscribe = rest(base, "POST", f"/tasks/{uuid.uuid4()}:subscribe", {})
    assert subscribe.status_code == 400 and reason(subscribe) == "UNSUPPORTED_OPERATION"
