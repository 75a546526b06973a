"""A2A errors as the kit shapes them: the SDK's error classes with the metadata clients need."""

from a2a.types import Task
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

from a2a_bridge.core.claims import ClaimError
from a2a_bridge.core.states import state_name

SUPPORTED_VERSION = "1.0"


def task_not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError("Task not found", data={"taskId": task_id})


def task_not_cancelable(task: Task) -> TaskNotCancelableError:
    return TaskNotCancelableError(
        "Task cannot be canceled", data={"taskId": task.id, "state": state_name(task.status.state)}
    )


def task_is_terminal(task: Task) -> UnsupportedOperationError:
    """A message, subscription or queued input aimed at a task that has ended."""
    return UnsupportedOperationError(
        "This operation is not supported", data={"taskId": task.id, "state": state_name(task.status.state)}
    )


def invalid_field(field: str, description: str) -> InvalidParamsError:
    """-32602 naming one field, as a google.rpc.BadRequest field violation."""
    return InvalidParamsError(
        "Invalid parameters", data={"errors": [{"field": field, "message": description}]}
    )


def content_type_not_supported(media_type: str) -> ContentTypeNotSupportedError:
    return ContentTypeNotSupportedError("Content type not supported", data={"mediaType": media_type})


def push_not_supported() -> PushNotificationNotSupportedError:
    return PushNotificationNotSupportedError("Push notifications are not supported")


def streaming_not_supported() -> UnsupportedOperationError:
    return UnsupportedOperationError("Streaming is not supported by this agent")


VERSION_HINT = f"Protocol version not supported: send the header A2A-Version: {SUPPORTED_VERSION}"
"""-32009's message, which says what to send (gRPC callers send it as the metadata a2a-version)."""


def version_not_supported(requested: str | None) -> VersionNotSupportedError:
    shown = requested if requested else "0.3 (no header)"
    return VersionNotSupportedError(VERSION_HINT, data={"requested": shown, "supported": SUPPORTED_VERSION})


def agent_failed(task_id: str) -> InternalError:
    """What a client is told when an agent raised: a generic error naming the task, never the exception."""
    return InternalError("Internal error", data={"taskId": task_id})


def needs_reconciliation(task: Task) -> UnsupportedOperationError:
    """Input to a task that waits for an operator to reconcile it."""
    return UnsupportedOperationError(
        "An operator must reconcile this task first",
        data={"taskId": task.id, "state": state_name(task.status.state), "claimState": "needs_reconciliation"},
    )


def claim_refused(task: Task, refused: ClaimError) -> UnsupportedOperationError:
    """A turn the claim rules refuse (a recorded cancellation, a task being reconciled)."""
    return UnsupportedOperationError(
        "This operation is not supported",
        data={"taskId": task.id, "state": state_name(task.status.state), "claim": refused.reason},
    )


def no_session() -> InternalError:
    """A replica that lost its database session takes no turn until it has a new one."""
    return InternalError(
        "This replica has lost its database session; send the message to another replica",
        data={"reason": "no_session"},
    )
