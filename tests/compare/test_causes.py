"""Drift a person reads in ten seconds: on an sglang-style pollution of a real venv (tiny
wheels, real uv, real probe), the first lines name the torch build change and the install
that pulled everything else in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.testing import make_torch_wheel, make_wheel
from factories import make_venv, uv_install

runner = CliRunner()

VERSION_PY = (
    "__version__ = '2.14.1+cu130'\ncuda = '13.0'\ngit_version = 'abc'\nhip = None\ndebug = False\n"
)
STACK = [f"stackdep{i:02d}" for i in range(20)]


@pytest.fixture
def polluted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wh = tmp_path / "wh"
    make_torch_wheel(wh, "2.13.0+cpu", None)
    # PyPI's CUDA wheel: no local label in the distribution's version, +cu130 in version.py.
    make_wheel(
        wh, "torch", "2.14.1", files={"torch/__init__.py": "", "torch/version.py": VERSION_PY}
    )
    make_wheel(wh, "numpy", "2.1.0")
    make_wheel(wh, "numpy", "1.26.4")
    make_wheel(wh, "transformers", "4.46.0", requires=["numpy>=1.26"])
    for name in STACK:
        make_wheel(wh, name, "1.0")
    make_wheel(wh, "flashinfer-python", "0.2.0", requires=["torch"])
    make_wheel(
        wh,
        "sglang",
        "0.5.23",
        requires=[
            "torch==2.14.1",
            "numpy<2",
            "flashinfer-python",
            *STACK,
            "pytest; extra == 'test'",
        ],
    )
    make_wheel(wh, "six", "1.17.0")
    venv = tmp_path / ".venv"
    make_venv(venv)
    uv_install(venv, wh, "torch==2.13.0+cpu", "transformers==4.46.0", "numpy==2.1.0")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app, ["snapshot", "--python", str(venv), "--name", "good", "--metric", "tok_s=21500"]
    )
    assert result.exit_code == 0, result.stderr
    uv_install(venv, wh, "sglang==0.5.23", "six==1.17.0")  # the inference stack, and one more
    return venv


def test_the_first_lines_name_the_torch_build_and_the_cause(polluted: Path) -> None:
    wide = {"COLUMNS": "250"}
    result = runner.invoke(app, ["diff", "good", "--python", str(polluted)], env=wide)
    assert result.exit_code == 1, result.stderr
    lines = result.stdout.splitlines()
    head = lines[: lines.index("")]  # the verdict: the first lines, then a blank one
    assert head[0] == "torch 2.13.0+cpu -> 2.14.1+cu130 (CUDA none -> 13.0)"
    assert head[1] == (
        "sglang 0.5.23 installed with 23 packages it pulled in (2 GPU stack, 1 downgraded)"
    )
    assert head[2] == "downgraded: numpy 2.1.0 -> 1.26.4"  # by name, once
    assert head[3] == "other packages: 1 added"  # six: nothing pulled it in
    assert head[-1] == "last good run: tok_s=21500" and len(head) == 5
    # Folded by default: one row for sglang, the critical ones (torch, flashinfer) kept.
    assert (
        "with 23 packages it pulled in (21 folded into this row, 2 in rows of their own;"
        " --expand lists them)"
    ) in result.stdout
    assert (
        "drift from good: 5 critical, 1 warning (plus 21 warnings in install rows" in result.stdout
    )
    assert "stackdep07" not in result.stdout
    assert "torch upgraded 2.13.0+cpu -> 2.14.1+cu130" in result.stdout
    expanded = runner.invoke(app, ["diff", "good", "--python", str(polluted), "--expand"], env=wide)
    assert "stackdep07 1.0 added" in expanded.stdout and "pulled in by sglang" in expanded.stdout
    tree = expanded.stdout.split("what each install pulled in:\n", 1)[1].splitlines()
    assert tree[0] == "sglang 0.5.23"
    assert "  ├─ numpy 1.26.4 (downgraded)" in tree and "  └─ torch 2.14.1+cu130 (upgraded)" in tree


def test_json_keeps_the_flat_list_and_adds_the_groups(polluted: Path) -> None:
    result = runner.invoke(app, ["diff", "good", "--python", str(polluted), "--format", "json"])
    doc = json.loads(result.stdout)
    changes = {c["name"]: c for c in doc["changes"] if c["section"] == "packages"}
    assert len(changes) == 25  # sglang, 23 pulled in, six
    assert changes["stackdep00"]["groups"] == ["sglang"] and changes["six"]["groups"] == []
    assert changes["torch"]["actual"] == "2.14.1+cu130"
    assert doc["groups"] == [
        {"root": "sglang", "members": sorted(set(changes) - {"sglang", "six"})}
    ]
    assert doc["verdict"][0].startswith("torch 2.13.0+cpu -> 2.14.1+cu130")


def test_only_torch_includes_the_version(polluted: Path) -> None:
    result = runner.invoke(app, ["diff", "good", "--python", str(polluted), "--only", "torch"])
    assert "torch 2.13.0+cpu -> 2.14.1+cu130" in result.stdout


def test_plan_export_show_and_fleet_name_the_torch_build() -> None:
    """PyPI's CUDA wheel carries no local label; every command names its build anyway."""
    from envguard.compare.fleet import items
    from envguard.recovery.export import requirements_export
    from envguard.recovery.plan import Sources, torch_build_label
    from envguard.snapshots.models import TorchBuild
    from factories import package, snapshot

    snap = snapshot(
        [package("torch", "2.14.1")], torch=TorchBuild(version="2.14.1+cu130", cuda="13.0")
    )
    assert torch_build_label(snap) == "2.14.1+cu130 (CUDA 13.0)"
    assert "# torch build: 2.14.1+cu130 (CUDA 13.0)" in requirements_export(snap, Sources())
    assert items(snap)["package torch"] == "2.14.1+cu130"


def test_no_kind_of_change_crowds_another_out_of_the_verdict() -> None:
    """Several installs, the GPU stack, a downgrade, files, a cache and the metrics: each
    keeps its line (a six-line cap once cut the changed script and the last good run)."""
    from envguard.compare.causes import Cause
    from envguard.compare.models import Change
    from envguard.compare.policy import Policy
    from envguard.compare.severity import Severity
    from envguard.compare.verdict import verdict
    from factories import package, snapshot

    good = snapshot([package("numpy", "2.4.6")], metrics={"tok_s": 21500})
    bad = snapshot([package("numpy", "2.2.6")])

    def change(section: str, name: str, kind: str, **kw: str) -> Change:
        return Change(section=section, name=name, kind=kind, severity=Severity.warning,
                      message=kw.pop("message", f"{name} {kind}"), **kw)  # fmt: skip

    changes = [
        change("packages", "numpy", "downgraded", expected="2.4.6", actual="2.2.6"),
        *(change("packages", f"p{i}", "added", actual="1.0") for i in range(12)),
        change("packages", "nvidia-nccl-cu12", "added", actual="2.21"),
        change("files", "train.py", "content_changed"),
        change("caches", "inductor", "cold", message="inductor cache /tmp/x is cold"),
        change("env", "NCCL_P2P_DISABLE", "added", actual="1"),
        change("env", "CUDA_VISIBLE_DEVICES", "changed", expected="0,1,2,3", actual="0"),
        change("env", "HF_TOKEN", "changed", expected="<redacted:ab12>", actual="<redacted:cd34>"),
    ]
    causes = [Cause(f"p{i}", (f"p{i + 1}",)) for i in range(0, 10, 2)]
    lines = verdict(good, bad, changes, causes, Policy())
    text = "\n".join(lines)
    assert lines[0].startswith("p0 ") and lines[1].startswith("also installed: p2 (+1)")
    assert "GPU stack: nvidia-nccl-cu12 2.21 added" in text
    assert "downgraded: numpy 2.4.6 -> 2.2.6" in text
    assert "train.py changed" in text and "inductor cache cold" in text
    assert lines[-2] == (
        "variables: NCCL_P2P_DISABLE set (1), CUDA_VISIBLE_DEVICES 0,1,2,3 -> 0,"
        " HF_TOKEN changed (values redacted)"
    )
    assert lines[-1] == "last good run: tok_s=21500"


def test_markdown_folds_an_install_as_the_table_does(polluted: Path) -> None:
    """The step summary is read as the terminal table is: one row for sglang with a count,
    the critical ones kept, every member only in the <details> tree."""
    result = runner.invoke(app, ["diff", "good", "--python", str(polluted), "--format", "markdown"])
    text = result.stdout
    table, _, details = text.partition("<details>")
    assert "with 23 packages it pulled in (21 folded into this row" in table
    assert "stackdep07" not in table and "stackdep07" in details
    assert "flashinfer" in table  # critical: never folded
    assert len(table.splitlines()) < 30


def test_github_annotations_open_with_the_verdict_and_fold_an_install(polluted: Path) -> None:
    result = runner.invoke(app, ["diff", "good", "--python", str(polluted), "--format", "github"])
    lines = result.stdout.splitlines()
    assert lines[0].startswith("::notice title=envguard verdict::torch 2.13.0+cpu -> 2.14.1+cu130")
    assert not any("stackdep07" in line for line in lines)
    assert any("with 23 packages it pulled in (21 folded into this row" in line for line in lines)
