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


ENDED_BY_CLAIM: dict[str, str] = {
    row.claim_state: name for name, row in reversed(STATE_TABLE.items()) if row.state_class is StateClass.TERMINAL
}
"""The A2A state that stands for each terminal claim state (the first row of the table that maps to it)."""

NAMES: dict[int, str] = {number: name for name, number in TaskState.items()}
"""The wire name of each A2A state number (one string object per state)."""
ROWS: dict[int, StateRow] = {number: STATE_TABLE[name] for number, name in NAMES.items() if name in STATE_TABLE}
"""The table row of each state number that has one."""


class UnknownStateError(ValueError):
    """A state that has no view: TASK_STATE_UNSPECIFIED or a name outside the nine."""


def row_for(state: "int | str") -> StateRow:
    """The table row of an A2A state given by enum number or name."""
    if isinstance(state, int):
        row = ROWS.get(state)
        if row is not None:
            return row
        if state not in NAMES:
            raise UnknownStateError(f"unknown task state number {state}")
        name = NAMES[state]
    else:
        name = state
    row = STATE_TABLE.get(name)
    if row is None:
        raise UnknownStateError(f"task state {name!r} has no view")
    return row


TERMINAL_BY_NUMBER: dict[int, bool] = {number: row.state_class is StateClass.TERMINAL for number, row in ROWS.items()}
"""Whether each state number that has a row is terminal (the question every event asks, answered by one lookup)."""


def is_terminal(state: "int | str") -> bool:
    """True for the four states after which a task never changes."""
    terminal = TERMINAL_BY_NUMBER.get(state) if type(state) is int else None
    return terminal if terminal is not None else row_for(state).state_class is StateClass.TERMINAL


def is_interrupted(state: "int | str") -> bool:
    """True for INPUT_REQUIRED and AUTH_REQUIRED."""
    return row_for(state).state_class is StateClass.INTERRUPTED


def state_name(state: int) -> str:
    """The wire name of an A2A state number, one shared string per state (`TaskState.Name` makes a new one per call,
    which records kept); ValueError for a number that names none, as `TaskState.Name`."""
    name = NAMES.get(state)
    return name if name is not None else TaskState.Name(state)
