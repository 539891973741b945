"""Text from snapshots, hosts and files never drives the terminal, Markdown or GitHub."""

from __future__ import annotations

import io

from rich.console import Console

from envguard.compare.models import Change, Drift, Severity
from envguard.render.github import drift_github
from envguard.render.markdown import drift_markdown
from envguard.render.table import drift_table

HOSTILE = "x\x1b]0;title\x07\x1b[2J\u202e`![](https://e.example/p.png)[click](https://e.example)<img src=x>|~~s~~"


def hostile_drift() -> Drift:
    change = Change(
        section="packages",
        kind="added",
        name=HOSTILE,
        expected=None,
        actual="<img src=y>",
        severity=Severity.warning,
        message=f"{HOSTILE} added\n::error::forged",
    )
    return Drift(changes=(change,), metrics={"note": HOSTILE}, expected_name="good")


def test_terminal_output_carries_no_control_characters() -> None:
    console = Console(file=io.StringIO(), width=300, color_system=None, record=True)
    drift_table(hostile_drift(), console)
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b" in text  # shown, escaped: the reader sees that something odd was there


def test_markdown_output_has_no_live_markup() -> None:
    md = drift_markdown(hostile_drift())
    assert "<img" not in md and "\x1b" not in md
    assert "![" not in md and "](" not in md.replace("\\](", "")
    assert "`" not in md.replace("\\`", "")
    body = [line for line in md.splitlines() if line.startswith("| packages")]
    assert len(body) == 1 and body[0].count(" | ") == 5  # the | in the name did not add a cell


def test_annotations_cannot_start_a_second_command() -> None:
    out = drift_github(hostile_drift())
    assert len(out.strip().splitlines()) == 1 and "%0A:\u200b:error:\u200b:forged" in out
    assert "\x1b" not in out
