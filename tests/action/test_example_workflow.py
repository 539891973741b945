"""examples/github-actions.yml can be copied as is: no placeholders, least privilege, every
action pinned by commit, and no step output spliced into a shell script's text."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "examples" / "github-actions.yml").read_text()
WORKFLOW = yaml.safe_load(TEXT)
STEPS = [step for job in WORKFLOW["jobs"].values() for step in job["steps"]]


def test_it_reads_the_repository_and_nothing_more() -> None:
    assert WORKFLOW["permissions"] == {"contents": "read"}
    assert all("permissions" not in job for job in WORKFLOW["jobs"].values())


def test_no_expression_inside_a_run_script() -> None:
    """`${{ }}` in run: is pasted into the script before bash reads it (script injection);
    values travel in env: instead."""
    runs = [step["run"] for step in STEPS if "run" in step]
    assert runs
    assert not [run for run in runs if "${{" in run]
    passed = [v for step in STEPS for v in step.get("env", {}).values()]
    assert "${{ steps.envguard.outputs.drift }}" in passed


def test_no_placeholders() -> None:
    uncommented = "\n".join(line.split(" #", 1)[0] for line in TEXT.splitlines())
    uncommented = re.sub(r"(?m)^\s*#.*$", "", uncommented)
    for placeholder in ("OWNER", "COMMIT_SHA", "<", "TODO", "CHANGEME", "xxx"):
        assert placeholder not in uncommented, placeholder


def _uses(step: dict[str, Any]) -> str:
    return str(step.get("uses", ""))


def test_actions_are_pinned_by_commit_or_checked_out_here() -> None:
    for job in WORKFLOW["jobs"].values():
        for i, step in enumerate(job["steps"]):
            use = _uses(step)
            if use.startswith("./"):  # a local action: a checkout before it in its job
                paths = [s.get("with", {}).get("path") for s in job["steps"][:i]]
                assert use[2:] in paths, use
    for step in STEPS:
        use = _uses(step)
        if not use or use.startswith("./"):
            continue
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", use), use
        assert re.search(re.escape(use) + r" # v\d+\.\d+\.\d+\n", TEXT), use
    checkouts = [s for s in STEPS if _uses(s).startswith("actions/checkout@")]
    assert checkouts and all(s["with"]["persist-credentials"] is False for s in checkouts)
