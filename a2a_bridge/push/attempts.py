"""A delivery's attempts: the id each carries (`webhook-id`: one event's delivery to one push config, the same on
every attempt and every replica, so that receivers can deduplicate by it), and when a failed one is made again."""

import hashlib
import uuid
from dataclasses import dataclass

IDS = uuid.UUID("4f2b6d0e-2a41-4c2e-9d8e-a2abe1d9e0b1")
"""The namespace of delivery ids (`delivery_id`)."""
NAMESPACE = IDS.bytes
"""The namespace's bytes, read once (`UUID.bytes` converts them on every read)."""


def delivery_id(task_id: str, config_id: str, revision: int) -> str:
    """The id of one event's delivery to one config, the same on every attempt (receivers deduplicate by it): the
    name-based UUID (version 5) of IDS and "task\\nconfig\\nrevision", as `uuid.uuid5` makes it, formatted directly."""
    digest = bytearray(hashlib.sha1(NAMESPACE + f"{task_id}\n{config_id}\n{revision}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(frozen=True)
class RetrySchedule:
    """When a failing delivery is tried again: `first` seconds after the first failure, doubling up to `most`, and
    given up once it has failed for `give_up` seconds."""

    first: float = 10.0
    most: float = 3600.0
    give_up: float = 86400.0

    def delay(self, attempts: int) -> float:
        return min(self.first * 2 ** max(attempts - 1, 0), self.most)
