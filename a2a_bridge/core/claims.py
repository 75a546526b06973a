"""Claims after the Open Agent Bridge: the transition reference as one data table, and the pure checks that read it."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

PENDING = "pending"
CLAIMED = "claimed"
AWAITING_REPLY = "awaiting_reply"
COMPLETED = "completed"
FAILED = "failed"
CANCEL_REQUESTED = "cancel_requested"
CANCELLED = "cancelled"
NEEDS_RECONCILIATION = "needs_reconciliation"
NO_RECORD = "no_record"

CLAIM_STATES = (
    PENDING, CLAIMED, AWAITING_REPLY, COMPLETED, FAILED, CANCEL_REQUESTED, CANCELLED, NEEDS_RECONCILIATION,
)
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
NONTERMINAL = tuple(s for s in CLAIM_STATES if s not in TERMINAL)

DEFAULT_LEASE = timedelta(minutes=5)
MAX_WINDOW_SECONDS = 3600


@dataclass(frozen=True)
class Row:
    """One row of the seed's transition reference."""

    sources: tuple[str, ...]
    operation: str
    actor: str
    preconditions: tuple[str, ...]
    target: str


TRANSITIONS: tuple[Row, ...] = (
    Row((NO_RECORD,), "create", "requester", (), PENDING),
    Row((PENDING,), "claim", "assignee", ("no_cancellation",), CLAIMED),
    Row((CLAIMED,), "renew", "assignee", ("live_claim", "no_cancellation"), CLAIMED),
    Row((CLAIMED,), "open_window", "assignee", ("live_claim", "no_cancellation", "bounded_stage"), CLAIMED),
    Row((CLAIMED,), "ask", "assignee", ("live_claim", "evidence", "stopped", "no_cancellation"), AWAITING_REPLY),
    Row((AWAITING_REPLY,), "resume", "assignee", ("evidence", "stopped", "no_cancellation"), CLAIMED),
    Row((CLAIMED, CANCEL_REQUESTED), "complete", "assignee", ("live_claim", "evidence"), COMPLETED),
    Row((CLAIMED, CANCEL_REQUESTED), "fail", "assignee", ("live_claim", "evidence"), FAILED),
    Row(NONTERMINAL, "request_cancel", "participant", (), CANCEL_REQUESTED),
    Row((CANCEL_REQUESTED,), "report_cancelled", "assignee", ("evidence", "stopped"), CANCELLED),
    Row((CLAIMED, CANCEL_REQUESTED), "invalidate", "server", (), NEEDS_RECONCILIATION),
    Row((NEEDS_RECONCILIATION,), "reconcile_completed", "assignee", ("evidence",), COMPLETED),
    Row((NEEDS_RECONCILIATION,), "reconcile_cancelled", "assignee", ("cancellation", "evidence", "stopped"), CANCELLED),
    Row((NEEDS_RECONCILIATION,), "reconcile_continue", "assignee", ("evidence", "stopped", "no_cancellation"), CLAIMED),
    Row((NEEDS_RECONCILIATION,), "reconcile_uncertain", "assignee", ("evidence",), NEEDS_RECONCILIATION),
)
"""The seed's transition reference. `request_cancel` from needs_reconciliation keeps that state (see `apply`)."""

REACHED_BY = {AWAITING_REPLY: "ask", COMPLETED: "complete", FAILED: "fail", CANCELLED: "report_cancelled"}
"""The operation an assignee posts to bring its claim to the claim state of a new A2A state (MAPPING.md)."""

NEW_GENERATION = frozenset({"claim", "resume", "reconcile_continue"})
EXTENDS_LEASE = frozenset({"claim", "renew", "open_window", "resume", "reconcile_continue"})


class ClaimError(Exception):
    """An operation the transition reference refuses; `reason` names which rule."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Claim(NamedTuple):
    """The claim view of one task (immutable: a tuple, built in a fraction of a frozen dataclass's time)."""

    state: str = NO_RECORD
    claim_generation: int = 0
    session_generation: int = 0
    lease_until: datetime | None = None
    cancellation_requested: bool = False
    stage: str | None = None


class Op(NamedTuple):
    """An operation on a claim, with what the caller asserts."""

    operation: str
    generation: int | None = None
    session: int = 0
    evidence: dict[str, object] | None = None
    local_operation_stopped: bool = False
    window_seconds: int | None = None
    stage: str | None = None


ROWS_BY_SOURCE: dict[tuple[str, str], Row] = {
    (source, row.operation): row for row in reversed(TRANSITIONS) for source in row.sources
}
"""The row that applies to each (claim state, operation): the first in TRANSITIONS where several would."""


def row_for(state: str, operation: str) -> Row:
    row = ROWS_BY_SOURCE.get((state, operation))
    if row is not None:
        return row
    if state in TERMINAL:
        raise ClaimError("terminal", f"the task is {state}; a terminal task is never mutated")
    raise ClaimError("invalid_transition", f"{operation} is not allowed from {state}")


def _check(claim: Claim, op: Op, row: Row, now: datetime) -> None:
    for rule in row.preconditions:
        if rule == "live_claim":
            if op.generation != claim.claim_generation or op.session != claim.session_generation:
                raise ClaimError("stale_claim", f"generation {op.generation} is not the current claim {claim.claim_generation}")
            if claim.lease_until is None or claim.lease_until <= now:
                raise ClaimError("lease_expired", "the claim's lease has expired")
        elif rule == "no_cancellation" and claim.cancellation_requested:
            raise ClaimError("cancellation_requested", "a cancellation is recorded for this task")
        elif rule == "cancellation" and not claim.cancellation_requested:
            raise ClaimError("no_cancellation", "no cancellation is recorded for this task")
        elif rule == "evidence" and not op.evidence:
            raise ClaimError("evidence_required", "this operation needs concrete evidence")
        elif rule == "stopped" and not op.local_operation_stopped:
            raise ClaimError("not_stopped", "local operations must have stopped")
        elif rule == "bounded_stage":
            if not op.stage or op.window_seconds is None or not 1 <= op.window_seconds <= MAX_WINDOW_SECONDS:
                raise ClaimError("invalid_window", "an operation window names a stage and lasts 1 to 3600 seconds")


def apply(claim: Claim, op: Op, now: datetime, lease: timedelta = DEFAULT_LEASE) -> Claim:
    """The claim after `op`, or ClaimError saying which rule refused it."""
    row = row_for(claim.state, op.operation)
    _check(claim, op, row, now)
    target = row.target
    if op.operation == "request_cancel":
        target = NEEDS_RECONCILIATION if claim.state == NEEDS_RECONCILIATION else CANCEL_REQUESTED
        return Claim(target, claim.claim_generation, claim.session_generation, claim.lease_until, True, claim.stage)
    generation, session = claim.claim_generation, claim.session_generation
    lease_until, stage = claim.lease_until, claim.stage
    if op.operation in NEW_GENERATION:
        generation, session = generation + 1, op.session
    if op.operation == "open_window":
        lease_until, stage = now + timedelta(seconds=op.window_seconds or 0), op.stage
    elif op.operation in EXTENDS_LEASE:
        lease_until, stage = now + lease, None
    if target in TERMINAL or target in (AWAITING_REPLY, NEEDS_RECONCILIATION):
        lease_until, stage = None, None
    return Claim(target, generation, session, lease_until, claim.cancellation_requested, stage)
