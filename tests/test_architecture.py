"""The layout docs/architecture.md promises: a2a_bridge/ in subpackages by layer whose imports point one way (down),
no import cycle among the project's modules, type-only imports included, the command line at the top with nothing
importing it, and no module of `a2a_bridge/` over 500 lines."""

import ast
import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
"""The packages by the name they import as, and their folders: agents/ and capture/ import as a2a_bridge.agents and
a2a_bridge.capture."""
MAX_LINES = 500

LAYERS = [
    ("core", ("a2a_bridge.core",)),
    ("store", ("a2a_bridge.store",)),
    ("push", ("a2a_bridge.push",)),
    ("tasks", ("a2a_bridge.tasks",)),
    ("http", ("a2a_bridge.http",)),
    ("agent API", ("a2a_bridge.agent", "a2a_bridge")),
    ("ops", ("a2a_bridge.ops",)),
    ("app", ("a2a_bridge.app",)),
    ("remote", ("a2a_bridge.remote",)),
    ("sample agents", ("a2a_bridge.agents",)),
    ("capture", ("a2a_bridge.capture",)),
    ("cli", ("a2a_bridge.cli", "a2a_bridge.__main__")),
]
"""The layers from the bottom up, each by the modules (and the packages' modules) it holds: a module imports only
modules of its own layer and of the layers below it (docs/architecture.md says why each sits where it does)."""


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            name = ".".join((package, *path.relative_to(ROOT / folder).with_suffix("").parts)).removesuffix(".__init__")
            found[name] = path
    return found


def type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imported(tree: ast.AST, known: dict[str, Path], type_only: bool = True) -> set[str]:
    """The project's modules a module imports, wherever the import stands; under `if TYPE_CHECKING:` too unless
    `type_only` is false."""
    names: set[str] = set()
    pending = [tree]
    while pending:
        node = pending.pop()
        if not type_only and type_checking_only(node):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a2a_bridge.core import claims` imports the module claims, as `import a2a_bridge.core.claims` does;
            # only a name the package itself defines (its public API) makes the package a dependency.
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(known)
            names |= submodules if len(submodules) == len(node.names) else {node.module} | submodules
        pending.extend(ast.iter_child_nodes(node))
    return {name for name in names if name in known}


def import_graph(type_only: bool = True) -> dict[str, set[str]]:
    known = modules()
    return {name: imported(ast.parse(path.read_text()), known, type_only) - {name} for name, path in known.items()}


def layer_of(module: str) -> int:
    """The index in LAYERS of the layer that holds the module: the longest name that is it or a package above it."""
    held = [
        (len(name), index) for index, (_, names) in enumerate(LAYERS) for name in names
        if module == name or module.startswith(name + ".")
    ]
    assert held, f"{module} is in no layer of LAYERS"
    return max(held)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module of a higher layer, as `importer -> imported (layer -> layer)`."""
    return sorted(
        f"{name} -> {target} ({LAYERS[layer_of(name)][0]} -> {LAYERS[layer_of(target)][0]})"
        for name, targets in graph.items() for target in targets if layer_of(target) > layer_of(name)
    )


def cycle_from(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)) is not None:
                return found
        state[name] = 2
        path.pop()
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)) is not None:
            return found
    return None


def test_no_import_cycle_among_the_projects_modules_type_only_imports_included() -> None:
    assert cycle_from(import_graph()) is None


def test_every_module_is_in_a_layer_and_imports_point_down() -> None:
    assert upward_imports(import_graph()) == []


def planted(tmp_path: Path, sources: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of modules planted beside the project's, with these sources: their imports, and the modules
    they import as leaves."""
    known = modules() | {name: tmp_path / f"{name}.py" for name in sources}
    graph: dict[str, set[str]] = {}
    for name, source in sources.items():
        known[name].write_text(source)
        graph[name] = imported(ast.parse(source), known) - {name}
    return {target: set() for targets in graph.values() for target in targets} | graph


def test_the_layer_check_finds_a_planted_upward_import(tmp_path: Path) -> None:
    graph = planted(tmp_path, {"a2a_bridge.store.planted": "from a2a_bridge.tasks.task_host import TaskHost\n"})
    assert upward_imports(graph) == ["a2a_bridge.store.planted -> a2a_bridge.tasks.task_host (store -> tasks)"]


def test_the_cycle_check_finds_a_planted_type_only_cycle(tmp_path: Path) -> None:
    graph = planted(tmp_path, {
        "a2a_bridge.tasks.planted_a": "from a2a_bridge.tasks.planted_b import B\n",
        "a2a_bridge.tasks.planted_b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a2a_bridge.tasks.planted_a import A\n"
        ),
    })
    assert cycle_from(graph) == ["a2a_bridge.tasks.planted_a", "a2a_bridge.tasks.planted_b", "a2a_bridge.tasks.planted_a"]
    assert cycle_from(planted(tmp_path, {"a2a_bridge.tasks.planted_b": "B = 1\n"})) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycle_from({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_nothing_imports_the_command_line_module_but_its_entry_point() -> None:
    importers = sorted(name for name, targets in import_graph().items() if "a2a_bridge.cli.main" in targets)
    assert importers == ["a2a_bridge.__main__"]


def test_no_module_of_the_server_library_is_over_500_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in (ROOT / "a2a_bridge").rglob("*.py")
    }
    assert {name: size for name, size in sizes.items() if size > MAX_LINES} == {}


def test_the_wheel_installs_one_top_level_package() -> None:
    assert {name.split(".")[0] for name in PACKAGES} == {"a2a_bridge"}
    assert sorted(PACKAGES) == ["a2a_bridge", "a2a_bridge.agents", "a2a_bridge.capture"]


def test_the_modules_are_found_under_the_names_they_import_as() -> None:
    names = modules()
    assert {"a2a_bridge.cli.main", "a2a_bridge.agents.catalog", "a2a_bridge.capture.replay"} <= set(names)
    assert not [name for name in names if name.split(".")[0] != "a2a_bridge"]
    assert {"a2a_bridge.agents.catalog", "a2a_bridge.capture.recorder"} <= import_graph()["a2a_bridge.cli.main"]


FOLDERS_AS_PACKAGES = {"agents", "capture"}
"""Folders at the top of the checkout that import only under a2a_bridge: imported by their folder's name from a
checkout (the root is on sys.path there), they would load a second copy of each module and fail once installed."""


def python_sources() -> list[Path]:
    """The checkout's Python files, without virtualenvs, build output, node_modules and other hidden folders."""
    sources = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if not name.startswith(".") and name not in {"build", "node_modules"}]
        sources += [Path(folder, name) for name in files if name.endswith(".py")]
    return sources


def test_nothing_imports_the_folders_by_their_top_level_names() -> None:
    found = []
    for path in python_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] in FOLDERS_AS_PACKAGES]
    assert found == []
