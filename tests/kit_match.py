"""The kit tests' strict comparison: every difference fails except the named allowances a test passes.

The comparison itself (ids bound one to one, timestamps as timestamps) is the product's, `a2a_bridge.capture.compare`; here it
runs strictly (key order and number form count), and each `Allowance` names one deliberate difference between our
server and the kit, with the reason it is acceptable.
"""

import base64
import json
from collections.abc import Callable, Collection
from enum import Enum
from typing import Any

from a2a_bridge.capture.compare import Difference, Ids, compare, path_segments
from a2a_bridge.core.task_status import WHO_MUST_ACT

__all__ = ["Allowance", "Ids", "match", "tolerated"]

PROTO_DEFAULTS: tuple[object, ...] = ("", [], {})
"""What protobuf's JSON mapping prints for a string, repeated or map field left at its default."""


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
    TASK_NOT_CANCELABLE_409 = (
        "The specification's error table (section 5.4) maps TaskNotCancelableError to HTTP 409 Conflict, the status "
        "and the AIP-193 body's `code`; the kit's server answers 400."
    )
    PLAIN_JSON_BY_DEFAULT = (
        "A request that names no media type (no JSON Accept, no body) is answered application/json, the type the "
        "specification's binding sections (9.1, 11.1) name and the TCK checks; the kit's server answers "
        "application/a2a+json. A request that sends or accepts application/a2a+json gets that type."
    )
    CARD_SIGNATURE = (
        "The card signature covers the card's interface URLs, which are the live server's, so its value differs; "
        "the protected header is the same JSON with keys in PyJWT's order. Tests verify the live signature instead."
    )
    WHO_MUST_ACT_EXTENSION = (
        "Every card declares the bridge's optional who-must-act extension (docs/who-must-act.md) as its only "
        "`capabilities.extensions` entry; the kit's cards declare none, and clients that do not know it ignore it."
    )
    ERROR_HINTS = (
        "The -32601 and -32009 messages keep the kit's text and go on to say what to do: a 0.3 method's 1.0 name, the "
        "A2A-Version header to send."
    )
    WHO_MUST_ACT_METADATA = (
        "An AUTH_REQUIRED status message says who must act under the who-must-act key of its `metadata`, which holds "
        "nothing else (the deployer's staging deploy: an operator approves); the kit's message has no metadata."
    )


def _jose_header(encoded: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))


def _last_key(difference: Difference) -> str:
    return path_segments(difference.path)[-1]


def _repeats_bad_request(difference: Difference) -> bool:
    """An extra INVALID_PARAMS ErrorInfo whose metadata repeats the field violations of the recorded BadRequest."""
    entry = difference.live
    if difference.kind != "unexpected item" or difference.parent is None or not isinstance(entry, dict):
        return False
    if entry.get("reason") != "INVALID_PARAMS" or not str(entry.get("@type", "")).endswith("google.rpc.ErrorInfo"):
        return False
    violations = [
        {"field": v["field"], "message": v["description"]}
        for recorded in difference.parent[0]
        if isinstance(recorded, dict) and str(recorded.get("@type", "")).endswith("google.rpc.BadRequest")
        for v in recorded.get("fieldViolations", [])
    ]
    return bool(violations) and entry.get("metadata", {}).get("errors") == violations


def _declares_who_must_act(difference: Difference) -> bool:
    """Card capabilities whose extra `extensions` is the optional who-must-act extension alone."""
    extensions = difference.live
    return (
        difference.kind == "unexpected key"
        and path_segments(difference.path)[-2:] == ["capabilities", "extensions"]
        and isinstance(extensions, list)
        and len(extensions) == 1
        and extensions[0].get("uri") == WHO_MUST_ACT
        and not extensions[0].get("required", False)
    )


def _says_who_must_act(difference: Difference) -> bool:
    """A status message whose extra `metadata` holds the who-must-act key alone."""
    return (
        difference.kind == "unexpected key"
        and path_segments(difference.path)[-3:] == ["status", "message", "metadata"]
        and isinstance(difference.live, dict)
        and list(difference.live) == [WHO_MUST_ACT]
    )


def _signature_field(difference: Difference) -> bool:
    if ".signatures[" not in difference.path or difference.kind != "value":
        return False
    key = _last_key(difference)
    if key == "protected":
        return _jose_header(difference.live) == _jose_header(difference.recorded)
    return key == "signature" and isinstance(difference.live, str) and bool(difference.live)


TOLERATES: dict[Allowance, Callable[[Difference], bool]] = {
    Allowance.KEY_ORDER: lambda d: d.kind == "key order",
    Allowance.INTEGRAL_FLOATS: lambda d: d.kind == "number form" and isinstance(d.recorded, int),
    Allowance.EMPTY_METADATA: lambda d: d.kind == "unexpected key" and _last_key(d) == "metadata" and d.live == {},
    Allowance.EMPTY_STRING_LIST: lambda d: d.kind == "missing key" and d.parent == ({"list": []}, {}),
    Allowance.INVALID_PARAMS_ERROR_INFO: _repeats_bad_request,
    Allowance.PRINTED_DEFAULTS: lambda d: d.kind == "unexpected key" and d.live in PROTO_DEFAULTS,
    Allowance.TASK_NOT_CANCELABLE_409: lambda d: (
        d.kind == "value" and _last_key(d) == "code" and (d.recorded, d.live) == (400, 409)
    ),
    Allowance.PLAIN_JSON_BY_DEFAULT: lambda d: False,
    Allowance.CARD_SIGNATURE: _signature_field,
    Allowance.WHO_MUST_ACT_EXTENSION: _declares_who_must_act,
    Allowance.WHO_MUST_ACT_METADATA: _says_who_must_act,
    Allowance.ERROR_HINTS: lambda d: (
        d.kind == "value" and _last_key(d) == "message" and isinstance(d.recorded, str) and isinstance(d.live, str)
        and d.live.startswith(f"{d.recorded}: ")
    ),
}
"""Which JSON differences each allowance tolerates (PLAIN_JSON_BY_DEFAULT is about the response's head alone, which
`tests.kit_session.KitSession.check_head` compares, as it does 409 for TASK_NOT_CANCELABLE_409)."""


def tolerated(difference: Difference, allow: Collection[Allowance]) -> bool:
    return any(TOLERATES[allowance](difference) for allowance in allow)


def match(recorded: Any, live: Any, ids: Ids, allow: Collection[Allowance] = (), where: str = "$") -> None:
    """Assert that `live` has the structure and values of `recorded`, binding ids; failures name the JSON path."""
    left = [d for d in compare(recorded, live, ids, strict=True, path=where) if not tolerated(d, allow)]
    assert not left, "; ".join(str(d) for d in left)
