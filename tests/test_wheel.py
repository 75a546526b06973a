"""The wheel as a user installs it: built from the checkout, installed in a fresh virtualenv in a temporary folder, and
run from there, outside the checkout: `--version`, `serve`, `capture`, `capture --check` and `replay` of a transcript
the wheel ships. Runs under CI=true, or locally with A2A_BRIDGE_WHEEL_TEST=1 (about a minute with pip's cache warm)."""

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from a2a_bridge.capture.recorder import differing, outputs
from tests.support import end_process, free_port, wait_for
from tests.test_compiled import compiled_names, runtime_names

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
BUILD_TIMEOUT = 480
"""Seconds to build the wheel, and to install it with its dependencies (from pip's cache, else the index)."""
COMMAND_TIMEOUT = 120
"""Seconds any one command of the installed bridge may take."""
REPLAYED = "03-blocking-task.http"

pytestmark = pytest.mark.skipif(
    os.environ.get("CI") != "true" and os.environ.get("A2A_BRIDGE_WHEEL_TEST") != "1",
    reason="builds and installs the wheel (a minute or two): runs under CI=true or A2A_BRIDGE_WHEEL_TEST=1",
)


@dataclass(frozen=True)
class Installed:
    """The wheel, and a fresh virtualenv it is installed in, with a working folder beside it (outside the checkout)."""

    wheel: Path
    bin: Path
    cwd: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`a2a-bridge ARGS` from the working folder."""
        return subprocess.run(
            [str(self.bin / "a2a-bridge"), *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
            cwd=self.cwd, env=clean_env(),
        )

    def python(self, code: str) -> str:
        done = subprocess.run(
            [str(self.bin / "python"), "-c", code], capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
            cwd=self.cwd, env=clean_env(), check=True,
        )
        return done.stdout.strip()


def clean_env() -> dict[str, str]:
    """This process's environment without what would let the checkout or its virtualenv leak into the installed one."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT)
    dist = base / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(ROOT)],
        check=True, timeout=BUILD_TIMEOUT, cwd=base, env=clean_env(),
    )
    [wheel] = dist.glob("a2a_bridge-*.whl")
    venv.EnvBuilder(with_pip=True, clear=True).create(base / "venv")
    bin = base / "venv" / "bin"
    subprocess.run(
        [str(bin / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        check=True, timeout=BUILD_TIMEOUT, cwd=base, env=clean_env(),
    )
    cwd = base / "work"
    cwd.mkdir()
    return Installed(wheel, bin, cwd)


@pytest.fixture
def served(installed: Installed) -> Iterator[str]:
    """`a2a-bridge serve` from the installed wheel on a free loopback port, memory store; its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [str(installed.bin / "a2a-bridge"), "serve", "--host", "127.0.0.1", "--port", str(port), "--store", "memory",
         "--pace", "0.2", "--log-level", "warning"],
        cwd=installed.cwd, env=clean_env(),
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the installed server exited with {proc.returncode}")
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, timeout=30, what="the installed server to be ready")
        yield url
    finally:
        end_process(proc)


def test_the_wheel_installs_one_top_level_package_with_the_transcripts_and_allow_files(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"a2a_bridge", f"a2a_bridge-{VERSION}.dist-info"}
    shipped = {name for name in names if name.startswith("a2a_bridge/capture/")}
    assert {f"a2a_bridge/capture/out/{name}" for name in outputs(ROOT / "capture" / "out")} <= shipped
    assert {"a2a_bridge/capture/allow/bridge.toml", "a2a_bridge/capture/allow/rerun.toml"} <= shipped
    extensions = {name.removeprefix("a2a_bridge/").split(".")[0] for name in names if name.endswith(".so")}
    compiled = os.environ.get("A2A_BRIDGE_COMPILE") != "0"
    assert extensions == ({*compiled_names(), *runtime_names()} if compiled else set()), "setup.py's COMPILED"
    found = installed.python(
        "import importlib.util as u, a2a_bridge.agents.catalog as c;"
        " print(c.__file__, u.find_spec('agents'), u.find_spec('capture'))"
    )
    where, agents, capture = found.split(" ")
    assert "site-packages" in where and not Path(where).is_relative_to(ROOT)
    assert (agents, capture) == ("None", "None")


def test_version_is_the_installed_distributions(installed: Installed) -> None:
    done = installed.run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"a2a-bridge {VERSION}"


def test_capture_check_passes_and_capture_writes_into_the_current_folder(installed: Installed) -> None:
    check = installed.run("capture", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "byte for byte" in check.stdout and "site-packages" in check.stdout
    done = installed.run("capture")
    assert done.returncode == 0, done.stdout + done.stderr
    written = installed.cwd / "capture-out"
    shipped = Path(installed.python("import a2a_bridge.capture.recorder as r; print(r.OUT)"))
    assert outputs(written) == outputs(shipped) and len(outputs(written)) >= 23
    assert differing(shipped, written) == []


def test_a_shipped_transcript_replays_against_the_installed_server(installed: Installed, served: str) -> None:
    transcript = Path(installed.python("import a2a_bridge.capture.recorder as r; print(r.OUT)")) / REPLAYED
    maps = {"41241": "test-runner", "41242": "code-reviewer", "41243": "deployer"}
    done = installed.run(
        "replay", str(transcript), "--allow", "bridge", "--junit", "replay.xml",
        *[arg for port, agent in maps.items() for arg in ("--map", f"localhost:{port}={served}/{agent}")],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 0 failed" in done.stdout
    assert (installed.cwd / "replay.xml").is_file()
