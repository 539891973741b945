"""The lock gate's pure rules for uv projects: which uv settings reach uv, where the hand
walk starts and what uv sync's flags leave out, and direct sources compared by where they
came from. tests/field/test_lock_gate.py holds the same rules against uv itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envguard.compare.lockfiles import Pin, Selection, lock_drift, read_lock
from envguard.compare.lockfiles.uv import walk
from envguard.compare.lockfiles.uvsettings import resolver_settings, settings_toml
from envguard.compare.policy import Policy
from envguard.snapshots.models import Source
from factories import package, snapshot

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_only_resolver_settings_are_kept_and_uv_toml_wins(tmp_path: Path) -> None:
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "a"\n[tool.uv]\nresolution = "lowest"\ncache-dir = "/x"\n'
    )
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert resolver_settings(proj, env) == {"resolution": "lowest"}
    (proj / "uv.toml").write_text(
        'exclude-newer = "2024-06-01T00:00:00Z"\npython-preference = "only-system"\n'
        'keyring-provider = "subprocess"\n[[index]]\nurl = "https://example.invalid/simple"\n'
    )
    assert resolver_settings(proj, env) == {
        "exclude-newer": "2024-06-01T00:00:00Z",
        "index": [{"url": "https://example.invalid/simple"}],
    }


def test_user_config_counts_below_the_projects_and_uv_no_config_drops_all(
    tmp_path: Path,
) -> None:
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "uv.toml").write_text('prerelease = "allow"\nfind-links = ["/a"]\n')
    (tmp_path / "xdg" / "uv").mkdir(parents=True)
    (tmp_path / "xdg" / "uv" / "uv.toml").write_text(
        'prerelease = "disallow"\nresolution = "highest"\nfind-links = ["/b"]\ncache-dir = "/c"\n'
    )
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_CONFIG_DIRS": str(tmp_path / "none")}
    assert resolver_settings(proj, env) == {
        "prerelease": "allow",
        "find-links": ["/a", "/b"],
        "resolution": "highest",
    }
    assert resolver_settings(proj, {**env, "UV_NO_CONFIG": "1"}) == {}
    only = tmp_path / "only.toml"
    only.write_text('resolution = "lowest-direct"\n')
    assert resolver_settings(proj, {**env, "UV_CONFIG_FILE": str(only)}) == {
        "resolution": "lowest-direct"
    }


def test_settings_are_written_as_toml_that_reads_back() -> None:
    settings = {
        "exclude-newer": 'a"b\\c\n',
        "no-index": True,
        "index": [{"name": "x", "url": "https://h/s", "explicit": True}],
        "exclude-newer-package": {"torch": "2024-01-01T00:00:00Z"},
    }
    assert tomllib.loads(settings_toml(settings)) == settings


WORKSPACE = """\
version = 1
requires-python = ">=3.10"

[manifest]
members = ["app", "lib", "other"]

[[package]]
name = "app"
version = "0.1.0"
source = { editable = "." }
dependencies = [{ name = "lib" }, { name = "six" }]

[package.dev-dependencies]
dev = [{ name = "packaging" }]

[[package]]
name = "lib"
version = "0.1.0"
source = { editable = "packages/lib" }
dependencies = [{ name = "idna" }]

[[package]]
name = "other"
version = "0.1.0"
source = { editable = "packages/other" }
dependencies = [{ name = "attrs" }]

[[package]]
name = "six"
version = "1.17.0"
source = { registry = "https://example.invalid/simple" }

[[package]]
name = "idna"
version = "3.10"
source = { path = "wheels/idna-3.10-py3-none-any.whl" }

[[package]]
name = "attrs"
version = "25.1.0"
source = { registry = "https://example.invalid/simple" }

[[package]]
name = "packaging"
version = "25.0"
source = { registry = "https://example.invalid/simple" }
"""


def walked(selection: Selection, base: Path = Path("/proj")) -> dict[str, Pin]:
    data = tomllib.loads(WORKSPACE)
    return walk(data, where="uv.lock", base=base, env=None, selection=selection)


def test_the_walk_starts_at_the_project_not_every_member() -> None:
    pins = walked(Selection())
    assert sorted(pins) == ["app", "idna", "lib", "packaging", "six"]
    assert pins["lib"].editable == "/proj/packages/lib"
    assert pins["idna"] == Pin(
        name="idna",
        version="3.10",
        url="file:///proj/wheels/idna-3.10-py3-none-any.whl",
        kind="archive",
    )
    assert sorted(walked(Selection(all_packages=True))) == [
        "app", "attrs", "idna", "lib", "other", "packaging", "six",
    ]  # fmt: skip
    assert sorted(walked(Selection(packages=("other",)))) == ["attrs", "other"]


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (Selection(no_install_project=True), ["idna", "lib", "packaging", "six"]),
        (Selection(no_install_workspace=True), ["idna", "packaging", "six"]),
        (Selection(no_dev=True), ["app", "idna", "lib", "six"]),
        (Selection(no_groups=("dev",)), ["app", "idna", "lib", "six"]),
        (Selection(all_groups=True, no_dev=True), ["app", "idna", "lib", "six"]),
        (Selection(only_groups=("dev",)), ["packaging"]),
    ],
)
def test_uv_syncs_flags_leave_out_what_uv_sync_does(
    selection: Selection, expected: list[str]
) -> None:
    assert sorted(walked(selection)) == expected


def test_no_editable_pins_the_folder_not_an_editable() -> None:
    pins = walked(Selection(no_editable=True))
    assert pins["lib"] == Pin(
        name="lib", version="0.1.0", url="file:///proj/packages/lib", kind="directory"
    )


def test_a_virtual_workspace_root_installs_every_member_and_its_groups() -> None:
    data = tomllib.loads(
        WORKSPACE.replace('members = ["app", "lib", "other"]', 'members = ["lib", "other"]')
        .replace('source = { editable = "." }', 'source = { editable = "packages/app" }')
        .replace("[manifest]\n", '[manifest]\ndependency-groups = { dev = [{ name = "six" }] }\n')
    )
    data["package"] = [p for p in data["package"] if p["name"] not in ("app", "packaging")]
    pins = walk(data, where="uv.lock", base=Path("/w"), env=None, selection=Selection())
    assert sorted(pins) == ["attrs", "idna", "lib", "other", "six"]


def test_without_a_pyproject_paths_are_the_locks_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = tmp_path / "app"
    image.mkdir()
    (image / "uv.lock").write_text(WORKSPACE)
    monkeypatch.chdir(tmp_path)
    read = read_lock(image / "uv.lock", None)
    assert read.pins["lib"].editable == str(image / "packages" / "lib")
    assert "other" not in read.pins
    assert any("own walk" in note for note in read.notes)


def url_source(url: str) -> Source:
    from envguard.snapshots.document import file_url_path

    return Source(kind="url", url=url, path=file_url_path(url))


@pytest.mark.parametrize(
    ("installed", "fails"),
    [
        (url_source("file:///proj/wheels/idna-3.10-py3-none-any.whl"), False),
        (url_source("file:///proj/wheels/../wheels/idna-3.10-py3-none-any.whl"), False),
        (url_source("file:///elsewhere/idna-3.10-py3-none-any.whl"), True),
        (Source(), True),  # the index
        (Source(kind="dir", url="file:///proj/wheels", path="/proj/wheels"), True),
    ],
)
def test_a_path_wheel_must_come_from_that_file(installed: Source, fails: bool) -> None:
    pin = Pin(
        name="idna",
        version="3.10",
        url="file:///proj/wheels/idna-3.10-py3-none-any.whl",
        kind="archive",
    )
    drift = lock_drift(
        snapshot([package("idna", "3.10", source=installed)]),
        {"idna": pin},
        policy=Policy(),
        lock="uv.lock",
    )
    kinds = [c.kind for c in drift.changes]
    assert kinds == (["source_differs"] if fails else [])


def test_a_url_wheel_compares_its_url_and_names_both() -> None:
    pin = Pin(name="six", version="1.17.0", url="http://127.0.0.1:8000/six.whl", kind="archive")
    same = snapshot([package("six", "1.17.0", source=url_source("http://127.0.0.1:8000/six.whl"))])
    assert lock_drift(same, {"six": pin}, policy=Policy(), lock="uv.lock").changes == ()
    index = snapshot([package("six", "1.17.0")])
    (change,) = lock_drift(index, {"six": pin}, policy=Policy(), lock="uv.lock").changes
    assert change.kind == "source_differs"
    assert change.message == (
        "six: uv.lock installs it from the archive http://127.0.0.1:8000/six.whl,"
        " the snapshot has it from index"
    )


def test_selection_flags_become_uv_exports() -> None:
    chosen = Selection(
        no_groups=("lint",),
        no_dev=True,
        all_packages=True,
        no_install_project=True,
        no_install_workspace=True,
        no_editable=True,
    )
    assert chosen.uv_args() == [
        "--no-group", "lint", "--no-dev", "--all-packages", "--no-emit-project",
        "--no-emit-workspace", "--no-editable",
    ]  # fmt: skip
