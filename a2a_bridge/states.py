"""The state table of MAPPING.md as data, with the pure projections that read it."""

from dataclasses import dataclass
from enum import Enum

from a2a.types import TaskState


class StateClass(str, Enum):
    """How the A2A specification groups a state."""

    ACTIVE = "active"
    INTERRUPTED = "interrupted"
    TERMINAL = "terminal"


@dataclass(frozen=True)
class StateRow:
    """One row of the table: an A2A state and what the other two views show for it."""

    state_class: StateClass
    phase: str
    terminal_reason: str | None
    claim_state: str


STATE_TABLE: dict[str, StateRow] = {
    "TASK_STATE_SUBMITTED": StateRow(StateClass.ACTIVE, "processing", None, "pending"),
    "TASK_STATE_WORKING": StateRow(StateClass.ACTIVE, "processing", None, "claimed"),
    "TASK_STATE_INPUT_REQUIRED": StateRow(StateClass.INTERRUPTED, "idle", None, "awaiting_reply"),
    "TASK_STATE_AUTH_REQUIRED": StateRow(StateClass.INTERRUPTED, "processing", None, "awaiting_reply"),
    "TASK_STATE_COMPLETED": StateRow(StateClass.TERMINAL, "terminal", "completed", "completed"),
    "TASK_STATE_FAILED": StateRow(StateClass.TERMINAL, "terminal", "errored", "failed"),
    "TASK_STATE_CANCELED": StateRow(StateClass.TERMINAL, "terminal", "completed", "cancelled"),
    "TASK_STATE_REJECTED": StateRow(StateClass.TERMINAL, "terminal", "restricted", "failed"),
}


class UnknownStateError(ValueError):
    """A state that has no view: TASK_STATE_UNSPECIFIED or a name outside the nine."""


def row_for(state: "int | str") -> StateRow:
    """The table row of an A2A state given by enum number or name."""
    if isinstance(state, int):
        try:
            name = TaskState.Name(state)
        except ValueError as e:
            raise UnknownStateError(f"unknown task state number {state}") from e
    else:
        name = state
    row = STATE_TABLE.get(name)
    if row is None:
        raise UnknownStateError(f"task state {name!r} has no view")
    return row


def is_terminal(state: "int | str") -> bool:
    """True for the four states after which a task never changes."""
    return row_for(state).state_class is StateClass.TERMINAL


def is_interrupted(state: "int | str") -> bool:
    """True for INPUT_REQUIRED and AUTH_REQUIRED."""
    return row_for(state).state_class is StateClass.INTERRUPTED


STATE_NAMES = {number: name for name, number in TaskState.items()}
"""Each state's wire name, one string each: `TaskState.Name` makes a new one per call, which records kept it."""


def state_name(state: int) -> str:
    """The wire name of an A2A state number."""
    name = STATE_NAMES.get(state)
    return name if name is not None else TaskState.Name(state)
