"""`a2a-bridge capture`: deterministic transcripts of our own server, which the replayer plays back against it, and
the capture's other outputs: the signed card worked through (17) and the planner's log (19)."""

import asyncio
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import AgentCard
from a2a.utils import signing
from google.protobuf.json_format import ParseDict

from a2a_bridge.agents.catalog import DEPLOYER_SIGNING_KEY
from a2a_bridge.capture.allowances import AllowList, load as load_allow
from a2a_bridge.capture.recorder import OUT, outputs
from a2a_bridge.capture.replay import Replayer, replay
from a2a_bridge.capture.transcript import (
    Block,
    Headers,
    Request,
    Response,
    StreamPosition,
    Transcript,
    load,
    load_all,
    parse,
)
from a2a_bridge.capture.transport import RecordingTransport
from a2a_bridge.capture.writer import Recorded, render
from tests.claim_support import claim_view, operations
from tests.support import LOOPBACK_WEBHOOKS, ServerProcess, wait_for
from tests.capture.test_planner import DECISIONS, SHORT_ID, normalized

ROOT = Path(__file__).resolve().parents[2]
KIT_AGENTS = {"localhost:41241": "test-runner", "localhost:41242": "code-reviewer", "localhost:41243": "deployer"}
RESTARTS = "22-reconcile"
"""The capture whose server restarts after its block 2: replayed on its own, across a restart of the server."""
ROLLOUT = 1.5
"""Seconds of each deployer step in the restart replay: the server is killed within the rollout's step."""


def maps_for(server: ServerProcess) -> dict[str, str]:
    return {host: server.agent(agent) for host, agent in KIT_AGENTS.items()}


def reply(block: Block) -> Any:
    """A recorded JSON reply."""
    assert block.response is not None
    return block.response.json()


def test_capture_check_matches_the_committed_transcripts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "capture", "--check"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "byte for byte" in done.stdout


def test_the_capture_covers_the_kits_01_to_19_and_ours() -> None:
    names = outputs(OUT)
    assert {f"{n:02d}" for n in range(1, 20)} <= {name[:2] for name in names}
    assert {"17-signed-card.txt", "19-planner.http", "19-planner.log", "20-task-status.http", "21-claims.http",
            "22-reconcile.http"} <= names
    scripts = {script.name: script for script in load_all(OUT)}
    assert len(scripts["15-push"].webhooks) == 8
    assert scripts["07-auth-required"].block(2).during == StreamPosition("1", 3)
    status = scripts["20-task-status"]
    long_poll, stream = status.block(4).response, status.block(7).response
    assert long_poll is not None and long_poll.status == 304
    assert stream is not None and [frame["status"]["phase"] for frame in stream.frames_json()] == ["idle", "terminal"]
    assert status.block(8).during == StreamPosition("7", 1)
    claims = reply(scripts[RESTARTS].block(4))
    assert claims["state"] == "needs_reconciliation" and operations(claims)[-1] == "invalidate"


def test_the_capture_replays_twice_against_one_server() -> None:
    """Fresh messageIds in every run: the second replay is not answered with the first one's tasks."""
    rerun = load_allow(ROOT / "capture" / "allow" / "rerun.toml")
    allow = AllowList(load_allow(ROOT / "capture" / "allow" / "bridge.toml").entries + rerun.entries)
    files = [path for path in sorted(OUT.glob("*.http")) if path.stem != RESTARTS]
    server = ServerProcess("memory", extra=LOOPBACK_WEBHOOKS).start()
    try:
        runs = [replay(files, maps_for(server), allow) for _ in range(2)]
    finally:
        server.stop()
    for results in runs:
        assert not [f"{r.name}: {d}" for r in results for d in r.failures]
        assert len(results) == sum(len(load(path).blocks) for path in files)
    assert not [d for r in runs[0] for d, entry in r.allowed if entry in rerun.entries]
    assert {r.file for r in runs[1] for _, entry in r.allowed if entry in rerun.entries} == {"12-list-tasks"}


def split(script: Transcript, first: str) -> tuple[Transcript, Transcript]:
    """The blocks before label `first`, and the rest."""
    labels = [block.label for block in script.blocks]
    cut = labels.index(first)
    return (dataclasses.replace(script, blocks=script.blocks[:cut]), dataclasses.replace(script, blocks=script.blocks[cut:]))


def test_the_reconcile_capture_replays_across_a_restart(tmp_path: Path) -> None:
    script = load(OUT / f"{RESTARTS}.http")
    before, after = split(script, "3")
    recorded_task = reply(before.block(1))["result"]["task"]["id"]
    server = ServerProcess(f"sqlite:///{tmp_path / 'bridge.db'}", pace=ROLLOUT).start()
    replayer = Replayer(maps_for(server))
    try:
        replayer.run([before])
        task_id = replayer.ids[recorded_task]
        wait_for(lambda: "open_window" in operations(claim_view(server, "deployer", task_id)), timeout=ROLLOUT,
                 what="the rollout to start")
        server.kill()
        server.start()
        replayer.run([after])
    finally:
        replayer.close()
        server.stop()
    assert not [f"{r.name}: {d}" for r in replayer.results for d in r.failures]
    assert len(replayer.results) == len(script.blocks)


@pytest.mark.filterwarnings("ignore:The HMAC key is")
def test_the_signed_card_text_is_the_sdks_canonical_form_and_verifies() -> None:
    text = (OUT / "17-signed-card.txt").read_text(encoding="utf-8")
    card = ParseDict(reply(load(OUT / "01-agent-cards.http").block(3)), AgentCard())
    [signature] = card.signatures
    assert signing._canonicalize_agent_card(card) in text.splitlines()
    assert f"signature:     {signature.signature}" in text and f"base64url: {signature.protected}" in text
    signing.create_signature_verifier(lambda kid, jku: DEPLOYER_SIGNING_KEY, ["HS256"])(card)
    verdicts = text.split("## 6", 1)[1].splitlines()[1:]
    assert [line.split(":", 1)[1].strip() for line in verdicts] == [
        "valid", "InvalidSignaturesError: No valid signature found", "InvalidSignaturesError: No valid signature found",
    ]


def test_the_planners_log_makes_the_kits_decisions_on_the_recorded_tasks() -> None:
    log = (OUT / "19-planner.log").read_text(encoding="utf-8").splitlines()
    assert [normalized(line) for line in log] == DECISIONS
    script = load(OUT / "19-planner.http")
    tasks = [
        body["result"]["task"]["id"]
        for block in script.exchanges
        if block.response is not None and not block.response.is_stream
        and isinstance(body := block.response.json(), dict) and "task" in body.get("result", {})
    ]
    assert [task[:8] for task in tasks] == SHORT_ID.findall("\n".join(log))
    methods = [block.request.json().get("method") for block in script.exchanges if block.request.path == "/a2a/jsonrpc"]
    assert methods == ["SendMessage", "SendMessage", "SendMessage", "SendMessage", "SubscribeToTask", "GetTask"]
    assert [block.request.json()["id"] for block in script.exchanges if block.request.path == "/a2a/jsonrpc"] == [1, 2, 3, 4, 5, 6]
    approval = script.block(9)
    assert approval.title == "operator approves" and approval.during == StreamPosition("8", 1)


def test_the_recording_transport_reaches_only_the_capture_server() -> None:
    async def attempt() -> None:
        transport = RecordingTransport({"http://localhost:41241": "http://127.0.0.1:9"}, {"localhost:41241": "test-runner"})
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get("http://example.com/.well-known/agent-card.json")

    with pytest.raises(httpx.ConnectError, match="not a kit host"):
        asyncio.run(attempt())


def test_a_request_inside_an_open_stream_is_written_where_the_parser_finds_it() -> None:
    def request(target: str) -> Request:
        return Request("POST", target, "HTTP/1.1", Headers((("Host", "localhost:1"),)), "{}")

    sse = Headers((("Content-Type", "text/event-stream"),))
    plain = Headers((("Content-Type", "application/json"),))
    inner = Recorded("2", "inside", request("/b"), Response("HTTP/1.1", 200, "OK", plain, '{"ok": true}'), ["after"])
    stream = Recorded(
        "1", "stream", request("/a"), Response("HTTP/1.1", 200, "OK", sse, frames=('{"n": 1}', '{"n": 2}', '{"n": 3}')),
        ["open"], [(2, inner)],
    )
    script = parse(render([stream], ["preamble"]), "made-up")
    outer, nested = script.blocks
    assert outer.response is not None and outer.response.frames_json() == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert nested.during == StreamPosition("1", 2) and nested.response is not None
    assert [n.text for n in script.narration] == ["preamble"]
    assert [n.text for n in outer.narration] == ["open"] and [n.text for n in nested.narration] == ["after"]
