"""envguard.api: one module per kind of work, every name re-exported from the package, and
each module loaded only when one of its names is used."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import envguard
from envguard import api

API = Path(api.__file__).parent


def _public(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
    }


def test_every_public_name_of_the_modules_is_exported_from_its_home() -> None:
    homes = {name: path.stem for path in API.glob("[!_]*.py") for name in _public(path)}
    assert sorted(homes) == sorted(api.__all__)
    for name, home in homes.items():
        assert getattr(api, name) is getattr(getattr(api, home), name), name
    # The names mypy sees (TYPE_CHECKING) are the same.
    tree = ast.parse((API / "__init__.py").read_text(encoding="utf-8"))
    typed = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("envguard.api.")
        for alias in node.names
    }
    assert typed == {name: f"envguard.api.{home}" for name, home in homes.items()}


def test_envguard_reexports_the_operations() -> None:
    for name in envguard.__all__:
        assert getattr(envguard, name) is not None
    assert envguard.diff is api.diff
    with pytest.raises(AttributeError):
        api.nothing_here  # noqa: B018


def test_a_module_loads_when_its_names_are_used() -> None:
    code = (
        "import sys, envguard.api as api\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith('envguard.api.'))\n"
        "print(loaded()); api.snapshot_document; print(loaded())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["[]", "['envguard.api._shared', 'envguard.api.capture']"]


def test_options_are_frozen_keywords() -> None:
    options = api.RestoreOptions(venv="/srv/venv", via="ssh {host}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.execute = True  # type: ignore[misc]
    assert dataclasses.replace(options, via="ssh gpu01").venv == "/srv/venv"
    with pytest.raises(TypeError):
        api.BisectOptions("python check.py")  # type: ignore[misc]
    assert api.BisectOptions(run="python check.py").max_steps == 30
