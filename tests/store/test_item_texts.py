"""store.item_texts: an item's text is `column_json(to_dict(item))` whether converted or reused; only plain, small
items are kept, at most the number asked; the last status's text is known again for a status of the same content
only, and only a plain one's; a task answered with the texts kept of its items is written byte for byte as its
conversion."""

import json

import orjson
from a2a.types import Artifact, Message, Part, Task, TaskState, TaskStatus

from a2a_bridge.store.column_json import column_json
from a2a_bridge.store.item_texts import KEPT_BYTES, ItemTexts, LastText, TaskTexts, task_dict
from a2a_bridge.store.proto_json import to_dict, to_plain_dict


def message(text: str) -> Message:
    return Message(message_id="m-1", role="ROLE_USER", parts=[Part(text=text)], context_id="c")


def test_a_text_reused_is_the_text_converted() -> None:
    texts = ItemTexts()
    first, again, other = message("hello"), message("hello"), message("other")
    assert texts.text(first) == texts.text(again) == column_json(to_dict(first))
    assert texts.text(other) == column_json(to_dict(other))
    assert len(texts._texts) == 2
    assert json.loads(texts.array([first, other]).text) == [to_dict(first), to_dict(other)]


def test_only_plain_small_items_are_kept_and_at_most_kept() -> None:
    texts = ItemTexts(kept=2)
    large = message("x" * (KEPT_BYTES + 1))
    structured = Artifact(artifact_id="a")
    structured.metadata.update({"b": 1, "a": "z"})
    assert texts.text(large) == column_json(to_dict(large))
    assert texts.text(structured) == column_json(to_dict(structured))
    assert texts._texts == {}
    for index in range(3):
        texts.text(message(str(index)))
    assert len(texts._texts) == 2
    assert message("0").SerializeToString(deterministic=True) not in texts._texts


def test_the_last_text_is_known_for_the_same_content_only() -> None:
    last = LastText()
    done = TaskStatus(state=TaskState.TASK_STATE_COMPLETED, message=message("done"))
    assert last.known(done) is None
    assert last.text(done) == column_json(to_dict(done))
    copy = TaskStatus()
    copy.CopyFrom(done)
    assert last.known(copy) == column_json(to_dict(done))
    assert last.known(TaskStatus(state=TaskState.TASK_STATE_FAILED, message=message("done"))) is None
    structured = TaskStatus(state=TaskState.TASK_STATE_COMPLETED, message=message("x"))
    structured.message.metadata.update({"b": 1, "a": "z"})
    assert last.text(structured) == column_json(to_dict(structured))
    assert last.known(structured) is None and last.known(done) is None


def task_with(artifact_text: str, history_text: str) -> Task:
    task = Task(id="t-1", context_id="c")
    task.status.state = TaskState.TASK_STATE_COMPLETED
    task.status.timestamp.FromSeconds(1_700_000_000)
    task.artifacts.add(artifact_id="a-1", parts=[Part(text=artifact_text)])
    task.history.append(message(history_text))
    return task


def test_a_task_answered_with_kept_texts_is_written_as_converted() -> None:
    texts = TaskTexts()
    task = task_with("result", "hello")
    assert task_dict(task, texts) == to_plain_dict(task)
    texts.artifacts.array(task.artifacts[:])
    texts.history.array(task.history[:])
    written, plain = task_dict(task, texts)
    assert plain
    assert [type(item) for item in written["artifacts"] + written["history"]] == [orjson.Fragment, orjson.Fragment]
    assert orjson.dumps({"task": written}) == orjson.dumps({"task": to_plain_dict(task)[0]})


def test_a_kept_text_with_null_or_a_task_that_is_not_plain_is_converted() -> None:
    texts = TaskTexts()
    task = task_with("null", "hello")
    texts.artifacts.array(task.artifacts[:])
    texts.history.array(task.history[:])
    written, plain = task_dict(task, texts)
    assert plain and isinstance(written["artifacts"][0], dict) and isinstance(written["history"][0], orjson.Fragment)
    assert orjson.dumps(written) == orjson.dumps(to_plain_dict(task)[0])
    task.metadata.update({"b": 1, "a": "z"})
    assert task_dict(task, texts) == to_plain_dict(task) and not task_dict(task, texts)[1]
    noted = task_with("result", "hello")
    noted.status.message.metadata.update({"b": 1})
    assert task_dict(noted, texts) == to_plain_dict(noted)
