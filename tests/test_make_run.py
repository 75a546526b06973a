"""The Makefile's two installs (issue 32 item 9), read with `make -n` in a copy that holds only what the stamps depend
on (nothing is installed or built): `make run` serves the compiled build when `make test` has made it and it is
current, else installs plain Python (`A2A_BRIDGE_COMPILE=0`) and removes the extensions and the compiled stamp, so no
stale extension shadows its source and `make test` compiles again before tests/test_compiled.py runs."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_compiled import compiled_names

ROOT = Path(__file__).resolve().parent.parent
PLAIN_INSTALL = "A2A_BRIDGE_COMPILE=0 .venv/bin/pip install --quiet -e ."
COMPILED_INSTALL = ".venv/bin/pip install --quiet -e '.[test]'"
DROP_COMPILED = "rm -f .venv/.installed; find a2a_bridge -name '*.so' -delete"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


MAKE_ENVIRONMENT = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
"""What a make running the tests (`make test`) passes down, which would make this one a sub-make of it."""


def dry_run(folder: Path, target: str) -> list[str]:
    """The commands `make -n TARGET` would run, as a make of its own."""
    env = {name: value for name, value in os.environ.items() if name not in MAKE_ENVIRONMENT}
    run = subprocess.run(
        ["make", "--no-print-directory", "-n", target], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in compiled_names():
        (tmp_path / "a2a_bridge" / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "a2a_bridge" / f"{name}.py").touch()
    return tmp_path


def test_a_fresh_clones_make_run_installs_plain_python_and_make_test_the_compiled_build(checkout: Path) -> None:
    run = dry_run(checkout, "run")
    assert PLAIN_INSTALL in run and DROP_COMPILED in run and COMPILED_INSTALL not in run
    assert run[-1].strip() == ".venv/bin/a2a-bridge serve"
    test = dry_run(checkout, "test")
    assert COMPILED_INSTALL in test and not any("A2A_BRIDGE_COMPILE" in line for line in test)


def test_make_run_serves_the_compiled_build_while_it_is_current(checkout: Path) -> None:
    (checkout / ".venv").mkdir()
    (checkout / ".venv" / ".installed").touch()
    run = dry_run(checkout, "run")
    assert not any("pip install" in line for line in run) and run[-1].strip() == ".venv/bin/a2a-bridge serve"

    source = checkout / "a2a_bridge" / f"{compiled_names()[0]}.py"
    stamp = (checkout / ".venv" / ".installed").stat().st_mtime
    os.utime(source, (stamp + 5, stamp + 5))
    run = dry_run(checkout, "run")
    assert PLAIN_INSTALL in run and DROP_COMPILED in run, "a stale extension would shadow its changed source"
