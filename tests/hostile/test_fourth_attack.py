"""What the fourth attack (on readable drift: verdict, groups, log, HTML) found, each closed
by a mechanism: no printed line can start a GitHub workflow command, names and versions
are redacted wherever they are shown, log and list never trace back, grouping is bounded,
and the grouping follows real installs (extras actually asked for, upgrades, cycles)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from envguard.snapshots.models import Package, Snapshot
from envguard.snapshots.shape import SNAPSHOT_KEYS
from factories import package, snapshot

runner = CliRunner()
TOKEN = "ghp_" + "A1b2C3d4E5" * 4


def pkg(name: str, version: str = "1.0", requires: tuple[str, ...] = ()) -> Package:
    return Package.model_validate({**package(name, version).model_dump(), "requires": requires})


def pair(tmp_path: Path, good: list[Package], bad: list[Package]) -> tuple[str, str]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(store.dumps(snapshot(good, name="a")))
    b.write_text(store.dumps(snapshot(bad, name="b")))
    return str(a), str(b)


def diff(a: str, b: str, *args: str) -> Any:
    return runner.invoke(app, ["diff", a, "--against", b, *args], env={"COLUMNS": "300"})


def test_no_printed_line_starts_a_workflow_command(tmp_path: Path) -> None:
    a, b = pair(
        tmp_path,
        [pkg("base")],
        [pkg("base"), pkg("::error title=pwned::fake", requires=("helperz",)), pkg("helperz")],
    )
    for args in ([], ["--format", "github"], ["--expand"], ["--format", "markdown"]):
        out = diff(a, b, *args).stdout
        lines = [ln for ln in out.splitlines() if ln.lstrip().startswith("::")]
        assert all(
            ln.startswith(
                (
                    "::error file",
                    "::error title=envguard",
                    "::warning title=envguard",
                    "::notice title=envguard",
                    "::warning file",
                    "::notice file",
                )
            )
            for ln in lines
        ), lines


def test_names_and_versions_are_redacted_in_the_verdict_groups_and_fleet(tmp_path: Path) -> None:
    a, b = pair(
        tmp_path,
        [pkg("base")],
        [
            pkg("base"),
            pkg("rootsec", f"1.0+{TOKEN}", requires=(TOKEN.lower(),)),
            pkg(TOKEN.lower()),
        ],
    )
    for fmt in ("table", "json", "markdown", "github", "html"):
        out = diff(a, b, "--format", fmt, "--expand").stdout
        assert TOKEN not in out and TOKEN.lower() not in out, fmt
    fleet = runner.invoke(app, ["fleet", a, b, "--format", "json"]).stdout
    assert TOKEN.lower() not in fleet


def _raw(name: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(store.dumps(snapshot([package("ok", "1")], name=name)))
    data.update(changes)
    return data


def test_log_and_list_never_trace_back(in_tmp: Path) -> None:
    folder = in_tmp / "snapshots"
    folder.mkdir()
    (folder / "old.json").write_text(json.dumps(_raw("old", created="0001-01-01T00:00:00+05:00")))
    (folder / "big.json").write_text(json.dumps(_raw("big", metrics={"tok_s": 10**4000})))
    (folder / "hi.json").write_text(json.dumps(_raw("hi", metrics={"tok_s": 1e308})))
    (folder / "lo.json").write_text(json.dumps(_raw("lo", metrics={"tok_s": -1e308})))
    for args in (
        ["log"],
        ["log", "--metric", "tok_s"],
        ["log", "--format", "markdown", "--metric", "tok_s"],
        ["list"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)


@pytest.mark.parametrize(
    "changes",
    [{"schema_version": 999}, {"surprise": 1}, {"torch": {"version": "2.0\u202e" + "x" * 5000}}],
)
def test_log_shows_a_malformed_snapshot_as_unreadable(
    in_tmp: Path, changes: dict[str, Any]
) -> None:
    folder = in_tmp / "snapshots"
    folder.mkdir()
    (folder / "bad.json").write_text(json.dumps(_raw("bad", **changes)))
    doc = json.loads(runner.invoke(app, ["log", "--format", "json"]).stdout)
    assert set(doc["snapshots"][0]) == {"path", "error"}


def test_the_log_reader_knows_every_snapshot_field() -> None:
    assert frozenset(Snapshot.model_fields) == SNAPSHOT_KEYS


def test_grouping_is_bounded(tmp_path: Path) -> None:
    members = [pkg(f"m{i:04d}") for i in range(300)]
    hub = pkg("hub", requires=tuple(m.name for m in members))
    roots = [pkg(f"r{i:05d}", requires=("hub",)) for i in range(3000)]
    a, b = pair(tmp_path, [pkg("base")], [pkg("base"), hub, *members, *roots])
    start = time.monotonic()
    result = diff(a, b, "--format", "json")
    assert result.exit_code == 1 and time.monotonic() - start < 30


def test_extras_are_bounded_and_only_the_asked_ones_count(tmp_path: Path) -> None:
    hub = pkg("hub", requires=tuple(f"x{j} ; extra == 'e{j}'" for j in range(300)))
    askers = [pkg(f"a{i:04d}", requires=(f"hub[e{i}]",)) for i in range(2000)]
    extras = [pkg(f"x{j}") for j in range(300)]
    a, b = pair(tmp_path, [pkg("base")], [pkg("base"), hub, *askers, *extras])
    start = time.monotonic()
    assert diff(a, b, "--format", "json").exit_code == 1
    assert time.monotonic() - start < 30


def test_grouping_follows_real_installs(tmp_path: Path) -> None:
    good = [
        pkg("peft", requires=("transformers",)),
        pkg("transformers", "4.0", requires=("tokenizers",)),
        pkg("tokenizers", "0.1"),
    ]
    bad = [
        pkg("peft", requires=("transformers",)),
        # an upgrade of something an unchanged package depends on pulls in its own upgrades
        pkg("transformers", "5.0", requires=("tokenizers",)),
        pkg("tokenizers", "0.2"),
        # an extra nobody asks for pulls in nothing
        pkg("xlib", requires=("xlib[test] ; extra == 'dev'", "pytestx ; extra == 'test'")),
        pkg("pytestx"),
        # a cycle of two new packages, each with its own dependency
        pkg("c1", requires=("c2", "d1")),
        pkg("c2", requires=("c1", "d2")),
        pkg("d1"),
        pkg("d2"),
    ]
    a, b = pair(tmp_path, good, bad)
    groups = {
        g["root"]: g["members"] for g in json.loads(diff(a, b, "--format", "json").stdout)["groups"]
    }
    assert groups["transformers"] == ["tokenizers"]
    assert "xlib" not in groups
    assert groups["c1"] == ["c2", "d1", "d2"]


def test_the_verdict_never_leaves_out_the_gpu_stack(tmp_path: Path) -> None:
    good = [pkg("base")]
    bad = [pkg("base")]
    for root in ("big1", "big2", "big3"):
        deps = [pkg(f"{root}-d{i}") for i in range(5)]
        bad += [pkg(root, requires=tuple(d.name for d in deps)), *deps]
    bad += [pkg("tiny", requires=("flash-attn",)), pkg("flash-attn", "2.7")]
    a, b = pair(tmp_path, good, bad)
    verdict = json.loads(diff(a, b, "--format", "json").stdout)["verdict"]
    assert any("flash-attn" in line for line in verdict), verdict


def test_html_shows_every_change_of_a_folded_package(tmp_path: Path) -> None:
    from envguard.snapshots.models import Source

    dep_before = package("dep0", "1.0", installer="pip")
    dep_after = package(
        "dep0",
        "1.0",
        installer="uv",
        source=Source(kind="url", url="https://example.invalid/d.whl"),
    )
    a, b = pair(tmp_path, [dep_before], [dep_after, pkg("rootx", requires=("dep0",))])
    html = diff(a, b, "--format", "html").stdout
    assert "source_changed" in html and "installer_changed" in html
    tree = diff(a, b, "--expand").stdout
    assert "dep0" in tree and "(source changed)" in tree
