"""`a2a-bridge capture`: deterministic transcripts of our own server, which the replayer plays back against it."""

import subprocess
import sys
from pathlib import Path

from capture.allowances import load as load_allow
from capture.recorder import OUT
from capture.replay import replay
from capture.transcript import Headers, Request, Response, StreamPosition, load_all, parse
from capture.writer import Recorded, render
from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
KIT_AGENTS = {"localhost:41241": "test-runner", "localhost:41242": "code-reviewer", "localhost:41243": "deployer"}


def test_capture_check_matches_the_committed_transcripts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "capture", "--check"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "byte for byte" in done.stdout


def test_the_captured_transcripts_cover_the_kit_scenarios() -> None:
    names = {script.name for script in load_all(OUT)}
    kit = {f"{n:02d}" for n in range(1, 19) if n != 17}
    assert kit <= {name[:2] for name in names}
    assert {"20-task-status", "21-claims"} <= names
    push = next(script for script in load_all(OUT) if script.name == "15-push")
    assert len(push.webhooks) == 8
    approval = next(script for script in load_all(OUT) if script.name == "07-auth-required").block(2)
    assert approval.during == StreamPosition("1", 3)


def test_replaying_the_capture_against_a_fresh_server_passes(tmp_path: Path) -> None:
    server = ServerProcess("memory").start()
    try:
        maps = {host: server.agent(agent) for host, agent in KIT_AGENTS.items()}
        results = replay(sorted(OUT.glob("*.http")), maps, load_allow(ROOT / "capture" / "allow" / "bridge.toml"))
    finally:
        server.stop()
    assert not [f"{r.name}: {d}" for r in results for d in r.failures]
    assert len(results) == sum(len(script.blocks) for script in load_all(OUT))


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
