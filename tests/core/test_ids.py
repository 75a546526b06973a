"""`ids.random_id`: the text of a version 4 UUID, as `str(uuid.uuid4())` writes it."""

import uuid
from unittest import mock

from a2a_bridge.core.ids import random_id


def test_random_ids_are_version_4_uuids_written_as_uuid_writes_them() -> None:
    ids = [random_id() for _ in range(2_000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text


def test_the_same_random_bytes_give_the_id_uuid4_gives() -> None:
    for pattern in (b"\x00" * 16, b"\xff" * 16, bytes(range(16)), bytes(range(240, 256))):
        with mock.patch("os.urandom", return_value=pattern):
            assert random_id() == str(uuid.uuid4())
