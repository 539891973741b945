"""I1: an untouched venv matches its own fresh snapshot: `diff` and `check` exit 0 with
nothing above info, on every member of the corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from field.corpus import Corpus, envguard, load_json

MEMBERS = sorted(Corpus.SPECS)


@pytest.mark.parametrize("name", MEMBERS)
def test_an_untouched_member_matches_its_own_snapshot(
    name: str, corpus: Corpus, field_env: Path
) -> None:
    member = corpus(name)
    py = str(member.python)
    taken = envguard("snapshot", "--name", "good", "--python", py)
    assert taken.returncode == 0, taken.stderr
    diff = envguard("diff", "good", "--python", py, "--format", "json")
    report = load_json(diff.stdout)
    above_info = [c for c in report["changes"] if c["severity"] != "info"]  # type: ignore[union-attr]
    assert above_info == [], diff.stdout
    assert diff.returncode == 0, diff.stderr
    check = envguard("check", "good", "--python", py)
    assert check.returncode == 0, check.stdout + check.stderr
