"""`ids.ordered_id`: the text of a version 7 UUID (RFC 9562), ids made later sorting later."""

import os
import time
import uuid

from a2a_bridge.core.ids import ordered_id, uuid7_text

RANDOM = bytes(range(8))


def test_new_ids_are_version_7_uuids_written_as_uuid_writes_them() -> None:
    ids = [ordered_id() for _ in range(2_000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert str(parsed) == text


def test_an_id_holds_its_time_in_milliseconds_and_the_fraction_after() -> None:
    parsed = uuid.UUID(uuid7_text(1_765_000_000_123_456_789, RANDOM))
    assert parsed.int >> 80 == 1_765_000_000_123
    assert parsed.int >> 64 & 0xFFF == 456_789 * 4096 // 1_000_000
    assert parsed.int & (1 << 62) - 1 == int.from_bytes(RANDOM)


def test_the_random_bytes_fill_only_the_62_bits_after_the_variant() -> None:
    for pattern in (b"\x00" * 8, b"\xff" * 8):
        parsed = uuid.UUID(uuid7_text(0, pattern))
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert parsed.int & (1 << 62) - 1 == int.from_bytes(pattern) & (1 << 62) - 1


def test_ids_of_later_times_sort_later_as_text() -> None:
    times = [1_765_000_000_000_000_000 + step * 250 for step in range(0, 40_000, 7)]
    texts = [uuid7_text(at, b"\xff" * 8 if index % 2 else b"\x00" * 8) for index, at in enumerate(times)]
    assert texts == sorted(texts)
    assert len(set(texts)) == len(texts)


def test_a_new_id_carries_the_wall_clock_time_it_was_made_at() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid.UUID(ordered_id()).int >> 80
    assert before <= made <= time.time_ns() // 1_000_000


def test_replicas_whose_clocks_agree_or_are_30_s_apart_never_make_the_same_id() -> None:
    """Two replicas at the same instant (or one's clock stepped back onto it), and one 30 s ahead: the ids differ by
    their random bits alone where the times agree, and the skewed replica's sort after, never equal to, the other's."""
    now = 1_765_000_000_000_000_000
    here = {uuid7_text(now, os.urandom(8)) for _ in range(5_000)}
    there = {uuid7_text(now, os.urandom(8)) for _ in range(5_000)}
    ahead = {uuid7_text(now + 30_000_000_000, os.urandom(8)) for _ in range(5_000)}
    assert len(here | there | ahead) == 15_000
    assert max(here | there) < min(ahead)
