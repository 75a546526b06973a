"""The specification's table of A2A errors per binding (section 5.4, "Error Code Mappings"), keyed by the ErrorInfo
reason each error carries; the SDK's own tables differ from it (TaskNotCancelableError as 400, not 409, ...)."""

from dataclasses import dataclass

from a2a.utils.errors import A2A_ERROR_REASONS, A2AError

from a2a_bridge.store.store_faults import StoreUnavailable


@dataclass(frozen=True)
class ErrorCodes:
    """One A2A error as each binding represents it."""

    jsonrpc: int
    grpc_status: str
    """The gRPC status name, also the `status` of an HTTP+JSON (AIP-193) error body."""
    http: int


SPEC_TABLE: dict[str, ErrorCodes] = {
    "TASK_NOT_FOUND": ErrorCodes(-32001, "NOT_FOUND", 404),
    "TASK_NOT_CANCELABLE": ErrorCodes(-32002, "FAILED_PRECONDITION", 409),
    "PUSH_NOTIFICATION_NOT_SUPPORTED": ErrorCodes(-32003, "UNIMPLEMENTED", 400),
    "UNSUPPORTED_OPERATION": ErrorCodes(-32004, "UNIMPLEMENTED", 400),
    "CONTENT_TYPE_NOT_SUPPORTED": ErrorCodes(-32005, "INVALID_ARGUMENT", 415),
    "INVALID_AGENT_RESPONSE": ErrorCodes(-32006, "INTERNAL", 502),
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED": ErrorCodes(-32007, "FAILED_PRECONDITION", 400),
    "EXTENSION_SUPPORT_REQUIRED": ErrorCodes(-32008, "FAILED_PRECONDITION", 400),
    "VERSION_NOT_SUPPORTED": ErrorCodes(-32009, "UNIMPLEMENTED", 400),
}
"""Reason (google.rpc.ErrorInfo) to the codes of the specification's table, for the nine A2A-specific errors."""


STORE_UNAVAILABLE = ErrorCodes(-32603, "UNAVAILABLE", 503)
"""The bridge's "store unavailable" (`store_faults.StoreUnavailable`): an internal error on JSON-RPC, and on the other
bindings the status that tells a client to try again later, as the bridge's own endpoints answer it."""


def codes_for(error: A2AError) -> ErrorCodes | None:
    """The table's codes for an A2A-specific error and for "store unavailable"; None for the generic JSON-RPC ones
    (invalid params, internal...)."""
    if isinstance(error, StoreUnavailable):
        return STORE_UNAVAILABLE
    reason = A2A_ERROR_REASONS.get(type(error))
    return SPEC_TABLE.get(reason) if reason is not None else None
