"""The checker: after the quiet period, every acknowledged message's task is read from every replica and from the
database, and the history and the deployer's ledger are checked against what replicas promise (docs/chaos.md)."""

import asyncio
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from chaos.clients import A2A, AUTH
from chaos.cluster import Replica
from chaos.history import TERMINAL_STATES, WAITING_STATES, History, Observation, now

EXISTS = "1 task exists"
AGREE = "2 replicas agree"
ONCE = "3 no deploy twice"
NOT_STUCK = "4 nothing stuck"
TERMINAL_STAYS = "5 terminal never changes"
REVISION = "6 revision = last event"
GENERATIONS = "7 claim generations never go back"
CHECKS = (EXISTS, AGREE, ONCE, NOT_STUCK, TERMINAL_STAYS, REVISION, GENERATIONS)
LIVE_CLAIMS = frozenset({"pending", "claimed", "cancel_requested"})
READ_ATTEMPTS = 10
EVENTS_SHOWN = 16


@dataclass
class Violation:
    check: str
    task_id: str
    evidence: str


@dataclass
class Stored:
    """A task's row in bridge_tasks, its event log's last sequence and its claim events, as the database holds them."""

    record: dict[str, Any]
    last_seq: int | None
    claim_events: list[dict[str, Any]]


@dataclass
class Report:
    tasks: int = 0
    messages: int = 0
    acknowledged: int = 0
    final_states: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)

    def add(self, check: str, task_id: str, evidence: str) -> None:
        self.violations.append(Violation(check, task_id, evidence))

    def by_check(self) -> Counter[str]:
        return Counter(v.check for v in self.violations)


async def final_state(http: httpx.AsyncClient, replica: Replica, agent: str, task_id: str) -> str:
    """The state GetTask answers on one replica: a TASK_STATE_*, NOT_FOUND, or ERROR(...) after a few attempts."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id, "historyLength": 0}}
    answer = "ERROR(no answer)"
    for _ in range(READ_ATTEMPTS):
        try:
            response = await http.post(
                f"{replica.base}/{agent}/a2a/jsonrpc", json=body, headers={**A2A, **AUTH.get(agent, {})}, timeout=10
            )
            envelope = response.json()
        except (httpx.HTTPError, json.JSONDecodeError) as failure:
            answer = f"ERROR({type(failure).__name__})"
        else:
            if "result" in envelope:
                return str(envelope["result"]["status"]["state"])
            code = envelope.get("error", {}).get("code")
            if code == -32001:
                return "NOT_FOUND"
            answer = f"ERROR({code} {envelope.get('error', {}).get('message', '')})"
        await asyncio.sleep(0.5)
    return answer


async def stored(database: str) -> tuple[dict[str, Stored], datetime]:
    """Every task the database holds, and the database's clock."""
    connection = await asyncpg.connect(database, timeout=30)
    try:
        records = await connection.fetch("SELECT * FROM bridge_tasks")
        seqs = await connection.fetch("SELECT task_id, max(seq) AS seq FROM bridge_events GROUP BY task_id")
        events = await connection.fetch(
            "SELECT id, task_id, claim_generation, operation, state FROM bridge_claim_events ORDER BY task_id, id"
        )
        clock = await connection.fetchval("SELECT now()")
    finally:
        await connection.close()
    last = {row["task_id"]: row["seq"] for row in seqs}
    claims: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in events:
        claims[row["task_id"]].append(dict(row))
    return {
        row["task_id"]: Stored(dict(row), last.get(row["task_id"]), claims[row["task_id"]]) for row in records
    }, clock


def claim_summary(record: dict[str, Any], clock: datetime) -> str:
    lease = record.get("lease_until")
    left = f"{(lease - clock).total_seconds():+.1f} s" if lease is not None else "none"
    return (
        f"claim {record['claim_state']} gen {record['claim_generation']} session {record['session_generation']} "
        f"lease {left} (database clock), stage {record.get('stage')!r}"
    )


def live_claim(record: dict[str, Any], clock: datetime) -> bool:
    lease = record.get("lease_until")
    return record["claim_state"] in LIVE_CLAIMS and lease is not None and lease > clock


def legitimately_waiting(state: str, record: dict[str, Any]) -> bool:
    """Non-terminal for a reason an operator sees: reconciliation needed, or a step waiting for a person."""
    if record["claim_state"] == "needs_reconciliation":
        return True
    return state in WAITING_STATES and record["claim_state"] == "awaiting_reply"


def settled(state: str, stored_task: Stored | None) -> bool:
    """Whether a task is done with for the quiet period: terminal, or legitimately waiting."""
    if state in TERMINAL_STATES:
        return True
    return stored_task is not None and legitimately_waiting(state, stored_task.record)


def terminal_changes(observations: list[Observation], origin: float) -> list[tuple[str, str]]:
    """(task id, evidence) for each task seen terminal and then, by a later request or later on one stream, otherwise;
    times in the evidence are seconds since `origin`."""
    by_task: dict[str, list[Observation]] = defaultdict(list)
    for observation in observations:
        by_task[observation.task_id].append(observation)
    found: list[tuple[str, str]] = []
    for task_id, seen in by_task.items():
        terminals = [o for o in seen if o.state in TERMINAL_STATES]
        if not terminals:
            continue
        if len({o.state for o in terminals}) > 1:
            found.append((task_id, "seen in two terminal states: " + "; ".join(describe(o, origin) for o in terminals[:6])))
            continue
        first = min(terminals, key=lambda o: o.observed)
        later = [o for o in seen if o.invoked > first.observed and o.state != first.state]
        by_stream: dict[int, list[Observation]] = defaultdict(list)
        for o in seen:
            if o.stream is not None:
                by_stream[o.stream].append(o)
        for frames in by_stream.values():
            ended = next((i for i, o in enumerate(frames) if o.state in TERMINAL_STATES), None)
            if ended is not None:
                later.extend(o for o in frames[ended + 1:] if o.state != frames[ended].state and o not in later)
        if later:
            evidence = f"first terminal {describe(first, origin)}; afterwards " + "; ".join(describe(o, origin) for o in later[:6])
            found.append((task_id, evidence))
    return found


def describe(o: Observation, origin: float) -> str:
    stream = f" stream {o.stream}" if o.stream is not None else ""
    return (
        f"{o.state.removeprefix('TASK_STATE_')} on {o.replica} by {o.source}{stream} "
        f"(sent {o.invoked - origin:.2f} s, seen {o.observed - origin:.2f} s)"
    )


def ledger_lines(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["taskId"] for line in path.read_text().splitlines() if line.strip())


async def check(history: History, replicas: list[Replica], database: str, ledger: Path) -> Report:
    """Every check of docs/chaos.md over every acknowledged message; the final reads join the history."""
    report = Report(messages=len(history.messages))
    agents = history.task_agents()
    report.acknowledged = sum(1 for m in history.messages.values() if m.task_id is not None)
    report.tasks = len(agents)
    async with httpx.AsyncClient(trust_env=False) as http:
        finals: dict[str, dict[str, str]] = {}
        for task_id, agent in agents.items():
            invoked = now()
            answers = await asyncio.gather(*(final_state(http, r, agent, task_id) for r in replicas))
            finals[task_id] = {r.name: a for r, a in zip(replicas, answers)}
            for replica, answer in zip(replicas, answers):
                if answer.startswith("TASK_STATE_"):
                    history.observe(Observation(task_id, answer, replica.name, "final GetTask", invoked, now()))
    tasks, clock = await stored(database)
    for task_id, states in finals.items():
        values = set(states.values())
        if "NOT_FOUND" in values or task_id not in tasks:
            report.add(EXISTS, task_id, f"GetTask per replica {states}; in bridge_tasks: {task_id in tasks}")
        elif len(values) > 1 or not all(v.startswith("TASK_STATE_") for v in values):
            report.add(AGREE, task_id, f"GetTask per replica {states}")
        state = next(iter(sorted(values)))
        report.final_states[state.removeprefix("TASK_STATE_") if len(values) == 1 else "DISAGREE"] += 1
        stored_task = tasks.get(task_id)
        if stored_task is None or len(values) > 1 or not state.startswith("TASK_STATE_"):
            continue
        record = stored_task.record
        if not settled(state, stored_task):
            why = "live claim, yet not settled by the end of the quiet period" if live_claim(record, clock) else "no live claim and no operator-visible reason"
            report.add(NOT_STUCK, task_id, f"{state} with {claim_summary(record, clock)}: {why}; claim events {events_text(stored_task)}")
    for task_id, count in ledger_lines(ledger).items():
        if count > 1:
            report.add(ONCE, task_id, f"{count} lines in the deployer's ledger; claim events {events_text(tasks.get(task_id))}")
    for task_id, evidence in terminal_changes(history.observations, history.started):
        report.add(TERMINAL_STAYS, task_id, evidence)
    for task_id, stored_task in tasks.items():
        revision = stored_task.record["revision"]
        if stored_task.last_seq is not None and revision != stored_task.last_seq:
            report.add(REVISION, task_id, f"revision {revision}, last event seq {stored_task.last_seq}; claim events {events_text(stored_task)}")
        highest = 0
        for event in stored_task.claim_events:
            if event["claim_generation"] < highest:
                report.add(GENERATIONS, task_id, f"event {event['id']} {event['operation']} at generation {event['claim_generation']} after generation {highest}; claim events {events_text(stored_task)}")
                break
            highest = event["claim_generation"]
    return report


def events_text(stored_task: Stored | None) -> str:
    """The claim events as (generation, operation), the first few and the last ones when there are many."""
    if stored_task is None:
        return "(no record)"
    pairs = [f"({e['claim_generation']}, {e['operation']})" for e in stored_task.claim_events]
    if len(pairs) > EVENTS_SHOWN:
        half = EVENTS_SHOWN // 2
        pairs = [*pairs[:half], f"... {len(pairs) - 2 * half} more ...", *pairs[-half:]]
    return ", ".join(pairs)
