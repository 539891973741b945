"""What the gate says on a real small uv project (offline, tiny wheels): uv's own words with
the names of extras, groups and projects kept, and hints for a selection mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.redact import redact_text
from envguard.snapshots import store
from envguard.testing import make_simple_index
from factories import UV, make_wheel, package, run, snapshot

runner = CliRunner()

PYPROJECT = """\
[project]
name = "app"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["six", "winonly; sys_platform == 'win32'"]

[project.optional-dependencies]
cpu = ["numpy"]

[dependency-groups]
dev = ["pytest"]
lint = ["ruff"]

[tool.uv]
package = false
"""

WHEELS = [("six", "1.16.0"), ("numpy", "2.1.0"), ("pytest", "8.0.0"), ("ruff", "0.6.0"),
          ("winonly", "1.0")]  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("msg")
    wheels = [make_wheel(root / "wh", n, v) for n, v in WHEELS]
    base = make_simple_index(root / "idx", {"pypi": wheels})
    proj = root / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    run([UV, "lock", "--quiet", "--offline", "--default-index", f"{base}/pypi"], cwd=proj)
    return proj


def check(tmp: Path, lock: Path, names: list[str], *flags: str) -> tuple[int, str, str]:
    versions = dict(WHEELS)
    (tmp / "good.json").write_text(store.dumps(snapshot([package(n, versions[n]) for n in names])))
    result = runner.invoke(app, ["check", str(tmp / "good.json"), "--lock", str(lock), *flags])
    return result.exit_code, result.stdout, result.stderr


def test_uvs_error_keeps_the_names_of_extras_and_projects(project: Path, tmp_path: Path) -> None:
    code, _, err = check(tmp_path, project / "uv.lock", ["six"], "--extra", "nope")
    assert code == 2
    assert err.splitlines()[0] == (
        f"error: {project / 'uv.lock'}: uv export refused it"
        " (Extra `nope` is not defined in the `optional-dependencies` table for `app`)"
    )
    code, _, err = check(tmp_path, project / "uv.lock", ["six"], "--group", "nope")
    assert code == 2 and "(Group `nope` is not defined in the project's" in err


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Group `auth-tokens`: not found", "Group `auth-tokens`: not found"),
        ("Extra `nope` is not defined", "Extra `nope` is not defined"),
        # Secrets inside backticks are still hidden.
        ("Extra `ghp_abcdefghijklmnopqrstuvwxyz123` x", "Extra `<redacted>` x"),
        ("fetch `https://u:hunter2@host/simple`", "fetch `https://host/simple`"),
        ("password: hunter2", "password: <redacted>"),
        ("`password=hunter2` x", "`password=<redacted> x"),
    ],
)
def test_quoted_names_are_kept_secrets_are_not(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_a_uv_exported_pylock_says_uv_applied_the_selection(project: Path, tmp_path: Path) -> None:
    exported = run([UV, "export", "--frozen", "--offline", "--format", "pylock.toml", "--extra",
                    "cpu", "--no-header"], cwd=project).stdout  # fmt: skip
    lock = tmp_path / "pylock.toml"
    lock.write_text(exported)
    code, _, err = check(tmp_path, lock, ["six", "numpy", "pytest"], "--extra", "cpu")
    assert code == 2
    assert err.splitlines() == [
        f"error: {lock}: Undeclared extras: cpu",
        "hint: uv applied the selection when it exported this pylock.toml:"
        " drop --extra/--group here",
    ]
    code, _, err = check(tmp_path, lock, ["six", "numpy", "pytest"], "--group", "lint")
    assert code == 2 and "hint: uv applied the selection" in err
    assert check(tmp_path, lock, ["six", "numpy", "pytest"])[0] == 0


def test_a_package_in_the_lock_says_why_it_is_not_installed(project: Path, tmp_path: Path) -> None:
    names = ["six", "pytest", "numpy", "ruff", "winonly"]
    code, out, _ = check(tmp_path, project / "uv.lock", names, "--format", "json")
    lock = project / "uv.lock"
    messages = {c["name"]: c["message"] for c in json.loads(out)["changes"]}
    assert code == 1 and messages == {
        "numpy": f"numpy 2.1.0 is installed; it is in {lock}, but only in extra `cpu`,"
        " not selected: add --extra cpu",
        "ruff": f"ruff 0.6.0 is installed; it is in {lock}, but only in group `lint`,"
        " not selected: add --group lint",
        "winonly": f"winonly 1.0 is installed; {lock} locks it only for sys_platform == 'win32'",
    }
    code, out, _ = check(tmp_path, lock, ["six", "winonly"], "--no-default-groups",
                         "--format", "json")  # fmt: skip
    assert [c["message"] for c in json.loads(out)["changes"]] == [
        f"winonly 1.0 is installed; {lock} locks it only for sys_platform == 'win32'"
    ]
    # Selected as the message says, they pass (winonly stays: this is not win32).
    code, out, _ = check(tmp_path, lock, names, "--extra", "cpu", "--group", "lint")
    assert code == 1 and "winonly" in out and "numpy" not in out and "ruff" not in out


def test_without_uv_the_walk_says_the_same(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVGUARD_UV", str(tmp_path / "no-uv-here"))
    code, out, _ = check(
        tmp_path, project / "uv.lock", ["six", "pytest", "ruff"], "--format", "json"
    )
    [ruff] = json.loads(out)["changes"]
    assert code == 1 and ruff["message"].endswith(
        "only in group `lint`, not selected: add --group lint"
    )
