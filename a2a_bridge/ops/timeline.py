"""One task's history on one time axis, for the console's task page: the A2A states it reached, the claim operations
(generation, lease), the Task Status' notifications, its webhook deliveries and the operator's actions with their
reasons, each an entry `{at, kind, title, detail, ...}`; and who must act now, and since when.

Pure functions of what the console read (the task, its record, its claim events, its deliveries): the clock is
passed in."""

from datetime import datetime
from typing import Any

from a2a.types import Task

from a2a_bridge.core.claims import CANCEL_REQUESTED, CLAIMED, NEEDS_RECONCILIATION, PENDING
from a2a_bridge.core.clock import iso
from a2a_bridge.core.states import is_terminal, state_name
from a2a_bridge.core.task_status import action_requests
from a2a_bridge.store.ledger import Delivery, TaskRecord

OPERATOR_OPERATIONS = frozenset({
    "reconcile_completed", "reconcile_cancelled", "reconcile_continue", "reconcile_uncertain",
})
"""Claim operations an operator posts with the evidence they give; the bridge posts them too, with BRIDGE_EVIDENCE."""
BRIDGE_EVIDENCE = frozenset({"reason", "requested_by"})
"""The evidence keys of the reconcile operations the bridge posts itself (a lost claim's cancel or recovery)."""
CLAIM_WORDS = {
    "create": "the bridge recorded the task",
    "claim": "a turn took the claim",
    "renew": "the turn renewed its lease",
    "ask": "the turn stopped to wait for a reply",
    "resume": "a reply resumed the task: a new turn took the claim",
    "open_window": "the turn opened a window in which its work may not be repeated",
    "complete": "the turn reported the work done",
    "fail": "the turn failed",
    "request_cancel": "a cancel was asked for",
    "report_cancelled": "the turn reported the work stopped",
    "invalidate": "the turn's session ended before it did: what happened must be reconciled",
    "reconcile_completed": "an operator reported the work done",
    "reconcile_cancelled": "an operator reported the work stopped",
    "reconcile_continue": "an operator let the work run again",
    "reconcile_uncertain": "an operator reported the outcome still unknown",
}
"""What each claim operation means, in the operator's words."""


def _short(state: str) -> str:
    return state.removeprefix("TASK_STATE_")


def _operator(event: dict[str, Any], operators: frozenset[str]) -> str | None:
    """Who acted as the operator in a claim event (an operator's name in `by` or `requested_by`, or a reconcile with
    evidence of the operator's own), or None when it was not an operator's action."""
    evidence = event["evidence"] if isinstance(event["evidence"], dict) else {}
    for field in ("by", "requested_by"):
        who = evidence.get(field)
        if isinstance(who, str) and who in operators:
            return who
    if event["operation"] in OPERATOR_OPERATIONS and set(evidence) - BRIDGE_EVIDENCE:
        return str(evidence.get("checked_by") or "operator")
    return None


def claim_entries(event: dict[str, Any], operators: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The entries of one claim event: the claim operation, the A2A state it reports, the operator's action."""
    at = iso(event["at"])
    evidence = event["evidence"] if isinstance(event["evidence"], dict) else {}
    operation = event["operation"]
    lease = event.get("lease_until")
    entries = [{
        "at": at, "kind": "claim", "title": f"{operation} → {event['state']}",
        "detail": CLAIM_WORDS.get(operation, ""), "generation": event["claim_generation"], "evidence": evidence,
        "session": event.get("session_generation"), "lease": iso(lease) if lease is not None else None,
    }]
    if isinstance(evidence.get("a2a_state"), str):
        entries.append({
            "at": at, "kind": "a2a", "title": _short(evidence["a2a_state"]), "detail": str(evidence.get("message") or ""),
        })
    failure = evidence.get("failure")
    if isinstance(failure, dict):
        entries.append({
            "at": at, "kind": "failure", "title": str(failure.get("type", "error")), "detail": str(failure.get("message", "")),
        })
    who = _operator(event, operators)
    if who is not None:
        entries.append({
            "at": at, "kind": "operator", "title": f"{who}: {operation.replace('_', ' ')}",
            "detail": CLAIM_WORDS.get(operation, ""), "reason": evidence.get("reason"),
        })
    return entries


def delivery_entries(delivery: Delivery) -> list[dict[str, Any]]:
    """A push config's delivery: failing since when, given up, or the next attempt due."""
    entries = []
    if delivery.failing_since is not None:
        title = f"webhook {delivery.config_id}: " + ("given up (dead letter)" if delivery.dead else "failing")
        entries.append({
            "at": iso(delivery.failing_since), "kind": "webhook", "title": title,
            "detail": f"{delivery.attempts} attempts, delivered up to revision {delivery.delivered}; last error: "
                      f"{delivery.last_error or 'none'}",
        })
    elif delivery.due_at is not None:
        entries.append({
            "at": iso(delivery.due_at), "kind": "webhook", "title": f"webhook {delivery.config_id}: delivery due",
            "detail": f"delivered up to revision {delivery.delivered}",
        })
    return entries


def timeline(
    task: Task, record: TaskRecord, events: list[dict[str, Any]], deliveries: list[Delivery], operators: frozenset[str],
) -> list[dict[str, Any]]:
    """Every entry of the task, the oldest first (entries of one moment in the order they happened); `operators` are
    the names of the operator principals, whose actions the claim evidence names."""
    entries: list[dict[str, Any]] = [
        {"at": iso(record.created_at), "kind": "a2a", "title": "SUBMITTED", "detail": "the task was created"},
    ]
    for event in events:
        entries.extend(claim_entries(event, operators))
    for notification in record.notifications:
        what = notification.kind + (f": {notification.provider}" if notification.provider else "")
        entries.append({
            "at": iso(notification.since), "kind": "status", "title": f"notification {what}",
            "detail": f"Task Status asks {record.responsible_user or 'the user'} to act",
        })
    current = _short(state_name(task.status.state))
    reported = any(entry["kind"] == "a2a" and entry["title"] == current for entry in entries)
    if task.status.HasField("timestamp") and not reported:
        entries.append({
            "at": iso(task.status.timestamp.ToDatetime().replace(tzinfo=record.created_at.tzinfo)),
            "kind": "a2a", "title": f"now {current}", "detail": "the task's current status",
        })
    for delivery in deliveries:
        entries.extend(delivery_entries(delivery))
    return sorted(entries, key=lambda entry: entry["at"])


def waiting_on(task: Task, record: TaskRecord, events: list[dict[str, Any]], now: datetime) -> dict[str, Any] | None:
    """Who must act for the task to go on, what, and since when; None once it has ended."""
    if is_terminal(task.status.state):
        return None
    last = iso(events[-1]["at"]) if events else iso(record.created_at)
    claim = record.claim
    if claim.state == NEEDS_RECONCILIATION:
        return {"who": "operator", "what": "reconcile: report what the work did, with evidence", "since": last}
    since = (
        iso(task.status.timestamp.ToDatetime().replace(tzinfo=record.created_at.tzinfo))
        if task.status.HasField("timestamp") else last
    )
    requests = action_requests(task)
    if requests:
        first = requests[0]
        who = first.actor if first.actor != "user" else f"user {first.user or record.responsible_user or 'anonymous'}"
        what = first.action.replace("_", " ") + (f" ({first.provider})" if first.provider else "")
        return {"who": who, "what": what, "since": since}
    if _short(state_name(task.status.state)) == "INPUT_REQUIRED":
        return {"who": f"user {record.responsible_user or 'anonymous'}", "what": "reply to the agent", "since": since}
    if claim.state in (PENDING, CLAIMED, CANCEL_REQUESTED):
        lease = claim.lease_until
        if lease is not None and lease < now:
            return {"who": "bridge", "what": "recover the turn: its lease ended", "since": iso(lease)}
        what = "stop after a cancel" if claim.state == CANCEL_REQUESTED else "work on the turn"
        return {"who": f"agent {record.agent}", "what": what, "since": last}
    return {"who": f"agent {record.agent}", "what": "go on", "since": last}
