"""core.history_length: the same task as the SDK's `apply_history_length` for every length, without copying the
history it leaves out."""

from a2a.types import GetTaskRequest, Message, Part, Task
from a2a.utils.task import apply_history_length
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_bridge.core.history_length import with_history_length
from tests.store.test_proto_json import tasks


@settings(max_examples=300, deadline=None)
@given(tasks(), st.integers(-2, 6))
def test_the_history_asked_for_is_the_sdks(task: Task, length: int) -> None:
    assert with_history_length(task, length) == apply_history_length(task, GetTaskRequest(history_length=length))


def test_a_task_with_no_more_history_than_asked_is_answered_as_it_is() -> None:
    task = Task(id="t", context_id="c", history=[Message(message_id="m", parts=[Part(text="x")])])
    assert with_history_length(task, 1) is task
    assert with_history_length(task, -1) is task


def test_the_copy_leaves_the_stored_task_whole() -> None:
    history = [Message(message_id=f"m{n}", parts=[Part(text="y" * 10)]) for n in range(5)]
    task = Task(id="t", context_id="c", history=history)
    short = with_history_length(task, 2)
    assert [m.message_id for m in short.history] == ["m3", "m4"]
    assert len(task.history) == 5
    short.history[0].message_id = "changed"
    assert task.history[3].message_id == "m3"
