"""`a2a-bridge replay`: the kit's transcripts and made-up ones against a fresh server, as a function and as the CLI."""

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2a_bridge.capture.allowances import AllowError, AllowList, allow_file, load as load_allow
from a2a_bridge.capture.compare import Difference, Ids, compare, path_matches
from a2a_bridge.capture.replay import BlockResult, Replayer, UsageError, parse_maps, replay
from a2a_bridge.capture.transcript import load_all, parse
from tests.support import LOOPBACK_WEBHOOKS, ServerProcess

ROOT = Path(__file__).resolve().parents[2]
BRIDGE_ALLOW = ROOT / "capture" / "allow" / "bridge.toml"
RERUN_ALLOW = ROOT / "capture" / "allow" / "rerun.toml"
KIT_AGENTS = {"localhost:41241": "test-runner", "localhost:41242": "code-reviewer", "localhost:41243": "deployer"}

WRONG = """# Made up for this test: the recorded error message is not the one the server sends.

### 1 · GetTask: an unknown id
POST /a2a/jsonrpc HTTP/1.1
Host: localhost:41241
Content-Type: application/json
A2A-Version: 1.0

{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "00000000-0000-4000-8000-0000000000be"}}

HTTP/1.1 200 OK
Content-Type: application/json

{"jsonrpc": "2.0", "id": 7, "error": {"code": -32001, "message": "No such task, recorded wrongly"}}
"""


RETURN_AT_ONCE = """### 1 · SendMessage: return immediately, a messageId that is not a UUID
POST /a2a/jsonrpc HTTP/1.1
Host: localhost:41241
Content-Type: application/json
A2A-Version: 1.0

{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "readme-1", "role": "ROLE_USER",
 "parts": [{"text": "Run the unit tests for payments-api at commit 9f3c2e1"}]}, "configuration": {"returnImmediately": true}}}

HTTP/1.1 200 OK
Content-Type: application/json

{"result": {"task": {"id": "e00e234e-5e59-489a-ad44-e2fb935286cb", "contextId": "29dad220-15fd-463d-816d-b3f537bc7c43",
 "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": "2026-10-06T09:00:06Z"},
 "history": [{"messageId": "readme-1", "contextId": "29dad220-15fd-463d-816d-b3f537bc7c43",
  "taskId": "e00e234e-5e59-489a-ad44-e2fb935286cb", "role": "ROLE_USER",
  "parts": [{"text": "Run the unit tests for payments-api at commit 9f3c2e1"}]}]}}, "id": 1, "jsonrpc": "2.0"}
"""
"""Made up for these tests: sent again with the same messageId, the server would answer with the first run's task,
which has completed by then."""


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of its own: the kit's 12 lists exactly the tasks that 03–10 created before it."""
    process = ServerProcess("memory", extra=LOOPBACK_WEBHOOKS).start()
    yield process
    process.stop()


def maps_for(server: ServerProcess) -> dict[str, str]:
    return {host: server.agent(agent) for host, agent in KIT_AGENTS.items()}


def map_args(server: ServerProcess) -> list[str]:
    return [arg for host, base in maps_for(server).items() for arg in ("--map", f"{host}={base}")]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "a2a_bridge", "replay", *args],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def failures(results: list[BlockResult]) -> list[str]:
    return [f"{r.name}: {d}" for r in results for d in r.failures]


def test_the_whole_kit_passes_every_block(kit: Path, fresh_server: ServerProcess) -> None:
    files = sorted(kit.glob("*.http"))
    results = replay(files, maps_for(fresh_server), load_allow(BRIDGE_ALLOW))
    assert not failures(results)
    assert len(results) == sum(len(script.blocks) for script in load_all(kit))
    allowed = {(r.file, r.label) for r in results if r.allowed}
    assert {("11-errors", "4"), ("12-list-tasks", "1"), ("16-rest-binding", "2"), ("16-rest-binding", "4")} <= allowed
    assert ("15-push", "4") not in allowed


def test_the_cli_replays_the_kit_and_writes_junit(kit: Path, fresh_server: ServerProcess, tmp_path: Path) -> None:
    report = tmp_path / "kit.xml"
    files = [str(path) for path in sorted(kit.glob("*.http"))]
    done = run_cli(*files, *map_args(fresh_server), "--allow", "bridge", "--junit", str(report))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failed" in done.stdout and "allowed differences" in done.stdout
    suites = ET.parse(report).getroot()
    assert suites.get("failures") == "0"
    assert int(suites.get("tests", "0")) == sum(len(script.blocks) for script in load_all(kit))
    assert "12-list-tasks" in {suite.get("name") for suite in suites.iter("testsuite")}


def test_a_wrong_transcript_fails_with_a_readable_diff(fresh_server: ServerProcess, tmp_path: Path) -> None:
    wrong = tmp_path / "90-wrong.http"
    wrong.write_text(WRONG, encoding="utf-8")
    report = tmp_path / "wrong.xml"

    results = replay([wrong], maps_for(fresh_server))
    [result] = results
    paths = {d.path: d for d in result.failures}
    assert paths["$.error.message"].recorded == "No such task, recorded wrongly"
    assert paths["$.error.message"].live == "Task not found"
    assert "$.error.data" in paths and paths["$.error.data"].kind == "unexpected key"

    done = run_cli(str(wrong), *map_args(fresh_server), "--junit", str(report))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL 90-wrong #1 · GetTask: an unknown id" in done.stdout
    assert "$.error.message" in done.stdout
    assert "recorded: No such task, recorded wrongly" in done.stdout and "live:     Task not found" in done.stdout
    assert "0 passed, 1 failed" in done.stdout
    failure = ET.parse(report).getroot().find("testsuite/testcase/failure")
    assert failure is not None and "$.error.message" in (failure.text or "")


def test_allowed_differences_are_reported_apart(fresh_server: ServerProcess, tmp_path: Path) -> None:
    wrong = tmp_path / "90-wrong.http"
    wrong.write_text(WRONG, encoding="utf-8")
    allow = tmp_path / "allow.toml"
    allow.write_text(
        '[[allow]]\nfile = "90-*"\nblock = 1\npath = "$.error.message"\nreason = "worded differently on purpose"\n\n'
        '[[allow]]\nfile = "*"\nblock = "*"\npath = "$.error.data"\nkind = "unexpected key"\nreason = "details added"\n',
        encoding="utf-8",
    )
    [result] = replay([wrong], maps_for(fresh_server), load_allow(allow))
    assert result.passed
    assert {(d.path, entry.reason) for d, entry in result.allowed} == {
        ("$.error.message", "worded differently on purpose"),
        ("$.error.data", "details added"),
    }
    done = run_cli(str(wrong), *map_args(fresh_server), "--allow", str(allow))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "allowed differences" in done.stdout and "worded differently on purpose" in done.stdout
    assert "1 passed, 0 failed (2 allowed differences)" in done.stdout


def test_a_host_without_a_mapping_is_explained(tmp_path: Path) -> None:
    wrong = tmp_path / "90-wrong.http"
    wrong.write_text(WRONG, encoding="utf-8")
    with pytest.raises(UsageError, match="--map localhost:41241="):
        replay([wrong], {})
    done = run_cli(str(wrong))
    assert done.returncode == 2 and "no --map for localhost:41241" in done.stderr
    with pytest.raises(UsageError):
        parse_maps(["localhost:41241"])


def test_allow_names_a_shipped_allow_file_or_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert allow_file("bridge") == allow_file("bridge.toml") == BRIDGE_ALLOW
    assert allow_file("rerun") == RERUN_ALLOW
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bridge.toml").write_text("", encoding="utf-8")
    assert allow_file("bridge.toml") == Path("bridge.toml")
    assert allow_file("./rerun") == Path("rerun")
    with pytest.raises(AllowError, match=r"nope: no such file \(the allow files shipped with the bridge: bridge, rerun\)"):
        load_allow(allow_file("nope"))


def test_allow_files_need_a_reason(tmp_path: Path) -> None:
    allow = tmp_path / "allow.toml"
    allow.write_text('[[allow]]\nfile = "*"\nblock = "*"\npath = "$.x"\nreason = ""\n', encoding="utf-8")
    with pytest.raises(AllowError, match="reason"):
        load_allow(allow)
    assert load_allow(BRIDGE_ALLOW).entries


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("$.error.data[*].metadata", "$.error.data[0].metadata", True),
        ("$.error.data[*].metadata", "$.error.data[0].reason", False),
        ("$[*].result.**", "$[3].result.statusUpdate.status", True),
        ("$.result.tasks[*].**", "$.result.tasks", False),
        ("headers.WWW-Authenticate", "headers.WWW-Authenticate", True),
        ('$.metadata["a.b"]', '$.metadata["a.b"]', True),
    ],
)
def test_path_patterns(pattern: str, path: str, matches: bool) -> None:
    assert path_matches(pattern, path) is matches


def test_numbers_compare_by_value_and_lists_align() -> None:
    ids = Ids()
    assert compare({"n": 11, "b": [1, 2]}, {"b": [1, 2], "n": 11.0}, ids) == []
    [extra] = compare([{"a": 1}], [{"x": 0}, {"a": 1}], ids)
    assert (extra.path, extra.kind) == ("$[0]", "unexpected item")
    [missing] = compare([1, 2, 3], [1, 3], ids)
    assert missing == Difference("$[1]", "missing item", "missing item 2", 2, None, ([1, 2, 3], [1, 3]))


def test_the_kit_replays_twice_against_one_server(kit: Path, fresh_server: ServerProcess) -> None:
    """Each run sends fresh messageIds, so the second is not answered as a retry of the first; only ListTasks sees the
    first run's tasks, which rerun.toml documents."""
    files = sorted(kit.glob("*.http"))
    rerun = load_allow(RERUN_ALLOW)
    allow = AllowList(load_allow(BRIDGE_ALLOW).entries + rerun.entries)
    first = replay(files, maps_for(fresh_server), allow)
    second = replay(files, maps_for(fresh_server), allow)

    assert not failures(first) and not failures(second)
    assert len(first) == len(second) == sum(len(script.blocks) for script in load_all(kit))
    assert not [d for r in first for d, entry in r.allowed if entry in rerun.entries]
    assert {(r.file, r.label, d.path) for r in second for d, entry in r.allowed if entry in rerun.entries} == {
        ("12-list-tasks", "1", "$.result.totalSize"),
        ("12-list-tasks", "2", "$.result.totalSize"),
        ("12-list-tasks", "3", "$.result.totalSize"),
        ("12-list-tasks", "3", "$.result.tasks[1]"),
    }


def test_every_run_gives_each_recorded_message_id_a_fresh_value(fresh_server: ServerProcess) -> None:
    script = parse(RETURN_AT_ONCE, "90-readme")
    sent = []
    for _ in range(2):
        replayer = Replayer(maps_for(fresh_server))
        try:
            [result] = replayer.run([script])
        finally:
            replayer.close()
        assert result.passed, [str(d) for d in result.failures]
        sent.append(replayer.ids.values["readme-1"])
    assert sent[0] != sent[1] and all(value.startswith("readme-1-") for value in sent)


def test_a_uuid_message_id_is_bound_like_an_id() -> None:
    replayer = Replayer({"localhost:41241": "http://127.0.0.1:9"})
    try:
        body = '{"message": {"messageId": "bef204f0-906f-46d8-903d-083cb42919b5", "parts": []}}'
        first = replayer.fresh_message_ids(body)
        again = replayer.fresh_message_ids(body)
    finally:
        replayer.close()
    live = replayer.ids["bef204f0-906f-46d8-903d-083cb42919b5"]
    assert first == again == body
    assert live != "bef204f0-906f-46d8-903d-083cb42919b5"
    assert replayer.ids.translate(body) == body.replace("bef204f0-906f-46d8-903d-083cb42919b5", live)
    echoed = {"history": [{"messageId": "bef204f0-906f-46d8-903d-083cb42919b5"}]}
    assert compare(echoed, {"history": [{"messageId": live}]}, replayer.ids) == []
