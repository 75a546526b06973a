"""The modules setup.py compiles run compiled, and from extensions built from their current source: a stale extension
would run (and test) code the checkout no longer holds. Skipped where the build was told not to compile."""

import ast
import importlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def setup_constant(name: str) -> object:
    """A constant of setup.py (read, not imported: importing setup.py runs the build)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    [value] = [
        node.value for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets)
    ]
    return ast.literal_eval(value)


def compiled_names() -> list[str]:
    """COMPILED, as setup.py lists it."""
    names = setup_constant("COMPILED")
    assert isinstance(names, list)
    return names


def runtime_names() -> set[str]:
    """The shared runtimes of mypyc's groups (setup.py's GROUPS), one extension each."""
    groups = setup_constant("GROUPS")
    assert isinstance(groups, dict)
    return {f"{group}__mypyc" for group in groups}


pytestmark = pytest.mark.skipif(
    os.environ.get("A2A_BRIDGE_COMPILE") == "0", reason="A2A_BRIDGE_COMPILE=0: the modules run from their source"
)


@pytest.mark.parametrize("name", compiled_names())
def test_the_module_runs_from_an_extension_built_after_its_source(name: str) -> None:
    module = importlib.import_module("a2a_bridge." + name.replace("/", "."))
    built = Path(module.__file__ or "")
    assert built.suffix == ".so", f"a2a_bridge/{name} runs from {built.name}: reinstall (make test does) to compile it"
    source = ROOT / "a2a_bridge" / f"{name}.py"
    if built.parent == source.parent:
        assert built.stat().st_mtime >= source.stat().st_mtime, f"{built.name} is older than {source.name}: reinstall"


def test_every_compiled_module_is_a_module_of_the_package() -> None:
    names = compiled_names()
    assert names == sorted(names) and len(set(names)) == len(names)
    assert all((ROOT / "a2a_bridge" / f"{name}.py").is_file() for name in names)


def test_every_compiled_module_is_in_one_group() -> None:
    groups = setup_constant("GROUPS")
    assert isinstance(groups, dict)
    layers = [layer for held in groups.values() for layer in held]
    assert len(set(layers)) == len(layers)
    assert {name.split("/")[0] for name in compiled_names()} <= set(layers)
