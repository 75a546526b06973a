"""The state table in code against the table of ../shared/MAPPING.md, row by row."""

import re

import pytest
from a2a.types import TaskState

from a2a_bridge.core.states import STATE_TABLE, UnknownStateError, is_terminal, row_for
from tests.support import SHARED

NINE = [name for name in TaskState.keys()]


def mapping_rows() -> dict[str, list[str]]:
    path = SHARED / "MAPPING.md"
    if not path.is_file():
        pytest.skip("../shared/MAPPING.md is not beside the repository")
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(TASK_STATE_[A-Z_]+)`", cells[0]) if cells else None
        if match and len(cells) >= 6:
            rows[match.group(1)] = cells
    return rows


@pytest.mark.parametrize("name", NINE)
def test_each_of_the_nine_states_matches_mapping(name: str) -> None:
    rows = mapping_rows()
    if name == "TASK_STATE_UNSPECIFIED":
        assert name not in rows
        with pytest.raises(UnknownStateError):
            row_for(name)
        with pytest.raises(UnknownStateError):
            row_for(TaskState.TASK_STATE_UNSPECIFIED)
        return
    cells = rows[name]
    row = row_for(name)
    assert row.state_class.value == cells[1]
    assert row.phase == cells[2]
    reason = cells[3].split(" ")[0]
    assert (row.terminal_reason or "null") == reason
    assert cells[5].startswith(row.claim_state)
    assert row_for(TaskState.Value(name)) == row


def test_unknown_names_and_numbers_are_errors() -> None:
    for bad in ("TASK_STATE_PAUSED", "completed", ""):
        with pytest.raises(UnknownStateError):
            row_for(bad)
    with pytest.raises(UnknownStateError):
        row_for(99)


def test_table_covers_exactly_eight_states_and_four_are_terminal() -> None:
    assert set(STATE_TABLE) == set(NINE) - {"TASK_STATE_UNSPECIFIED"}
    assert sorted(n for n in STATE_TABLE if is_terminal(n)) == [
        "TASK_STATE_CANCELED", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED",
    ]
