"""Structural comparison of live JSON with the capture kit's recorded JSON.

Recorded ids (UUIDs, page tokens) are bound to the live ids the server issued, one to one and consistently across
a transcript; recorded ISO timestamps match any ISO timestamp; every other value must be equal, after the kit's
base URLs and bound ids inside strings are rewritten to their live form. The few deliberate differences between
our server and the kit are tolerated only where a caller passes the named `Allowance` for them.
"""

import base64
import json
import re
from collections.abc import Collection, Mapping
from datetime import datetime
from enum import Enum
from typing import Any

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$")
PROTO_DEFAULTS: tuple[object, ...] = ("", [], {})
"""What protobuf's JSON mapping prints for a string, repeated or map field left at its default."""
OPAQUE_FIELDS = frozenset({"nextPageToken"})
"""Fields whose recorded value is an opaque server-issued token: bound like an id, never compared."""


class Allowance(Enum):
    """A deliberate difference between our server and the kit; each value is the reason it is acceptable."""

    KEY_ORDER = (
        "JSON objects are unordered: the SDK writes JSON-RPC envelopes as result, id, jsonrpc, tasks with artifacts "
        "before history (proto field order) and data-part keys in protobuf Struct order."
    )
    INTEGRAL_FLOATS = (
        "Data parts are protobuf Struct values, whose numbers are doubles: the SDK renders 11 as 11.0. JSON does not "
        "distinguish the two."
    )
    EMPTY_METADATA = (
        "The SDK's ErrorInfo always carries `metadata`, `{}` when an error has none; the kit omits the empty object."
    )
    EMPTY_STRING_LIST = (
        "A security requirement naming no scopes is an empty protobuf StringList, which protobuf's JSON mapping "
        "prints as `{}`; the kit prints `{\"list\": []}`. Both parse to the same message."
    )
    INVALID_PARAMS_ERROR_INFO = (
        "-32602 details carry the kit's google.rpc.BadRequest and, before it, the SDK's ErrorInfo "
        "(reason INVALID_PARAMS) whose metadata repeats the same field violations."
    )
    PRINTED_DEFAULTS = (
        "The SDK serializes ListTasks with always_print_fields_with_no_presence, so fields at their default "
        "(`\"\"`, `[]`, `{}`) are printed where the kit leaves them out; ProtoJSON readers take both as the default."
    )
    EMPTY_RESULT_NULL = (
        "DeleteTaskPushNotificationConfig returns google.protobuf.Empty: the SDK's JSON-RPC result is null, the "
        "kit's is {} (Empty's JSON form). The specification leaves it open; both report success."
    )
    CARD_SIGNATURE = (
        "The card signature covers the card's interface URLs, which are the live server's, so its value differs; "
        "the protected header is the same JSON with keys in PyJWT's order. Tests verify the live signature instead."
    )


class Ids:
    """Recorded ids bound to live ones, one to one, plus the kit's base URLs mapped to the live ones."""

    def __init__(self, urls: Mapping[str, str]) -> None:
        self.urls = dict(urls)
        self.live: dict[str, str] = {}
        self._recorded: dict[str, str] = {}

    def bind(self, recorded: str, live: Any, where: str) -> None:
        """Bind a recorded id to the live id at the same place, or check it matches its earlier binding."""
        assert isinstance(live, str) and live, f"{where}: expected an id for recorded {recorded}, got {live!r}"
        bound = self.live.get(recorded)
        if bound is not None:
            assert bound == live, f"{where}: recorded {recorded} is live {bound} elsewhere, here {live!r}"
            return
        other = self._recorded.get(live)
        assert other is None, f"{where}: live {live} already stands for recorded {other}, here for {recorded}"
        self.live[recorded] = live
        self._recorded[live] = recorded

    def __getitem__(self, recorded: str) -> str:
        return self.live[recorded]

    def translate(self, text: str) -> str:
        """The recorded text with the kit's base URLs and every bound id replaced by its live form."""
        for kit, live in sorted(self.urls.items(), key=lambda item: -len(item[0])):
            text = text.replace(kit, live)
        for recorded, live in sorted(self.live.items(), key=lambda item: -len(item[0])):
            text = text.replace(recorded, live)
        return text


def is_iso_time(value: object) -> bool:
    if not isinstance(value, str) or not ISO_TIME.match(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def match(recorded: Any, live: Any, ids: Ids, allow: Collection[Allowance] = (), where: str = "$") -> None:
    """Assert that `live` has the structure and values of `recorded`, binding ids; failures name the JSON path."""
    if isinstance(recorded, dict):
        if Allowance.EMPTY_RESULT_NULL in allow and recorded == {} and live is None and where.endswith(".result"):
            return
        assert isinstance(live, dict), f"{where}: expected an object, got {live!r}"
        _match_object(recorded, live, ids, allow, where)
    elif isinstance(recorded, list):
        assert isinstance(live, list), f"{where}: expected a list, got {live!r}"
        if Allowance.INVALID_PARAMS_ERROR_INFO in allow:
            live = _without_invalid_params_info(recorded, live, where)
        assert len(live) == len(recorded), f"{where}: expected {len(recorded)} items, got {len(live)}: {live!r}"
        for index, (want, got) in enumerate(zip(recorded, live, strict=True)):
            match(want, got, ids, allow, f"{where}[{index}]")
    elif isinstance(recorded, bool) or recorded is None:
        assert live is recorded, f"{where}: expected {recorded!r}, got {live!r}"
    elif isinstance(recorded, int | float):
        _match_number(recorded, live, allow, where)
    elif isinstance(recorded, str):
        _match_string(recorded, live, ids, allow, where)
    else:
        raise TypeError(f"{where}: not a JSON value: {recorded!r}")


def _match_object(
    recorded: dict[str, Any], live: dict[str, Any], ids: Ids, allow: Collection[Allowance], where: str
) -> None:
    extra = [key for key in live if key not in recorded]
    if Allowance.EMPTY_METADATA in allow and "metadata" in extra and live["metadata"] == {}:
        extra.remove("metadata")
    if Allowance.PRINTED_DEFAULTS in allow:
        extra = [key for key in extra if live[key] not in PROTO_DEFAULTS]
    if Allowance.EMPTY_STRING_LIST in allow and recorded == {"list": []} and live == {}:
        return
    missing = [key for key in recorded if key not in live]
    assert not missing and not extra, f"{where}: missing keys {missing}, unexpected keys {extra} in {live!r}"
    if Allowance.KEY_ORDER not in allow:
        shared = [key for key in live if key in recorded]
        assert shared == list(recorded), f"{where}: keys in order {shared}, the kit has {list(recorded)}"
    for key, want in recorded.items():
        path = f"{where}.{key}"
        if Allowance.CARD_SIGNATURE in allow and where.endswith("]") and ".signatures[" in where:
            _match_signature_field(key, want, live[key], path)
        elif key in OPAQUE_FIELDS and isinstance(want, str) and want:
            ids.bind(want, live[key], path)
        else:
            match(want, live[key], ids, allow, path)


def _match_number(recorded: int | float, live: Any, allow: Collection[Allowance], where: str) -> None:
    assert isinstance(live, int | float) and not isinstance(live, bool), f"{where}: expected {recorded!r}, got {live!r}"
    if type(live) is not type(recorded):
        integral = isinstance(recorded, int) and isinstance(live, float) and live.is_integer()
        assert Allowance.INTEGRAL_FLOATS in allow and integral, f"{where}: expected {recorded!r}, got {live!r}"
    assert live == recorded, f"{where}: expected {recorded!r}, got {live!r}"


def _match_string(recorded: str, live: Any, ids: Ids, allow: Collection[Allowance], where: str) -> None:
    assert isinstance(live, str), f"{where}: expected a string like {recorded!r}, got {live!r}"
    if UUID.fullmatch(recorded):
        ids.bind(recorded, live, where)
    elif ISO_TIME.match(recorded):
        assert is_iso_time(live), f"{where}: expected an ISO timestamp, got {live!r}"
    else:
        expected = ids.translate(recorded)
        assert live == expected, f"{where}: expected {expected!r}, got {live!r}"


def _match_signature_field(key: str, recorded: Any, live: Any, where: str) -> None:
    if key == "protected":
        assert _jose_header(live) == _jose_header(recorded), f"{where}: protected header {_jose_header(live)}"
    else:
        assert key == "signature" and isinstance(live, str) and live, f"{where}: unexpected signature field {live!r}"


def _jose_header(encoded: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))


def _without_invalid_params_info(recorded: list[Any], live: list[Any], where: str) -> list[Any]:
    """Drop the SDK's INVALID_PARAMS ErrorInfo from error details, after checking it repeats the BadRequest."""
    violations = [
        {"field": v["field"], "message": v["description"]}
        for entry in recorded
        if isinstance(entry, dict) and entry.get("@type", "").endswith("google.rpc.BadRequest")
        for v in entry.get("fieldViolations", [])
    ]
    if not violations:
        return live
    kept = []
    for entry in live:
        if isinstance(entry, dict) and entry.get("reason") == "INVALID_PARAMS" and "@type" in entry:
            assert entry["@type"].endswith("google.rpc.ErrorInfo"), f"{where}: {entry!r}"
            assert entry.get("metadata", {}).get("errors") == violations, f"{where}: ErrorInfo {entry!r}"
        else:
            kept.append(entry)
    return kept
