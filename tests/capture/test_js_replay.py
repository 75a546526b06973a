"""Our replayer against another implementation: the kit's blocks that do not depend on the kit's agents (card
discovery, task not found, missing version header, v0.3 method name, malformed body), played against the echo agent
server on @a2a-js/sdk 1.3.0. Each difference the replayer reports is asserted, so a change on either side shows."""

import dataclasses
from pathlib import Path

from a2a_bridge.capture.replay import BlockResult, Replayer
from a2a_bridge.capture.transcript import Transcript, load
from tests.js_support import EchoServer, node

KIT_HOST = "localhost:41241"
ERROR_BLOCKS = (1, 2, 3, 7)
"""11-errors: task not found, no A2A-Version header, a v0.3 method name, a malformed body."""

CARD_DIFFERENCES = [
    ("$.name", "value"),
    ("$.description", "value"),
    ("$.supportedInterfaces[1]", "missing item"),
    ("$.provider.url", "value"),
    ("$.provider.organization", "value"),
    ("$.version", "value"),
    ("$.capabilities.streaming", "value"),
    ("$.capabilities.pushNotifications", "value"),
    ("$.defaultInputModes[1]", "missing item"),
    ("$.defaultOutputModes[1]", "missing item"),
    ("$.skills[0].id", "value"),
    ("$.skills[0].name", "value"),
    ("$.skills[0].description", "value"),
    ("$.skills[0].tags[0]", "value"),
    ("$.skills[0].tags[1]", "missing item"),
    ("$.skills[0].examples[0]", "value"),
]
"""The echo card is another agent's card: every difference is in what the agent is, none in the card's shape."""

ERROR_DIFFERENCES = {
    "1": [
        (
            "$.error.message",
            "value",
            'expected "Task not found", got "Task not found: 00000000-0000-4000-8000-000000000000"',
        ),
        ("$.error.data[0].metadata", "missing key", "missing key 'metadata'"),
    ],
    "2": [
        (
            "$.error.message",
            "value",
            'expected "Protocol version not supported", got "The requested A2A protocol version \'0.3\' is not'
            ' supported. Supported versions: 1.0"',
        ),
        ("$.error.data[0].metadata", "missing key", "missing key 'metadata'"),
    ],
    "3": [("$.error.message", "value", 'expected "Method not found", got "Invalid method."')],
    "7": [("$.error.message", "value", 'expected "Invalid JSON payload", got "Invalid JSON payload."')],
}
"""The JS SDK answers each error with the kit's code, reason and status line; it words the messages its own way and
sends no ErrorInfo metadata (the kit names the task id, and the requested and supported versions)."""


def only(script: Transcript, *labels: int) -> Transcript:
    return dataclasses.replace(script, blocks=tuple(script.block(label) for label in labels))


def replay_against(base: str, kit: Path) -> list[BlockResult]:
    scripts = [only(load(kit / "01-agent-cards.http"), 1), only(load(kit / "11-errors.http"), *ERROR_BLOCKS)]
    replayer = Replayer({KIT_HOST: base})
    try:
        return replayer.run(scripts)
    finally:
        replayer.close()


def test_the_replayer_reports_exactly_how_the_js_echo_server_differs(kit: Path) -> None:
    with EchoServer(node()) as echo:
        results = replay_against(echo.url, kit)

    blocks = [("01-agent-cards", "1")] + [("11-errors", str(n)) for n in ERROR_BLOCKS]
    assert [(r.file, r.label) for r in results] == blocks
    card, *errors = results
    assert [(d.path, d.kind) for d in card.failures] == CARD_DIFFERENCES
    for result in errors:
        assert [(d.path, d.kind, d.detail) for d in result.failures] == ERROR_DIFFERENCES[result.label], result.name
