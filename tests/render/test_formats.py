"""Golden tests: each drift format, byte for byte (UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from envguard.compare.models import Change, Drift, Severity
from envguard.render.github import drift_github
from envguard.render.json import drift_json
from envguard.render.markdown import drift_markdown
from envguard.render.table import drift_table

GOLDEN = Path(__file__).parent / "golden"

DRIFT = Drift(
    changes=(
        Change(
            section="packages",
            kind="variant_changed",
            name="torch",
            expected="2.11.0+cu128",
            actual="2.11.0+cu130",
            severity=Severity.critical,
            message="torch 2.11.0+cu128 -> 2.11.0+cu130: same release, a different build"
            " (+cu128 -> +cu130): GPU stack",
        ),
        Change(
            section="packages",
            kind="added",
            name="sglang",
            expected=None,
            actual="0.4.0",
            severity=Severity.critical,
            message="sglang 0.4.0 added: not in the good environment: GPU stack",
        ),
        Change(
            section="caches",
            kind="cold",
            name="/tmp/torchinductor_root",
            expected="1.2 GiB, 20000 files",
            actual="missing",
            severity=Severity.warning,
            message="inductor cache /tmp/torchinductor_root is cold (missing; was 1.2 GiB,"
            " 20000 files): first steps will recompile, expect a slow warm-up",
        ),
        Change(
            section="env",
            kind="changed",
            name="NCCL_ALGO",
            expected="Ring",
            actual="Tree|x",
            severity=Severity.warning,
            message="$NCCL_ALGO changed (Ring -> Tree|x)",
        ),
        Change(
            section="interpreter",
            kind="prefix",
            name="prefix",
            expected="/a",
            actual="/b",
            severity=Severity.info,
            message="a different environment path: /a -> /b",
        ),
    ),
    metrics={"tok_s": 21500},
    expected_name="good",
    actual_name="good-live",
)


def table_text(drift: Drift) -> str:
    console = Console(width=100, color_system=None, record=True, file=io.StringIO())
    drift_table(drift, console)
    return console.export_text()


RENDERERS = {
    "drift.json": drift_json,
    "drift.md": drift_markdown,
    "drift.github.txt": drift_github,
    "drift.table.txt": table_text,
}


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_golden(name: str) -> None:
    text = RENDERERS[name](DRIFT)
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


def test_json_contract_fields() -> None:
    doc = json.loads(drift_json(DRIFT))
    assert doc["drift"] is True and doc["max_severity"] == "critical"
    assert set(doc["changes"][0]) == {
        "section",
        "kind",
        "name",
        "expected",
        "actual",
        "severity",
        "message",
        "file",
        "line",
        "groups",
        "scope",
    }
    assert doc["metrics"] == {"tok_s": 21500}
    assert (doc["schema"], doc["schema_version"]) == ("envguard.drift", 1)


def test_no_drift_renders_cleanly() -> None:
    empty = Drift(expected_name="good")
    assert json.loads(drift_json(empty))["drift"] is False
    assert drift_github(empty) == ""
    assert "no drift" in table_text(empty)


def test_github_escapes_newlines_in_messages() -> None:
    hostile = Drift(
        changes=(
            Change(
                section="env",
                kind="added",
                name="X",
                severity=Severity.warning,
                message="line1\n::error::forged",
            ),
        )
    )
    out = drift_github(hostile)
    assert out.count("\n") == 1 and "%0A:\u200b:error:\u200b:forged" in out


def test_an_annotation_points_at_the_lockfile_from_the_workspace_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative --lock given from a project below $GITHUB_WORKSPACE is annotated by its
    path from the workspace root, where GitHub looks for it."""
    from envguard.compare.models import Change, Drift, Severity

    (tmp_path / "proj").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    change = Change(section="packages", kind="not_in_lock", name="six", message="six",
                    severity=Severity.warning, file="uv.lock", line=12)  # fmt: skip
    out = drift_github(Drift(changes=(change,)), workspace=str(tmp_path))
    assert "file=proj/uv.lock,line=12," in out


def test_show_names_the_compile_key_ingredients() -> None:
    from envguard.render.table import compile_label
    from envguard.snapshots.models import CompileKey, Compiler, TritonKey

    key = CompileKey(
        cxx=Compiler(name="g++", version="g++ (Debian 12.2.0-14) 12.2.0"),
        triton=TritonKey(version="3.8.0", digest="ba4da488a3fd" + "0" * 52),
        capabilities=("9.0", "9.0"),
    )
    assert compile_label(key) == (
        "C++ g++ (g++ (Debian 12.2.0-14) 12.2.0), triton 3.8.0 key ba4da488a3fd,"
        " compute capability 9.0"
    )
    missing = CompileKey(cxx=Compiler(name="clang++", error="not found on PATH"))
    assert compile_label(missing) == "C++ clang++ (not found on PATH)"
    assert compile_label(CompileKey()) == "-"
