"""The README's commands as a newcomer runs them: read from README.md's own fenced block, not copied here. The kit's
transcripts replayed against a server on its kit ports (needs `../shared/kit` beside the checkout; skipped while another
process holds a kit port)."""

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from a2a_bridge.capture.kit import KIT_PORTS
from tests.kit_ports import skip_if_a_kit_port_was_taken
from tests.support import CONSOLE_SCRIPT, SHARED, end_process, free_port, wait_for

README = Path(__file__).resolve().parents[1] / "README.md"
REPLAY_TIMEOUT = 600
"""Seconds the whole replay may take (about a minute here)."""


def readme_commands(containing: str) -> list[str]:
    """The commands of the README's one ```bash block that contains `containing`, a line continued by `\\` joined."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    [block] = [block for block in blocks if containing in block]
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_readme_block_is_a_server_and_a_replay() -> None:
    """What the replay test relies on: the block's first command serves in the background, the second replays."""
    serve, replay = readme_commands("a2a-bridge replay ../shared/kit/")
    assert serve.startswith("a2a-bridge serve ") and "--kit-ports" in serve and serve.endswith(" &")
    assert replay.startswith("a2a-bridge replay ../shared/kit/*.http ")


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A folder to run the README's commands in, with the kit at `../shared/kit` as beside a checkout, and a PATH
    that finds the installed `a2a-bridge` first."""
    if not (SHARED / "kit").is_dir():
        pytest.skip(f"needs the capture kit at {SHARED / 'kit'}")
    (tmp_path / "shared").symlink_to(SHARED)
    here = tmp_path / "checkout"
    here.mkdir()
    yield here, {**os.environ, "PATH": f"{CONSOLE_SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def kit_cards_answer() -> bool:
    try:
        return all(
            httpx.get(f"http://127.0.0.1:{KIT_PORTS[name]}/.well-known/agent-card.json", timeout=2).status_code == 200
            for name in ("test-runner", "code-reviewer", "deployer")
        )
    except httpx.HTTPError:
        return False


def test_the_readme_replay_of_the_kit_passes_as_written(newcomer: tuple[Path, dict[str, str]]) -> None:
    """The README's two commands, the server given a free `--port` (the replay never reaches it; 8000 would collide
    with a `make run`), every block of every transcript passing."""
    here, env = newcomer
    serve, replay = readme_commands("a2a-bridge replay ../shared/kit/")
    port = free_port()
    log = here / "server.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [*shlex.split(serve.removesuffix("&")), "--port", str(port)], cwd=here, env=env, stdout=output, stderr=output
        )
    try:

        def up() -> bool:
            if server.poll() is not None:
                skip_if_a_kit_port_was_taken(log)
                raise AssertionError(f"the README's server exited with {server.returncode}: {log.read_text()}")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200 and kit_cards_answer()
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=60, interval=0.2, what="the README's server")
        done = subprocess.run(
            ["bash", "-c", replay], cwd=here, env=env, capture_output=True, text=True, timeout=REPLAY_TIMEOUT
        )
    finally:
        end_process(server)
    transcripts = sorted((SHARED / "kit").glob("*.http"))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    summary = re.search(r"(\d+) passed, (\d+) failed", done.stdout)
    assert summary is not None and int(summary[1]) > len(transcripts) and summary[2] == "0", done.stdout[-3000:]
    assert (here / "replay.xml").is_file()
