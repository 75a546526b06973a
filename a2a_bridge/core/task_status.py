"""The Common Agent Specification's Task Status: the coarse view polling consumers read, projected from a task."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from a2a.types import AgentExtension, Task
from a2a.types.a2a_pb2 import TASK_STATE_AUTH_REQUIRED
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import ListValue, Struct

from a2a_bridge.core.clock import iso
from a2a_bridge.core.states import row_for

WHO_MUST_ACT = "urn:a2a-bridge:ext:who-must-act:v1"
"""The extension whose key, in an AUTH_REQUIRED status message's metadata, says who must act."""

ANONYMOUS = "anonymous"


def who_must_act_extension() -> AgentExtension:
    """The card's declaration of the bridge's who-must-act extension (docs/who-must-act.md)."""
    return AgentExtension(
        uri=WHO_MUST_ACT,
        description=(
            "In TASK_STATE_AUTH_REQUIRED, the status message's metadata under this URI says who must act: "
            "{actor: user|operator|host, action, user?, provider?}, or a list of them."
        ),
        required=False,
    )


@dataclass(frozen=True)
class Notification:
    """An outstanding call to action for the responsible user."""

    kind: str
    since: datetime
    provider: str | None = None

    def as_json(self) -> dict[str, str]:
        body = {"kind": self.kind, "since": iso(self.since)}
        if self.provider is not None:
            body["provider"] = self.provider
        return body


@dataclass(frozen=True)
class ActionRequest:
    """One entry of the who-must-act metadata: who must do what before the task can go on."""

    actor: str
    action: str
    user: str | None = None
    provider: str | None = None


def action_requests(task: Task) -> list[ActionRequest]:
    """The who-must-act entries of the task's current status message (a dict or a list of dicts)."""
    if task.status.state != TASK_STATE_AUTH_REQUIRED or not task.status.HasField("message"):
        return []
    metadata = task.status.message.metadata
    if WHO_MUST_ACT not in metadata:
        return []
    raw: Any = _plain(metadata[WHO_MUST_ACT])
    entries = raw if isinstance(raw, list) else [raw]
    requests = []
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("actor"), str) and isinstance(entry.get("action"), str):
            requests.append(
                ActionRequest(
                    actor=entry["actor"],
                    action=entry["action"],
                    user=entry.get("user") if isinstance(entry.get("user"), str) else None,
                    provider=entry.get("provider") if isinstance(entry.get("provider"), str) else None,
                )
            )
    return requests


def _plain(value: Any) -> Any:
    """A protobuf Struct value as plain Python."""
    if isinstance(value, Struct | ListValue):
        return MessageToDict(value)
    return value


def wanted_notifications(task: Task) -> list[tuple[str, str | None]]:
    """(kind, provider) pairs the responsible user must act on: every `actor: user` step is theirs, whoever its `user`
    names (who answers comes from who the task is for, never from what the requester wrote); operators' and hosts'
    actions raise nothing."""
    wanted: list[tuple[str, str | None]] = []
    key: tuple[str, str | None]
    for request in action_requests(task):
        if request.actor != "user":
            continue
        if request.action == "authorize_provider" and request.provider:
            key = ("user_auth_required", request.provider)
        elif request.action == "review":
            key = ("review_required", None)
        else:
            continue
        if key not in wanted:
            wanted.append(key)
    return wanted


def next_notifications(previous: list[Notification], task: Task, responsible_user: str, now: datetime) -> list[Notification]:
    """The responsible user's notifications after a change: outstanding ones keep their `since`, new ones start now,
    resolved ones go. Every user step is the responsible user's, so `responsible_user` does not filter them."""
    wanted = wanted_notifications(task)
    if not wanted:
        return []
    kept = {(n.kind, n.provider): n for n in previous}
    result = [kept.get(key) or Notification(key[0], now, key[1]) for key in wanted]
    return sorted(result, key=lambda n: n.since)


class StatusRecord(Protocol):
    """What the status view reads of the bridge's record of a task (`ledger.TaskRecord`)."""

    task_id: str
    agent: str
    responsible_user: str
    created_at: datetime
    revision: int
    notifications: list[Notification]
    idle_expires_at: datetime | None


def status_object(task: Task, record: StatusRecord) -> dict[str, Any]:
    """The Task Status object of the Common Agent Specification; an unknown A2A state raises UnknownStateError."""
    row = row_for(task.status.state)
    return {
        "id": task.id,
        "agent": record.agent,
        "responsible_user": record.responsible_user or ANONYMOUS,
        "created_at": iso(record.created_at),
        "status": {
            "phase": row.phase,
            "terminal_reason": row.terminal_reason,
            "revision": str(record.revision),
            "notifications": [n.as_json() for n in record.notifications] if row.phase != "terminal" else [],
            "idle_expires_at": iso(record.idle_expires_at) if record.idle_expires_at and row.phase == "idle" else None,
        },
    }
