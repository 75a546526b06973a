"""The capture kit's fixed ports in the tests: a server listens on them (`serve --kit-ports`) only where they are the
point, and a test that needs them is skipped, never failed, while another process (a `make run ARGS=--kit-ports`, a
TCK run, a second checkout's tests) holds one."""

from pathlib import Path

import pytest

from tests.support import ServerProcess

TAKEN = "kit port): Address already in use"
"""The end of the line `serve` stops with when a kit port is held."""


def serve_on_kit_ports(store: str, agents: list[str], log: Path, env: dict[str, str] | None = None) -> ServerProcess:
    """A started server of `agents` on a free port and on their kit ports, or the test skipped naming the kit port
    another process holds; its output goes to `log`."""
    process = ServerProcess(
        store, extra=[*(arg for name in agents for arg in ("--agent", name)), "--kit-ports"], env=env, log=log
    )
    try:
        return process.start()
    except AssertionError:
        process.stop()
        taken = [line for line in log.read_text().splitlines() if line.endswith(TAKEN)]
        if taken:
            pytest.skip(f"a kit port is held by another process: {taken[0]}")
        raise
