"""The transcript parser, on every file of the capture kit and on small made-up transcripts."""

import json
import re
from pathlib import Path

import pytest

from a2a_bridge.capture.transcript import StreamPosition, TranscriptError, load, load_all, parse

BLOCKS = {
    "01-agent-cards": 3,
    "02-message-reply": 1,
    "03-blocking-task": 1,
    "04-polling": 3,
    "05-streaming": 1,
    "06-input-required": 2,
    "07-auth-required": 2,
    "08-rejected": 1,
    "09-failed": 1,
    "10-cancel": 4,
    "11-errors": 7,
    "12-list-tasks": 3,
    "13-history": 2,
    "14-resubscribe": 3,
    "15-push": 12,
    "16-rest-binding": 4,
    "18-extended-card": 2,
}


def test_every_kit_file_parses_into_its_blocks(kit: Path) -> None:
    scripts = {script.name: script for script in load_all(kit)}
    assert {name: len(script.blocks) for name, script in scripts.items()} == BLOCKS
    for script in scripts.values():
        for block in script.blocks:
            response = block.response
            if response is None:
                continue
            if response.is_stream:
                assert response.frames and not response.body
                response.frames_json()
            else:
                assert response.body and not response.frames
                response.json()


def test_a_plain_exchange(kit: Path) -> None:
    block = load(kit / "02-message-reply.http").block(1)
    assert (block.label, block.number, block.kind, block.title) == ("1", 1, "", "SendMessage: a question")
    request = block.request
    assert (request.method, request.target, request.version) == ("POST", "/a2a/jsonrpc", "HTTP/1.1")
    assert request.host == "localhost:41242"
    assert request.headers.get("a2a-version") == "1.0" and "CONTENT-TYPE" in request.headers
    assert request.json()["params"]["message"]["parts"] == [{"text": "What languages can you review?"}]
    response = block.response
    assert response is not None
    assert (response.status, response.reason, response.headers.media_type) == (200, "OK", "application/json")
    assert response.json()["result"]["message"]["role"] == "ROLE_AGENT"
    assert block.during is None and not block.narration


def test_a_stream_keeps_each_event(kit: Path) -> None:
    response = load(kit / "05-streaming.http").block(1).response
    assert response is not None and response.is_stream
    events = response.frames_json()
    assert len(events) == 9
    assert events[0]["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_an_out_of_band_block_inside_an_open_stream(kit: Path) -> None:
    script = load(kit / "07-auth-required.http")
    stream, approve = script.block(1), script.block(2)
    assert stream.response is not None and len(stream.response.frames) == 6
    assert stream.request.headers.get("Authorization") == "Bearer dpl_test_7c1e4b"
    assert [note.text for note in stream.narration] == [
        "The stream stays open. An operator opens the approval link, outside A2A."
    ]
    assert approve.during == StreamPosition("1", 3)
    assert approve.request.path == "/approve/ecf2dcb6-79c8-48f8-8868-24a0541781f4"
    assert approve.request.body == "{}"
    assert approve.response is not None and approve.response.json() == {
        "approved": True,
        "taskId": "ecf2dcb6-79c8-48f8-8868-24a0541781f4",
    }
    assert [note.text for note in approve.narration] == ["The same stream continues."]
    updates = [event["result"].get("statusUpdate") for event in stream.response.frames_json()]
    states = [update["status"]["state"] if update else None for update in updates]
    assert states[2:] == ["TASK_STATE_AUTH_REQUIRED", "TASK_STATE_WORKING", None, "TASK_STATE_COMPLETED"]


def test_a_malformed_body_is_kept_as_sent(kit: Path) -> None:
    block = load(kit / "11-errors.http").block(7)
    assert block.request.body == '{"jsonrpc": "2.0", "method": '
    with pytest.raises(json.JSONDecodeError):
        block.request.json()
    assert block.response is not None and block.response.json()["error"]["code"] == -32700


def test_a_dropped_stream_then_an_error_answered_as_json(kit: Path) -> None:
    script = load(kit / "14-resubscribe.http")
    first = script.block(1)
    assert first.response is not None and len(first.response.frames) == 4
    assert [note.text for note in first.narration] == ["the client closes the connection after 4 events"]
    finished = script.block(3).response
    assert finished is not None and not finished.is_stream
    assert finished.json()["error"]["code"] == -32004


def test_webhook_blocks_are_requests_only(kit: Path) -> None:
    script = load(kit / "15-push.http")
    assert [block.label for block in script.exchanges] == ["1", "2", "3", "4"]
    hooks = script.webhooks
    assert [block.number for block in hooks] == list(range(1, 9))
    for block in hooks:
        assert block.is_webhook and block.kind == "webhook" and block.response is None
        assert block.title == "received by the client"
        assert (block.request.method, block.request.path, block.request.host) == ("POST", "/a2a-events", None)
        assert block.request.headers.media_type == "application/a2a+json"
        assert block.request.headers.get("X-A2A-Notification-Token") == "planner-run-0006"
    assert hooks[0].request.json()["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert script.block("webhook 8").request.json()["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_rest_targets_queries_and_error_statuses(kit: Path) -> None:
    script = load(kit / "16-rest-binding.http")
    get = script.block(2).request
    assert get.path == "/a2a/rest/tasks/bbfb9ea5-50ea-4441-b991-2a8ba0d6f3f3"
    assert get.query == {"historyLength": "0"} and get.body == ""
    missing = script.block(3).response
    assert missing is not None and (missing.status, missing.reason) == (404, "Not Found")
    assert missing.headers.media_type == "application/a2a+json"
    refused = load(kit / "18-extended-card.http").block(1).response
    assert refused is not None and (refused.status, refused.reason) == (401, "Unauthorized")
    assert refused.headers.get("www-authenticate") == 'Bearer realm="deployer"'


MADE_UP = """# a preamble note

### 1 · a stream
POST /s HTTP/1.1
Host: localhost:1

{}

HTTP/1.1 200 OK
Content-Type: text/event-stream; charset=utf-8

data: {"a":
data: 1}

data: {"b": 2}

# cut here

### 2 · aside
GET /x HTTP/1.1
Host: localhost:1

HTTP/1.1 204 No Content

data: {"c": 3}
"""


def test_made_up_transcript_with_multiline_events_and_a_continuation() -> None:
    script = parse(MADE_UP, "made-up")
    assert [note.text for note in script.narration] == ["a preamble note"]
    assert script.narration[0].line == 1
    stream, aside = script.blocks
    assert stream.response is not None and stream.response.is_stream
    assert stream.response.frames == ('{"a":\n1}', '{"b": 2}', '{"c": 3}')
    assert stream.response.frames_json() == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert [note.text for note in stream.narration] == ["cut here"]
    assert aside.during == StreamPosition("1", 2)
    assert aside.request.body == "" and aside.response is not None and aside.response.status == 204
    assert aside.line == 19
    with pytest.raises(KeyError):
        script.block(3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("GET / HTTP/1.1\n", "made-up:1: expected a `### N · title` line"),
        ("### 1 · x\nnot a request\n", "made-up:2: block '1' does not start with a request line"),
        ("### 1 · x\nGET / HTTP/1.1\nbad header\n", "made-up:3: expected a header field"),
        (
            "### 1 · x\nGET / HTTP/1.1\n\nHTTP/1.1 200 OK\n\n{}\n\ndata: {}\n",
            "made-up:8: `data:` lines with no open stream",
        ),
        ("### 1 · x\nGET / HTTP/1.1\n\n### 1 · y\nGET / HTTP/1.1\n", "made-up: duplicate block labels"),
    ],
)
def test_malformed_transcripts_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TranscriptError, match=re.escape(message)):
        parse(text, "made-up")
