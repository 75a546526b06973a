from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import LOOPBACK_WEBHOOKS, SHARED, ServerProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A bridge on a fresh SQLite file, shared by the tests that only read or create their own tasks; webhooks may
    reach the kit tests' receiver on 127.0.0.1."""
    db = tmp_path_factory.mktemp("store") / "bridge.db"
    process = ServerProcess(f"sqlite:///{db}", extra=LOOPBACK_WEBHOOKS).start()
    yield process
    process.stop()


@pytest.fixture
def kit() -> Path:
    """The capture kit's transcripts; tests that compare against them skip where ../shared is absent."""
    path = SHARED / "kit"
    if not path.is_dir():
        pytest.skip("../shared/kit is not beside the repository")
    return path
