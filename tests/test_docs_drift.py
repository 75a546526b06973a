"""What the docs and `make help` say of the build matches the build (issue 32 item 8): the Dockerfile of
docs/operations.md copies every file the build reads and can compile; the wheel names are the build's; `make help`
names each variable the targets pass on."""

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def dockerfile() -> str:
    [block] = re.findall(r"```dockerfile\n(.*?)```", OPERATIONS, re.DOTALL)
    return block


def test_the_dockerfile_copies_what_the_build_reads_and_has_a_compiler() -> None:
    build_stage = dockerfile().split("\nFROM ")[0]
    copied = {name for line in build_stage.splitlines() if line.startswith("COPY ") for name in line.split()[1:-1]}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(project["tool"]["setuptools"]["package-dir"].values())
    assert {"pyproject.toml", "setup.py", project["project"]["readme"], *folders} <= copied
    assert re.search(r"apt-get install .*\bgcc\b", build_stage), "a slim image has no C compiler: the wheel would be the plain one"


def test_operations_names_the_wheels_the_build_makes() -> None:
    assert "py3-none-any" not in OPERATIONS.split("A2A_BRIDGE_COMPILE=0 pip wheel")[0]
    assert "dist/a2a_bridge-VERSION-cp311-cp311-linux_x86_64.whl" in OPERATIONS
    assert "A2A_BRIDGE_COMPILE=0 pip wheel --no-deps --wheel-dir dist .   # dist/a2a_bridge-VERSION-py3-none-any.whl" in OPERATIONS


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_names_every_variable_the_targets_pass_on() -> None:
    passed = set(re.findall(r"\$\((\w*ARGS)\)", (ROOT / "Makefile").read_text()))
    assert passed == {"ARGS", "PYTEST_ARGS", "TCK_ARGS", "BENCH_ARGS", "CHAOS_ARGS"}
    shown = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for name in passed:
        assert re.search(rf"(?<![A-Z_]){name}\b", shown.stdout), f"make help does not name {name}"
