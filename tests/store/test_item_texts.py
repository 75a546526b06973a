"""store.item_texts: an item's text is `column_json(to_dict(item))` whether converted or reused; only plain, small
items are kept, at most the number asked; the last status's text is known again for a status of the same content
only, and only a plain one's."""

import json

from a2a.types import Artifact, Message, Part, TaskState, TaskStatus

from a2a_bridge.store.column_json import column_json
from a2a_bridge.store.item_texts import KEPT_BYTES, ItemTexts, LastText
from a2a_bridge.store.proto_json import to_dict


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
