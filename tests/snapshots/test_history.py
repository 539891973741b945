"""`envguard log`: snapshots in time order, a metric followed as bars, and what changed
between runs, so the fall and its cause read in one command."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from factories import package, snapshot

runner = CliRunner()
START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _save(folder: Path, name: str, day: int, tok_s: float, packages: list[tuple[str, str]]) -> None:
    snap = snapshot(
        [package(n, v) for n, v in packages],
        name=name,
        created=START + timedelta(days=day),
        metrics={"tok_s": tok_s},
    )
    (folder / f"{name}.json").write_text(store.dumps(snap))


@pytest.fixture
def runs(in_tmp: Path) -> Path:
    folder = in_tmp / "snapshots"
    folder.mkdir()
    good = [("torch", "2.13.0+cpu"), ("numpy", "2.1.0")]
    _save(folder, "mon", 0, 21500, good)
    _save(folder, "tue", 1, 21400, good)
    polluted = [("torch", "2.14.1+cu130"), ("numpy", "1.26.4"), ("sglang", "0.5.23")]
    _save(folder, "wed", 2, 4300, polluted)  # written in a different order than created
    (folder / "broken.json").write_text("{")
    return folder


def test_a_falling_metric_and_what_changed_then(runs: Path) -> None:
    result = runner.invoke(app, ["log", "--metric", "tok_s"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "│" in line and "created" not in line]
    assert [r.split("│")[2].strip() for r in rows] == ["mon", "tue", "wed", "broken"]
    assert "█ 21500" in rows[0] and "▁ 4300" in rows[2]
    assert "torch 2.13.0+cpu -> 2.14.1+cu130; 1 added, 2 changed" in rows[2]
    assert "first snapshot" in rows[0] and "no package change" in rows[1]
    assert "unreadable" in rows[3]


def test_log_as_json_and_markdown(runs: Path) -> None:
    from pydantic import TypeAdapter

    from envguard.schemas import LogDocument

    doc = json.loads(runner.invoke(app, ["log", "--format", "json"]).stdout)
    TypeAdapter(LogDocument).validate_python(doc)  # the published schema's model
    assert (doc["schema"], doc["schema_version"]) == ("envguard.log", 1)
    assert [s.get("name") for s in doc["snapshots"]] == ["mon", "tue", "wed", None]
    assert doc["snapshots"][2]["metrics"] == {"tok_s": 4300}
    md = runner.invoke(app, ["log", "--format", "markdown", "--metric", "tok_s"]).stdout
    assert md.startswith("## envguard log") and "| ▁ 4300 |" in md


def test_hostile_fields_never_reach_the_terminal(in_tmp: Path) -> None:
    folder = in_tmp / "snapshots"
    folder.mkdir()
    data = json.loads(store.dumps(snapshot([package("ok", "1")], name="x")))
    data["metrics"] = {"tok_s\u202e": 1}
    (folder / "x.json").write_text(json.dumps(data))
    data["name"], data["metrics"] = "y\x1b[2J", {}
    (folder / "y.json").write_text(json.dumps(data))
    result = runner.invoke(app, ["log"])
    assert result.exit_code == 0
    assert "\u202e" not in result.stdout and "\x1b" not in result.stdout
    assert result.stdout.count("unreadable") == 2
