"""Every row of the Open Agent Bridge transition reference, every refused pair, and every precondition."""

from datetime import UTC, datetime, timedelta

import pytest

from a2a_bridge.core import claims
from a2a_bridge.core.claims import (
    CLAIM_STATES,
    NO_RECORD,
    TERMINAL,
    TRANSITIONS,
    Claim,
    ClaimError,
    Op,
)

NOW = datetime(2026, 10, 6, 9, 0, tzinfo=UTC)
OPERATIONS = sorted({row.operation for row in TRANSITIONS})
EVIDENCE = {"note": "checked"}


def satisfying(state: str, row: claims.Row) -> tuple[Claim, Op]:
    """A claim in `state` and an operation that meets every precondition of `row`."""
    claim = Claim(
        state=state,
        claim_generation=3,
        session_generation=7,
        lease_until=NOW + timedelta(minutes=1),
        cancellation_requested="cancellation" in row.preconditions,
    )
    op = Op(
        row.operation,
        generation=3,
        session=7,
        evidence=EVIDENCE,
        local_operation_stopped=True,
        window_seconds=60 if "bounded_stage" in row.preconditions else None,
        stage="migrate" if "bounded_stage" in row.preconditions else None,
    )
    return claim, op


ROW_CASES = [(row, source) for row in TRANSITIONS for source in row.sources]


@pytest.mark.parametrize(("row", "source"), ROW_CASES, ids=[f"{s}-{r.operation}" for r, s in ROW_CASES])
def test_every_row_reaches_its_target(row: claims.Row, source: str) -> None:
    claim, op = satisfying(source, row)
    after = claims.apply(claim, op, NOW)
    expected = claims.NEEDS_RECONCILIATION if (row.operation, source) == ("request_cancel", claims.NEEDS_RECONCILIATION) else row.target
    assert after.state == expected
    if row.operation in claims.NEW_GENERATION:
        assert after.claim_generation == claim.claim_generation + 1
    else:
        assert after.claim_generation == claim.claim_generation
    if row.operation == "request_cancel":
        assert after.cancellation_requested
    if row.operation in ("claim", "renew", "resume", "reconcile_continue"):
        assert after.lease_until == NOW + claims.DEFAULT_LEASE
    if row.operation == "open_window":
        assert after.lease_until == NOW + timedelta(seconds=60) and after.stage == "migrate"


REFUSED = [
    (state, operation)
    for state in (NO_RECORD, *CLAIM_STATES)
    for operation in OPERATIONS
    if not any(state in row.sources and row.operation == operation for row in TRANSITIONS)
]


@pytest.mark.parametrize(("state", "operation"), REFUSED, ids=[f"{s}-{o}" for s, o in REFUSED])
def test_every_other_pair_is_refused(state: str, operation: str) -> None:
    with pytest.raises(ClaimError) as refused:
        claims.apply(Claim(state=state, lease_until=NOW + timedelta(minutes=1)), Op(operation, evidence=EVIDENCE, local_operation_stopped=True), NOW)
    assert refused.value.reason == ("terminal" if state in TERMINAL else "invalid_transition")


def test_stale_generation_is_refused() -> None:
    claim, op = satisfying(claims.CLAIMED, claims.row_for(claims.CLAIMED, "complete"))
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim, op._replace(generation=2), NOW)
    assert refused.value.reason == "stale_claim"


def test_fenced_session_is_refused() -> None:
    claim, op = satisfying(claims.CLAIMED, claims.row_for(claims.CLAIMED, "renew"))
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim, op._replace(session=6), NOW)
    assert refused.value.reason == "stale_claim"


def test_expired_lease_is_refused() -> None:
    claim, op = satisfying(claims.CLAIMED, claims.row_for(claims.CLAIMED, "complete"))
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim._replace(lease_until=NOW - timedelta(seconds=1)), op, NOW)
    assert refused.value.reason == "lease_expired"


@pytest.mark.parametrize(
    ("state", "operation"),
    [(claims.PENDING, "claim"), (claims.CLAIMED, "renew"), (claims.CLAIMED, "ask"), (claims.AWAITING_REPLY, "resume"),
     (claims.NEEDS_RECONCILIATION, "reconcile_continue")],
)
def test_recorded_cancellation_blocks_progress(state: str, operation: str) -> None:
    claim, op = satisfying(state, claims.row_for(state, operation))
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim._replace(cancellation_requested=True), op, NOW)
    assert refused.value.reason == "cancellation_requested"


def test_reconcile_cancelled_needs_a_recorded_cancellation() -> None:
    claim, op = satisfying(claims.NEEDS_RECONCILIATION, claims.row_for(claims.NEEDS_RECONCILIATION, "reconcile_cancelled"))
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim._replace(cancellation_requested=False), op, NOW)
    assert refused.value.reason == "no_cancellation"


@pytest.mark.parametrize("operation", ["ask", "complete", "report_cancelled", "reconcile_completed", "reconcile_uncertain"])
def test_evidence_is_required(operation: str) -> None:
    row = next(r for r in TRANSITIONS if r.operation == operation)
    claim, op = satisfying(row.sources[0], row)
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim, op._replace(evidence={}), NOW)
    assert refused.value.reason == "evidence_required"


@pytest.mark.parametrize("operation", ["ask", "resume", "report_cancelled", "reconcile_continue"])
def test_local_operations_must_have_stopped(operation: str) -> None:
    row = next(r for r in TRANSITIONS if r.operation == operation)
    claim, op = satisfying(row.sources[0], row)
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim, op._replace(local_operation_stopped=False), NOW)
    assert refused.value.reason == "not_stopped"


@pytest.mark.parametrize(("seconds", "stage"), [(0, "x"), (3601, "x"), (60, None), (None, "x")])
def test_operation_window_is_named_and_bounded(seconds: int | None, stage: str | None) -> None:
    claim, op = satisfying(claims.CLAIMED, claims.row_for(claims.CLAIMED, "open_window"))
    with pytest.raises(ClaimError) as refused:
        claims.apply(claim, op._replace(window_seconds=seconds, stage=stage), NOW)
    assert refused.value.reason == "invalid_window"


def test_window_bounds_are_inclusive() -> None:
    claim, op = satisfying(claims.CLAIMED, claims.row_for(claims.CLAIMED, "open_window"))
    for seconds in (1, 3600):
        assert claims.apply(claim, op._replace(window_seconds=seconds), NOW).lease_until == NOW + timedelta(seconds=seconds)
