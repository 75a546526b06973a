"""HTTP caching of the agent card (specification section 8.6): `Cache-Control` with a `max-age`, a weak `ETag` (a hash
of the agent's card before the caller's URLs are filled in: the cards served at every address are the same card),
`Last-Modified` (when the bridge started, as the cards are fixed from then on), and 304 Not Modified for a request
whose `If-None-Match` or `If-Modified-Since` shows it holds the card already."""

import hashlib
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response

MAX_AGE = 300
"""Seconds a client may use a card without asking again: cards change only when the bridge is restarted."""
CARD_MEDIA_TYPE = "application/json"


def entity_tag(card: bytes) -> str:
    return 'W/"' + hashlib.sha256(card).hexdigest()[:32] + '"'


def matches(if_none_match: str, tag: str) -> bool:
    """Whether an If-None-Match header names the tag (weakly compared, as RFC 9110 says for GET) or is `*`."""
    names = [name.strip().removeprefix("W/") for name in if_none_match.split(",")]
    return "*" in names or tag.removeprefix("W/") in names


def unmodified_since(if_modified_since: str, last_modified: datetime) -> bool:
    """Whether the card has not changed since the date a client names (False when the date is unreadable)."""
    try:
        since = parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError):
        return False
    return since.tzinfo is not None and last_modified.replace(microsecond=0) <= since


def card_response(request: Request, body: bytes, card: bytes, last_modified: datetime | None) -> Response:
    """The card's body with its caching headers, or 304 when the request's validators match; `card` is the agent's
    card serialized, which the ETag is taken from. If-None-Match, when sent, decides alone (RFC 9110, section
    13.2.2). No Last-Modified before the bridge has started."""
    tag = entity_tag(card)
    headers = {"Cache-Control": f"public, max-age={MAX_AGE}", "ETag": tag}
    if last_modified is not None:
        headers["Last-Modified"] = format_datetime(last_modified.astimezone(UTC), usegmt=True)
    if_none_match = request.headers.get("if-none-match")
    if_modified_since = request.headers.get("if-modified-since")
    if if_none_match is not None:
        fresh = matches(if_none_match, tag)
    else:
        fresh = (
            if_modified_since is not None
            and last_modified is not None
            and unmodified_since(if_modified_since, last_modified)
        )
    if fresh:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=CARD_MEDIA_TYPE, headers=headers)
