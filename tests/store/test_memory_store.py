"""The memory store (`--store memory`), which keeps each task as its protobuf encoding and the ledger's rows compacted
(issue 18), through the wire: a task reads back as it was answered, only by who may see it and cut to historyLength;
ListTasks pages each task once, newest first, filtered, refusing a token it did not issue; the claim view shows each
claim event in order with its evidence and time; a retried messageId gets its task, another message under it -32602.
Beside the wire, the store itself against the SDK's `InMemoryTaskStore` on what the wire rarely shows."""

import asyncio
import random
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, Task, TaskState, TaskStatus
from google.protobuf.timestamp_pb2 import Timestamp

from a2a_bridge.agents import bench
from a2a_bridge.core.auth import owner_context
from a2a_bridge.store.memory_task_store import MemoryTaskStore
from tests.support import A2A, rpc, serve_in_thread, user_message
from tests.store.test_stored_reads import ALICE, BOB, bench_bridge, every_page, list_rest, list_rpc, send, timestamp


@pytest.fixture
def base() -> Iterator[str]:
    with serve_in_thread(bench_bridge("memory").app()) as url:
        yield url + "/bench"


def summary(task: dict[str, Any]) -> tuple[Any, ...]:
    """What ListTasks shows of a task (artifacts only when asked; the listing writes default values too)."""
    history = [(m["messageId"], m["role"], [part["text"] for part in m["parts"]]) for m in task["history"]]
    return task["id"], task["contextId"], task["status"]["state"], task["status"]["timestamp"], str(history)


def get(base: str, task_id: str, headers: dict[str, str] | None = None, **params: Any) -> dict[str, Any]:
    return rpc(base, "GetTask", {"id": task_id, **params}, headers=headers)


def test_a_task_reads_back_as_answered_to_whom_may_see_it(base: str) -> None:
    sent = send(base, headers=ALICE)
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED" and sent["artifacts"][0]["parts"][0]["text"] == bench.RESULT_TEXT
    assert get(base, sent["id"], ALICE)["result"] == sent
    assert get(base, sent["id"], ALICE)["result"] == sent, "a read does not change what is stored"
    assert get(base, sent["id"], ALICE, historyLength=0)["result"] == {k: v for k, v in sent.items() if k != "history"}
    for other in (BOB, None):
        assert get(base, sent["id"], other)["error"]["code"] == -32001, "another caller's task is not found"
    rest = httpx.get(f"{base}/a2a/rest/tasks/{sent['id']}", headers={**A2A, **ALICE}, timeout=30)
    assert rest.status_code == 200 and rest.json() == sent


@pytest.mark.parametrize("binding", [list_rpc, list_rest], ids=["JSON-RPC", "HTTP+JSON"])
def test_list_tasks_pages_each_task_once_newest_first(base: str, binding: Any) -> None:
    sent = [send(base) for _ in range(11)]
    send(base, headers=BOB)
    tasks, totals = every_page(base, 4, binding)
    assert sorted(task["id"] for task in tasks) == sorted(task["id"] for task in sent), "each of the caller's tasks once"
    assert totals == {len(sent)}
    keys = [(timestamp(task), task["id"]) for task in tasks]
    assert keys == sorted(keys, reverse=True), "newest first, ties by id, descending"
    assert sorted(map(summary, tasks)) == sorted(map(summary, sent)), "listed as answered"

    context = binding(base, "", 5, contextId=sent[3]["contextId"])["result"]
    assert [task["id"] for task in context["tasks"]] == [sent[3]["id"]] and context["totalSize"] == 1
    assert binding(base, "", 5, status="TASK_STATE_WORKING")["result"]["totalSize"] == 0
    done = binding(base, "", 100, status="TASK_STATE_COMPLETED")["result"]
    assert done["totalSize"] == len(sent) and done["nextPageToken"] == ""


def test_a_page_token_this_server_did_not_issue_is_refused(base: str) -> None:
    send(base)
    for token in ("not-a-token", "eyJ0cyI6MSwiaWQiOjF9"):
        assert rpc(base, "ListTasks", {"pageToken": token})["error"]["code"] == -32602


def test_the_claim_view_shows_each_event_in_order_with_its_evidence(base: str) -> None:
    message_id = str(uuid.uuid4())
    task = rpc(base, "SendMessage", {"message": user_message("hello", message_id)})["result"]["task"]
    response = httpx.get(f"{base}/tasks/{task['id']}/claim", timeout=30)
    assert response.status_code == 200, response.text
    view = response.json()
    assert (view["taskId"], view["state"]) == (task["id"], "completed")
    events = view["events"]
    assert [(e["operation"], e["state"], e["claim_generation"]) for e in events] == [
        ("create", "pending", 0), ("claim", "claimed", 1), ("complete", "completed", 1),
    ], events
    assert [e["evidence"] for e in events] == [
        {"message_id": message_id}, {"turn": "first message"}, {"a2a_state": "TASK_STATE_COMPLETED", "message": ""},
    ]
    times = [e["at"] for e in events]
    assert times == sorted(times) and all(t.endswith("Z") for t in times)


def test_a_retried_message_id_gets_its_task_and_another_message_under_it_is_refused(base: str) -> None:
    message_id = str(uuid.uuid4())
    first = rpc(base, "SendMessage", {"message": user_message("hello", message_id)})["result"]["task"]
    again = rpc(base, "SendMessage", {"message": user_message("hello", message_id)})["result"]["task"]
    assert again["id"] == first["id"]
    refused = rpc(base, "SendMessage", {"message": user_message("other", message_id)})["error"]
    assert refused["code"] == -32602 and "already sent with a different message" in str(refused), refused



def every_listed_page(store: TaskStore, params: ListTasksRequest) -> list[tuple[list[str], int, str]]:
    """Every page of a listing for alice: its task ids, totalSize and next page token."""
    request = ListTasksRequest()
    request.CopyFrom(params)
    pages = []
    for _ in range(100):
        response = asyncio.run(store.list(request, owner_context("alice")))
        pages.append(([task.id for task in response.tasks], response.total_size, response.next_page_token))
        if not response.next_page_token:
            return pages
        request.page_token = response.next_page_token
    raise AssertionError("paging did not end")


def test_tasks_read_and_list_as_in_the_sdk_store() -> None:
    """The SDK's InMemoryTaskStore as the reference, on what the wire rarely shows: tasks without a status timestamp,
    equal timestamps (ties by id), times before 1970 and past 2262 (beyond 64-bit nanoseconds), updated tasks, other
    owners, every filter, pages of several sizes."""
    ours, reference = MemoryTaskStore(), InMemoryTaskStore()
    rng = random.Random(18)
    states = [TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_WORKING]
    for n in range(80):
        task = Task(id=f"t{rng.randrange(50):02d}", context_id=rng.choice(["c1", "c2"]), status=TaskStatus(state=rng.choice(states)))
        seconds = rng.choice([None, 0, -86_400, 1_700_000_000, 1_700_000_000, 32_503_680_000])
        if seconds is not None:
            task.status.timestamp.seconds, task.status.timestamp.nanos = seconds, rng.choice([0, 5, 999_999_999])
        task.history.add().parts.add().text = f"message {n}"
        owner = owner_context(rng.choice(["alice", "alice", "bob"]))
        for store in (ours, reference):
            asyncio.run(store.save(task, owner))
    for task_id in [f"t{n:02d}" for n in range(50)]:
        for who in ("alice", "bob", "carol"):
            found = [asyncio.run(store.get(task_id, owner_context(who))) for store in (ours, reference)]
            assert found[0] == found[1], (task_id, who)
    after = Timestamp(seconds=1_700_000_000)
    listings = [ListTasksRequest(page_size=size) for size in (1, 7, 100)] + [
        ListTasksRequest(page_size=5, context_id="c1"),
        ListTasksRequest(page_size=5, status=TaskState.TASK_STATE_COMPLETED),
        ListTasksRequest(page_size=5, status_timestamp_after=after, context_id="c2"),
    ]
    for params in listings:
        assert every_listed_page(ours, params) == every_listed_page(reference, params), params
