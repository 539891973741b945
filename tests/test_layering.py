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
BASE = {"errors", "lifecycle", "redact", "reading", "confine", "tools", "units", "testing", "trace"}
PARTS = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if p.is_dir()}
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "probe": {"base"},
    "snapshots": {"base", "probe"},
    "compare": {"base", "snapshots"},
    "recovery": {"base", "probe", "snapshots", "compare"},
    "schemas": {"base", "snapshots", "recovery"},
    "render": {"base", "snapshots", "compare", "recovery.plan", "recovery.outcome"},
    "api": {"base", "probe", "snapshots", "compare", "recovery"},
    "cli": {"base", "probe", "snapshots", "compare", "recovery", "render", "api", "schemas"},
    # Starts the probe from argv before the command line (typer) loads: outside cli/.
    "prestart": {"base", "api"},
    "help_screen": set(),  # the root --help, written before typer loads
    "__main__": {"cli", "prestart", "help_screen"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "envguard":
        raise ValueError(module)
    if len(parts) == 1 or parts[1] in BASE or parts[1] not in PARTS:
        return "base"  # envguard itself, a base module, or a name from envguard/__init__
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """Every envguard module ``path`` imports, at the top or inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names]
    return [name for name in found if name == "envguard" or name.startswith("envguard.")]


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


def test_lower_layers_never_import_higher_ones() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if TARGET in path.parents or path == SRC / "__init__.py":
            continue  # the target side is checked below; __init__ re-exports the API lazily
        importer = _module_name(path)
        for imported in _imports(path):
            if imported.startswith("envguard.probe.target"):
                wrong.append(f"{importer} imports the target side {imported}")
            elif not _allowed(importer, imported):
                wrong.append(f"{importer} -> {imported}")
    assert not wrong, "\n".join(wrong)


def test_render_never_imports_what_changes_the_machine() -> None:
    for path in (SRC / "render").rglob("*.py"):
        for imported in _imports(path):
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
