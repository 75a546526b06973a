"""The operator's reads across every task (`ledger_views`), the same on every store: counts by agent, A2A state and
claim state, records by claim state, claims past their lease, turns failed since a moment, claims held per session;
and a SQLite file made before the overview gets its indexes and the claim events' new columns at start, its older
events read without a session or lease."""

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from a2a.types import TaskState

from a2a_bridge.core.auth import owner_context
from a2a_bridge.core.claims import Claim
from a2a_bridge.store import ledger_views
from a2a_bridge.store.ledger import ClaimEvent, TaskRecord
from tests.store.test_ledger_contract import OWNER, opened, store_url, task  # noqa: F401 - store_url: a fixture

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def stored(task_id: str, state: str, claim: Claim, created: datetime) -> TaskRecord:
    return TaskRecord(task_id, "agent", OWNER, OWNER, created, state, 1, claim=claim, version=1)


async def views(url: str) -> None:
    owner = owner_context(OWNER)
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        planted = {
            "past": (TaskState.TASK_STATE_WORKING, Claim("claimed", 1, 7, NOW - timedelta(minutes=3))),
            "live": (TaskState.TASK_STATE_WORKING, Claim("claimed", 1, 8, NOW + timedelta(minutes=3))),
            "lost": (TaskState.TASK_STATE_WORKING, Claim("needs_reconciliation", 1, 7)),
            "failed": (TaskState.TASK_STATE_FAILED, Claim("failed", 1, 7)),
            "old-failure": (TaskState.TASK_STATE_FAILED, Claim("failed", 1, 7)),
        }
        ids = {name: str(uuid.uuid4()) for name in planted}
        for n, (name, (state, claim)) in enumerate(planted.items()):
            at = NOW - timedelta(hours=2) if name == "old-failure" else NOW - timedelta(minutes=n)
            failure = {"failure": {"type": "E", "message": name}}
            events = [ClaimEvent(ids[name], 1, "fail", "failed", failure, at)] if claim.state == "failed" else []
            record = stored(ids[name], TaskState.Name(state), claim, NOW - timedelta(minutes=n))
            await ledger.save(store, task(ids[name], state), owner, record, events, new=True)

        counts = await ledger_views.counts(ledger)
        assert counts == {
            ("agent", "TASK_STATE_WORKING", "claimed"): 2,
            ("agent", "TASK_STATE_WORKING", "needs_reconciliation"): 1,
            ("agent", "TASK_STATE_FAILED", "failed"): 2,
        }
        lost = await ledger_views.in_claim_states(ledger, ("needs_reconciliation",), 10)
        assert [r.task_id for r in lost] == [ids["lost"]]
        newest = await ledger_views.in_claim_states(ledger, ("claimed", "failed"), 2)
        assert [r.task_id for r in newest] == [ids["past"], ids["live"]], "newest first, within the limit"
        assert await ledger_views.in_claim_states(ledger, ("claimed",), 10, ("other",)) == []
        total, past = await ledger_views.past_lease(ledger, NOW, 10)
        assert total == 1 and [r.task_id for r in past] == [ids["past"]]
        total, failed = await ledger_views.failed_since(ledger, NOW - timedelta(hours=1), 10)
        assert total == 1 and [(e["task_id"], e["evidence"]["failure"]["message"]) for e in failed] == [(ids["failed"], "failed")]
        assert await ledger_views.held_by_session(ledger) == {7: 1, 8: 1}


def test_the_overview_reads_agree_on_every_store(store_url: str) -> None:  # noqa: F811
    asyncio.run(views(store_url))


async def stored_then_reopened(url: str, task_id: str) -> list[dict]:
    async with opened(url) as (stores, ledger):
        store, _ = stores.for_agent("agent")
        event = ClaimEvent(task_id, 1, "claim", "claimed", {}, NOW, 4, NOW + timedelta(minutes=5))
        record = stored(str(uuid.uuid4()), "TASK_STATE_WORKING", Claim("claimed", 1, 4), NOW)
        working = task(record.task_id, TaskState.TASK_STATE_WORKING)
        await ledger.save(store, working, owner_context(OWNER), record, [event._replace(task_id=record.task_id)], new=True)
        return [*await ledger.claim_events(task_id), *await ledger.claim_events(record.task_id)]


def test_a_file_made_before_gets_the_indexes_and_columns_and_reads_its_old_events(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    asyncio.run(stored_then_reopened(url, "none"))
    with sqlite3.connect(db) as conn:
        for index in ("ix_bridge_tasks_overview", "ix_bridge_tasks_lease", "ix_bridge_tasks_created", "ix_bridge_claim_events_operation_at"):
            conn.execute(f"DROP INDEX {index}")
        conn.execute("ALTER TABLE bridge_claim_events DROP COLUMN session_generation")
        conn.execute("ALTER TABLE bridge_claim_events DROP COLUMN lease_until")
        conn.execute(
            "INSERT INTO bridge_claim_events (task_id, claim_generation, operation, state, evidence, at) "
            "VALUES ('old-task', 0, 'create', 'pending', '{}', '2026-12-01 10:00:00.000000')"
        )
    events = asyncio.run(stored_then_reopened(url, "old-task"))
    assert events[0]["operation"] == "create" and events[0]["session_generation"] is None and events[0]["lease_until"] is None
    assert events[1]["session_generation"] == 4 and events[1]["lease_until"] == NOW + timedelta(minutes=5)
    with sqlite3.connect(db) as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"ix_bridge_tasks_overview", "ix_bridge_tasks_lease", "ix_bridge_tasks_created", "ix_bridge_claim_events_operation_at"} <= names
