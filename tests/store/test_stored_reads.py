"""Reads of the database stores (issue 18): finished tasks served from a bounded cache that a write here or on
another replica invalidates, never stale, never shown to a caller who may not see them; ListTasks in keyset pages
over many tasks, each task exactly once and in order, on both JSON bindings, with a totalSize that follows writes."""

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from a2a.types import Task, TaskState, TaskStatus

from a2a_bridge.agents import bench
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.claims import Claim
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.ledger import TaskRecord
from a2a_bridge.store.proto_json import to_dict
from a2a_bridge.store.stored_tasks import StoredTasks
from a2a_bridge.store.stores import StoreConfig, Stores
from a2a_bridge.tasks.task_host import TaskHost
from bench.populate import clone_tasks
from tests.support import A2A, rpc, serve_in_thread, user_message, wait_for


def finished(task_id: str, text: str = "x") -> tuple[Task, TaskRecord]:
    task = Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    task.history.add().parts.add().text = text
    record = TaskRecord(task_id, "bench", "", "", datetime.now(UTC), "completed", 3, claim=Claim(state="completed"))
    return task, record


def test_the_cache_keeps_the_most_recently_read_tasks_within_its_bounds() -> None:
    cache = StoredTasks(max_tasks=3, max_bytes=1_000)
    for name in "abcd":
        cache.keep(*finished(name), cache.epoch())
        cache.get("a")
    assert len(cache) == 3 and cache.get("a") is not None and cache.get("b") is None

    cache.keep(*finished("big", "y" * 900), cache.epoch())
    kept = [name for name in ("a", "c", "d", "big") if cache.get(name) is not None]
    assert "big" in kept and len(kept) < 4
    assert cache.bytes == sum(cache.get(name)[0].ByteSize() for name in kept) <= 1_000
    cache.keep(*finished("huge", "y" * 2_000), cache.epoch())
    assert cache.get("huge") is None and cache.get("big") is not None, "a task past the bound alone is not kept"


def test_the_cache_keeps_only_finished_tasks_read_since_their_last_write() -> None:
    cache = StoredTasks()
    running, record = finished("a")
    running.status.state = TaskState.TASK_STATE_WORKING
    cache.keep(running, record, cache.epoch())
    assert cache.get("a") is None
    task, open_claim = finished("b")
    open_claim.claim = Claim(state="claimed")
    cache.keep(task, open_claim, cache.epoch())
    assert cache.get("b") is None

    since = cache.epoch()
    cache.forget(["c"])
    cache.keep(*finished("c"), since)
    assert cache.get("c") is None, "a read that began before a write must not be kept"
    cache.keep(*finished("d"), since)
    assert cache.get("d") is not None, "another task's write does not refuse it"
    cache.forget(["d"])
    assert cache.get("d") is None


def test_a_kept_tasks_json_is_made_once_and_only_for_that_task_as_kept() -> None:
    cache = StoredTasks()
    task, record = finished("a")
    task.history.add().parts.add().text = "second"
    cache.keep(task, record, cache.epoch())
    copy = Task()
    copy.CopyFrom(task)
    made = cache.json(copy)
    assert made == to_dict(task) and cache.json(copy) is made

    cut = Task()
    cut.CopyFrom(task)
    del cut.history[:1]
    assert cache.json(cut) == to_dict(cut) != made, "a task whose history was cut is not the kept task"
    cache.forget(["a"])
    assert cache.json(copy) == made and cache.json(copy) is not made, "a forgotten task's JSON is made anew"


def test_the_json_of_kept_tasks_is_bounded_by_their_bytes_most_recently_answered_first() -> None:
    tasks = [finished(name, "y" * 100) for name in "abc"]
    size = tasks[0][0].ByteSize()
    cache = StoredTasks(max_json_bytes=2 * size)
    for task, record in tasks:
        cache.keep(task, record, cache.epoch())
    made = {task.id: cache.json(task) for task, _ in tasks[:2]}
    assert cache.json(tasks[0][0]) is made["a"], "answered again: now the most recent"
    cache.json(tasks[2][0])
    assert cache.json_bytes == 2 * size
    assert cache.json(tasks[0][0]) is made["a"] and cache.json(tasks[1][0]) is not made["b"]
    cache.forget(["a", "b", "c"])
    assert cache.json_bytes == 0


ALICE, BOB = {"Authorization": "Bearer alice-token"}, {"Authorization": "Bearer bob-token"}


def bench_bridge(store: str) -> Bridge:
    return Bridge([AgentSpec("bench", bench.card(), bench.Bench())], Stores(StoreConfig.parse(store)), SystemClock(),
                  lambda: str(uuid.uuid4()), principals={"alice-token": Principal("alice"), "bob-token": Principal("bob")})


@contextlib.contextmanager
def served(store: str) -> Iterator[tuple[str, TaskHost]]:
    bridge = bench_bridge(store)
    with serve_in_thread(bridge.app()) as base:
        yield base + "/bench", bridge.agents["bench"].host


def send(base: str, text: str = "hello", headers: dict[str, str] | None = None, **extra: str) -> dict[str, Any]:
    reply = rpc(base, "SendMessage", {"message": user_message(text, str(uuid.uuid4()), **extra)}, headers=headers)
    return reply["result"]["task"]


def get_task(base: str, task_id: str, **params: Any) -> dict[str, Any]:
    return rpc(base, "GetTask", {"id": task_id, **params})


def test_get_task_serves_finished_tasks_from_a_bounded_cache_as_stored(tmp_path: Path) -> None:
    with served(f"sqlite:///{tmp_path / 'b.db'}") as (base, host):
        host.finished.max_tasks = 2
        tasks = [send(base) for _ in range(5)]
        for task in tasks:
            assert get_task(base, task["id"])["result"] == task
            assert get_task(base, task["id"])["result"] == task
        assert len(host.finished) == 2
        assert host.finished.get(tasks[-1]["id"]) is not None and host.finished.get(tasks[0]["id"]) is None

        last = tasks[-1]
        assert last["history"], "the bench agent's task has history"
        assert "history" not in get_task(base, last["id"], historyLength=0)["result"]
        assert get_task(base, last["id"], historyLength=1)["result"]["history"] == last["history"][-1:]
        assert get_task(base, last["id"])["result"] == last, "a trimmed answer must not trim what is kept"

        asking = send(base, "ask")
        assert get_task(base, asking["id"])["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert host.finished.get(asking["id"]) is None
        done = send(base, "go on", taskId=asking["id"])
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert get_task(base, asking["id"])["result"] == done


def test_a_finished_task_hidden_from_the_caller_answers_as_an_unknown_id(tmp_path: Path) -> None:
    with served(f"sqlite:///{tmp_path / 'b.db'}") as (base, host):
        task = send(base, headers=ALICE)
        assert rpc(base, "GetTask", {"id": task["id"]}, headers=ALICE)["result"] == task
        assert host.finished.get(task["id"]) is not None
        for headers in (BOB, {}):
            missing = str(uuid.uuid4())
            theirs = json.dumps(rpc(base, "GetTask", {"id": task["id"]}, headers=headers)).replace(task["id"], "ID")
            absent = json.dumps(rpc(base, "GetTask", {"id": missing}, headers=headers)).replace(missing, "ID")
            assert theirs == absent and '"error"' in theirs
        assert rpc(base, "GetTask", {"id": task["id"]}, headers=ALICE)["result"] == task


CHANGED = '{"messageId": "m-elsewhere", "role": "ROLE_AGENT", "parts": [{"text": "changed elsewhere"}]}'


async def rewrite_elsewhere(database: str, task_id: str) -> None:
    """What another replica's write of a task does: its rows changed and `t:<task>` announced at commit."""
    connection = await asyncpg.connect(database)
    try:
        async with connection.transaction():
            await connection.execute(
                "UPDATE tasks_bench SET status = jsonb_set(status::jsonb, '{message}', $2::jsonb)::json WHERE id = $1",
                task_id, CHANGED,
            )
            await connection.execute("UPDATE bridge_tasks SET revision = revision + 1 WHERE task_id = $1", task_id)
            await connection.execute("SELECT pg_notify('a2a_bridge', $1)", f"t:{task_id}")
    finally:
        await connection.close()


def status_text(task: dict[str, Any]) -> str:
    return str(task["status"].get("message", {}).get("parts", [{}])[0].get("text", ""))


def test_a_replica_never_serves_a_task_another_replica_changed(pg_database: str) -> None:  # noqa: F811
    with served(pg_database) as (a, _), served(pg_database) as (b, b_host):
        asking = send(a, "ask")
        assert get_task(b, asking["id"])["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        done = send(a, "go on", taskId=asking["id"])
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert get_task(b, asking["id"])["result"] == done, "B reads the task at once as A stored it"
        assert b_host.finished.get(asking["id"]) is not None
        assert get_task(b, asking["id"])["result"] == done

        asyncio.run(rewrite_elsewhere(pg_database, asking["id"]))
        wait_for(lambda: status_text(get_task(b, asking["id"])["result"]) == "changed elsewhere", timeout=10,
                 what="B to answer the task as the other replica rewrote it")
        kept = b_host.finished.get(asking["id"])
        assert kept is not None and kept[0].status.message.parts[0].text == "changed elsewhere", "read again, kept again"


def timestamp(task: dict[str, Any]) -> datetime:
    """A status timestamp to the microsecond (what the store keeps)."""
    text = task["status"]["timestamp"].removesuffix("Z")
    whole, _, fraction = text.partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}")


def list_rpc(base: str, token: str, size: int, **extra: Any) -> dict[str, Any]:
    params = {"pageSize": size, **extra, **({"pageToken": token} if token else {})}
    return rpc(base, "ListTasks", params)


def list_rest(base: str, token: str, size: int, **extra: Any) -> dict[str, Any]:
    query = {"pageSize": size, **extra, **({"pageToken": token} if token else {})}
    response = httpx.get(f"{base}/a2a/rest/tasks", params=query, headers=A2A, timeout=30)
    assert response.status_code == 200, response.text
    return {"result": response.json()}


def every_page(base: str, size: int, binding: Any) -> tuple[list[dict[str, Any]], set[int]]:
    """The tasks of every page in order, and the totalSize each page gave."""
    tasks: list[dict[str, Any]] = []
    totals: set[int] = set()
    token = ""
    for _ in range(1_000):
        page = binding(base, token, size)["result"]
        tasks += page.get("tasks", [])
        totals.add(page["totalSize"])
        assert page["pageSize"] == size
        token = page["nextPageToken"]
        if not token:
            return tasks, totals
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("binding", [list_rpc, list_rest], ids=["JSON-RPC", "HTTP+JSON"])
def test_list_tasks_pages_return_each_task_once_in_order(tmp_path: Path, binding: Any) -> None:
    database = tmp_path / "b.db"
    with served(f"sqlite:///{database}") as (base, _):
        sent = [send(base) for _ in range(12)]
        copies = clone_tasks(database, sent[0]["id"], 40)
        expected = {task["id"] for task in sent} | set(copies)

        tasks, totals = every_page(base, 7, binding)
        ids = [task["id"] for task in tasks]
        assert len(ids) == len(set(ids)) == len(expected) and set(ids) == expected
        assert totals == {len(expected)}
        keys = [(timestamp(task), task["id"]) for task in tasks]
        assert keys == sorted(keys, reverse=True), "newest first, ties by id, descending"

        newer = send(base)
        first = binding(base, "", 7)["result"]
        assert first["totalSize"] == len(expected) + 1, "a new task is counted"
        assert first["tasks"][0]["id"] == newer["id"]
        last = binding(base, "", 100)["result"]
        assert last["nextPageToken"] == "" and len(last["tasks"]) == len(expected) + 1

        context = binding(base, "", 5, contextId=sent[3]["contextId"])["result"]
        assert [task["id"] for task in context["tasks"]] == [sent[3]["id"]] and context["totalSize"] == 1


def test_a_page_token_this_server_did_not_issue_is_refused_on_both_bindings(tmp_path: Path) -> None:
    with served(f"sqlite:///{tmp_path / 'b.db'}") as (base, _):
        send(base)
        for token in ("not-a-token", "eyJ0cyI6MSwiaWQiOjF9", "eyJ0cyI6OTk5OTk5OTk5OTk5OTk5OTk5OTk5OSwiaWQiOiJ4In0"):
            error = rpc(base, "ListTasks", {"pageToken": token})["error"]
            assert error["code"] == -32602, error
            response = httpx.get(f"{base}/a2a/rest/tasks", params={"pageToken": token}, headers=A2A, timeout=30)
            assert response.status_code == 400, response.text
