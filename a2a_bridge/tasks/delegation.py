"""On whose behalf a new task is created: an agent principal names the parent task it works on for a person, and the
bridge verifies it before the task exists (docs/security.md, "Delegation")."""

from a2a.server.context import ServerCallContext
from a2a.types import Message
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from a2a_bridge.core import errors
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.states import STATE_TABLE, StateClass
from a2a_bridge.store.ledger import Ledger

ON_BEHALF_OF = "urn:a2a-bridge:ext:on-behalf-of:v1"
"""The message metadata key: `{"parentTask": "<agent>/<task id>"}`."""
EXTENSION_FIELD = f"message.metadata.{ON_BEHALF_OF}"
PARENT_FIELD = f"{EXTENSION_FIELD}.parentTask"
REFUSED = (
    "parentTask must name an active task on this bridge, as <agent>/<task id>, whose responsible user is a person this "
    "agent principal acts for, and which that person or this agent principal created"
)
"""One answer for every parent that does not qualify, so that the refusal never tells whether a task exists."""


def refused() -> InvalidParamsError:
    return errors.invalid_field(PARENT_FIELD, REFUSED)


def parent_task(message: Message) -> str | None:
    """The parent task a message names ('' when the extension's value is not an object with a string parentTask);
    None when the message does not use the extension."""
    if not message.HasField("metadata") or ON_BEHALF_OF not in message.metadata:
        return None
    value = MessageToDict(message.metadata).get(ON_BEHALF_OF)
    parent = value.get("parentTask") if isinstance(value, dict) else None
    return parent if isinstance(parent, str) else ""


async def responsible_user(message: Message, context: ServerCallContext, ledger: Ledger) -> str | None:
    """The person a new task is for when an agent principal creates it on their behalf, None when its creator is its
    responsible user; raises -32602 naming the field when the request does not qualify.

    An agent principal must name a parent task; the parent qualifies when it exists on this bridge, has not ended,
    its responsible user is a person the configuration says this agent acts for (`acts_for`), and its owner is that
    person or this agent (a task it created for that person earlier). Nothing else may use the extension."""
    parent = parent_task(message)
    principal = context.user if isinstance(context.user, Principal) else None
    if principal is None or principal.kind != "agent":
        if parent is not None:
            raise errors.invalid_field(EXTENSION_FIELD, "only an agent principal creates a task on a person's behalf")
        return None
    if parent is None:
        raise errors.invalid_field(
            EXTENSION_FIELD, "an agent principal creates a task only on a person's behalf: name the parent task"
        )
    agent, slash, task_id = parent.partition("/")
    if not slash or not agent or not task_id:
        raise refused()
    record = await ledger.get(task_id)
    if (
        record is None
        or record.agent != agent
        or record.responsible_user not in principal.acts_for
        or record.owner not in (principal.name, record.responsible_user)
        or STATE_TABLE.get(record.state, STATE_TABLE["TASK_STATE_COMPLETED"]).state_class == StateClass.TERMINAL
    ):
        raise refused()
    return record.responsible_user
