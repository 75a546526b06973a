"""The operator's reads across every task, for the console's overview: counts by agent, A2A state and claim state (one
GROUP BY over an index, never the tasks themselves), the records in given claim states, the claims past their lease
and the turns that failed since a moment, each bounded by a limit and answered from the indexes of `ledger_tables`.

The memory ledger answers the same from its dictionaries."""

from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select

from a2a_bridge.store.ledger import HELD, Ledger, MemoryLedger, TaskRecord
from a2a_bridge.store.ledger_tables import claim_events_table, record_of, records_table, utc
from a2a_bridge.store.sql_ledger import SqlLedger

Counts = dict[tuple[str, str, str], int]
"""Stored tasks by (agent, A2A state, claim state)."""


async def counts(ledger: Ledger) -> Counts:
    """How many tasks each (agent, A2A state, claim state) has."""
    if isinstance(ledger, SqlLedger):
        table = records_table
        columns = (table.c.agent, table.c.state, table.c.claim_state)
        rows = await _rows(ledger, select(*columns, func.count()).group_by(*columns))
        return {(agent, state, claim): int(count) for agent, state, claim, count in rows}
    found: Counts = {}
    for record in _memory(ledger).values():
        key = (record.agent, record.state, record.claim.state)
        found[key] = found.get(key, 0) + 1
    return found


async def in_claim_states(
    ledger: Ledger, states: tuple[str, ...], limit: int, agents: tuple[str, ...] | None = None, state: str | None = None,
) -> list[TaskRecord]:
    """At most `limit` records whose claim is in one of `states` (of one of `agents`, in A2A `state`, when given),
    the most recently created first."""
    if isinstance(ledger, SqlLedger):
        table = records_table
        query = select(table).where(table.c.claim_state.in_(states))
        if agents is not None:
            query = query.where(table.c.agent.in_(agents))
        if state is not None:
            query = query.where(table.c.state == state)
        rows = await _rows(ledger, query.order_by(table.c.created_at.desc(), table.c.task_id).limit(limit))
        return [record_of(row) for row in rows]
    held = [
        r for r in _memory(ledger).values()
        if r.claim.state in states and (agents is None or r.agent in agents) and state in (None, r.state)
    ]
    return [r.copy() for r in sorted(held, key=lambda r: (-r.created_at.timestamp(), r.task_id))[:limit]]


async def held_by_session(ledger: Ledger) -> dict[int, int]:
    """How many claims each session's turns hold (claimed or cancel requested)."""
    if isinstance(ledger, SqlLedger):
        table = records_table
        column = table.c.session_generation
        query = select(column, func.count()).where(table.c.claim_state.in_(HELD)).group_by(column)
        return {int(session): int(count) for session, count in await _rows(ledger, query)}
    held: dict[int, int] = {}
    for record in _memory(ledger).values():
        if record.claim.state in HELD:
            held[record.claim.session_generation] = held.get(record.claim.session_generation, 0) + 1
    return held


async def past_lease(ledger: Ledger, now: datetime, limit: int) -> tuple[int, list[TaskRecord]]:
    """How many held claims are past their lease at `now`, and at most `limit` of them, the longest past first."""
    if isinstance(ledger, SqlLedger):
        table = records_table
        where = and_(table.c.claim_state.in_(HELD), table.c.lease_until < now)
        [(total,)] = await _rows(ledger, select(func.count()).select_from(table).where(where))
        rows = await _rows(ledger, select(table).where(where).order_by(table.c.lease_until).limit(limit))
        return int(total), [record_of(row) for row in rows]
    past = [
        r for r in _memory(ledger).values()
        if r.claim.state in HELD and r.claim.lease_until is not None and r.claim.lease_until < now
    ]
    past.sort(key=lambda r: r.claim.lease_until or now)
    return len(past), [r.copy() for r in past[:limit]]


async def failed_since(ledger: Ledger, since: datetime, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """How many turns failed (claim operation `fail`) at or after `since`, and the latest `limit` of those claim
    events, each with its task id."""
    if isinstance(ledger, SqlLedger):
        table = claim_events_table
        where = and_(table.c.operation == "fail", table.c.at >= since)
        [(total,)] = await _rows(ledger, select(func.count()).select_from(table).where(where))
        rows = await _rows(ledger, select(table).where(where).order_by(table.c.at.desc()).limit(limit))
        events = [
            {"task_id": r.task_id, "claim_generation": r.claim_generation, "operation": r.operation, "state": r.state,
             "evidence": r.evidence, "at": utc(r.at)}
            for r in rows
        ]
        return int(total), events
    memory = _memory(ledger)
    failed = [
        {"task_id": task_id, **event}
        for task_id in memory
        for event in await ledger.claim_events(task_id)
        if event["operation"] == "fail" and event["at"] >= since
    ]
    failed.sort(key=lambda event: event["at"], reverse=True)
    return len(failed), failed[:limit]


async def _rows(ledger: SqlLedger, statement: Any) -> list[Any]:
    await ledger._init()  # noqa: SLF001 - the ledger's tables are made on first use
    async with ledger.reader.connect() as conn:
        return list((await conn.execute(statement)).all())


def _memory(ledger: Ledger) -> dict[str, TaskRecord]:
    """The memory ledger's records by task id (read only)."""
    if not isinstance(ledger, MemoryLedger):
        raise TypeError(f"no overview reads for {type(ledger).__name__}")
    return ledger._records  # noqa: SLF001 - this module is the memory ledger's overview reads
