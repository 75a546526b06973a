"""A hostile caller against the bridge (issue 15): the approval link checked against the task's owner, one principal a
request, the demo operator token gone once principals exist, Host and Origin checks, `A2A-Version` in the query only
where the spec allows it, `params` that are not an object, cards that never sign a caller's Host, and the console's
response headers. Each test runs a real server on 127.0.0.1 and talks to it over HTTP."""

import base64
import re
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import AgentCard
from a2a.utils.signing import create_signature_verifier
from google.protobuf.json_format import ParseDict

from a2a_bridge.agents.catalog import DEPLOYER_SIGNING_KEY
from tests.security_support import message, new_id, normalized, start, wait_state
from tests.support import A2A, DEPLOYER_TOKEN, ServerProcess, rpc

ALICE = {"Authorization": "Bearer usr_alice_hard"}
BOB = {"Authorization": "Bearer usr_bob_hard"}
OPS = {"Authorization": "Bearer ops_hard_91"}
DEMO_OPS = {"Authorization": "Bearer ops_demo_5b9e"}
DEPLOYER = {"Authorization": f"Bearer {DEPLOYER_TOKEN}"}
USERS = ["--user-token", "usr_alice_hard=alice", "--user-token", "usr_bob_hard=bob", "--operator-token", "ops_hard_91"]
DEPLOY = "Deploy build 2026.10.06-1 to staging"


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A bridge with named users and an operator of its own: no demo operator token."""
    db = tmp_path_factory.mktemp("hardening") / "named.db"
    server = ServerProcess(f"sqlite:///{db}", extra=USERS).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The default demo: no principals configured."""
    db = tmp_path_factory.mktemp("hardening") / "demo.db"
    server = ServerProcess(f"sqlite:///{db}").start()
    yield server
    server.stop()


def waiting_deploy(server: ServerProcess, headers: dict[str, str]) -> str:
    """A staging deploy waiting in AUTH_REQUIRED for an operator's approval; its id."""
    base = server.agent("deployer")
    task = start(base, message(DEPLOY), headers, immediately=True)
    wait_state(base, task["id"], headers, "TASK_STATE_AUTH_REQUIRED")
    return task["id"]


def approve(server: ServerProcess, task_id: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.agent('deployer')}/approve/{task_id}", headers=headers or {}, timeout=30)


def resume_evidence(server: ServerProcess, agent: str, task_id: str, headers: dict[str, str]) -> dict[str, Any]:
    """The evidence of the task's last resume, from its claim view."""
    response = httpx.get(f"{server.agent(agent)}/tasks/{task_id}/claim", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    resumes = [event for event in response.json()["events"] if event["operation"] == "resume"]
    assert resumes, response.json()
    return resumes[-1]["evidence"]


def test_only_an_operator_approves_a_named_users_deploy_and_others_get_the_unknown_task_answer(
    named: ServerProcess,
) -> None:
    task_id = waiting_deploy(named, ALICE)
    unknown = normalized(approve(named, "no-such-task"), "no-such-task")
    for who in ({}, ALICE, BOB, {"Authorization": "Bearer ops_demo_5b9e"}):
        answer = approve(named, task_id, who)
        assert normalized(answer, task_id) == unknown, (who, answer.text)
    assert get_state(named, task_id, ALICE) == "TASK_STATE_AUTH_REQUIRED", "a refused approval changed the task"
    assert approve(named, task_id, OPS).json() == {"approved": True, "taskId": task_id}
    wait_state(named.agent("deployer"), task_id, ALICE, "TASK_STATE_COMPLETED")
    assert resume_evidence(named, "deployer", task_id, OPS) == {"signal": "approved", "by": "operator"}


def test_in_the_demo_an_anonymous_caller_approves_the_demo_clients_deploy_and_is_named(demo: ServerProcess) -> None:
    task_id = waiting_deploy(demo, DEPLOYER)
    assert approve(demo, task_id).status_code == 200
    wait_state(demo.agent("deployer"), task_id, DEPLOYER, "TASK_STATE_COMPLETED")
    assert resume_evidence(demo, "deployer", task_id, DEMO_OPS) == {"signal": "approved", "by": "anonymous"}


def get_state(server: ServerProcess, task_id: str, headers: dict[str, str], agent: str = "deployer") -> str:
    reply = rpc(server.agent(agent), "GetTask", {"id": task_id}, headers=headers)
    return str(reply["result"]["status"]["state"])


def two_principals(headers: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Headers with two Authorization headers, `Bearer nobody` first and bob's token last."""
    return [*(headers or {}).items(), ("Authorization", "Bearer nobody"), ("Authorization", BOB["Authorization"])]


def test_two_authorization_headers_are_refused_everywhere(named: ServerProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("hello")}}
    calls = [
        ("POST", named.agent("test-runner") + "/a2a/jsonrpc", body),
        ("POST", named.agent("deployer") + "/a2a/jsonrpc", body),
        ("POST", named.agent("test-runner") + "/a2a/rest/message:send", {"message": message("hello")}),
        ("GET", named.agent("test-runner") + "/a2a/rest/tasks", None),
        ("GET", named.agent("test-runner") + "/tasks/some-task/status", None),
        ("POST", named.agent("deployer") + "/approve/some-task", None),
        ("GET", named.url + "/console/api/tasks", None),
    ]
    for method, url, payload in calls:
        response = httpx.request(method, url, headers=two_principals(A2A), json=payload, timeout=30)
        assert response.status_code == 400, (url, response.status_code, response.text)
        assert response.json()["error"]["message"] == "Send one Authorization header"
    one = httpx.post(named.agent("test-runner") + "/a2a/jsonrpc", headers={**A2A, **BOB}, json=body, timeout=30)
    assert "result" in one.json(), "one Authorization header still works"


def test_the_demo_operator_token_goes_once_principals_exist_and_info_never_names_a_token(
    named: ServerProcess, demo: ServerProcess
) -> None:
    named_info = httpx.get(named.url + "/console/api/info", timeout=30)
    demo_info = httpx.get(demo.url + "/console/api/info", timeout=30)
    assert named_info.json() == {"agents": ["code-reviewer", "deployer", "test-runner"], "demo": False}
    assert demo_info.json() == {"agents": ["code-reviewer", "deployer", "test-runner"], "demo": True}
    assert "ops_" not in demo_info.text and "token" not in demo_info.text
    assert httpx.get(named.url + "/console/api/tasks", headers=DEMO_OPS, timeout=30).status_code == 401
    assert httpx.get(named.url + "/console/api/tasks", headers=OPS, timeout=30).status_code == 200
    assert httpx.get(demo.url + "/console/api/tasks", headers=DEMO_OPS, timeout=30).status_code == 200


def test_a_host_outside_the_allowed_hosts_is_refused(named: ServerProcess) -> None:
    card = named.agent("test-runner") + "/.well-known/agent-card.json"
    for host in ("evil.example", f"evil.example:{named.port}", "127.0.0.2", "localhost.evil.example"):
        response = httpx.get(card, headers={"Host": host}, timeout=30)
        assert response.status_code == 421, (host, response.text)
        assert response.headers["content-type"] == "application/json"
        assert response.json()["error"]["status"] == "MISDIRECTED_REQUEST"
    for host in (f"localhost:{named.port}", "LOCALHOST:1", f"[::1]:{named.port}", "127.0.0.1"):
        assert httpx.get(card, headers={"Host": host}, timeout=30).status_code == 200, host


MALFORMED_HOSTS = (
    "localhost:1@evil.example", "localhost@evil.example", "localhost:1/evil", "localhost:x", "localhost:1:2",
    "localhost:99999", "localhost:", "[::1", "[::1]x", "[fe80::1%25eth0]", "local host", "localhost\\evil",
)
"""Host values that are not a name or a bracketed IPv6 address with an optional numeric port."""


@pytest.mark.parametrize("allowed", [[], ["--allowed-host", "*"]], ids=["loopback-default", "any-host"])
def test_a_host_that_is_not_a_name_and_a_port_is_refused_and_never_reaches_a_card(tmp_path: Path, allowed: list[str]) -> None:
    """`Host: localhost:1@evil.example` once passed the allowed-host check (which read the name before the colon) and
    put `http://localhost:1@evil.example/...` in a card cached for five minutes; every allowed-host setting, `*` too,
    now refuses a Host that is not `name[:port]` or `[v6][:port]` with 421."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", extra=allowed).start()
    try:
        card_url = server.agent("test-runner") + "/.well-known/agent-card.json"
        for host in MALFORMED_HOSTS:
            response = httpx.get(card_url, headers={"Host": host}, timeout=30)
            assert response.status_code == 421, (host, response.text)
            assert response.json()["error"]["status"] == "MISDIRECTED_REQUEST"
        for host in (f"localhost:{server.port}", f"[::1]:{server.port}", "127.0.0.1"):
            assert urls(card(server, "test-runner", host))[0] == f"http://{host}/test-runner/a2a/jsonrpc"
    finally:
        server.stop()


def test_a_write_from_another_sites_page_is_refused(named: ServerProcess) -> None:
    rpc_url = named.agent("test-runner") + "/a2a/jsonrpc"
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("hello")}}
    for origin in ("http://evil.example", "null", f"http://localhost:{named.port + 1}"):
        response = httpx.post(rpc_url, headers={**A2A, "Origin": origin}, json=body, timeout=30)
        assert response.status_code == 403, (origin, response.text)
    same = httpx.post(rpc_url, headers={**A2A, "Origin": named.url}, json=body, timeout=30)
    assert "result" in same.json(), same.text


def test_the_version_goes_in_the_query_only_on_requests_without_a_body(named: ServerProcess) -> None:
    base = named.agent("test-runner")
    task = start(base, message("Run the unit tests at commit 9f3c2e1"), ALICE)
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
    plain = {"Content-Type": "application/json", **ALICE}
    posted = httpx.post(f"{base}/a2a/jsonrpc?A2A-Version=1.0", headers=plain, json=body, timeout=30).json()
    assert posted["error"]["code"] == -32009, posted
    rest_post = httpx.post(
        f"{base}/a2a/rest/message:send?A2A-Version=1.0", headers=plain, json={"message": message("hi")}, timeout=30
    )
    assert rest_post.status_code == 400 and "VERSION_NOT_SUPPORTED" in rest_post.text, rest_post.text
    got = httpx.get(f"{base}/a2a/rest/tasks/{task['id']}?A2A-Version=1.0", headers=ALICE, timeout=30)
    assert got.status_code == 200 and got.json()["id"] == task["id"], got.text


@pytest.mark.parametrize(
    ("params", "code"), [(["x"], -32602), ([], -32602), ("x", -32600), (3, -32600), (True, -32600), (None, -32600)]
)
def test_params_that_are_not_an_object_are_refused(named: ServerProcess, params: Any, code: int) -> None:
    for method in ("SendMessage", "GetTask", "ListTasks"):
        body = {"jsonrpc": "2.0", "id": "p-1", "method": method, "params": params}
        reply = httpx.post(named.agent("test-runner") + "/a2a/jsonrpc", headers=A2A, json=body, timeout=30).json()
        assert reply["id"] == "p-1" and reply["error"]["code"] == code, (method, reply)
    unknown = {"jsonrpc": "2.0", "id": 2, "method": "NoSuchMethod", "params": params}
    reply = httpx.post(named.agent("test-runner") + "/a2a/jsonrpc", headers=A2A, json=unknown, timeout=30).json()
    assert reply["error"]["code"] == (-32601 if isinstance(params, list) else -32600), reply


def card(server: ServerProcess, agent: str, host: str | None = None) -> dict[str, Any]:
    headers = {"Host": host} if host else {}
    response = httpx.get(f"{server.agent(agent)}/.well-known/agent-card.json", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def urls(agent_card: dict[str, Any]) -> list[str]:
    return [interface["url"] for interface in agent_card["supportedInterfaces"]]


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_a_signed_card_never_names_the_callers_host(named: ServerProcess) -> None:
    for host in (f"localhost:{named.port}", "localhost:1"):
        signed = card(named, "deployer", host)
        assert urls(signed) == [f"{named.agent('deployer')}/a2a/jsonrpc", f"{named.agent('deployer')}/a2a/rest"]
        create_signature_verifier(lambda kid, jku: DEPLOYER_SIGNING_KEY, ["HS256"])(ParseDict(signed, AgentCard()))
    assert urls(card(named, "test-runner", "localhost:1"))[0] == "http://localhost:1/test-runner/a2a/jsonrpc"


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_the_public_url_is_what_every_card_names_and_signs(tmp_path: Path) -> None:
    public = "https://a2a.example.com/bridge"
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", extra=["--public-url", public]).start()
    try:
        signed = card(server, "deployer", f"localhost:{server.port}")
        assert urls(signed) == [f"{public}/deployer/a2a/jsonrpc", f"{public}/deployer/a2a/rest"]
        create_signature_verifier(lambda kid, jku: DEPLOYER_SIGNING_KEY, ["HS256"])(ParseDict(signed, AgentCard()))
        assert urls(card(server, "test-runner"))[0] == f"{public}/test-runner/a2a/jsonrpc"
        assert card(server, "test-runner", "a2a.example.com")["name"] == "test-runner", "the public host is allowed"
        index = httpx.get(server.url + "/", timeout=30).json()
        assert index["agents"][0]["card"].startswith(f"{public}/")
    finally:
        server.stop()


def test_every_console_response_carries_the_security_headers(named: ServerProcess) -> None:
    scripts = ["overview.js", "timeline.js", "confirm.js", "console.js"]
    for path in ("/console/", *(f"/console/{name}" for name in scripts), "/console/api/info", "/console/api/tasks"):
        response = httpx.get(named.url + path, timeout=30)
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-frame-options"] == "DENY"
    page = httpx.get(named.url + "/console/", timeout=30).text
    assert re.findall(r"<script[^>]*>", page) == [f'<script src="{name}">' for name in scripts], "an inline script"
    assert re.findall(r"<script[^>]*>([^<]*)</script>", page) == [""] * len(scripts), "a script with a body"
    assert not re.search(r"\son[a-z]+\s*=", page), "an inline event handler"


def test_a_review_answer_names_who_answered(named: ServerProcess) -> None:
    base = named.agent("code-reviewer")
    diff = {"raw": "LS0tIGEvcGF5bWVudHMvcmVmdW5kcy5weQo=", "mediaType": "text/x-diff"}
    body = {"messageId": new_id("rev"), "role": "ROLE_USER", "parts": [
        {"text": "Review this diff against main, and ask me before posting"}, diff]}
    task = start(base, body, ALICE, immediately=True)
    wait_state(base, task["id"], ALICE, "TASK_STATE_AUTH_REQUIRED")
    refused = httpx.post(f"{base}/tasks/{task['id']}/review", headers=BOB, json={"decision": "post"}, timeout=30)
    unknown = httpx.post(f"{base}/tasks/no-such-task/review", headers=BOB, json={"decision": "post"}, timeout=30)
    assert normalized(refused, task["id"]) == normalized(unknown, "no-such-task")
    answered = httpx.post(f"{base}/tasks/{task['id']}/review", headers=ALICE, json={"decision": "discard"}, timeout=30)
    assert answered.status_code == 200, answered.text
    wait_state(base, task["id"], ALICE, "TASK_STATE_COMPLETED")
    assert resume_evidence(named, "code-reviewer", task["id"], ALICE) == {"signal": "review:discard", "by": "alice"}


def test_an_operator_reads_any_tasks_status_view_and_others_get_the_unknown_task_answer(named: ServerProcess) -> None:
    task_id = waiting_deploy(named, ALICE)
    base = named.agent("deployer")
    owners = httpx.get(f"{base}/tasks/{task_id}/status", headers=ALICE, timeout=30)
    operators = httpx.get(f"{base}/tasks/{task_id}/status", headers=OPS, timeout=30)
    assert operators.status_code == 200 and operators.json() == owners.json()
    assert operators.headers["etag"] == owners.headers["etag"]
    polled = httpx.get(f"{base}/tasks/{task_id}/status?wait=0.2", headers={**OPS, "If-None-Match": owners.headers["etag"]}, timeout=30)
    assert polled.status_code == 304
    with httpx.stream("GET", f"{base}/tasks/{task_id}/status/stream", headers=OPS, timeout=30) as streamed:
        first = next(line for line in streamed.iter_lines() if line.startswith("data:"))
    assert first.startswith("data: {") and task_id in first
    unknown = normalized(httpx.get(f"{base}/tasks/no-such-task/status", headers=BOB, timeout=30), "no-such-task")
    assert normalized(httpx.get(f"{base}/tasks/{task_id}/status", headers=BOB, timeout=30), task_id) == unknown
    elsewhere = httpx.get(f"{named.agent('test-runner')}/tasks/{task_id}/status", headers=OPS, timeout=30)
    assert normalized(elsewhere, task_id) == unknown, "an operator reads a task on its own agent only"


TIMING_TRIES = 200
"""Interleaved tries of each kind (a hidden task, an unknown id) a timing comparison makes."""
TIMING_TOLERANCE = 0.0006
"""Seconds the medians may differ by: reading a hidden task before refusing cost about 2.3 ms more than an unknown id."""


def median_seconds(client: httpx.Client, urls: list[str], headers: dict[str, str], body: dict[str, str]) -> list[float]:
    """The median time of a POST to each of `urls`, tried in turn TIMING_TRIES times (interleaved); every answer 404."""
    times: list[list[float]] = [[] for _ in urls]
    for _ in range(TIMING_TRIES):
        for index, url in enumerate(urls):
            started = time.perf_counter()
            answer = client.post(url, headers=headers, json=body)
            times[index].append(time.perf_counter() - started)
            assert answer.status_code == 404, answer.text
    return [statistics.median(sample) for sample in times]


TIMED_ANSWERS = {
    "review": ("code-reviewer", "Review this diff against main, and ask me before posting", {"decision": "post"}),
    "authorize": ("deployer", "Deploy build 2026.10.06-7 to preview", {"provider": "github"}),
}


@pytest.mark.parametrize("route", sorted(TIMED_ANSWERS))
def test_a_hidden_tasks_answer_takes_as_long_as_an_unknown_ids(named: ServerProcess, route: str) -> None:
    """bob answers alice's task waiting for her review (or her sign-in to a provider), and a task id that never
    existed: the medians of 200 interleaved tries each agree within TIMING_TOLERANCE."""
    agent, text, body = TIMED_ANSWERS[route]
    base = named.agent(agent)
    padding = "+ refund line\n" * 4000
    bulk = {"raw": base64.b64encode(padding.encode()).decode(), "mediaType": "text/x-diff"} if route == "review" else {"text": padding}
    task = start(base, {"messageId": new_id("tim"), "role": "ROLE_USER", "parts": [{"text": text}, bulk]}, ALICE, immediately=True)
    wait_state(base, task["id"], ALICE, "TASK_STATE_AUTH_REQUIRED")
    urls = [f"{base}/tasks/{task['id']}/{route}", f"{base}/tasks/{new_id('tim')}/{route}"]
    with httpx.Client(timeout=30) as client:
        median_seconds(client, urls, BOB, body)
        hidden, unknown = median_seconds(client, urls, BOB, body)
    assert abs(hidden - unknown) < TIMING_TOLERANCE, f"hidden {hidden * 1000:.2f} ms, unknown {unknown * 1000:.2f} ms"
    assert get_state(named, task["id"], ALICE, agent) == "TASK_STATE_AUTH_REQUIRED", "a refused answer changed the task"
