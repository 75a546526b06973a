"""New ids: a version 7 UUID as text (RFC 9562: the Unix time in milliseconds, then its sub-millisecond fraction in
the 12 bits of `rand_a`, then 62 random bits), so that ids made later sort later. The stores key tasks, their records,
event logs and push configs by task id: a random id puts each new task's rows on a random page of every B-tree (a
page read and a page written to the WAL per table and save), a time-ordered one on the last few pages of each."""

import os
import time

VERSION_7 = 0x7000 << 64 | 0x8000 << 48
"""Version 7 (Unix time ordered), variant RFC 9562."""
RANDOM_BITS = (1 << 62) - 1
"""`rand_b`: the 62 random bits after the variant."""


def uuid7_text(unix_ns: int, random: bytes) -> str:
    """The version 7 UUID of a time (nanoseconds since the Unix epoch) and 8 random bytes, lower-case hex in its five
    dashed groups: 48 bits of milliseconds, 12 bits of the fraction of the millisecond, 62 of the random bits."""
    milliseconds, rest = divmod(unix_ns, 1_000_000)
    fraction = rest * 4096 // 1_000_000
    value = milliseconds << 80 | fraction << 64 | int.from_bytes(random) & RANDOM_BITS
    digits = (value | VERSION_7).to_bytes(16).hex()
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def ordered_id() -> str:
    """A new id: the version 7 UUID of the wall clock's time now and 8 bytes from the system's random source."""
    return uuid7_text(time.time_ns(), os.urandom(8))
