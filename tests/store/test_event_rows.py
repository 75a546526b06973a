"""The event log's row format: the events of a save in one row, read back one by one; rows of one event, as every
row was written before, read as they were."""

import orjson
from hypothesis import given
from hypothesis import strategies as st

from a2a_bridge.store.event_rows import log_rows, row_events

bodies = st.dictionaries(st.text(), st.text() | st.integers(-(2**63), 2**64 - 1) | st.none(), max_size=3).map(
    lambda value: orjson.dumps({"statusUpdate": value}).decode()
)
"""Event bodies as the log writes them: compact JSON objects, any text in their strings (line breaks escaped)."""


@given(st.lists(st.tuples(st.integers(1, 3), bodies), max_size=6))
def test_a_saves_events_come_back_from_its_row_each_under_its_revision(steps: list[tuple[int, str]]) -> None:
    log, revision = [], 0
    for gap, body in steps:
        revision += gap
        log.append((revision, body))
    rows = log_rows("task", log)
    assert len(rows) == min(len(log), 1), "one row per save at the most"
    assert [event for row in rows for event in row_events(row["seq"], row["body"])] == log
    assert all(row["seq"] == log[-1][0] and row["task_id"] == "task" for row in rows), "under the save's last revision"


def test_a_row_of_one_event_is_the_event_as_rows_were_written_before() -> None:
    body = '{"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_COMPLETED"}}}'
    assert log_rows("t", [(7, body)]) == ({"task_id": "t", "seq": 7, "body": body},)
    assert row_events(7, body) == [(7, body)]
    assert row_events(3, "2 {}\n3 {\"a\":\"1 2\"}") == [(2, "{}"), (3, '{"a":"1 2"}')]
