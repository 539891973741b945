"""The CI gate on real layouts locked by real uv (offline, local indexes of tiny wheels): uv's
PyTorch guide (torch in cpu/cu128 extras with conflicts and explicit indexes), default
groups, dependency groups, extras, a workspace member; PEP 751 multi-use locks with extra
and group markers; requirements files in pip's syntax. A synced environment passes; each
injected drift is reported exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from envguard.snapshots.models import Source
from envguard.testing import make_simple_index
from factories import (
    UV,
    make_torch_wheel,
    make_venv,
    make_wheel,
    package,
    run,
    snapshot,
    uv_install,
)

runner = CliRunner()

PYPROJECT = """\
[project]
name = "train"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["transformers", "helper"]

[project.optional-dependencies]
cpu = ["torch==2.11.0"]
cu128 = ["torch==2.11.0"]
gpu = ["six"]

[dependency-groups]
dev = ["pytest"]
lint = ["ruff"]
docs = ["mkdocs"]

[tool.uv]
default-groups = ["dev", "lint"]
conflicts = [[{ extra = "cpu" }, { extra = "cu128" }]]

[tool.uv.workspace]
members = ["packages/helper"]

[tool.uv.sources]
helper = { workspace = true }
torch = [
  { index = "pytorch-cpu", extra = "cpu" },
  { index = "pytorch-cu128", extra = "cu128" },
]

[[tool.uv.index]]
name = "pytorch-cpu"
url = "INDEX/cpu"
explicit = true

[[tool.uv.index]]
name = "pytorch-cu128"
url = "INDEX/cu128"
explicit = true

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
"""

HELPER = """\
[project]
name = "helper"
version = "0.2.0"
requires-python = ">=3.10"
dependencies = ["numpy"]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
"""

WHEELS = [
    ("numpy", "2.1.0", []),
    ("six", "1.16.0", []),
    ("ruff", "0.6.0", []),
    ("pytest", "8.0.0", ["iniconfig"]),
    ("iniconfig", "2.0.0", []),
    ("mkdocs", "1.6.0", []),
    ("transformers", "4.46.0", ["numpy"]),
]


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """uv's PyTorch-guide layout with a workspace member, locked by `uv lock` offline."""
    root = tmp_path_factory.mktemp("layout")
    wheels = root / "wh"
    built = [make_wheel(wheels, n, v, requires=r) for n, v, r in WHEELS]
    cpu = make_torch_wheel(root / "tw", "2.11.0+cpu", None)
    cu128 = make_torch_wheel(root / "tw", "2.11.0+cu128", "12.8")
    base = make_simple_index(root / "idx", {"pypi": built, "cpu": [cpu], "cu128": [cu128]})
    proj = root / "proj"
    (proj / "packages" / "helper").mkdir(parents=True)
    (proj / "pyproject.toml").write_text(PYPROJECT.replace("INDEX", base))
    (proj / "packages" / "helper" / "pyproject.toml").write_text(HELPER)
    run([UV, "lock", "--quiet", "--offline", "--default-index", f"{base}/pypi"], cwd=proj)
    return proj


def synced(proj: Path, *extra: tuple[str, str], torch: str | None = "2.11.0+cpu") -> dict:
    """A snapshot of what `uv sync --extra cpu` installs (the project and helper editable)."""
    pkgs = [
        package("transformers", "4.46.0"),
        package("numpy", "2.1.0"),
        package("pytest", "8.0.0"),
        package("iniconfig", "2.0.0"),
        package("ruff", "0.6.0"),
        package("train", "0.1.0", source=Source(kind="editable", path=str(proj))),
        package(
            "helper",
            "0.2.0",
            source=Source(kind="editable", path=str(proj / "packages" / "helper")),
        ),
    ]
    if torch:
        pkgs.append(package("torch", torch))
    pkgs += [package(n, v) for n, v in extra]
    return json.loads(store.dumps(snapshot(pkgs, name="good")))


def gate(tmp: Path, snap: dict, lock: Path, *flags: str) -> tuple[int, list[dict], str]:
    (tmp / "good.json").write_text(json.dumps(snap))
    result = runner.invoke(
        app, ["check", str(tmp / "good.json"), "--lock", str(lock), "--format", "json", *flags]
    )
    assert result.exit_code in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "envguard.drift" and doc["schema_version"] == 1
    notes = "".join(f"note: {n}\n" for n in doc["notes"])
    return result.exit_code, doc["changes"], result.stderr + notes


def test_synced_venv_passes_with_the_same_selection_as_uv_sync(
    layout: Path, tmp_path: Path
) -> None:
    code, changes, err = gate(tmp_path, synced(layout), layout / "uv.lock", "--extra", "cpu")
    assert (code, changes) == (0, []), err
    assert "note:" not in err  # read by uv itself, no fallback


def test_torch_in_the_cuda_extra_is_no_false_alarm(layout: Path, tmp_path: Path) -> None:
    snap = synced(layout, torch="2.11.0+cu128")
    code, changes, _ = gate(tmp_path, snap, layout / "uv.lock", "--extra", "cu128")
    assert (code, changes) == (0, [])


def test_default_groups_extras_and_groups_follow_uv(layout: Path, tmp_path: Path) -> None:
    # `uv sync --extra cpu --extra gpu --group docs`: six and mkdocs belong.
    snap = synced(layout, ("six", "1.16.0"), ("mkdocs", "1.6.0"))
    flags = ("--extra", "cpu", "--extra", "gpu", "--group", "docs")
    assert gate(tmp_path, snap, layout / "uv.lock", *flags)[:2] == (0, [])
    # Without them, exactly those two are reported.
    code, changes, _ = gate(tmp_path, snap, layout / "uv.lock", "--extra", "cpu")
    assert code == 1
    assert {(c["kind"], c["name"]) for c in changes} == {
        ("not_in_lock", "six"),
        ("not_in_lock", "mkdocs"),
    }
    # --no-default-groups: pytest, iniconfig and ruff are then not expected.
    snap = synced(layout)
    code, changes, _ = gate(
        tmp_path, snap, layout / "uv.lock", "--extra", "cpu", "--no-default-groups"
    )
    assert {c["name"] for c in changes} == {"pytest", "iniconfig", "ruff"}


def test_injected_drift_is_reported_exactly_with_the_lock_line(
    layout: Path, tmp_path: Path
) -> None:
    snap = synced(layout, ("flashinfer-python", "0.2.0"), torch="2.11.0+cu128")
    snap["packages"] = [p for p in snap["packages"] if p["name"] != "ruff"]
    code, changes, _ = gate(tmp_path, snap, layout / "uv.lock", "--extra", "cpu")
    assert code == 1
    found = {(c["kind"], c["name"]): c for c in changes}
    assert set(found) == {
        ("pin_differs", "torch"),
        ("not_in_lock", "flashinfer-python"),
        ("not_installed", "ruff"),
    }
    torch = found[("pin_differs", "torch")]
    assert torch["severity"] == "critical" and torch["file"] == str(layout / "uv.lock")
    lines = (layout / "uv.lock").read_text().splitlines()
    assert lines[torch["line"] - 1] == 'name = "torch"'


def test_conflicting_extras_are_one_line_exit_2(layout: Path, tmp_path: Path) -> None:
    (tmp_path / "good.json").write_text(json.dumps(synced(layout)))
    result = runner.invoke(
        app,
        [
            "check",
            str(tmp_path / "good.json"),
            "--lock",
            str(layout / "uv.lock"),
            "--extra",
            "cpu",
            "--extra",
            "cu128",
        ],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "uv export refused it" in result.stderr


def test_without_uv_the_walk_is_used_and_said(
    layout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGUARD_UV", str(tmp_path / "no-uv-here"))
    code, changes, err = gate(tmp_path, synced(layout), layout / "uv.lock", "--extra", "cpu")
    assert (code, changes) == (0, [])
    assert "note: " in err and "not by uv" in err


def test_an_old_uv_is_named_with_the_minimum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envguard.errors import UsageError
    from envguard.tools import find_modern_uv

    old = tmp_path / "uv"
    old.write_text("#!/bin/sh\necho 'uv 0.12.9'\n")
    old.chmod(0o755)
    monkeypatch.setenv("ENVGUARD_UV", str(old))
    with pytest.raises(UsageError, match=r"uv 0\.12\.9 .* needs uv >= 0\.13\.0"):
        find_modern_uv()


def test_live_venv_against_the_lock_without_a_snapshot(layout: Path, tmp_path: Path) -> None:
    """A real venv, checked against a lockfile with no snapshot at all."""
    venv = tmp_path / "venv"
    make_venv(venv)
    uv_install(venv, layout.parent / "wh", "transformers==4.46.0", "six==1.16.0")
    lock = tmp_path / "requirements.txt"
    lock.write_text("transformers==4.46.0\nnumpy==2.1.0\n")
    result = runner.invoke(
        app, ["check", "--lock", str(lock), "--python", str(venv), "--format", "json"]
    )
    assert result.exit_code == 1, result.stderr
    changes = json.loads(result.stdout)["changes"]
    assert [(c["kind"], c["name"]) for c in changes] == [("not_in_lock", "six")]
    assert changes[0]["message"] == f"six 1.16.0 is installed but {lock} does not install it"
    lock.write_text("transformers==4.46.0\nnumpy==2.1.0\nsix==1.16.0\n")
    result = runner.invoke(app, ["check", "--lock", str(lock), "--python", str(venv)])
    assert result.exit_code == 0
    assert f"no drift: the environment at {venv} matches {lock}" in result.stdout


def test_lock_against_lock_says_what_a_lock_change_does(layout: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.txt"
    new = tmp_path / "new.txt"
    old.write_text("torch==2.11.0+cpu\nnumpy==2.1.0\nsix==1.16.0\n")
    new.write_text("torch==2.11.0+cu128\nnumpy==2.2.0\nmkdocs==1.6.0\n")
    result = runner.invoke(
        app, ["diff", "--lock", str(old), "--lock", str(new), "--format", "json"]
    )
    assert result.exit_code == 1, result.stderr
    found = {(c["kind"], c["name"]) for c in json.loads(result.stdout)["changes"]}
    assert found == {
        ("variant_changed", "torch"),
        ("upgraded", "numpy"),
        ("removed", "six"),
        ("added", "mkdocs"),
    }
    # The old side from stdin, as `git show HEAD~1:uv.lock | envguard diff --lock - --lock uv.lock`.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "envguard",
            "diff",
            "--lock",
            "-",
            "--lock",
            str(layout / "uv.lock"),
            "--extra",
            "cpu",
        ],
        input=(layout / "uv.lock").read_text(),
        capture_output=True,
        text=True,
        cwd=layout,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no drift" in proc.stdout
    assert "own walk" not in proc.stderr  # uv read it too, from a scratch copy of the project


def test_a_lock_under_another_name_is_read_as_itself(layout: Path, tmp_path: Path) -> None:
    """uv exports the project's uv.lock whatever file is named: `old.lock` beside it (or a
    lock on stdin) must be exported as itself, or a lock change reads as no change."""
    import shutil

    proj = tmp_path / "proj"
    shutil.copytree(layout, proj)
    text = (proj / "uv.lock").read_text()
    (proj / "old.lock").write_text(text)
    pyproject = (proj / "pyproject.toml").read_text()
    (proj / "pyproject.toml").write_text(pyproject.replace('lint = ["ruff"]', "lint = []"))
    index = str(layout.parent / "idx" / "pypi")
    run([UV, "lock", "--quiet", "--offline", "--default-index", index], cwd=proj)
    assert (proj / "uv.lock").read_text() != text
    # Another user's workspace root planted in the shared temp folder, with a forged lock:
    # uv looks above a project for one, so the scratch copy never lives there.
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "pyproject.toml").write_text(
        '[tool.uv.workspace]\nmembers = ["*", "*/*", "envguard-lock-*", "lock-*"]\n'
    )
    (shared / "uv.lock").write_text(text.replace('version = "2.1.0"', 'version = "9.9.9"'))
    env = {**os.environ, "TMPDIR": str(shared), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    for old in (["--lock", "../old.lock"], ["--lock", "-"]):
        proc = subprocess.run(
            [sys.executable, "-m", "envguard", "diff", *old, "--lock", "../uv.lock", "--extra", "cpu",
             "--format", "json"],
            input=text, capture_output=True, text=True, cwd=proj / "packages", timeout=120,
            env=env,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        changes = json.loads(proc.stdout)["changes"]
        assert [(c["kind"], c["name"]) for c in changes] == [("removed", "ruff")], changes
    assert (tmp_path / "xdg" / "envguard").is_dir()  # the scratch copy lived in a private folder
    assert not any(shared.glob("*lock-*"))


MULTI_USE = """\
lock-version = "1.0"
created-by = "hand"
requires-python = ">=3.10"
extras = ["gpu"]
dependency-groups = ["dev", "lint"]
default-groups = ["dev"]

[[packages]]
name = "numpy"
version = "2.1.0"
wheels = [{ name = "numpy-2.1.0-py3-none-any.whl", url = "https://example.invalid/numpy-2.1.0-py3-none-any.whl", hashes = { sha256 = "00" } }]

[[packages]]
name = "six"
version = "1.16.0"
marker = "'gpu' in extras"
wheels = [{ name = "six-1.16.0-py3-none-any.whl", url = "https://example.invalid/six-1.16.0-py3-none-any.whl", hashes = { sha256 = "00" } }]

[[packages]]
name = "pytest"
version = "8.0.0"
marker = "'dev' in dependency_groups"
wheels = [{ name = "pytest-8.0.0-py3-none-any.whl", url = "https://example.invalid/pytest-8.0.0-py3-none-any.whl", hashes = { sha256 = "00" } }]

[[packages]]
name = "ruff"
version = "0.6.0"
marker = "'lint' in dependency_groups"
wheels = [{ name = "ruff-0.6.0-cp312-abi3-win_amd64.whl", url = "https://example.invalid/ruff-0.6.0-cp312-abi3-win_amd64.whl", hashes = { sha256 = "00" } }]
"""


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), {"numpy", "pytest"}),
        (("--extra", "gpu"), {"numpy", "pytest", "six"}),
        (("--group", "lint"), {"numpy", "pytest", "ruff"}),
        (("--only-group", "lint"), {"numpy", "ruff"}),
        (("--all-extras", "--all-groups"), {"numpy", "pytest", "ruff", "six"}),
    ],
)
def test_pep751_markers_with_extras_and_groups(
    tmp_path: Path, flags: tuple[str, ...], expected: set[str]
) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(MULTI_USE)
    versions = {"numpy": "2.1.0", "six": "1.16.0", "pytest": "8.0.0", "ruff": "0.6.0"}
    snap = json.loads(store.dumps(snapshot([package(n, versions[n]) for n in expected])))
    code, changes, err = gate(tmp_path, snap, lock, *flags)
    assert (code, changes) == (0, []), (changes, err)


def test_pylock_requires_python_is_honoured(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(MULTI_USE.replace('requires-python = ">=3.10"', 'requires-python = ">=3.99"'))
    snap = json.loads(store.dumps(snapshot([package("numpy", "2.1.0")])))
    code, changes, _ = gate(tmp_path, snap, lock)
    assert code == 1 and [(c["kind"], c["severity"]) for c in changes] == [
        ("outside_lock", "critical")
    ]


def test_an_undeclared_extra_is_one_line_exit_2(tmp_path: Path) -> None:
    lock = tmp_path / "pylock.toml"
    lock.write_text(MULTI_USE)
    (tmp_path / "good.json").write_text(store.dumps(snapshot([package("numpy", "2.1.0")])))
    result = runner.invoke(
        app, ["check", str(tmp_path / "good.json"), "--lock", str(lock), "--extra", "nope"]
    )
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_requirements_in_pips_syntax(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.txt").write_text("numpy==2.1.0\n")
    (tmp_path / "more.txt").write_text("six==1.16.0\n")
    (tmp_path / "gpu.txt").write_text("pytest==8.0.0\n")
    commit = "a" * 40
    (tmp_path / "requirements.txt").write_text(
        "--index-url https://example.invalid/simple\n"
        "--find-links ./wheels\n"
        "-rbase.txt\n"
        "--requirement=more.txt\n"
        "--requirement gpu.txt\n"
        "torch==2.11.0+cpu\n"
        f"-e git+https://example.invalid/click.git@{commit}#egg=click\n"
        "transformers==4.46.0 \\\n    --hash=sha256:00\n"
    )
    pkgs = [
        package("numpy", "2.1.0"),
        package("six", "1.16.0"),
        package("pytest", "8.0.0"),
        package("torch", "2.11.0+cpu"),
        package("transformers", "4.46.0"),
        package(
            "click",
            "8.1.0",
            source=Source(kind="vcs", url="https://example.invalid/click.git", commit=commit),
        ),
    ]
    snap = json.loads(store.dumps(snapshot(pkgs)))
    code, changes, err = gate(tmp_path, snap, tmp_path / "requirements.txt")
    assert (code, changes) == (0, []), (changes, err)
    assert "--index-url ignored" in err and "--find-links ignored" in err


def test_a_venvs_seed_packages_follow_the_installer(layout: Path, tmp_path: Path) -> None:
    """`python -m venv` puts pip (and setuptools, wheel) there: `pip install -r` leaves them,
    so against a requirements file they are info; `uv sync` is exact and removes them, so
    against a uv.lock they fail the gate, unless --inexact (as `uv sync --inexact`)."""
    seeded = synced(layout, ("pip", "24.0"), ("setuptools", "70.0.0"))
    code, changes, _ = gate(tmp_path, seeded, layout / "uv.lock", "--extra", "cpu")
    assert code == 1
    assert {(c["name"], c["severity"]) for c in changes} == {
        ("pip", "warning"),
        ("setuptools", "warning"),
    }
    assert "a seed package of the venv" in changes[0]["message"]
    code, changes, _ = gate(tmp_path, seeded, layout / "uv.lock", "--extra", "cpu", "--inexact")
    assert code == 0 and {c["severity"] for c in changes} == {"info"}
    lock = tmp_path / "requirements.txt"
    lock.write_text("six==1.16.0\n")
    seeded = json.loads(store.dumps(snapshot([package("six", "1.16.0"), package("pip", "24.0")])))
    code, changes, _ = gate(tmp_path, seeded, lock)
    assert code == 0 and [(c["name"], c["severity"]) for c in changes] == [("pip", "info")]
    code, changes, _ = gate(
        tmp_path, synced(layout, ("six", "1.16.0")), layout / "uv.lock", "--extra", "cpu"
    )
    assert code == 1 and changes[0]["severity"] == "warning"  # any other package is drift


def test_lock_against_lock_for_the_snapshots_interpreter(tmp_path: Path) -> None:
    """A lock change matters for the interpreter that runs it, not for envguard's own: with
    a snapshot (or --python), the markers are evaluated for that one; without, for every
    environment the lock covers, each change labelled with its marker."""
    from factories import interpreter

    (tmp_path / "old.txt").write_text('six==1.16.0; python_version < "3.11"\n')
    (tmp_path / "new.txt").write_text('six==1.17.0; python_version < "3.11"\n')
    args = ["diff", "--lock", str(tmp_path / "old.txt"), "--lock", str(tmp_path / "new.txt")]
    for version, severity in (("3.10.14", "warning"), ("3.12.1", "info")):
        snap = snapshot([], name="py", interpreter=interpreter(version))
        (tmp_path / "py.json").write_text(store.dumps(snap))
        theirs = runner.invoke(
            app, [*args[:1], str(tmp_path / "py.json"), *args[1:], "--format", "json"]
        )
        assert theirs.exit_code == (1 if severity == "warning" else 0), theirs.stderr
        (six,) = json.loads(theirs.stdout)["changes"]
        assert (six["kind"], six["severity"]) == ("upgraded", severity)
        assert six["scope"] == ['python_version < "3.11"']
    anywhere = runner.invoke(app, [*args, "--format", "json"])  # whatever runs envguard
    assert anywhere.exit_code == 1, anywhere.stderr
    (six,) = json.loads(anywhere.stdout)["changes"]
    assert six["message"] == 'six upgraded 1.16.0 -> 1.17.0 [python_version < "3.11"]'


def test_without_a_private_folder_the_copy_is_not_made_in_a_shared_one(layout: Path) -> None:
    """No HOME (some containers): uv's copy of the project would have to go to a shared
    folder, so the lock from stdin is walked by hand instead, and the note says why."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    proc = subprocess.run(
        [sys.executable, "-m", "envguard", "diff", "--lock", "-", "--lock", "uv.lock",
         "--extra", "cpu"],
        input=(layout / "uv.lock").read_text(), capture_output=True, text=True, cwd=layout,
        env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no private folder of yours" in proc.stderr
