"""A clean answer kept (compare.identical): the engine reads no UNREAD field of either side
but for labels and metrics, so its answer is a function of what the keys cover; what a
live side alone carries changes its key; a Clean is the Drift the engine gives."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from envguard.compare.engine import diff
from envguard.compare.identical import UNREAD, Clean, live_key, snapshot_key
from envguard.compare.policy import Policy, policy_from_table
from envguard.snapshots.models import (
    Cache,
    Claimant,
    Clash,
    FileDigest,
    Fit,
    Library,
    OnDisk,
    Repo,
    Snapshot,
    TorchBuild,
    Unfit,
)
from factories import package, snapshot

SHA, SHA2 = "a" * 64, "b" * 64
ON_DISK = OnDisk(checked=10, modified=("a.py",), missing=("b.py",), added=("c.pyc",))
# Snapshots the engine finds something in even against themselves, and plain ones.
CASES = {
    "plain": snapshot([package("numpy", "2.0")], metrics={"tok_s": 21500}),
    "library disagrees with its metadata": snapshot(
        libraries=(
            Library(
                name="libnccl.so.2",
                path="nvidia/nccl/lib/libnccl.so.2",
                dist="nvidia-nccl-cu12",
                metadata_version="2.30.7",
                embedded_version="2.28.9",
            ),
        )
    ),
    "unfit extension": snapshot(
        fit=Fit(checked=3, broken=(Unfit(path="tv/_C.so", missing=("libcudart.so.13",)),))
    ),
    "siblings split": snapshot(
        [
            package("torch", "2.5.0"),
            package("torchvision", "0.20.0").model_copy(update={"requires": ("torch==2.4.0",)}),
        ]
    ),
    "files edited and clashes": snapshot(
        [package("numpy", "2.0").model_copy(update={"on_disk": ON_DISK})],
        clashes=(
            Clash(
                path="d.so",
                claimants=(Claimant(name="numpy", version="2.0"),),
                owner="numpy",
            ),
        ),
        unowned=("evil.pth",),
    ),
    "a file the snapshot could not read": snapshot(
        files=(FileDigest(path="/code/train.py", sha256=None, size=None),)
    ),
    "a repo listed twice": snapshot(
        repos=(Repo(path="/code", head="abc"), Repo(path="/code", head="def"))
    ),
    "stale cache on NFS": snapshot(
        [package("torch", "2.5.0")],
        torch=TorchBuild(version="2.5.0"),
        caches=(Cache(kind="inductor", path="/c/ind", exists=True, bytes=100, files=5, fs="nfs4"),),
    ),
}
POLICIES = {
    "default": Policy(),
    "stricter": policy_from_table(
        {"severity": {"libraries": "critical", "fit": "critical", "caches": "critical"}},
        where="pyproject.toml",
    ),
    "packages ignored": Policy(ignore_sections=("packages",)),
}


def _unread_changed(snap: Snapshot) -> Snapshot:
    """``snap`` with every UNREAD field other than it was."""
    changed = snap.model_copy(
        update={
            "name": snap.name + "-live",
            "created": datetime(2030, 1, 1, tzinfo=timezone.utc),
            "signature": "f" * 64,
            "command": ("python", "other.py"),
            "note": "another note",
            "metrics": {"other": 1},
        }
    )
    assert set(UNREAD) <= set(Snapshot.model_fields)
    return changed


def _answer(drift: object) -> tuple[Any, ...]:
    return tuple(getattr(drift, f) for f in ("changes", "verdict", "groups", "subject", "notes"))


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_engine_reads_no_unread_field(case: Snapshot, policy: Policy) -> None:
    """What the engine finds (changes, verdict, groups) is the same whatever either side's
    UNREAD fields hold: the key of a kept answer leaves them out."""
    renamed = case.model_copy(update={"name": case.name + "-live"})
    found = _answer(diff(case, renamed, policy))
    assert _answer(diff(case, _unread_changed(case), policy)) == found
    # The good side's metrics are its verdict's last line once something drifted.
    changes, verdict, *rest = _answer(diff(_unread_changed(case), renamed, policy))
    assert (changes, *rest) == (found[0], *found[2:])
    lines = [v for v in verdict if not v.startswith("last good run")]
    assert lines == [v for v in found[1] if not v.startswith("last good run")]
    doc = case.model_dump(mode="json")
    other = _unread_changed(case).model_dump(mode="json")
    assert snapshot_key(doc, policy, "code") == snapshot_key(other, policy, "code")
    assert live_key(doc) == live_key(other)


def test_a_key_is_every_input_of_the_answer() -> None:
    """Another policy, other comparison code, a field the engine reads, or what only a live
    side carries (a repo it could not read): another key."""
    snap = CASES["plain"].model_copy(update={"repos": (Repo(path="/code", head="abc"),)})
    doc = snap.model_dump(mode="json")
    keys = {
        snapshot_key(doc, Policy(), "code"),
        snapshot_key(doc, POLICIES["stricter"], "code"),
        snapshot_key(doc, Policy(), "other code"),
        snapshot_key({**doc, "env": {"CUDA_VISIBLE_DEVICES": "1"}}, Policy(), "code"),
    }
    assert len(keys) == 4
    live = {**doc, "repos": [{**doc["repos"][0], "error": "not readable"}]}
    assert live_key(live) != live_key(doc)
    assert live_key({**doc, "env": {"N": 1}}) != live_key({**doc, "env": {"N": 1.0}})
    # where the policy was read from is no rule
    assert snapshot_key(doc, Policy(source="a/pyproject.toml"), "c") == snapshot_key(
        doc, Policy(source="b/pyproject.toml"), "c"
    )


def test_a_clean_answer_told_again_is_the_engines_drift() -> None:
    snap = CASES["plain"]
    live = snap.model_copy(update={"name": "good-live"})
    drift = diff(snap, live, Policy())
    assert not drift.changes
    again = Clean(snap.name, live.name, snap.model_dump(mode="json")["metrics"])
    assert again.drift() == drift
    assert again.drift().model_dump(mode="json") == drift.model_dump(mode="json")


def test_the_comparison_is_stamped_before_any_of_its_files_loads() -> None:
    """A process keeps clean answers under the stamp of the code it runs: the stamp is
    taken as envguard.snapshots or envguard.compare is first imported (whichever comes
    first), and one taken once a stamped module has loaded vouches for nothing."""
    import subprocess
    import sys

    from envguard.snapshots import clean

    for first in ("envguard.compare.engine", "envguard.snapshots.document", "envguard.cli"):
        program = (
            f"import {first}, sys\n"
            "from envguard.snapshots.clean import comparison_code\n"
            "sys.stdout.write('stamped' if comparison_code() else 'none')\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
        )
        assert proc.stdout == "stamped", (first, proc.stderr)
    # Taken again in this process, which loaded the engine long ago: no stamp.
    assert clean.comparison_code.__wrapped__() is None


def test_a_clean_answer_is_written_as_the_engines_drift_in_every_format() -> None:
    """Each report a clean diff writes from a Clean (the JSON document, the Markdown report,
    GitHub's annotations and step outputs) is the one written from its Drift."""
    from envguard.render.github import drift_github, drift_outputs
    from envguard.render.json import drift_json
    from envguard.render.markdown import drift_markdown
    from envguard.render.text import summary

    clean = Clean("good", "good-live", {"tok_s": 21500, "loss": 1.25, "run": "a"})
    drift = clean.drift()
    for write in (drift_json, drift_markdown, drift_github, drift_outputs, summary):
        assert write(clean) == write(drift), write.__name__
