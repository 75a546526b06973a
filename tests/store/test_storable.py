"""What the stores cannot hold is refused before anything changes: NaN, ±Infinity, 1e400, integers past 2^53, lone
surrogates, U+0000, a key given twice and nesting past 32 levels, anywhere in a body, on both bindings and the
bridge's endpoints, as a first message and as a follow-up, with -32602 (HTTP 400) naming the field; the task is
untouched and answers the next message. A property test (hypothesis, derandomized and bounded) sends generated
messages, holdable or not, to a server on SQLite: each is refused naming a field exactly when it holds such a value,
and each accepted one is read back with GetTask as protobuf parsed it, as a first message and as a follow-up."""

import json
import math
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types import Message
from google.protobuf.json_format import MessageToDict, ParseDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2a_bridge.store import storable
from tests.support import A2A, ServerProcess, wait_for

EXAMPLES = int(os.environ.get("A2A_BRIDGE_STORABLE_EXAMPLES", "60"))
"""Generated messages; each sends a first message, a follow-up and two GetTask calls."""
ASKS = "Run the unit tests"
"""test-runner asks which commit for any text without one: each first message leaves a task in INPUT_REQUIRED."""
UNHOLDABLE = {
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e400": "1e400",
    "-2e308": "-2e308",
    "2^53": "9007199254740992",
    "400 digits": "1" + "0" * 400,
    "lone high surrogate": '"a\\ud800"',
    "lone low surrogate": '"\\udc00b"',
    "NUL": '"a\\u0000"',
    "34 levels": "[" * 30 + "1" + "]" * 30,
}
"""Raw JSON put at params.message.metadata.x (four levels down), each something the stores cannot hold."""
LEAKS = ("Traceback", 'File "', "site-packages", "OverflowError", "Fail to serialize")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("storable")
    server = ServerProcess(f"sqlite:///{directory / 'b.db'}", pace=0.01, log=directory / "server.log").start()
    yield server
    server.stop()


def log_of(server: ServerProcess) -> str:
    assert server.log is not None
    return server.log.read_text(errors="replace")


def with_metadata(raw: str, task_id: str | None = None, text: str = ASKS) -> str:
    """A message whose metadata.x is the raw JSON text."""
    task = f', "taskId": "{task_id}"' if task_id else ""
    return (
        f'{{"messageId": "{uuid.uuid4()}", "role": "ROLE_USER", "parts": [{{"text": "{text}"}}]{task}, '
        f'"metadata": {{"x": {raw}}}}}'
    )


def post(url: str, body: str | bytes) -> httpx.Response:
    content = body.encode() if isinstance(body, str) else body
    return httpx.post(url, content=content, headers=A2A, timeout=10)


def violations(error: dict[str, Any]) -> list[str]:
    """The fields a -32602 (data) or an HTTP+JSON 400 (details) names."""
    details = error.get("data") or error.get("details") or []
    return [v["field"] for d in details if d.get("@type", "").endswith("BadRequest") for v in d["fieldViolations"]]


def names_x(error: dict[str, Any]) -> bool:
    """Whether the error names message.metadata.x, or a member inside it (the level past the depth limit)."""
    fields = violations(error)
    return len(fields) == 1 and re.fullmatch(r"message\.metadata\.x(\[0\])*", fields[0]) is not None


def rpc_body(method: str, params: str, rpc_id: str = "1") -> str:
    return f'{{"jsonrpc": "2.0", "id": {rpc_id}, "method": "{method}", "params": {params}}}'


def task_count(server: ServerProcess) -> int:
    body = rpc_body("ListTasks", '{"pageSize": 100}')
    return len(post(f"{server.agent('test-runner')}/a2a/jsonrpc", body).json()["result"].get("tasks", []))


def get_task(server: ServerProcess, task_id: str) -> dict[str, Any]:
    reply = post(f"{server.agent('test-runner')}/a2a/jsonrpc", rpc_body("GetTask", json.dumps({"id": task_id}))).json()
    return reply["result"]


def asking_task(server: ServerProcess) -> str:
    body = rpc_body("SendMessage", f'{{"message": {with_metadata("1")}}}')
    task = post(f"{server.agent('test-runner')}/a2a/jsonrpc", body).json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return str(task["id"])


@pytest.mark.parametrize("raw", UNHOLDABLE.values(), ids=UNHOLDABLE.keys())
def test_a_first_message_the_store_cannot_hold_is_refused_naming_the_field(served: ServerProcess, raw: str) -> None:
    runner = served.agent("test-runner")
    before = task_count(served)
    for method in ("SendMessage", "SendStreamingMessage"):
        reply = post(f"{runner}/a2a/jsonrpc", rpc_body(method, f'{{"message": {with_metadata(raw)}}}'))
        assert reply.status_code == 200
        error = reply.json()["error"]
        assert error["code"] == -32602 and names_x(error), error
        assert reply.json()["id"] == 1
    for path in ("message:send", "message:stream"):
        rest = post(f"{runner}/a2a/rest/{path}", f'{{"message": {with_metadata(raw)}}}')
        assert rest.status_code == 400, rest.text
        assert names_x(rest.json()["error"])
        assert not [leak for leak in LEAKS if leak in rest.text]
    assert task_count(served) == before


@pytest.mark.parametrize("raw", UNHOLDABLE.values(), ids=UNHOLDABLE.keys())
def test_a_follow_up_the_store_cannot_hold_is_refused_and_the_task_goes_on(served: ServerProcess, raw: str) -> None:
    runner = served.agent("test-runner")
    task_id = asking_task(served)
    before = get_task(served, task_id)
    reply = post(f"{runner}/a2a/jsonrpc", rpc_body("SendMessage", f'{{"message": {with_metadata(raw, task_id)}}}'))
    assert reply.json()["error"]["code"] == -32602
    assert names_x(reply.json()["error"])
    rest = post(f"{runner}/a2a/rest/message:send", f'{{"message": {with_metadata(raw, task_id)}}}')
    assert rest.status_code == 400 and names_x(rest.json()["error"])
    assert get_task(served, task_id) == before
    valid = with_metadata('{"y": [1.5, -0.0, 9007199254740991, "é😀"]}', task_id, "commit 9f3c2e1")
    answered = post(f"{runner}/a2a/jsonrpc", rpc_body("SendMessage", f'{{"message": {valid}}}')).json()
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answered
    stored = {m["messageId"]: m for m in get_task(served, task_id)["history"]}[json.loads(valid)["messageId"]]
    assert stored["metadata"] == {"x": {"y": [1.5, -0.0, 9007199254740991, "é😀"]}}


def test_the_bridge_endpoints_refuse_what_the_store_cannot_hold(served: ServerProcess) -> None:
    operator = {"Authorization": "Bearer ops_demo_5b9e"}
    task_id = asking_task(served)
    reconcile = httpx.post(
        f"{served.agent('test-runner')}/tasks/{task_id}/reconcile",
        content=b'{"outcome": "completed", "evidence": {"checked": NaN}}', headers=operator, timeout=10,
    )
    assert reconcile.status_code == 400 and violations(reconcile.json()["error"]) == ["evidence.checked"]
    review = httpx.post(
        f"{served.agent('code-reviewer')}/tasks/{task_id}/review", content=b'{"decision": "\\udfff"}', timeout=10
    )
    assert review.status_code == 400 and violations(review.json()["error"]) == ["decision"]
    nul = httpx.get(f"{served.agent('test-runner')}/tasks/{task_id}/status?x=%00", timeout=10)
    assert nul.status_code == 400
    assert get_task(served, task_id)["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize(
    "rpc_id", ["9" * 5000, "-" + "9" * 20, "NaN", "1e400"], ids=["5000 digits", "20 digits", "NaN", "1e400"]
)
def test_an_id_no_json_rpc_peer_can_hold_is_an_invalid_request_without_a_traceback(
    served: ServerProcess, rpc_id: str
) -> None:
    before = log_of(served)
    reply = post(f"{served.agent('test-runner')}/a2a/jsonrpc", rpc_body("GetTask", '{"id": "x"}', rpc_id))
    assert reply.status_code == 200
    body = reply.json()
    assert body["id"] is None and body["error"]["code"] == -32600
    assert body["error"]["data"][0]["metadata"]["field"] == "id"

    def logged() -> str | None:
        added = log_of(served)[len(before):]
        return added if "refused a request" in added else None

    added = wait_for(logged, timeout=5, what="the refusal's log line")
    assert "Traceback" not in added and "ERROR" not in added, added


def test_nesting_is_held_to_32_levels(served: ServerProcess) -> None:
    runner = served.agent("test-runner")
    deepest = "[" * 28 + "1" + "]" * 28
    accepted = post(f"{runner}/a2a/jsonrpc", rpc_body("SendMessage", f'{{"message": {with_metadata(deepest)}}}')).json()
    task = get_task(served, accepted["result"]["task"]["id"])
    assert task["history"][0]["metadata"] == {"x": json.loads(deepest)}
    refused = post(f"{runner}/a2a/jsonrpc", rpc_body("SendMessage", f'{{"message": {with_metadata("[" + deepest + "]")}}}'))
    assert violations(refused.json()["error"]) == ["message.metadata.x" + "[0]" * 28]


RAW = "\x01raw:"
"""Marks a string that stands for raw JSON text (a number literal no float can be) in a generated value."""


def holdable(value: Any, depth: int) -> bool:
    """The rules of docs/security.md, written out independently for a value as Python's parser reads it (a
    surrogate pair is one character then): finite doubles, integers within 2^53 - 1, no lone surrogate or U+0000,
    at most 32 levels."""
    if isinstance(value, str):
        return "\x00" not in value and not re.search("[\ud800-\udfff]", value)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= 2**53 - 1
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 32:
        return False
    members = list(value.items()) if isinstance(value, dict) else [(None, item) for item in value]
    return all((key is None or holdable(key, 0)) and holdable(item, depth + 1) for key, item in members)


def encoded(value: Any) -> str:
    """JSON text as a careless client writes it: NaN and Infinity as bare words, lone surrogates escaped, raw
    marks replaced by their literal."""
    text = json.dumps(value)
    return re.sub(r'"\\u0001raw:([^"]*)"', lambda m: m.group(1), text)


any_text = st.text(max_size=12) | st.sampled_from(["\ud800", "a\udfffb", "\udbff\udfff", "\x00", "é😀\u2028", ""])
"""Text, sometimes with a lone surrogate (a pair written as two escapes is one character, and holdable) or U+0000."""
numbers = st.one_of(
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(),
    st.sampled_from([2**53 - 1, -(2**53) + 1, 1e308, -5e-324, 0.1]),
    st.sampled_from(["1e400", "-1e999", "123456789012345678901234567890"]).map(lambda raw: RAW + raw),
)
values = st.recursive(
    st.none() | st.booleans() | numbers | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=10,
)


@st.composite
def nested(draw: st.DrawFn) -> Any:
    """A value, sometimes wrapped near or past the depth limit."""
    value = draw(values)
    for _ in range(draw(st.sampled_from([0, 0, 0, 20, 27, 28, 29, 30]))):
        value = [value]
    return value


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    parts = draw(st.lists(
        st.one_of(
            st.builds(lambda text: {"text": text}, any_text.filter(bool)),
            st.builds(lambda data: {"data": data}, nested()),
        ),
        min_size=1, max_size=3,
    ))
    message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
    if draw(st.booleans()):
        message["metadata"] = draw(st.dictionaries(any_text, nested(), max_size=3))
    if draw(st.booleans()):
        message["extensions"] = draw(st.lists(any_text, max_size=2))
    return message


def as_stored(message: dict[str, Any]) -> dict[str, Any]:
    """The message as protobuf parses it and JSON carries it back."""
    parsed = ParseDict(json.loads(encoded(message)), Message(), ignore_unknown_fields=True)
    return json.loads(json.dumps(MessageToDict(parsed)))


def sent(server: ServerProcess, message: dict[str, Any], task_id: str | None) -> dict[str, Any]:
    """SendMessage with the message, as a follow-up of the task when one is named; the reply's envelope."""
    params = {"message": {**message, "taskId": task_id} if task_id else message}
    return post(f"{server.agent('test-runner')}/a2a/jsonrpc", rpc_body("SendMessage", encoded(params))).json()


def check_stored(
    server: ServerProcess, message: dict[str, Any], reply: dict[str, Any], task_id: str | None, seen: Counter[str]
) -> str:
    """Refused naming a field exactly when unholdable; else read back as stored. The task id."""
    if not holdable(json.loads(encoded({"params": {"message": message}})), 1):
        assert reply.get("error", {}).get("code") == -32602, reply
        [field] = violations(reply["error"])
        assert field.startswith("message."), field
        seen["refused"] += 1
        return task_id or ""
    assert "result" in reply, reply
    seen["stored"] += 1
    task = reply["result"]["task"]
    stored = {m["messageId"]: m for m in get_task(server, task["id"])["history"]}[message["messageId"]]
    assert {k: v for k, v in stored.items() if k not in ("taskId", "contextId")} == as_stored(message)
    return str(task["id"])


def test_every_accepted_message_is_read_back_as_stored_and_every_other_is_refused(served: ServerProcess) -> None:
    @settings(
        max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(messages(), messages())
    def round_trip(first: dict[str, Any], follow_up: dict[str, Any]) -> None:
        task_id = check_stored(served, first, sent(served, first, None), None, seen)
        if task_id:
            check_stored(served, follow_up, sent(served, follow_up, task_id), task_id, seen)

    seen: Counter[str] = Counter()
    round_trip()
    assert seen["stored"] >= EXAMPLES // 4 and seen["refused"] >= EXAMPLES // 10, seen
    assert "Traceback" not in log_of(served)


def equal_reads(left: tuple[Any, bool, Any], right: tuple[Any, bool, Any]) -> bool:
    """Two results of reading a body: the same value (NaN equal to NaN, a float never equal to an integer), the same
    verdicts and flaw."""
    return repr(left) == repr(right)


mutations = st.sampled_from([
    b"", b"NaN", b"-Infinity", b"1e400", b"9007199254740993", b"123456789012345678901234567890", b'"\\ud800"',
    b'"\\u0000"', b"\xff", b"\xed\xa0\x80", b"[" * 40, b"]", b",", b"0.1", b"-0", b'"\\udbff\\udfff"', b"\x00",
])


@settings(max_examples=1500, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested(), st.integers(min_value=0, max_value=400), mutations)
def test_a_body_reads_as_pythons_parser_reads_it_whichever_parser_reads_it(value: Any, at: int, mutation: bytes) -> None:
    """`parse` (orjson where it reads as Python's parser does) gives what `read` (Python's parser, always) gives: the
    value, whether it is unreadable and its first flaw, for generated JSON and for the same text with a number, an
    escape or a byte spliced in."""
    body = encoded({"params": {"message": {"metadata": {"x": value}}}}).encode()
    for case in (body, body[:at] + mutation + body[at:]):
        assert equal_reads(storable.parse(case), storable.read(case)), case


@pytest.mark.parametrize("depth", [33, 500, 990, 1100, 5000])
def test_a_deep_body_reads_as_pythons_parser_reads_it(depth: int) -> None:
    """Past Python's recursion limit its parser gives up (unreadable) where orjson may still read: `read` decides."""
    body = b'{"params": ' + b"[" * depth + b"]" * depth + b"}"
    assert equal_reads(storable.parse(body), storable.read(body))


REPEATED_KEYS = {
    "in metadata": ('{"message": %s}', '{"k": "a:b", "k": 2}', "message.metadata.x.k"),
    "escaped colon": ('{"message": %s}', '{"k": 1, "k": 2, "c": "\\u003a"}', "message.metadata.x.k"),
    "in params": ('{"message": %s, "message": {}}', '1', "message"),
}
"""Params with a key twice (I-JSON forbids it; the parsers kept the last): the template, metadata.x, the field."""


@pytest.mark.parametrize("case", REPEATED_KEYS.values(), ids=REPEATED_KEYS.keys())
def test_a_key_given_twice_is_refused_naming_it_and_nothing_is_stored(
    served: ServerProcess, case: tuple[str, str, str]
) -> None:
    template, raw, field = case
    runner = served.agent("test-runner")
    before = task_count(served)
    task_id = asking_task(served)
    task_before = get_task(served, task_id)
    for task in (None, task_id):
        params = template % with_metadata(raw, task)
        reply = post(f"{runner}/a2a/jsonrpc", rpc_body("SendMessage", params)).json()
        assert reply["error"]["code"] == -32602 and violations(reply["error"]) == [field], reply
        rest = post(f"{runner}/a2a/rest/message:send", params)
        assert rest.status_code == 400 and violations(rest.json()["error"]) == [field], rest.text
        assert "RFC 7493" in rest.text
    assert task_count(served) == before + 1 and get_task(served, task_id) == task_before


def test_a_key_given_twice_in_the_envelope_or_a_bridge_endpoint_is_refused(served: ServerProcess) -> None:
    runner = served.agent("test-runner")
    before = task_count(served)
    log_before = log_of(served)
    body = '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "method": "SendMessage", "params": {"message": %s}}'
    reply = post(f"{runner}/a2a/jsonrpc", body % with_metadata("1")).json()
    assert reply["error"]["code"] == -32600 and reply["error"]["data"][0]["metadata"]["field"] == "method", reply
    task_id = asking_task(served)
    review = httpx.post(
        f"{served.agent('code-reviewer')}/tasks/{task_id}/review", content=b'{"decision": "discard", "decision": "post"}',
        timeout=10,
    )
    assert review.status_code == 400 and violations(review.json()["error"]) == ["decision"]
    assert task_count(served) == before + 1

    def logged() -> list[str] | None:
        lines = [line for line in log_of(served)[len(log_before):].splitlines() if "same key twice" in line]
        return lines if len(lines) == 2 else None

    lines = wait_for(logged, timeout=5, what="one log line a refusal")
    assert [line.rsplit(" at ", 1)[1] for line in lines] == ["method", "decision"]


def test_bodies_without_a_repeated_key_pass_the_quick_count() -> None:
    """Colons in strings, keys with colons, escapes, nesting: none is taken for a repeated key."""
    for body in (b'{"a": "x:y", "b:c": [1, {"c": "::"}], "d": {"e": []}}', b'{"a": "\\u003a", "b": 1}', b"[]", b'"x:y"',
                 b"1", b"null", b'"\\u003a"'):
        assert storable.parse(body)[2] is None, body
    assert storable.parse(b'[{"a": 1}, {"a": {"b": 1, "b": ":"}}]')[2] == storable.Flaw("[1].a.b", storable.REPEATED)
