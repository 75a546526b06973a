"""Push deliveries under pauses and skewed clocks (issue 30), Jepsen's way: real servers on 127.0.0.1, a loopback
receiver recording every delivery (the history), faults injected (SIGSTOP past a hold, SIGSTOP inside a transaction
of the outbox, a clock 30 s ahead, SIGSTOP mid-delivery behind a failing receiver), and the invariants checked over the history, the event log and, on
PostgreSQL, every change of the outbox's rows with the replica that made it (tests/push_history.py)."""

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.push_history import (
    Invariants,
    Receiver,
    all_ended,
    as_role,
    event_revisions,
    is_hold,
    pg_rows,
    record_row_changes,
    roles,
    row_changes,
    sessions_of,
    sqlite_rows,
    start_tasks,
)
from tests.support import LOOPBACK_WEBHOOKS, ServerProcess, clock_of, wait_for

RETRY = ["--webhook-retry", "0.3"]
TASKS = 4
AHEAD = 3
"""Distinct revisions of each task the receiver accepts before the next waits at its gate (the paused replica is that
far ahead of its rows)."""
DELAY = 0.4
"""Seconds the receiver takes to answer in the pause test: the replica that takes over is still delivering when the
paused one wakes."""
SKEW = 30
SLOW_DELAY = 6.5
"""Seconds the receiver takes to answer in the skew test's first SLOW_FOR seconds: a run's fifth post, sent 26 s into
its hold (a run takes no event past half its 60 s hold), is still under way 30 s in, when a replica reading the hold
on its own clock, 30 s ahead, would see it run out."""
SLOW_FOR = 35.0
LOCKED_ROW = """
SELECT d.task_id FROM bridge_push_deliveries d
WHERE NOT d.dead AND d.due_at <= clock_timestamp() AND (d.holder IS NULL OR d.held_until <= clock_timestamp())
  AND EXISTS (SELECT 1 FROM bridge_events e WHERE e.task_id = d.task_id AND e.seq > d.delivered)
  AND d.task_id NOT IN (SELECT task_id FROM bridge_push_deliveries FOR UPDATE SKIP LOCKED)
"""
"""A row another replica would take (free and due on what is committed) that a transaction still open has locked."""
OPEN_TRANSACTION = """
SELECT s.pid FROM pg_stat_activity s JOIN pg_locks l ON l.pid = s.pid
WHERE s.usename = $1 AND s.state = 'idle in transaction' AND l.locktype = 'relation'
  AND l.relation = 'bridge_push_deliveries'::regclass AND l.mode = 'RowExclusiveLock'
"""
"""A backend of a role's in a transaction that has written the outbox's rows and waits for its next statement."""
BLOCKED = """
SELECT waiting.pid, left(waiting.query, 60) AS query FROM pg_stat_activity waiting, pg_stat_activity holding
WHERE waiting.usename = $1 AND holding.usename = $2 AND holding.pid = ANY(pg_blocking_pids(waiting.pid))
"""
STOPS = 500
"""SIGSTOPs of A at the most to land one inside such a transaction (a few dozen do, on a loaded 2-core machine)."""
JITTER = 0.03
"""Seconds A runs at the most between two of those SIGSTOPs (a random part of it: each lands at a random point)."""
LIVE_FOR = 3.0
"""Seconds replica B must go on taking tasks while A is stopped inside a transaction: three of its outbox's polls."""
ANSWER = 10.0
"""Seconds B has to answer each SendMessage while A is stopped (it answers in milliseconds when not stalled)."""
PAUSE = 11.0
"""Seconds the SQLite server stays stopped mid-delivery: past the webhook client's 10 s timeout (the answer to the post
under way waits in its socket meanwhile), and several retries of its schedule fall due."""


@pytest.fixture
def two_roles(pg_database: str) -> Iterator[list[str]]:
    """A database role for each of two replicas, so the row history says which made each change."""
    yield from roles(pg_database, 2)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hooks = Receiver()
    yield hooks
    hooks.down()


def no_rows(database: str) -> bool:
    return not pg_rows(database, "SELECT 1 FROM bridge_push_deliveries")


def taken_over(database: str, held: list[tuple[str, int]], role: str) -> bool:
    """Whether `role` took a hold of every row in `held` (task, holds as held) over."""
    holds = {(c["task_id"], c["old_holds"]) for c in row_changes(database) if c["role"] == role and is_hold(c)}
    return all(row in holds for row in held)


def checked_on_pg(
    pg_database: str, receiver: Receiver, task_ids: list[str], changes: list[asyncpg.Record], replicas: set[str]
) -> Invariants:
    """The receiver's history checked against the events the database stored, and the rows' changes by `replicas`."""
    events = event_revisions(pg_rows(pg_database, "SELECT task_id, seq, body FROM bridge_events"))
    return Invariants(receiver.history(), events, task_ids).check_deliveries().check_rows(changes, replicas)


def test_a_replica_paused_past_its_hold_changes_nothing_when_it_wakes(
    pg_database: str, two_roles: list[str], receiver: Receiver, tmp_path: Path
) -> None:
    """Replica A holds every task's delivery, three revisions ahead of its row, when it is SIGSTOPped with a post at
    the receiver; its holds run out on the database's clock (HOLD is 60 s, so the test moves `held_until` back rather
    than wait: A wakes believing its holds live, the harder case for the fence); B takes every row over and delivers
    from the rows, slowly; A is SIGCONTed while B still holds them and goes on, posting and settling or dropping late.
    A's late writes change no row; every logged update arrives, in order, one id per event on either replica."""
    role_a, role_b = two_roles
    receiver.delay, receiver.gate_after = DELAY, AHEAD
    receiver.up()
    extra = [*LOOPBACK_WEBHOOKS, *RETRY]
    a = ServerProcess(as_role(pg_database, role_a), pace=0.05, extra=extra, log=tmp_path / "a.log")
    b = ServerProcess(as_role(pg_database, role_b), pace=0.05, extra=extra, log=tmp_path / "b.log")
    try:
        a.start()
        record_row_changes(pg_database)
        b.start()
        task_ids = start_tasks(a.agent("test-runner"), receiver.url, TASKS)
        wait_for(lambda: all_ended(a.agent("test-runner"), task_ids), timeout=30, what="the tasks to end")
        wait_for(lambda: receiver.gated == TASKS, timeout=30, what="a post of every task at the gate")
        a.pause()
        a_sessions = sorted(sessions_of(row_changes(pg_database)).get(role_a, set()))
        held = [(r["task_id"], r["holds"]) for r in pg_rows(
            pg_database, "SELECT task_id, holds FROM bridge_push_deliveries WHERE holder = ANY($1::int[])", a_sessions
        )]
        assert held, "A held no delivery when it was paused"
        pg_rows(
            pg_database,
            "UPDATE bridge_push_deliveries SET held_until = clock_timestamp() - interval '1 second'"
            " WHERE holder = ANY($1::int[])", a_sessions,
        )
        receiver.release()
        wait_for(lambda: taken_over(pg_database, held, role_b), timeout=20, what="B to take over A's rows")
        a.resume()
        wait_for(lambda: receiver.ended(task_ids) and no_rows(pg_database), timeout=40, what="every delivery done")
    finally:
        a.stop()
        b.stop()
    checked_on_pg(pg_database, receiver, task_ids, row_changes(pg_database), {role_a, role_b}).assert_none()


def test_a_replica_30_s_ahead_takes_no_row_a_live_replica_holds(
    pg_database: str, two_roles: list[str], receiver: Receiver, faketime_preload: str, tmp_path: Path
) -> None:
    """Replica B's clock runs 30 s ahead (libfaketime); no other fault. The receiver is slow for a while, so runs
    hold their rows past half their hold. B takes no hold another live replica's hold still covers on the database's
    clock (leases are read on it), and every task's updates arrive, in order, one id per event."""
    role_a, role_b = two_roles
    receiver.slow_delay = SLOW_DELAY
    receiver.up()
    extra = [*LOOPBACK_WEBHOOKS, *RETRY]
    skewed = {"LD_PRELOAD": faketime_preload, "FAKETIME": f"+{SKEW}s"}
    a = ServerProcess(as_role(pg_database, role_a), pace=0.05, extra=extra, log=tmp_path / "a.log")
    b = ServerProcess(as_role(pg_database, role_b), pace=0.05, extra=extra, env=skewed, log=tmp_path / "b.log")
    try:
        a.start()
        record_row_changes(pg_database)
        receiver.slow_until = time.monotonic() + SLOW_FOR
        task_ids = start_tasks(a.agent("test-runner"), receiver.url, TASKS - 1)
        b.start()  # while A's first runs are under way
        assert time.monotonic() < receiver.slow_until - 2 * SLOW_DELAY, "B started too late to see A's long holds"
        skew = clock_of(b) - clock_of(a)
        assert SKEW - 2 <= skew <= SKEW + 2, f"B's clock is {skew:.0f} s ahead of A's, not {SKEW} s: no libfaketime"
        task_ids += start_tasks(b.agent("test-runner"), receiver.url, 1)
        wait_for(lambda: receiver.ended(task_ids) and no_rows(pg_database), timeout=SLOW_FOR + 30, what="all delivered")
    finally:
        a.stop()
        b.stop()
    changes = row_changes(pg_database)
    (
        checked_on_pg(pg_database, receiver, task_ids, changes, {role_a, role_b})
        .check(any(c["role"] == role_a and is_hold(c) for c in changes), "A held no row: the test showed nothing")
        .assert_none()
    )


def test_a_replica_stopped_inside_a_transaction_stalls_no_other(
    pg_database: str, two_roles: list[str], receiver: Receiver, tmp_path: Path
) -> None:
    """Replica A delivers a stream of tasks (fed without pause) and is SIGSTOPped, again and again until it stops
    inside a transaction of its outbox (between two statements of a batch) that has locked a row replica B would take
    (free and due as committed). B goes on meanwhile: its outbox takes nothing A's open transaction locked, none of its
    connections waits on A's, and the tasks sent to it are stored and delivered. After SIGCONT every task's updates
    arrive, in order, one id per event, and no row change breaks a fence."""
    role_a, role_b = two_roles
    receiver.up()
    extra = [*LOOPBACK_WEBHOOKS, *RETRY]
    a = ServerProcess(as_role(pg_database, role_a), pace=0.02, extra=extra, log=tmp_path / "a.log")
    b = ServerProcess(as_role(pg_database, role_b), pace=0.02, extra=extra, log=tmp_path / "b.log")
    task_ids: list[str] = []
    feeding = threading.Event()

    def feed() -> None:
        while not feeding.is_set():
            with contextlib.suppress(httpx.TimeoutException):  # sent as A stopped for good: its task may be unknown
                task_ids.extend(start_tasks(a.agent("test-runner"), receiver.url, 1))

    feeders = [threading.Thread(target=feed, daemon=True) for _ in range(3)]
    try:
        a.start()
        record_row_changes(pg_database)
        b.start()
        for feeder in feeders:
            feeder.start()
        wait_for(lambda: len(receiver.history()) > 20, timeout=20, what="A delivering")
        for _ in range(STOPS):
            a.pause()
            if pg_rows(pg_database, OPEN_TRANSACTION, role_a) and pg_rows(pg_database, LOCKED_ROW):
                break
            a.resume()
            time.sleep(random.uniform(0, JITTER))  # the next stop at a random point of A's work
        assert a.paused, f"A never stopped inside a transaction holding a row B would take in {STOPS} tries"
        feeding.set()
        locked = pg_rows(pg_database, LOCKED_ROW)
        assert locked, "the locked row was locked by a transaction that ended, not by A's"
        on_b: list[str] = []
        stalled = None
        live_until = time.monotonic() + LIVE_FOR
        while time.monotonic() < live_until and stalled is None:
            try:
                on_b.extend(start_tasks(b.agent("test-runner"), receiver.url, 1, timeout=ANSWER))
            except httpx.TimeoutException as error:
                stalled = f"B's SendMessage unanswered in {ANSWER} s while A is stopped ({error!r})"
        blocked = pg_rows(pg_database, BLOCKED, role_b, role_a)
        if stalled is None:
            wait_for(lambda: receiver.ended(on_b), timeout=20, what="B's tasks delivered while A is stopped")
        a.resume()
        for feeder in feeders:
            feeder.join(30)  # its last SendMessage to A, answered once A runs again
        task_ids += on_b
        wait_for(lambda: receiver.ended(task_ids) and no_rows(pg_database), timeout=40, what="every delivery done")
    finally:
        feeding.set()
        a.stop()
        b.stop()
    (
        checked_on_pg(pg_database, receiver, task_ids, row_changes(pg_database), {role_a, role_b})
        .check(stalled is None, str(stalled))
        .check(not blocked, f"B's connections waited on A's transaction: {[dict(r) for r in blocked]} (rows {locked})")
        .assert_none()
    )


def test_a_server_stopped_mid_delivery_behind_a_failing_receiver_delivers_all_in_order(
    tmp_path: Path, receiver: Receiver
) -> None:
    """On SQLite, one server: the receiver answers 500 (slowly, so a post is under way) until the server is SIGSTOPped
    mid-delivery, then 200; SIGCONT after PAUSE seconds, the retries that fell due meanwhile all at once. Every logged
    update arrives, in order, one id per event on every attempt; nothing is dead-lettered, every row is dropped."""
    receiver.answer, receiver.delay = 500, 0.2
    receiver.up()
    db = tmp_path / "b.db"
    extra = [*LOOPBACK_WEBHOOKS, *RETRY]
    server = ServerProcess(f"sqlite:///{db}", pace=0.05, extra=extra, log=tmp_path / "s.log")
    try:
        server.start()
        base = server.agent("test-runner")
        task_ids = start_tasks(base, receiver.url, TASKS)
        wait_for(lambda: all_ended(base, task_ids), timeout=30, what="the tasks to end")
        wait_for(
            lambda: all(sum(p.task_id == t and p.status == 500 for p in receiver.history()) >= 2 for t in task_ids),
            timeout=30, what="two failed attempts of every task",
        )
        wait_for(lambda: receiver.in_flight() > 0, timeout=10, what="a post under way")
        server.pause()
        receiver.answer = 200
        time.sleep(PAUSE)
        server.resume()
        wait_for(lambda: receiver.ended(task_ids), timeout=40, what="every terminal state")
        rows = "SELECT 1 FROM bridge_push_deliveries"
        wait_for(lambda: not sqlite_rows(str(db), rows), timeout=10, what="every row dropped")
    finally:
        server.stop()
    events = event_revisions(sqlite_rows(str(db), "SELECT task_id, seq, body FROM bridge_events"))
    (
        Invariants(receiver.history(), events, task_ids)
        .check_deliveries()
        .check(any(p.status == 500 for p in receiver.history()), "the receiver never failed: the test showed nothing")
        .assert_none()
    )
