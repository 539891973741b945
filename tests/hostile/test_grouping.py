"""Readable drift on a hostile snapshot: grouping is bounded, it follows real installs
(extras actually asked for, upgrades, cycles), the verdict never leaves out the GPU stack and
the HTML report shows every change of a folded package."""

from __future__ import annotations

import json
import time
from pathlib import Path

from factories import package
from hostile.helpers import diff, pair, pkg


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
