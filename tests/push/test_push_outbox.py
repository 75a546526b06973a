"""Push notifications delivered from the store's outbox (issue 30): a receiver that is down, that answers 500 for a
while, or a server killed with deliveries pending, and every task's terminal state still arrives, in order per task,
with the same id on every attempt; two replicas with one killed; an answer that is a gzip bomb costs no memory."""

import gzip
import io
import json
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.support import LOOPBACK_WEBHOOKS, ServerProcess, free_port, rpc, user_message, wait_for

RUN = "Run the unit tests for payments-api at commit 4b2d9a7"
TASKS = 10
RETRY = ["--webhook-retry", "0.3"]
OPERATOR = {"Authorization": "Bearer ops_demo_5b9e"}


@dataclass
class Received:
    """One request the receiver got, and what it answered."""

    task_id: str
    revision: int
    delivery_id: str
    state: str | None
    status: int


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 whose answer the test sets: 200, 500, a slow 200, or a gzip bomb; it can go
    down (its port closed) and come back on the same port."""

    port: int = field(default_factory=free_port)
    answer: int = 200
    delay: float = 0.0
    bomb: bytes | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                update = body.get("statusUpdate") or body.get("artifactUpdate") or {}
                state = body.get("statusUpdate", {}).get("status", {}).get("state")
                if receiver.delay:
                    time.sleep(receiver.delay)
                status = receiver.answer
                with receiver.lock:
                    receiver.received.append(Received(
                        update.get("taskId", ""), int(self.headers["a2a-task-revision"]), self.headers["webhook-id"],
                        state, status,
                    ))
                self.send_response(status)
                if receiver.bomb is not None:
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(receiver.bomb)))
                    self.end_headers()
                    self.wfile.write(receiver.bomb)
                    return
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def got(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def ended(self, task_ids: list[str]) -> bool:
        """Whether every task's terminal state was delivered (answered 2xx)."""
        done = {r.task_id for r in self.got() if r.status < 300 and r.state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")}
        return done >= set(task_ids)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hooks = Receiver()
    yield hooks
    hooks.down()


def start_tasks(base: str, hook: str, count: int = TASKS) -> list[str]:
    """`count` test-runner tasks, each with a push config to `hook`, sent without waiting for them."""
    ids = []
    for _ in range(count):
        params = {
            "message": user_message(RUN, str(uuid.uuid4())),
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": hook}},
        }
        ids.append(rpc(base, "SendMessage", params)["result"]["task"]["id"])
    return ids


def all_completed(bases: list[str], task_ids: list[str]) -> bool:
    return all(rpc(bases[0], "GetTask", {"id": t})["result"]["status"]["state"] == "TASK_STATE_COMPLETED" for t in task_ids)


def check_order_and_ids(received: list[Received], task_ids: list[str]) -> None:
    """Per task, the revisions delivered (2xx) arrive in order; every attempt at one revision carries one id."""
    ids: dict[tuple[str, int], set[str]] = {}
    for r in received:
        ids.setdefault((r.task_id, r.revision), set()).add(r.delivery_id)
    assert all(len(found) == 1 for found in ids.values()), {k: v for k, v in ids.items() if len(v) > 1}
    for task_id in task_ids:
        delivered = [r.revision for r in received if r.task_id == task_id and r.status < 300]
        firsts = list(dict.fromkeys(delivered))
        assert firsts == sorted(firsts), (task_id, delivered)


def test_a_receiver_down_then_failing_gets_every_terminal_state_in_order(tmp_path: Path, receiver: Receiver) -> None:
    """The receiver is down while the tasks run and end, then answers 500 for a while, then 200: every task's
    terminal state arrives, each task's updates in order, one id per event on every attempt."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=[*LOOPBACK_WEBHOOKS, *RETRY]).start()
    try:
        task_ids = start_tasks(server.agent("test-runner"), receiver.url)
        wait_for(lambda: all_completed([server.agent("test-runner")], task_ids), timeout=30, what="the tasks to end")
        receiver.answer = 500
        receiver.up()
        wait_for(lambda: len(receiver.got()) >= TASKS, timeout=30, what="attempts answered 500")
        receiver.answer = 200
        wait_for(lambda: receiver.ended(task_ids), timeout=60, what="every terminal state")
        check_order_and_ids(receiver.got(), task_ids)
        assert any(r.status == 500 for r in receiver.got())
    finally:
        server.stop()


def test_deliveries_pending_at_a_crash_are_made_after_the_restart(tmp_path: Path, receiver: Receiver) -> None:
    """A slow receiver leaves deliveries queued; the server is SIGKILLed once every task has ended and restarted on
    the same store: every terminal state still arrives."""
    receiver.delay = 0.5
    receiver.up()
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=[*LOOPBACK_WEBHOOKS, *RETRY]).start()
    try:
        task_ids = start_tasks(server.agent("test-runner"), receiver.url)
        wait_for(lambda: all_completed([server.agent("test-runner")], task_ids), timeout=30, what="the tasks to end")
        assert not receiver.ended(task_ids), "the receiver was too fast to leave deliveries pending"
        server.kill()
        receiver.delay = 0.0
        server.start()
        wait_for(lambda: receiver.ended(task_ids), timeout=60, what="every terminal state after the restart")
        check_order_and_ids(receiver.got(), task_ids)
    finally:
        server.stop()


def test_a_replica_delivers_what_a_killed_one_left(pg_database: str, receiver: Receiver) -> None:
    """Two replicas on PostgreSQL: the tasks run on A behind a slow receiver, A is killed, B delivers the rest."""
    receiver.delay = 0.5
    receiver.up()
    extra = [*LOOPBACK_WEBHOOKS, *RETRY]
    a = ServerProcess(pg_database, pace=0.05, extra=extra).start()
    b = ServerProcess(pg_database, pace=0.05, extra=extra).start()
    try:
        task_ids = start_tasks(a.agent("test-runner"), receiver.url)
        wait_for(lambda: all_completed([b.agent("test-runner")], task_ids), timeout=30, what="the tasks to end")
        a.kill()
        receiver.delay = 0.0
        wait_for(lambda: receiver.ended(task_ids), timeout=60, what="every terminal state from the other replica")
        check_order_and_ids(receiver.got(), task_ids)
    finally:
        a.stop()
        b.stop()


def test_a_dead_letter_is_listed_and_delivered_again_by_an_operator(tmp_path: Path, receiver: Receiver) -> None:
    """A webhook that fails for longer than --webhook-give-up is given up: listed as a dead letter, counted in
    /metrics, and delivered again, from where it stopped, once an operator asks."""
    receiver.answer = 500
    receiver.up()
    extra = [*LOOPBACK_WEBHOOKS, *RETRY, "--webhook-give-up", "1"]
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=extra).start()
    try:
        base = server.agent("test-runner")
        [task_id] = start_tasks(base, receiver.url, 1)

        def dead() -> list[dict] | None:
            return httpx.get(f"{base}/webhooks/dead", headers=OPERATOR, timeout=10).json()["deadLetters"] or None

        [letter] = wait_for(dead, timeout=30, what="a dead letter")
        assert letter["taskId"] == task_id and letter["dead"] and letter["lastError"] == "HTTP 500"
        assert httpx.get(f"{base}/webhooks/dead", timeout=10).status_code == 404, "operators only"
        metrics = httpx.get(f"{server.url}/metrics", headers=OPERATOR, timeout=10).text
        assert 'a2a_bridge_webhook_deliveries_total{agent="test-runner",outcome="dead"} 1.0' in metrics
        receiver.answer = 200
        again = httpx.post(f"{base}/tasks/{task_id}/webhooks/redeliver", headers=OPERATOR, timeout=10)
        assert again.status_code == 200 and again.json()["redelivering"] == 1, again.text
        wait_for(lambda: receiver.ended([task_id]), timeout=30, what="the terminal state after the redelivery")
        check_order_and_ids(receiver.got(), [task_id])
    finally:
        server.stop()


def gzip_bomb(inflated: int) -> bytes:
    """A gzip body of zeros that inflates to `inflated` bytes."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as archive:
        chunk = bytes(1 << 20)
        for _ in range(inflated >> 20):
            archive.write(chunk)
    return out.getvalue()


def rss(pid: int) -> int:
    """A process's resident memory, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_an_answer_that_is_a_gzip_bomb_costs_no_memory(tmp_path: Path, receiver: Receiver) -> None:
    """Each answer is a 300 KB gzip body that inflates to 300 MiB: the server reads a few KB of it, raw, and its
    memory stays within 50 MiB of where it was."""
    receiver.bomb = gzip_bomb(300 << 20)
    assert len(receiver.bomb) < 400_000 and zlib.decompressobj(31).decompress(receiver.bomb, 1 << 20)
    receiver.up()
    server = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", pace=0.05, extra=[*LOOPBACK_WEBHOOKS, *RETRY]).start()
    try:
        assert server.proc is not None
        base = server.agent("test-runner")
        start_tasks(base, receiver.url, 1)
        wait_for(lambda: len(receiver.got()) >= 1, timeout=30, what="a first delivery")
        before = rss(server.proc.pid)
        task_ids = start_tasks(base, receiver.url, 2)
        wait_for(lambda: receiver.ended(task_ids), timeout=30, what="eight more deliveries")
        assert rss(server.proc.pid) - before < 50 << 20
    finally:
        server.stop()
