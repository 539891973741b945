"""The GitHub Action: action.yml's step run locally as the runner would run it (its env
mapping, a fake GITHUB_STEP_SUMMARY / GITHUB_OUTPUT / GITHUB_WORKSPACE), on a real lockfile."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envguard.snapshots import store
from factories import package, snapshot

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())


def _step_env(inputs: dict[str, str]) -> dict[str, str]:
    """The check step's env block with ${{ inputs.X }} filled in as the runner does."""
    defaults = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    values = {**defaults, **inputs}
    (step,) = [s for s in ACTION["runs"]["steps"] if s.get("id") == "check"]
    env = {}
    for key, expr in step["env"].items():
        name = re.fullmatch(r"\$\{\{ inputs\.([a-z-]+) \}\}", expr)
        assert name, expr
        env[key] = values[name.group(1)]
    return env


def step_outputs(text: str) -> dict[str, str]:
    """$GITHUB_OUTPUT as the runner reads it: name=value lines, the last value of a name wins."""
    return dict(line.split("=", 1) for line in text.splitlines())


def run_action(work: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str], str, str]:
    summary, output = work / "summary.md", work / "output.txt"
    summary.write_text("")
    output.write_text("")
    (step,) = [s for s in ACTION["runs"]["steps"] if s.get("id") == "check"]
    env = {
        **os.environ,
        **_step_env(inputs),
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_WORKSPACE": str(work),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
        "ENVGUARD": f"{sys.executable} -m envguard",
    }
    proc = subprocess.run(
        ["bash", "-c", step["run"]], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    return proc, summary.read_text(), output.read_text()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "snapshots").mkdir()
    good = snapshot([package("torch", "2.11.0+cu128"), package("numpy", "2.1.0")], name="good")
    (tmp_path / "snapshots" / "good.json").write_text(store.dumps(good))
    return tmp_path


def test_the_action_installs_envguard_from_itself_never_from_pypi() -> None:
    text = (ROOT / "action.yml").read_text() + (ROOT / "action" / "run.sh").read_text()
    assert "pip install envguard" not in text
    assert '--from "${GITHUB_ACTION_PATH:?}" envguard' in text


def test_a_drifted_lock_fails_with_annotations_on_its_lines(work: Path) -> None:
    (work / "requirements.txt").write_text("# pins\nnumpy==2.1.0\ntorch==2.11.0+cu130\n")
    proc, summary, output = run_action(work, lock="requirements.txt", snapshot="good")
    assert proc.returncode == 1, proc.stderr
    assert (
        "::error file=requirements.txt,line=3,title=envguard packages/pin_differs::" in proc.stdout
    )
    assert "drift from requirements.txt: 1 critical" in proc.stdout
    assert "critical (1)" in summary and "| torch | 2.11.0+cu130 | 2.11.0+cu128 |" in summary
    assert step_outputs(output) == {"drift": "true", "max-severity": "critical"}


def test_a_matching_lock_passes_and_says_which_side_matched(work: Path) -> None:
    (work / "requirements.txt").write_text("numpy==2.1.0\ntorch==2.11.0+cu128\n")
    proc, _, output = run_action(work, lock="requirements.txt")  # newest snapshot
    assert proc.returncode == 0, proc.stderr
    assert "no drift: snapshot good matches requirements.txt" in proc.stdout
    assert step_outputs(output) == {"drift": "false", "max-severity": ""}


def test_inputs_are_words_not_shell(work: Path) -> None:
    """An input is one argv word: $(...), ; and globs reach envguard as text, and fail there."""
    marker = work / "pwned"
    (work / "requirements.txt").write_text("numpy==2.1.0\ntorch==2.11.0+cu128\n")
    proc, _, _ = run_action(
        work, lock="requirements.txt", extras=f"$(touch {marker}) *", snapshot="good"
    )
    assert not marker.exists()
    assert proc.returncode == 0, proc.stderr  # requirements files have no extras to refuse


def test_fail_on_is_passed_through(work: Path) -> None:
    (work / "requirements.txt").write_text("numpy==2.1.0\ntorch==2.11.0+cu128\nsix==1.0\n")
    proc, _, output = run_action(work, lock="requirements.txt", **{"fail-on": "critical"})
    assert proc.returncode == 0, proc.stderr  # six not installed: a warning only
    assert "::warning file=requirements.txt,line=3" in proc.stdout
    assert step_outputs(output)["drift"] == "true"


@pytest.mark.parametrize(
    "inputs",
    [{"lock": "no-such.lock"}, {"snapshot": "no-such-snapshot"}, {"fail-on": "sometimes"}],
)
def test_bad_input_still_sets_the_outputs(work: Path, inputs: dict[str, str]) -> None:
    """A step reading the outputs after a failed check finds them, saying it could not run."""
    proc, _, output = run_action(work, **inputs)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(("error: ", "Usage: "))
    assert step_outputs(output) == {"drift": "unknown", "max-severity": ""}


def test_third_party_actions_are_pinned_by_commit() -> None:
    """A tag can be moved to other code; a commit SHA cannot. The version is a comment."""
    text = (ROOT / "action.yml").read_text()
    uses = [s["uses"] for s in ACTION["runs"]["steps"] if "uses" in s]
    assert uses
    for use in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", use), use
        assert re.search(re.escape(use) + r" # v\d+\.\d+\.\d+\n", text), use


def test_no_doc_or_example_installs_the_unrelated_pypi_envguard() -> None:
    """`envguard` on PyPI is another project: every install line names a checkout or envguard-ml."""
    installs = re.compile(
        r"(pip install|uv tool install|uv pip install|uvx|pipx install)(\s+-{1,2}\S+)*\s+['\"]?envguard(?![-\w./])"
    )
    files = [ROOT / "README.md", ROOT / "action.yml", ROOT / ".pre-commit-hooks.yaml"]
    files += [p for p in (ROOT / "docs").rglob("*") if p.is_file()]
    files += [
        p
        for p in (ROOT / "examples").rglob("*")
        if p.suffix in (".md", ".yml", ".yaml", ".sh", ".py")
    ]
    found = [f"{p}: {m.group(0)}" for p in files for m in installs.finditer(p.read_text())]
    assert found == []
