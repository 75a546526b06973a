"""Test support for the push outbox under faults, Jepsen's way: a loopback webhook receiver that records every
delivery it gets (the history), a trigger that records every change of the outbox's rows on PostgreSQL with the
database role that made it, and the invariants checked over both, the history printed when one breaks."""

import asyncio
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from a2a_bridge.store.event_rows import row_events
from tests.support import A2A, free_port, rpc, user_message

RUN = "Run the unit tests for payments-api at commit 4b2d9a7"
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}


@dataclass
class Post:
    """One request the receiver got (`at`: when it arrived, this process's monotonic time) and its answer (None while
    it is being answered)."""

    at: float
    task_id: str
    revision: int
    webhook_id: str
    state: str | None
    status: int | None = None

    def line(self) -> str:
        return f"{self.at:10.3f} task={self.task_id[:8]} rev={self.revision:3d} id={self.webhook_id} " \
               f"state={self.state or '-'} -> {self.status}"


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 recording every post in arrival order. It answers `answer` (read when it
    answers) after `delay` seconds, posts arriving before `slow_until` (monotonic time) after `slow_delay`; with
    `gate_after` set, a task's posts of revisions beyond its first `gate_after` distinct ones wait for `release`
    (`gated`: how many wait)."""

    port: int = field(default_factory=free_port)
    answer: int = 200
    delay: float = 0.0
    slow_until: float = 0.0
    slow_delay: float = 0.0
    gate_after: int | None = None
    posts: list[Post] = field(default_factory=list)
    gated: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                post = receiver.arrived(body, int(self.headers["a2a-task-revision"]), self.headers["webhook-id"])
                self.send_response(receiver.answered(post))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arrived(self, body: dict[str, Any], revision: int, webhook_id: str) -> Post:
        update = body.get("statusUpdate") or body.get("artifactUpdate") or {}
        task_id = update.get("taskId") or body.get("task", {}).get("id", "")
        state = body.get("statusUpdate", {}).get("status", {}).get("state")
        with self.lock:
            post = Post(time.monotonic(), task_id, revision, webhook_id, state)
            self.posts.append(post)
        return post

    def answered(self, post: Post) -> int:
        """Wait at the gate and the delay, then the answer (recorded on the post)."""
        with self.lock:
            seen = sorted({p.revision for p in self.posts if p.task_id == post.task_id})
            gated = self.gate_after is not None and seen.index(post.revision) >= self.gate_after
            if gated:
                self.gated += 1
        if gated:
            self.gate.wait(60)
            with self.lock:
                self.gated -= 1
        time.sleep(self.slow_delay if post.at < self.slow_until else self.delay)
        with self.lock:
            post.status = self.answer
        return post.status

    def release(self) -> None:
        """Open the gate for good."""
        self.gate_after = None
        self.gate.set()

    def down(self) -> None:
        self.release()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def history(self) -> list[Post]:
        with self.lock:
            return list(self.posts)

    def ended(self, task_ids: list[str]) -> bool:
        """Whether every task's terminal state was answered 2xx."""
        done = {p.task_id for p in self.history() if p.state in TERMINAL and p.status is not None and p.status < 300}
        return done >= set(task_ids)

    def in_flight(self) -> int:
        return sum(1 for p in self.history() if p.status is None)


def start_tasks(base: str, hook: str, count: int, timeout: float = 30.0) -> list[str]:
    """`count` test-runner tasks, each with a push config to `hook`, sent without waiting for them (each SendMessage
    answered within `timeout` seconds, or httpx's timeout raised)."""
    ids = []
    for n in range(count):
        params = {
            "message": user_message(RUN, str(uuid.uuid4())),
            "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": hook}},
        }
        body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": params}
        answer = httpx.post(f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=timeout)
        ids.append(answer.json()["result"]["task"]["id"])
    return ids


def all_ended(base: str, task_ids: list[str]) -> bool:
    states = [rpc(base, "GetTask", {"id": t, "historyLength": 0})["result"]["status"]["state"] for t in task_ids]
    return set(states) <= TERMINAL


def event_revisions(bodies: list[tuple[str, int, str]]) -> dict[str, list[int]]:
    """Per task, the revisions of its logged events that its webhooks carry (all but messages), from (task, seq, body)
    rows of the event log."""
    found: dict[str, list[int]] = {}
    for task_id, row_seq, row_body in bodies:
        for seq, body in row_events(row_seq, row_body):
            if "message" not in json.loads(body):
                found.setdefault(task_id, []).append(seq)
    return {task_id: sorted(seqs) for task_id, seqs in found.items()}


def sqlite_rows(path: str, statement: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path, timeout=10) as connection:
        return connection.execute(statement).fetchall()


def pg_rows(database: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    """The rows of one statement on the database."""
    return asyncio.run(_on(database, lambda connection: connection.fetch(statement, *args)))


def pg_script(database: str, script: str) -> None:
    """Run statements (no arguments) on the database."""
    asyncio.run(_on(database, lambda connection: connection.execute(script)))


async def _on(database: str, use: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    connection = await asyncpg.connect(database)
    try:
        return await use(connection)
    finally:
        await connection.close()


def as_role(database: str, role: str) -> str:
    """The database's URL for another role (the test server trusts 127.0.0.1: .ci/postgres runs initdb -A trust)."""
    parts = urlsplit(database)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))


def roles(database: str, count: int) -> Iterator[list[str]]:
    """`count` new login roles (superusers: each replica may make the tables), one per replica, so the trigger's
    history says which replica made each change; dropped afterwards with what they own."""
    names = [f"replica_{uuid.uuid4().hex[:8]}" for _ in range(count)]
    for name in names:
        pg_script(database, f"CREATE ROLE {name} LOGIN SUPERUSER")
    try:
        yield names
    finally:
        listed = ", ".join(names)
        pg_script(database, f"REASSIGN OWNED BY {listed} TO CURRENT_USER; DROP OWNED BY {listed}")
        pg_script(database, "".join(f"DROP ROLE {name};" for name in names))


ROW_HISTORY = """
CREATE TABLE test_row_history (
    id BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    role TEXT NOT NULL DEFAULT current_user,
    op TEXT NOT NULL, task_id TEXT NOT NULL, config_id TEXT NOT NULL,
    old_holder INTEGER, old_holds INTEGER, old_delivered INTEGER, old_held_until TIMESTAMPTZ,
    new_holder INTEGER, new_holds INTEGER, new_delivered INTEGER, new_held_until TIMESTAMPTZ, new_attempts INTEGER,
    new_dead BOOLEAN
);
CREATE FUNCTION test_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO test_row_history (op, task_id, config_id, new_holder, new_holds, new_delivered, new_attempts,
                                      new_dead)
        VALUES ('insert', NEW.task_id, NEW.config_id, NEW.holder, NEW.holds, NEW.delivered, NEW.attempts, NEW.dead);
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO test_row_history (op, task_id, config_id, old_holder, old_holds, old_delivered, old_held_until,
                                      new_holder, new_holds, new_delivered, new_held_until, new_attempts, new_dead)
        VALUES ('update', NEW.task_id, NEW.config_id, OLD.holder, OLD.holds, OLD.delivered, OLD.held_until,
                NEW.holder, NEW.holds, NEW.delivered, NEW.held_until, NEW.attempts, NEW.dead);
    ELSE
        INSERT INTO test_row_history (op, task_id, config_id, old_holder, old_holds, old_delivered, old_held_until)
        VALUES ('delete', OLD.task_id, OLD.config_id, OLD.holder, OLD.holds, OLD.delivered, OLD.held_until);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER test_row_changed AFTER INSERT OR UPDATE OR DELETE ON bridge_push_deliveries
    FOR EACH ROW EXECUTE FUNCTION test_row_changed();
"""
"""Every change of an outbox row, with the role that made it and the database's time (`clock_timestamp()`)."""


def record_row_changes(database: str) -> None:
    """Install the row history's trigger (once the tables are made: after the first replica started)."""
    pg_script(database, ROW_HISTORY)


def row_changes(database: str) -> list[asyncpg.Record]:
    return pg_rows(
        database,
        "SELECT *, old_held_until > at AS unexpired FROM test_row_history ORDER BY id",
    )


def sessions_of(changes: list[asyncpg.Record]) -> dict[str, set[int]]:
    """The sessions each role took holds as (its replica's sessions)."""
    found: dict[str, set[int]] = {}
    for change in changes:
        if is_hold(change):
            found.setdefault(change["role"], set()).add(change["new_holder"])
    return found


def is_hold(change: asyncpg.Record) -> bool:
    """Whether a change took a hold (its count went up by one, a holder set)."""
    taken = change["op"] == "update" and change["new_holder"] is not None
    return taken and change["new_holds"] == change["old_holds"] + 1


def row_violations(changes: list[asyncpg.Record], replicas: set[str]) -> list[str]:
    """What breaks the outbox's fences in a row history (changes the test made itself, by another role, aside): a hold
    taken over from another session before the hold ran out on the database's clock; a settle or drop by a replica
    that did not hold the row's current hold; a row's holds or delivered revision going back."""
    sessions = sessions_of(changes)
    found = []
    for change in changes:
        by, op = change["role"], change["op"]
        if by not in replicas or op == "insert":
            continue
        where = f"#{change['id']} {op} by {by} of task {change['task_id'][:8]}"
        if is_hold(change):
            taken_over = change["old_holder"] is not None and change["old_holder"] != change["new_holder"]
            if taken_over and change["unexpired"]:
                found.append(f"{where}: took the live hold of session {change['old_holder']} (held until "
                             f"{change['old_held_until']}, the database's time {change['at']})")
            continue
        if change["old_holder"] not in sessions.get(by, set()):
            found.append(f"{where}: the row was held by session {change['old_holder']}, not by {by} "
                         f"(sessions {sorted(sessions.get(by, set()))})")
        if op == "update" and (
            change["new_holds"] < change["old_holds"] or change["new_delivered"] < change["old_delivered"]
        ):
            found.append(f"{where}: holds {change['old_holds']}->{change['new_holds']}, delivered "
                         f"{change['old_delivered']}->{change['new_delivered']}")
    return found


def change_line(change: asyncpg.Record) -> str:
    return (f"#{change['id']} {change['at']:%H:%M:%S.%f} {change['role']} {change['op']} task={change['task_id'][:8]} "
            f"holder {change['old_holder']}->{change['new_holder']} holds {change['old_holds']}->{change['new_holds']} "
            f"delivered {change['old_delivered']}->{change['new_delivered']} attempts {change['new_attempts']} "
            f"held until {change['old_held_until']}->{change['new_held_until']}")


class Invariants:
    """The invariants of push delivery over a receiver's history and the event log, every violation collected; the
    history (and the row history, where there is one) printed when any is found."""

    def __init__(self, posts: list[Post], events: dict[str, list[int]], task_ids: list[str]) -> None:
        self.posts = posts
        self.events = events
        self.task_ids = task_ids
        self.found: list[str] = []
        self.changes: list[asyncpg.Record] = []

    def check_deliveries(self) -> "Invariants":
        """Every logged update of every task answered 2xx at least once (its terminal state among them); per task the
        distinct revisions in the order the receiver first saw them, and first accepted them, ascending; one
        webhook-id per event on every attempt, and no two events with one id."""
        ids: dict[tuple[str, int], set[str]] = {}
        for post in self.posts:
            ids.setdefault((post.task_id, post.revision), set()).add(post.webhook_id)
        for (task_id, revision), seen in ids.items():
            if len(seen) != 1:
                self.found.append(f"task {task_id[:8]} revision {revision} carried ids {sorted(seen)}")
        owners: dict[str, tuple[str, int]] = {}
        for key, seen in ids.items():
            for webhook_id in seen:
                if owners.setdefault(webhook_id, key) != key:
                    self.found.append(f"id {webhook_id} carried both {owners[webhook_id]} and {key}")
        for task_id in self.task_ids:
            mine = [p for p in self.posts if p.task_id == task_id]
            firsts = list(dict.fromkeys(p.revision for p in mine))
            accepted = list(dict.fromkeys(p.revision for p in sorted(mine, key=lambda p: p.at) if p.status == 200))
            if firsts != sorted(firsts):
                self.found.append(f"task {task_id[:8]}: first seen out of order {firsts}")
            if accepted != sorted(accepted):
                self.found.append(f"task {task_id[:8]}: first accepted out of order {accepted}")
            missing = sorted(set(self.events.get(task_id, [])) - set(accepted))
            if missing or not self.events.get(task_id):
                logged = self.events.get(task_id)
                self.found.append(f"task {task_id[:8]}: logged revisions {logged} never accepted: {missing}")
            if not any(p.state in TERMINAL and p.status == 200 for p in mine):
                self.found.append(f"task {task_id[:8]}: its terminal state was never accepted")
        return self

    def check(self, condition: bool, what: str) -> "Invariants":
        if not condition:
            self.found.append(what)
        return self

    def check_rows(self, changes: list[asyncpg.Record], replicas: set[str]) -> "Invariants":
        self.changes = changes
        self.found.extend(row_violations(changes, replicas))
        return self

    def assert_none(self) -> None:
        if not self.found:
            return
        print("receiver history (arrival, task, revision, webhook-id, state -> answer):")
        for post in self.posts:
            print("  " + post.line())
        if self.changes:
            print("outbox row history (database time, role, change):")
            for change in self.changes:
                print("  " + change_line(change))
        raise AssertionError("\n".join([f"{len(self.found)} push delivery violations:", *self.found]))
