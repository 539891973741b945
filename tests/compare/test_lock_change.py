"""A lock change (`check --lock OLD --lock NEW`) on a real uv project locked twice by uv
(offline, tiny wheels): two dependency groups (one default), an extra, a win32-only
dependency and a package that pulls in three others. What envguard calls a change is what
`uv export` (uv's own reading of each lock, with the same selection) says moved; what an
added package pulled in is folded under it; each change names its extra, group or marker;
nothing depends on the interpreter running envguard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from envguard.testing import make_simple_index
from factories import UV, interpreter, make_wheel, package, run, snapshot, uv_project_toml

runner = CliRunner()

OLD = {
    "dependencies": ["numpy==2.1.0", "colorama==0.4.5; sys_platform == 'win32'"],
    "extras": {"gpu": ["six"]},
    "groups": {"dev": ["pytest"], "lint": ["ruff"]},
}
# The change: sglang added (it pulls in aiohttp, yarl, orjson), colorama moved on win32
# only, mkdocs added to a group that is not a default one.
NEW = {
    "dependencies": ["numpy==2.1.0", "sglang", "colorama==0.4.6; sys_platform == 'win32'"],
    "extras": {"gpu": ["six"]},
    "groups": {"dev": ["pytest"], "lint": ["ruff"], "docs": ["mkdocs"]},
}

WHEELS = [  # name, version, requirements
    ("aiohttp", "3.9.0", ["yarl"]),
    ("colorama", "0.4.5", []),
    ("colorama", "0.4.6", []),
    ("iniconfig", "2.0.0", []),
    ("mkdocs", "1.6.0", []),
    ("numpy", "2.1.0", []),
    ("orjson", "3.10.0", []),
    ("pytest", "8.0.0", ["iniconfig"]),
    ("ruff", "0.6.0", []),
    ("sglang", "0.4.0", ["aiohttp", "orjson", "numpy"]),
    ("six", "1.16.0", []),
    ("yarl", "1.9.0", []),
]


@pytest.fixture(scope="module")
def change(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose uv.lock is the new lock and old.lock the old one, both by `uv lock`;
    beside them uv's own exports of each (pylock.old.toml, old.txt, ...)."""
    root = tmp_path_factory.mktemp("change")
    built = [make_wheel(root / "wh", n, v, requires=r) for n, v, r in WHEELS]
    index = make_simple_index(root / "idx", {"pypi": built}) + "/pypi"
    proj = root / "proj"
    proj.mkdir()
    for side, spec in (("old", OLD), ("new", NEW)):
        (proj / "pyproject.toml").write_text(
            uv_project_toml(spec["dependencies"], extras=spec["extras"], groups=spec["groups"])
        )
        run([UV, "lock", "--quiet", "--offline", "--default-index", index], cwd=proj)
        for args, out in (
            (["--format", "pylock.toml"], f"pylock.{side}.toml"),
            (["--no-hashes"], f"{side}.txt"),
        ):
            run([UV, "export", "--quiet", "--frozen", "--offline", "--all-groups",
                 "--all-extras", *args, "-o", out], cwd=proj)  # fmt: skip
        if side == "old":
            (proj / "old.lock").write_text((proj / "uv.lock").read_text())
    return proj


def lock_change(proj: Path, old: str, new: str, *flags: str) -> tuple[int, dict]:
    result = runner.invoke(
        app, ["check", "--lock", str(proj / old), "--lock", str(proj / new), "--format",
              "json", *flags],
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)


def uv_moved(proj: Path, *flags: str, old_flags: tuple[str, ...] | None = None) -> set[str]:
    """uv's answer: the packages whose line differs between the two locks' exports (uv
    exports only a project's own uv.lock: the old one is exported from a copy)."""
    old = proj.parent / "old-proj"
    if not old.exists():
        shutil.copytree(proj, old)
        (old / "uv.lock").write_text((proj / "old.lock").read_text())
    moved = uv_export(old, *(flags if old_flags is None else old_flags)) ^ uv_export(proj, *flags)
    return {re.split(r"[=\s;]", line)[0] for line in moved if line.strip()}


def uv_export(proj: Path, *flags: str) -> set[str]:
    proc = subprocess.run(
        [UV, "export", "--frozen", "--offline", "--no-hashes", "--no-annotate", "--no-header",
         *flags],
        cwd=proj, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return set(proc.stdout.splitlines())


def failing(doc: dict) -> set[str]:
    return {c["name"] for c in doc["changes"] if c["severity"] != "info"}


def test_a_lock_change_agrees_with_uv_and_folds_what_sglang_pulls_in(change: Path) -> None:
    code, doc = lock_change(change, "old.lock", "uv.lock")
    assert code == 1
    assert failing(doc) == uv_moved(change) == {
        "sglang", "aiohttp", "yarl", "orjson", "colorama"
    }  # fmt: skip
    assert "sglang 0.4.0 added (+3 packages it pulls in)" in doc["verdict"]
    assert doc["groups"] == [{"root": "sglang", "members": ["aiohttp", "orjson", "yarl"]}]
    found = {c["name"]: c for c in doc["changes"]}
    assert found["yarl"]["groups"] == ["sglang"]
    # The win32-only upgrade is there, labelled, though envguard runs on Linux.
    colorama = found["colorama"]
    assert (colorama["kind"], colorama["severity"]) == ("upgraded", "warning")
    assert colorama["scope"] == ['sys_platform == "win32"']
    assert colorama["message"].endswith('[sys_platform == "win32"]')
    assert any(line.startswith("only for some environments: colorama") for line in doc["verdict"])
    # mkdocs went into a group that is not selected: said, at info, with the flag.
    mkdocs = found["mkdocs"]
    assert (mkdocs["kind"], mkdocs["severity"]) == ("added", "info")
    assert mkdocs["message"] == "mkdocs 1.6.0 added (only in group `docs`, not selected)"


def test_the_selection_flags_move_a_change_in_as_uv_export_does(change: Path) -> None:
    code, doc = lock_change(change, "old.lock", "uv.lock", "--group", "docs")
    # The old lock has no group docs: uv refuses it there, envguard reads it without, noted.
    assert code == 1 and doc["notes"] == [
        f"{change / 'old.lock'} has no group `docs`: read without it"
    ]
    assert failing(doc) == uv_moved(change, "--group", "docs", old_flags=())
    mkdocs = next(c for c in doc["changes"] if c["name"] == "mkdocs")
    assert (mkdocs["severity"], mkdocs["scope"]) == ("warning", ["group docs"])
    assert mkdocs["message"] == "mkdocs 1.6.0 added [group docs]"


def test_for_a_named_interpreter_a_win32_change_is_said_not_failed(
    change: Path, tmp_path: Path
) -> None:
    (tmp_path / "linux.json").write_text(store.dumps(snapshot([package("numpy", "2.1.0")])))
    result = runner.invoke(
        app, ["check", str(tmp_path / "linux.json"), "--lock", str(change / "old.lock"),
              "--lock", str(change / "uv.lock"), "--format", "json"],
    )  # fmt: skip
    doc = json.loads(result.stdout)
    colorama = next(c for c in doc["changes"] if c["name"] == "colorama")
    assert (colorama["severity"], colorama["scope"]) == ("info", ['sys_platform == "win32"'])
    # The message keeps uv.lock's own spelling of the marker.
    assert colorama["message"] == (
        "colorama upgraded 0.4.5 -> 0.4.6 (locked only for sys_platform == 'win32')"
    )


def test_uvs_exports_say_the_same_where_the_format_carries_it(change: Path) -> None:
    _, from_uv = lock_change(change, "old.lock", "uv.lock", "--all-groups")
    changes = {(c["kind"], c["name"], c["severity"]) for c in from_uv["changes"]}
    for old, new in (("old.txt", "new.txt"), ("pylock.old.toml", "pylock.new.toml")):
        code, doc = lock_change(change, old, new)
        assert code == 1
        assert {(c["kind"], c["name"], c["severity"]) for c in doc["changes"]} == changes
        colorama = next(c for c in doc["changes"] if c["name"] == "colorama")
        assert colorama["scope"] == ['sys_platform == "win32"']
    # requirements.txt says what pulled what in (`# via`); uv's pylock.toml does not.
    assert lock_change(change, "old.txt", "new.txt")[1]["groups"] == from_uv["groups"]
    assert lock_change(change, "pylock.old.toml", "pylock.new.toml")[1]["groups"] == []


NEWER = sys.version_info.minor + 1  # a Python above the one running envguard


def pylock(requires_python: str, packages: list[tuple[str, str, str | None]]) -> str:
    """A hand-written multi-use PEP 751 lock (extra gpu, groups dev and lint) of
    ``packages`` (name, version, marker)."""
    head = (
        f'lock-version = "1.0"\ncreated-by = "hand"\nrequires-python = "{requires_python}"\n'
        'extras = ["gpu"]\ndependency-groups = ["dev", "lint"]\ndefault-groups = ["dev"]\n'
    )
    entries = []
    for name, version, marker in packages:
        wheel = f"{name}-{version}-py3-none-any.whl"
        entries.append(
            f'\n[[packages]]\nname = "{name}"\nversion = "{version}"\n'
            + (f"marker = {json.dumps(marker)}\n" if marker else "")
            + f'wheels = [{{ name = "{wheel}", url = "https://example.invalid/{wheel}",'
            ' hashes = { sha256 = "00" } }]\n'
        )
    return head + "".join(entries)


NEWER = sys.version_info.minor + 1  # a Python above the one running envguard
WIN_NEWER = f"sys_platform == 'win32' and python_version >= '3.{NEWER}'"


def test_a_lock_for_a_newer_python_is_read_for_its_own_range(tmp_path: Path) -> None:
    """`requires-python` above envguard's own Python: read for the lock's range, no
    'requires Python' failure, the markers of that range evaluated."""
    for side, version in (("old", "2.1.0"), ("new", "2.2.0")):
        (tmp_path / f"pylock.{side}.toml").write_text(
            pylock(
                f">=3.{NEWER}",
                [
                    ("numpy", version, None),
                    ("ruff", "0.6.0", "'lint' in dependency_groups"),
                    ("colorama", version, WIN_NEWER),
                ],
            )
        )
    code, doc = lock_change(tmp_path, "pylock.old.toml", "pylock.new.toml")
    assert code == 1
    found = {c["name"]: (c["kind"], c["severity"], c["scope"]) for c in doc["changes"]}
    assert found == {
        "numpy": ("upgraded", "warning", []),
        "colorama": (
            "upgraded",
            "warning",
            [f'sys_platform == "win32" and python_version >= "3.{NEWER}"'],
        ),
    }


def test_pylock_and_requirements_say_why_an_installed_package_is_not_installed(
    tmp_path: Path,
) -> None:
    """`check --lock` against a multi-use pylock.toml and a requirements file: a package
    in an unselected group, or locked only for win32, is named as such."""
    lock = tmp_path / "pylock.toml"
    lock.write_text(
        pylock(
            ">=3.8",
            [
                ("numpy", "2.1.0", None),
                ("ruff", "0.6.0", "'lint' in dependency_groups"),
                ("colorama", "2.1.0", "sys_platform == 'win32'"),
            ],
        )
    )
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("numpy==2.1.0\ncolorama==2.1.0 ; sys_platform == 'win32'\n")
    installed = [package(n, "2.1.0") for n in ("numpy", "colorama")] + [package("ruff", "0.6.0")]
    snap = snapshot(installed, interpreter=interpreter())
    (tmp_path / "good.json").write_text(store.dumps(snap))
    said = {}
    for path in (lock, reqs):
        result = runner.invoke(
            app, ["check", str(tmp_path / "good.json"), "--lock", str(path), "--format", "json"]
        )
        assert result.exit_code == 1, result.stderr
        said[path.name] = {c["name"]: c["message"] for c in json.loads(result.stdout)["changes"]}
    assert said["pylock.toml"] == {
        "ruff": f"ruff 0.6.0 is installed; it is in {lock}, but only in group `lint`,"
        " not selected: add --group lint",
        "colorama": f'colorama 2.1.0 is installed; {lock} locks it only for sys_platform == "win32"',
    }
    assert said["requirements.txt"]["colorama"] == (
        f'colorama 2.1.0 is installed; {reqs} locks it only for sys_platform == "win32"'
    )


def test_a_secret_in_a_marker_is_not_printed(tmp_path: Path) -> None:
    """A marker is lockfile text from a pull request: its scope and message are redacted
    like every other field."""
    marker = "platform_release == 'https://ci:s3cr3tT0ken@example.invalid/x'"
    (tmp_path / "old.txt").write_text(f"six==1.16.0 ; {marker}\n")
    (tmp_path / "new.txt").write_text(f"six==1.17.0 ; {marker}\n")
    result = runner.invoke(
        app, ["check", "--lock", str(tmp_path / "old.txt"), "--lock", str(tmp_path / "new.txt"),
              "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 1, result.stderr
    assert "s3cr3tT0ken" not in result.stdout
    (six,) = json.loads(result.stdout)["changes"]
    assert six["scope"] and "example.invalid" in six["scope"][0]
