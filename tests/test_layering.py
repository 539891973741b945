"""The house's arrows: lower layers never import higher ones, and the target side of the
probe is standard-library Python 3.8 that envguard itself never imports."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import envguard

SRC = Path(envguard.__file__).parent
TARGET = SRC / "probe" / "target"

# Each top-level part of the package and the parts it may import (besides itself).
BASE = {"errors", "lifecycle", "redact", "reading", "confine", "tools", "units"}
BASE |= {"trace", "version", "notices", "owned", "inuse", "toml_reading"}
PARTS = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if p.is_dir()}
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "probe": {"base"},
    "snapshots": {"base", "probe"},
    "compare": {"base", "snapshots", "blame"},
    "recovery": {"base", "probe", "snapshots", "compare"},
    "schemas": {"base", "snapshots", "recovery", "guard.report"},
    "render": {"base", "snapshots", "compare", "recovery.plan", "recovery.outcome"},
    # An install previewed, run and recorded: above compare, beside recovery.
    "guard": {"base", "probe", "snapshots", "compare"},
    "api": {"base", "probe", "snapshots", "compare", "recovery", "guard"},
    "cli": {"base", "probe", "snapshots", "compare", "recovery", "render", "api", "schemas"}
    | {"distributed", "terminal", "recording"},
    # What a command's run says (errors, -q, notes, interrupts), typer or not.
    "terminal": {"base", "render"},
    # What `snapshot` does once its options are read; a plain one runs without typer.
    "recording": {"base", "snapshots", "render", "api", "terminal"},
    # The rank gate, called from training scripts: measures in-process, loads a snapshot.
    "distributed": {"base", "probe", "snapshots", "compare", "rendezvous", "blame"}
    | {"gatestore", "launchers"},
    # The launcher gate's own store (standard library only) and torchrun's command line.
    "gatestore": set(),
    "launchers": {"base"},
    # The gate's store with deadlines of its own (imports torch when asked for one).
    "rendezvous": {"base"},
    "blame": set(),  # who the gate names: pure functions over what the ranks published
    # Starts the probe from argv before the command line (typer) loads: outside cli/.
    "prestart": {"base", "api"},
    "help_screen": set(),  # the root --help, written before typer loads
    "__main__": {"cli", "prestart", "help_screen", "recording", "base"},
    # Generates the fast paths from the models: run by developers, never by a command.
    "dev": {"base", "probe", "snapshots", "schemas"},
    # Wheels and indexes for the tests, bench/ and examples/: like dev, left out of the
    # wheel (pyproject), so nothing the wheel ships may import either.
    "testing": set(),
}


def _layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "envguard":
        raise ValueError(module)
    if len(parts) == 1:
        return "api"  # ``import envguard``, ``from envguard import diff``: the API's names
    if parts[1] in BASE:
        return "base"
    if parts[1] not in PARTS:
        raise ValueError(f"{module}: no such part of envguard")
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    path = SRC.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _imports(path: Path) -> list[tuple[str, bool]]:
    """Every envguard module ``path`` imports, at the top or inside functions, each with
    whether only type checkers see it (under ``if TYPE_CHECKING:``). ``from X import Y``
    imports the module X.Y when there is one, else X (a name from it: from ``envguard``
    itself, one of the API's)."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, typing_only) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.append((name if _is_module(name) else node.module, typing_only))
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                assert isinstance(child, ast.If)
                for stmt in child.body:
                    visit(stmt, True)
                for stmt in child.orelse:
                    visit(stmt, typing_only)
            else:
                visit(child, typing_only)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return [(n, t) for n, t in found if n == "envguard" or n.startswith("envguard.")]


def _allowed(importer: str, imported: str) -> bool:
    here, there = _layer(importer), _layer(imported)
    if here == there or there == "base":
        return True
    allowed = ALLOWED[here]
    if there in allowed:
        return True
    return any(
        imported == f"envguard.{a}" or imported.startswith(f"envguard.{a}.")
        for a in allowed
        if "." in a
    )


def _sources() -> list[Path]:
    """envguard's modules, less the target side (checked below) and envguard/__init__ (it
    re-exports the API, lazily)."""
    return [
        path
        for path in sorted(SRC.rglob("*.py"))
        if TARGET not in path.parents and path != SRC / "__init__.py"
    ]


def test_lower_layers_never_import_higher_ones() -> None:
    wrong = []
    for path in _sources():
        importer = _module_name(path)
        for imported, _ in _imports(path):
            if imported.startswith("envguard.probe.target"):
                wrong.append(f"{importer} imports the target side {imported}")
            elif not _allowed(importer, imported):
                wrong.append(f"{importer} -> {imported}")
    assert not wrong, "\n".join(wrong)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the envguard modules it imports when it runs (at its top or in a function;
    not the ones only type checkers see)."""
    graph = {_module_name(path): set() for path in _sources()}
    for path in _sources():
        importer = _module_name(path)
        graph[importer] |= {
            name
            for name, typing_only in _imports(path)
            if not typing_only and name in graph and name != importer
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a path
    around the cycle, for the message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while stack[-1] != node:
                component.append(stack.pop())
            component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_cycle() -> None:
    """A cycle hidden in function-level imports is a cycle too: the piece both ends need
    belongs a layer down."""
    graph = _import_graph()
    wrong = [
        " <-> ".join(f"{m} (-> {', '.join(sorted(graph[m] & set(c)))})" for m in c)
        for c in _cycles(graph)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_checks_see_what_they_check() -> None:
    """A name from ``envguard`` is the API's, a submodule is itself, and the imports only
    type checkers see are told apart."""
    assert _layer("envguard") == "api"
    assert _layer("envguard.version") == "base"
    assert not _allowed("envguard.snapshots.store", "envguard")
    graph = _import_graph()
    assert "envguard.snapshots.live" in graph["envguard.api.early"]  # inside prestart()
    assert "envguard.compare.policy" not in graph["envguard.cli.compare"]  # TYPE_CHECKING
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_render_never_imports_what_changes_the_machine() -> None:
    for path in (SRC / "render").rglob("*.py"):
        for imported, _ in _imports(path):
            assert not imported.startswith("envguard.recovery.execute"), path
            assert not imported.startswith(("envguard.api", "envguard.cli")), path


def _target_files() -> list[Path]:
    from envguard.probe.payload import SHARED_MODULES

    return [
        *sorted(TARGET.glob("*.py")),
        *(SRC / f"{name}.py" for name in SHARED_MODULES),
        SRC / "probe" / "loader.py",  # runs first on the target
    ]


def test_target_side_is_stdlib_only_and_parses_as_python_38() -> None:
    from envguard.probe.payload import SHARED_MODULES

    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in _target_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # a sibling in the target package
                    sibling = TARGET / f"{node.module}.py"
                    assert sibling.exists() or node.module in SHARED_MODULES, (
                        path,
                        node.module,
                    )
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in stdlib, f"{path.name} imports {name}"


def test_payload_ships_every_target_module() -> None:
    from envguard.probe.payload import SHARED_MODULES, TARGET_MODULES

    shipped = set(TARGET_MODULES)
    on_disk = {p.stem for p in TARGET.glob("*.py")} - {"__init__"}
    assert on_disk | set(SHARED_MODULES) == shipped
    # A shared module is typed on the target side by a stub that re-exports it.
    assert {p.stem for p in TARGET.glob("*.pyi")} == set(SHARED_MODULES)


def test_probe_versions_agree() -> None:
    from envguard.probe.report import PROBE_VERSION

    tree = ast.parse((TARGET / "main.py").read_text(encoding="utf-8"))
    values = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any(isinstance(t, ast.Name) and t.id == "PROBE_VERSION" for t in node.targets)
    ]
    assert values == [PROBE_VERSION]


def test_importing_envguard_has_no_side_effects() -> None:
    import os
    import subprocess

    code = (
        "import os, sys; before = dict(os.environ); import envguard, envguard.api, envguard.cli;"
        " import envguard.snapshots.models, envguard.compare.engine;"
        " sys.exit(0 if dict(os.environ) == before else 1)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    assert subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0


def test_sections_are_one_registry() -> None:
    from envguard.compare.policy import SECTIONS
    from envguard.compare.sections import REGISTRY

    modules = {p.stem for p in (SRC / "compare" / "sections").glob("*.py")} - {"__init__", "base"}
    assert {s.name for s in REGISTRY} == modules
    assert tuple(s.name for s in REGISTRY) == SECTIONS
