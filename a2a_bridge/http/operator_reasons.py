"""The reason an operator may give for an action (approve, cancel, reconcile, redeliver): `{"reason": "..."}` in the
request's JSON body, optional, kept in the claim's evidence under `reason` so the task's timeline shows it."""

from typing import Any

from starlette.requests import Request

MAX_REASON = 500
"""Characters a reason may have."""


class BadReason(ValueError):
    """The body or its reason is not what an action takes; the message says what is (a 400)."""


def reason_in(body: Any) -> str | None:
    """The body's `reason` (None when absent or blank); BadReason when it is not text of at most MAX_REASON."""
    reason = body.get("reason") if isinstance(body, dict) else None
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise BadReason(f"reason must be text of at most {MAX_REASON} characters")
    return reason.strip() or None


async def optional_reason(request: Request) -> str | None:
    """The reason of an action whose body is optional: None for an empty body; BadReason for a body that is not a
    JSON object or a reason that is not text."""
    if not (await request.body()).strip():
        return None
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise BadReason('the body must be empty or a JSON object such as {"reason": "..."}')
    return reason_in(body)


def with_reason(evidence: dict[str, Any], reason: str | None) -> dict[str, Any]:
    """The evidence of an operator's action, with its reason when one was given."""
    return {**evidence, "reason": reason} if reason else evidence
