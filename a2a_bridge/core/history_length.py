"""A task with the history a request asks for (`historyLength`), copied without the messages it leaves out: the SDK's
`apply_history_length` copies the whole task, history included, and then drops the history, so a reply that asks for
none of a large task's history held a second copy of all of it."""

from a2a.types import Task
from google.protobuf.descriptor import FieldDescriptor

HISTORY = "history"


def with_history_length(task: Task, length: int) -> Task:
    """The task itself where it holds at most `length` messages or `length` is negative (as the SDK answers), else
    `copy_with_history`."""
    if length < 0 or len(task.history) <= length:
        return task
    return copy_with_history(task, length)


def copy_with_history(task: Task, length: int) -> Task:
    """A copy of every field of the task but its history, and of the last `length` messages of that (none when
    `length` is 0 or less)."""
    copy = Task()
    for field, value in task.ListFields():
        if field.name == HISTORY:
            continue
        if field.is_repeated:
            getattr(copy, field.name).extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(copy, field.name).CopyFrom(value)
        else:
            setattr(copy, field.name, value)
    if length > 0:
        copy.history.extend(task.history[-length:])
    return copy
