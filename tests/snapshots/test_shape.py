"""The snapshot's shape is declared once (snapshots/models.py, the probe report's
TypedDicts) and everything fast is generated from it; a file from a newer envguard of the
same major version is read as far as this one knows, said once in a note."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import field_validator

import envguard
from envguard import SCHEMA_VERSION, dev, notices
from envguard.errors import SnapshotError
from envguard.snapshots import shape, store
from envguard.snapshots.history import history
from envguard.snapshots.models import Model, Snapshot
from factories import make_git_repo

# Every field a 1.0 file could hold. A field added since carries Since(minor): the file's
# schema_minor says which fields a reader must know to read it all.
FIELDS_1_0 = {
    "Snapshot": "schema_version name created host user envguard_version command via note"
    " metrics interpreter packages torch accelerator repos files caches env warnings",
    "Interpreter": "version implementation executable prefix base_prefix is_venv os machine"
    " libc site_packages markers",
    "Package": "name display_name version installer requested location source fingerprint"
    " shadowed requires",
    "Source": "kind url vcs commit requested_revision path archive_hash subdirectory",
    "TorchBuild": "version cuda git_version hip debug cudnn nccl cublas triton",
    "Accelerator": "present driver gpus count nvcc source",
    "Repo": "path head branch dirty diff_sha256 untracked remote error",
    "FileDigest": "path sha256 size root rel read_from error",
    "Cache": "kind path exists readable bytes files newest_mtime archive error",
    "CacheArchive": "sha256 files bytes compressed",
}


@pytest.mark.version_pinned("the regenerated schema/*.json is the newest pydantic's text")
def test_the_generated_files_are_what_the_declarations_make() -> None:
    stale = [str(p.relative_to(dev.REPO)) for p in dev.stale()]
    assert not stale, f"{stale} disagree with the models: run `python -m envguard.dev regenerate`"


def test_every_field_added_after_1_0_says_since_when_and_the_minor_follows() -> None:
    from envguard.dev import _models, _since

    found = 0
    for model in _models(Snapshot):
        if model.__name__ not in FIELDS_1_0:
            # A model added since 1.0: the field that holds it says since when; a field
            # added to it later says its own (Fit.archs).
            found = max([found, *(_since(info) for info in model.model_fields.values())])
            continue
        old = set(FIELDS_1_0[model.__name__].split())
        for name, info in model.model_fields.items():
            since = _since(info)
            if name in old:
                assert since == 0, f"{model.__name__}.{name} was in 1.0"
            else:
                assert since >= 1, f"{model.__name__}.{name} is new: declare Since(minor)"
            found = max(found, since)
    assert found == shape.SCHEMA_MINOR >= 1


def test_a_validator_without_a_fast_twin_stops_the_generator() -> None:
    class Guarded(Model):
        name: str

        @field_validator("name")
        @classmethod
        def _shouting(cls, name: str) -> str:
            return name.upper()

    with pytest.raises(dev.GenerationError, match="VALIDATOR_HOOKS"):
        dev._fits_function(dev._Shape(), Guarded)


def test_a_type_the_generator_cannot_check_stops_it() -> None:
    class Odd(Model):
        ratio: complex

    with pytest.raises(dev.GenerationError, match="no fast check"):
        dev._fits_function(dev._Shape(), Odd)


@pytest.mark.version_pinned("an unchanged tree is fresh only with the newest pydantic's text")
def test_the_dev_command_says_what_is_stale(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "envguard.dev", "check"], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout) == (0, "")
    bad = subprocess.run(
        [sys.executable, "-m", "envguard.dev", "frobnicate"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "regenerate|check" in bad.stderr


# ---- files from the future ---------------------------------------------------------------------


def _written(tmp_path: Path) -> dict[str, Any]:
    """A real snapshot of this interpreter with a tracked file, as its file holds it."""
    repo = make_git_repo(tmp_path / "proj", {"train.py": "print('train')\n"})
    snap = envguard.snapshot(python=sys.executable, name="now", files=(str(repo / "train.py"),))
    data: dict[str, Any] = json.loads(store.dumps(snap))
    return data


def _from_the_future(data: dict[str, Any], *, minor: int) -> dict[str, Any]:
    future = json.loads(json.dumps(data))
    future["schema_minor"] = minor
    future["cluster"] = {"fingerprint": "abc"}  # a new section
    future["packages"][0]["clobbers"] = ["nvidia/nccl/lib/libnccl.so.2"]
    future["files"][0]["xattrs"] = {}
    future["interpreter"]["gil"] = False
    return future


def test_a_newer_minor_version_is_read_as_far_as_this_envguard_knows(tmp_path: Path) -> None:
    data = _written(tmp_path)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(_from_the_future(data, minor=shape.SCHEMA_MINOR + 7)))
    before = len(notices.said())

    snap = envguard.load(path)
    again = envguard.load(path)  # said once, not once per read

    assert snap == again
    assert snap.packages == Snapshot.model_validate(data).packages
    assert snap.files[0].mode is not None
    new = notices.said()[before:]
    assert len(new) == 1, new
    assert (
        f"written by a newer envguard (schema {SCHEMA_VERSION}.{shape.SCHEMA_MINOR + 7}; this one"
        f" reads {SCHEMA_VERSION}.{shape.SCHEMA_MINOR}): 4 fields ignored" in new[0]
    )
    for field in ("cluster", "packages[].clobbers", "files[].xattrs", "interpreter.gil"):
        assert field in new[0]
    # What this envguard writes of it holds only what it knows, and says so.
    rewritten = json.loads(store.dumps(snap))
    assert rewritten["schema_minor"] == shape.SCHEMA_MINOR and "cluster" not in rewritten


def test_the_cli_says_the_note_once_and_q_keeps_it_quiet(tmp_path: Path) -> None:
    data = _written(tmp_path)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(_from_the_future(data, minor=99)))
    envguard_cli = [sys.executable, "-m", "envguard"]
    shown = subprocess.run([*envguard_cli, "show", str(path)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.count("note: ") == 1 and "4 fields ignored" in shown.stderr
    quiet = subprocess.run([*envguard_cli, "-q", "show", str(path)], capture_output=True, text=True)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


def test_unknown_fields_at_this_minor_version_are_still_refused(tmp_path: Path) -> None:
    data = _written(tmp_path)
    forged = _from_the_future(data, minor=shape.SCHEMA_MINOR)
    with pytest.raises(SnapshotError, match="invalid snapshot at"):
        store.loads(json.dumps(forged), source="forged.json")


def test_a_newer_major_version_is_refused_with_the_upgrade_hint(tmp_path: Path) -> None:
    data = _from_the_future(_written(tmp_path), minor=0)
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(SnapshotError, match="newer than this envguard reads") as caught:
        store.loads(json.dumps(data), source="major.json")
    assert caught.value.hint == "upgrade envguard to read it"


def test_a_file_written_before_schema_minor_loads_as_before(tmp_path: Path) -> None:
    data = _written(tmp_path)
    del data["schema_minor"]
    for f in data["files"]:
        del f["mode"]
    snap = store.loads(json.dumps(data), source="old.json")
    assert snap.schema_minor == shape.SCHEMA_MINOR  # written now, it holds every field
    assert snap.files[0].mode is None
    assert snap == Snapshot.model_validate(data)  # the fast path and the model agree


def test_log_reads_a_newer_minor_version(tmp_path: Path) -> None:
    data = _written(tmp_path)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(_from_the_future(data, minor=shape.SCHEMA_MINOR + 1)))
    (entry,) = history([path])
    assert entry.error is None and entry.name == "now"


# ---- the field added this way: a tracked file's permission bits ----------------------------


def test_a_tracked_file_that_lost_its_executable_bit_is_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_git_repo(tmp_path / "proj", {"run.sh": "#!/bin/sh\necho train\n"})
    script = repo / "run.sh"
    os.chmod(script, 0o755)
    monkeypatch.chdir(repo)
    good = envguard.snapshot(python=sys.executable, name="good", files=(str(script),))
    assert good.files[0].mode == 0o755
    os.chmod(script, 0o644)

    drift = envguard.diff(good, python=sys.executable)

    (change,) = [c for c in drift.changes if c.section == "files"]
    assert (change.kind, change.expected, change.actual) == ("mode", "0755", "0644")
    assert change.message == f"tracked file {script} mode 0755 -> 0644"
    assert change.severity.value == "warning"


def test_a_serializer_the_fast_path_does_not_know_stops_the_generator() -> None:
    from pydantic import field_serializer

    class Rewritten(Model):
        name: str

        @field_serializer("name")
        def _upper(self, name: str) -> str:
            return name.upper()

    with pytest.raises(dev.GenerationError, match="SERIALIZERS_ALLOWED"):
        dev._fits_function(dev._Shape(), Rewritten)
