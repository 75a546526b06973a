"""Random ids: a version 4 UUID as text, as `str(uuid.uuid4())` writes it from the same 16 random bytes, built
without the `UUID` object (half the work; two per new task)."""

import os

VERSION_BITS = 0xF000 << 64 | 0xC000 << 48
"""The version nibble and the variant bits of a UUID read as a 128-bit integer."""
VERSION_4 = 0x4000 << 64 | 0x8000 << 48
"""Version 4 (random), variant RFC 4122."""


def random_id() -> str:
    """A new random UUID, lower-case hex in its five dashed groups."""
    digits = (int.from_bytes(os.urandom(16)) & ~VERSION_BITS | VERSION_4).to_bytes(16).hex()
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
