"""The console's overview (`GET /console/api/overview`), what the operator sees on signing in: stored tasks counted by
agent, phase, A2A state and claim state; the attention queue (what needs the operator, why, and what they can do);
the last hour's throughput and latency from this process's own metrics; the sessions and replicas; the store's health.

Counts come from one GROUP BY over an index (`store.ledger_views`), never from loading tasks; each queue reads at most
ATTENTION_LIMIT records."""

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from a2a.types import Task

from a2a_bridge.core.claims import AWAITING_REPLY, NEEDS_RECONCILIATION
from a2a_bridge.core.clock import Clock, iso
from a2a_bridge.core.states import STATE_TABLE
from a2a_bridge.core.task_status import action_requests
from a2a_bridge.http.webhook_routes import delivery_view
from a2a_bridge.ops.minute_ring import MinuteRing
from a2a_bridge.store import ledger_views
from a2a_bridge.store.ledger import Delivery, Ledger, TaskRecord

ATTENTION_LIMIT = 50
"""Items of each kind the queue shows at most (its count says how many there are)."""
FAILURE_WINDOW = timedelta(hours=1)
Found = Callable[[TaskRecord], Awaitable[tuple[Task, TaskRecord] | None]]
"""The task and its freshest record, for an agent served here (`Console._found`)."""


@dataclass
class Surroundings:
    """What the overview reads beside the ledger, passed in by the application."""

    clock: Clock
    minutes: MinuteRing
    store_kind: str
    """memory, sqlite or postgresql."""
    reachable: Callable[[], Awaitable[str | None]]
    """None when the store answers and takes writes, else why not."""
    session: Callable[[], int]
    """This process's session generation (0 while it holds none)."""
    replicas: Callable[[], dict[str, tuple[set[int], set[int]]]]
    """Per agent: other sessions found dead, and found without their lock once."""


def agent_counts(agents: list[str], counts: ledger_views.Counts) -> list[dict[str, Any]]:
    """Per agent: its total, and its tasks by Task Status phase, by A2A state and by claim state."""
    rows = []
    for agent in agents:
        phases: dict[str, int] = {}
        states: dict[str, int] = {}
        claims: dict[str, int] = {}
        for (name, state, claim), count in counts.items():
            if name != agent:
                continue
            row = STATE_TABLE.get(state)
            phase = row.phase if row is not None else "unknown"
            phases[phase] = phases.get(phase, 0) + count
            short = state.removeprefix("TASK_STATE_")
            states[short] = states.get(short, 0) + count
            claims[claim] = claims.get(claim, 0) + count
        rows.append({"agent": agent, "total": sum(states.values()), "phases": phases, "states": states, "claims": claims})
    return rows


def item(kind: str, record: TaskRecord, since: str, why: str, what: str, actions: list[str], **more: Any) -> dict[str, Any]:
    """One entry of the attention queue."""
    return {
        "kind": kind, "taskId": record.task_id, "agent": record.agent, "since": since, "why": why, "what": what,
        "actions": actions, **more,
    }


class Overview:
    """The overview over the ledger, the hosts' agents and the surroundings."""

    def __init__(self, ledger: Ledger, agents: list[str], pushing: list[str], approvals: set[str], found: Found,
                 around: Surroundings) -> None:
        self.ledger = ledger
        self.agents = agents
        self.pushing = pushing
        """The agents with a push outbox (the only ones with dead letters)."""
        self.approvals = approvals
        self.found = found
        self.around = around

    async def view(self) -> dict[str, Any]:
        now = self.around.clock.now()
        counts = await ledger_views.counts(self.ledger)
        queues = await self.attention(counts)
        return {
            "now": iso(now),
            "agents": agent_counts(self.agents, counts),
            "attention": queues,
            "traffic": self.around.minutes.view(),
            "sessions": await self.sessions(),
            "store": await self.store(),
        }

    async def attention(self, counts: ledger_views.Counts) -> dict[str, Any]:
        """The attention queue: its items, the most urgent kinds first, and how many there are of each kind (approvals
        and uncertain outcomes among the ATTENTION_LIMIT records read of their kind; the others counted in full)."""
        now = self.around.clock.now()
        waiting, approvals = await self._approvals()
        reconcile, uncertain = await self._unreconciled()
        past_total, past = await ledger_views.past_lease(self.ledger, now, ATTENTION_LIMIT)
        failed_total, failed = await ledger_views.failed_since(self.ledger, now - FAILURE_WINDOW, ATTENTION_LIMIT)
        dead = await self._dead_letters()
        unreconciled = sum(n for (_, _, claim), n in counts.items() if claim == NEEDS_RECONCILIATION)
        items = [
            *approvals, *reconcile, *uncertain,
            *(self._past_lease(record) for record in past),
            *(self._dead_letter(letter) for letter in dead[:ATTENTION_LIMIT]),
            *[await self._failed(event) for event in failed],
        ]
        return {
            "items": [entry for entry in items if entry is not None],
            "counts": {
                "approval": waiting, "needs_reconciliation": unreconciled - len(uncertain), "uncertain": len(uncertain),
                "past_lease": past_total, "dead_letter": len(dead), "failed": failed_total,
            },
        }

    async def _approvals(self) -> tuple[int, list[dict[str, Any]]]:
        """Deploys waiting for the operator's approval (read among the records waiting for a reply)."""
        if not self.approvals:
            return 0, []
        items = []
        agents = tuple(sorted(self.approvals))
        waiting = await ledger_views.in_claim_states(
            self.ledger, (AWAITING_REPLY,), ATTENTION_LIMIT, agents, "TASK_STATE_AUTH_REQUIRED"
        )
        for record in waiting:
            found = await self.found(record)
            if found is None:
                continue
            task, live = found
            if not any(r.actor == "operator" and r.action == "approve" for r in action_requests(task)):
                continue
            since = iso(task.status.timestamp.ToDatetime().replace(tzinfo=live.created_at.tzinfo))
            items.append(item(
                "approval", live, since, "A deploy waits for the operator's approval.",
                "Approve it to let it go on, or cancel it.", ["approve", "cancel"],
            ))
        return len(items), items[:ATTENTION_LIMIT]

    async def _unreconciled(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Tasks whose claim needs reconciling: those never reconciled, and those an operator left uncertain."""
        reconcile, uncertain = [], []
        for record in await ledger_views.in_claim_states(self.ledger, (NEEDS_RECONCILIATION,), ATTENTION_LIMIT):
            events = await self.ledger.claim_events(record.task_id)
            last = events[-1] if events else None
            since = iso(last["at"]) if last is not None else iso(record.created_at)
            cancel = ["cancel"] if not record.claim.cancellation_requested else []
            if last is not None and last["operation"] == "reconcile_uncertain":
                uncertain.append(item(
                    "uncertain", record, since, "An operator reconciled it as uncertain: what the work did is not known yet.",
                    "Find out what happened, then reconcile it as completed, cancelled or continue.", ["reconcile", *cancel],
                ))
            else:
                reconcile.append(item(
                    "needs_reconciliation", record, since,
                    "Its turn's session ended while it worked: whether the work was done is unknown.",
                    "Check what the work did, then reconcile it with evidence.", ["reconcile", *cancel],
                ))
        return reconcile, uncertain

    def _past_lease(self, record: TaskRecord) -> dict[str, Any]:
        lease = record.claim.lease_until
        return item(
            "past_lease", record, iso(lease) if lease else iso(record.created_at),
            f"Its turn's lease ended and no one renewed it (claim {record.claim.state}, generation "
            f"{record.claim.claim_generation}, session {record.claim.session_generation}).",
            "The sweep recovers it; if it stays here, its session may be stuck: cancel it.", ["cancel"],
        )

    async def _dead_letters(self) -> list[Delivery]:
        letters = [letter for agent in self.pushing for letter in await self.ledger.deliveries(agent, dead=True)]
        letters.sort(key=lambda d: d.failing_since.timestamp() if d.failing_since else 0.0, reverse=True)
        return letters

    @staticmethod
    def _dead_letter(letter: Delivery) -> dict[str, Any]:
        since = iso(letter.failing_since) if letter.failing_since else ""
        return {
            "kind": "dead_letter", "taskId": letter.task_id, "agent": letter.agent, "since": since,
            "why": f"Its webhook {letter.config_id} was given up after {letter.attempts} attempts: "
                   f"{letter.last_error or 'no answer'}.",
            "what": "Fix the receiver, then deliver it again from where it stopped.", "actions": ["redeliver"],
            "webhook": delivery_view(letter),
        }

    async def _failed(self, event: dict[str, Any]) -> dict[str, Any] | None:
        record = await self.ledger.get(event["task_id"])
        if record is None:
            return None
        evidence = event["evidence"] if isinstance(event["evidence"], dict) else {}
        failure = evidence.get("failure") if isinstance(evidence.get("failure"), dict) else {}
        detail = f"{failure.get('type')}: {failure.get('message')}" if failure else str(evidence.get("message") or "")
        return item(
            "failed", record, iso(event["at"]), f"Its turn failed in the last hour. {detail}".strip(),
            "Read the failure on its page; send the work again if it should run.", [],
            failure=failure or None,
        )

    async def sessions(self) -> dict[str, Any]:
        """This process's session and the others that hold claims of the served agents."""
        dead: set[int] = set()
        dying: set[int] = set()
        for gone, suspect in self.around.replicas().values():
            dead |= gone
            dying |= suspect
        held = await ledger_views.held_by_session(self.ledger)
        mine = self.around.session()
        rows = [
            {"session": session, "claims": count, "this": session == mine,
             "status": "this process" if session == mine else "dead" if session in dead else
             "suspect" if session in dying else "live"}
            for session, count in sorted(held.items())
        ]
        if mine and mine not in held:
            rows.append({"session": mine, "claims": 0, "this": True, "status": "this process"})
        return {"this": mine, "shared": self.ledger.shared, "sessions": rows}

    async def store(self) -> dict[str, Any]:
        """The store: its kind, whether it answers and takes writes, and how long that check took."""
        started = time.perf_counter()
        problem = await self.around.reachable()
        return {
            "kind": self.around.store_kind, "ok": problem is None, "problem": problem,
            "answeredMs": round((time.perf_counter() - started) * 1000, 1),
        }
