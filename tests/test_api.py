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
    """The public names a module defines, and those it re-exports (``import X as X``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
    }
    return defined | {
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
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


def test_where_to_measure_is_one_value_and_the_old_keywords_still_work(tmp_path: Path) -> None:
    """measure= holds python, via, timeout, allow, root, deep and pid; a script written with
    the keywords keeps working, and giving both is refused (which would win is a guess)."""
    from envguard.errors import UsageError

    where = api.Measure(python=sys.executable, timeout=30.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        where.deep = True  # type: ignore[misc]
    with pytest.raises(UsageError, match="not both"):
        api.snapshot_document(measure=where, deep=True)
    with pytest.raises(UsageError, match="not both"):
        api.diff("good", measure=where, via="ssh gpu01")
    # Checked from the value, before anything runs.
    with pytest.raises(UsageError, match="--timeout 0: seconds"):
        api.snapshot_document(measure=api.Measure(python=sys.executable, timeout=0.0))
    with pytest.raises(UsageError, match="--pid -1: not a process id"):
        api.snapshot(measure=api.Measure(pid=-1))
    with pytest.raises(UsageError, match=r"--root .*: no such directory"):
        api.diff("good", measure=api.Measure(root=tmp_path / "gone"))
    with pytest.raises(UsageError, match=r"--root .*: no such directory"):
        api.diff("good", root=tmp_path / "gone")  # the keyword, as before
    # The same snapshot either way: the value is what the keywords were.
    by_value = api.snapshot_document(name="m", measure=api.Measure(python=sys.executable))
    by_keywords = api.snapshot_document(name="m", python=sys.executable)
    assert by_value["interpreter"] == by_keywords["interpreter"]
    assert [p["name"] for p in by_value["packages"]] == [p["name"] for p in by_keywords["packages"]]
