"""Each capture-kit transcript replayed against the live bridge: same states, texts, artifacts and errors.

Ids and timestamps aside, every response must equal the recorded one; the differences our server keeps on purpose
are tolerated only where ALLOWANCES names them for that transcript (kit_match.Allowance says why each is fine).
"""

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from a2a.types import AgentCard
from a2a.utils.signing import create_signature_verifier
from google.protobuf.json_format import ParseDict

from a2a_bridge.agents.catalog import DEPLOYER_SIGNING_KEY
from a2a_bridge.capture.transcript import Transcript
from tests import kit_steps
from tests.kit_match import Allowance
from a2a_bridge.capture.replay import Delivery, WebhookReceiver
from tests.kit_session import KitSession, transcript
from tests.support import A2A, ServerProcess, wait_for

ORDER = Allowance.KEY_ORDER
FLOATS = Allowance.INTEGRAL_FLOATS

ALLOWANCES: dict[str, frozenset[Allowance]] = {
    "01-agent-cards": frozenset(
        {ORDER, Allowance.EMPTY_STRING_LIST, Allowance.CARD_SIGNATURE, Allowance.WHO_MUST_ACT_EXTENSION}
    ),
    "02-message-reply": frozenset({ORDER}),
    "03-blocking-task": frozenset({ORDER, FLOATS}),
    "04-polling": frozenset({ORDER, FLOATS}),
    "05-streaming": frozenset({ORDER, FLOATS}),
    "06-input-required": frozenset({ORDER, FLOATS}),
    "07-auth-required": frozenset({ORDER, Allowance.WHO_MUST_ACT_METADATA}),
    "08-rejected": frozenset({ORDER}),
    "09-failed": frozenset({ORDER}),
    "10-cancel": frozenset({ORDER}),
    "11-errors": frozenset({ORDER, Allowance.EMPTY_METADATA, Allowance.INVALID_PARAMS_ERROR_INFO, Allowance.ERROR_HINTS}),
    "12-list-tasks": frozenset({ORDER, Allowance.PRINTED_DEFAULTS}),
    "13-history": frozenset({ORDER, FLOATS}),
    "14-resubscribe": frozenset({ORDER}),
    "15-push": frozenset({ORDER, FLOATS}),
    "16-rest-binding": frozenset(
        {ORDER, FLOATS, Allowance.TASK_NOT_CANCELABLE_409, Allowance.PLAIN_JSON_BY_DEFAULT}
    ),
    "18-extended-card": frozenset({ORDER, Allowance.EMPTY_STRING_LIST, Allowance.WHO_MUST_ACT_EXTENSION}),
}
"""The only differences from the kit each transcript's comparison tolerates."""


def recorded_json(script: Transcript, label: int) -> Any:
    """The recorded JSON body of a block's response."""
    response = script.block(label).response
    assert response is not None
    return response.json()


def recorded_events(script: Transcript, label: int) -> list[Any]:
    """The recorded JSON of each event of a streaming block."""
    response = script.block(label).response
    assert response is not None
    return response.frames_json()


@contextmanager
def replaying(server: ServerProcess, kit: Path, name: str) -> Iterator[tuple[KitSession, Transcript]]:
    """A session on the shared server with the allowances of one transcript, and that transcript."""
    with KitSession(server, ALLOWANCES[name]) as live:
        yield live, transcript(kit, name)


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_01_agent_cards(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "01-agent-cards") as (session, script):
        session.play(script)
        card = session.send(script.block(3)).json()
        verify = create_signature_verifier(lambda kid, jku: DEPLOYER_SIGNING_KEY, ["HS256"])
        verify(ParseDict(card, AgentCard()))


def test_02_message_reply(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "02-message-reply") as (session, script):
        session.play(script)


def test_03_blocking_task(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "03-blocking-task") as (session, script):
        session.play(script)


def test_04_polling(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "04-polling") as (session, script):
        kit_steps.run(session, script)


def test_05_streaming(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "05-streaming") as (session, script):
        session.play(script)


def test_06_input_required(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "06-input-required") as (session, script):
        session.play(script)


def test_07_auth_required_stream_stays_open_across_approval(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "07-auth-required") as (session, script):
        approve = script.block(2)
        assert approve.during is not None and approve.during.label == "1" and approve.during.frames == 3
        session.play(script)


def test_08_rejected(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "08-rejected") as (session, script):
        session.play(script)


def test_09_failed(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "09-failed") as (session, script):
        session.play(script)


def test_10_cancel(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "10-cancel") as (session, script):
        kit_steps.run(session, script)


def test_11_errors(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "11-errors") as (session, script):
        session.play(script)


LISTED_TASKS = ("03-blocking-task", "04-polling", "05-streaming", "09-failed", "10-cancel")
"""The test-runner tasks the kit had created when it listed tasks, oldest first."""


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A bridge of its own, so ListTasks sees exactly the tasks the test creates."""
    process = ServerProcess(f"sqlite:///{tmp_path / 'list-tasks.db'}").start()
    yield process
    process.stop()


def test_12_list_tasks_pages_and_filter(kit: Path, fresh_server: ServerProcess) -> None:
    with KitSession(fresh_server, ALLOWANCES["12-list-tasks"]) as session:
        for name in LISTED_TASKS:
            session.allow = ALLOWANCES[name]
            kit_steps.run(session, transcript(kit, name))
        session.allow = ALLOWANCES["12-list-tasks"]
        script = transcript(kit, "12-list-tasks")
        session.play(script)
        token = session.ids[recorded_json(script, 2)["result"]["nextPageToken"]]
        last = session.client.post(
            fresh_server.agent("test-runner") + "/a2a/jsonrpc",
            json={"jsonrpc": "2.0", "id": 4, "method": "ListTasks", "params": {"pageSize": 2, "pageToken": token}},
            headers=A2A,
        ).json()["result"]
        oldest = session.ids[recorded_json(transcript(kit, LISTED_TASKS[0]), 1)["result"]["task"]["id"]]
    assert [task["id"] for task in last["tasks"]] == [oldest]
    assert last["nextPageToken"] == "" and last["totalSize"] == 5


def test_13_history_of_the_task_from_06(kit: Path, fresh_server: ServerProcess) -> None:
    """On a bridge of its own: 06's messageIds are already sent to the shared one, and a resent messageId is a retry."""
    with replaying(fresh_server, kit, "13-history") as (session, script):
        session.play(transcript(kit, "06-input-required"))
        session.play(script)


def chunk_text(event: Any) -> str:
    """The text an artifactUpdate event appends to the log."""
    return str(event["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"])


def chunk_event(recorded: list[Any], log: list[str], number: int) -> Any:
    """The recorded event appending chunk `number` (from 1) of the log; chunks that were already in the kit's
    snapshot take the shape of the first chunk it appended."""
    first = len(log) - len(recorded) + 1
    if number >= first:
        return recorded[number - first]
    event = copy.deepcopy(recorded[0])
    event["result"]["artifactUpdate"]["artifact"]["parts"] = [{"text": log[number - 1]}]
    return event


def test_14_resubscribe_loses_and_repeats_no_chunk(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "14-resubscribe") as (session, script):
        dropped, resumed = script.block(1), script.block(2)
        with session.stream(dropped) as events:
            streamed = [chunk_text(event) for event in session.expect(events, dropped, 0, 4)[2:]]
        with session.stream(resumed) as events:
            snapshot = events.next()
            later = events.rest()
        recorded = recorded_events(script, 2)
        appended = recorded[1:-1]
        log = [part["text"] for part in recorded[0]["result"]["task"]["artifacts"][0]["parts"]]
        log += [chunk_text(event) for event in appended]

        assert snapshot is not None
        logged = [part["text"] for part in snapshot["result"]["task"]["artifacts"][0]["parts"]]
        assert len(streamed) <= len(logged) < len(log), f"the snapshot holds {len(logged)} chunks"
        expected = copy.deepcopy(recorded[0])
        expected["result"]["task"]["artifacts"][0]["parts"] = [{"text": text} for text in log[: len(logged)]]
        session.match(expected, snapshot, "block 2 event 0")

        expected_later = [chunk_event(appended, log, n) for n in range(len(logged) + 1, len(log) + 1)] + recorded[-1:]
        assert len(later) == len(expected_later), f"after the snapshot: {later}"
        for index, (want, live) in enumerate(zip(expected_later, later, strict=True), 1):
            session.match(want, live, f"block 2 event {index}")
        assert logged[: len(streamed)] == streamed
        assert logged + [chunk_text(event) for event in later[:-1]] == log
        session.replay(script.block(3))


def test_15_push_webhooks_and_config_operations(server: ServerProcess, kit: Path) -> None:
    script = transcript(kit, "15-push")
    with WebhookReceiver() as hooks, KitSession(server, ALLOWANCES["15-push"], webhook_base=hooks.base) as session:
        session.play(script, labels={"1", "2", "3"})
        recorded = script.webhooks

        def all_delivered() -> list[Delivery] | None:
            received = hooks.received()
            return received if len(received) >= len(recorded) else None

        deliveries = wait_for(all_delivered, timeout=20, what=f"{len(recorded)} webhooks")
        session.play(script, labels={"4"})
        assert len(deliveries) == len(recorded), deliveries
        for block, delivery in zip(recorded, deliveries, strict=True):
            session.check_webhook(block, delivery)


def test_16_rest_binding(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "16-rest-binding") as (session, script):
        session.play(script)


def test_18_extended_card(server: ServerProcess, kit: Path) -> None:
    with replaying(server, kit, "18-extended-card") as (session, script):
        session.play(script)
