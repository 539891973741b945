"""Reading untrusted snapshot files, and writing them atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envguard.errors import SnapshotError, UsageError
from envguard.snapshots import store
from factories import package, snapshot


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema_version": 1, "name": "x"', "not valid JSON"),
        ("[]", "top level is not an object"),
        ('{"name": "x"}', "no schema_version"),
        ('{"schema_version": 99}', "schema_version 99 is newer"),
        ('{"schema_version": 1, "name": "x"}', "invalid snapshot at created"),
    ],
)
def test_corrupt_snapshots_are_named_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SnapshotError, match=message) as info:
        store.load(path)
    assert str(path) in info.value.message


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    data = json.loads(store.dumps(snapshot([package("a", "1")])))
    data["packages"][0]["evil"] = "x"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SnapshotError, match=r"packages\.0\.evil"):
        store.load(path)


def test_write_atomic_never_leaves_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "snapshots" / "a.json"
    store.write_atomic(target, "one", force=False)
    with pytest.raises(UsageError, match="already exists"):
        store.write_atomic(target, "two", force=False)
    store.write_atomic(target, "three", force=True)
    assert target.read_text() == "three"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_resolve_by_name_and_newest(tmp_path: Path) -> None:
    folder = tmp_path / "snapshots"
    folder.mkdir()
    for name in ("old", "new"):
        (folder / f"{name}.json").write_text(store.dumps(snapshot(name=name)))
    import os

    os.utime(folder / "old.json", (1, 1))
    assert store.load("new", root=tmp_path).name == "new"
    assert store.newest(root=tmp_path).name == "new.json"
    with pytest.raises(SnapshotError):
        store.resolve("../etc/passwd", root=tmp_path)


def test_newest_is_by_created_not_file_time(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    folder = tmp_path / "snapshots"
    folder.mkdir()
    (folder / "later.json").write_text(
        store.dumps(snapshot(name="later", created=datetime(2025, 6, 1, tzinfo=timezone.utc)))
    )
    (folder / "earlier.json").write_text(
        store.dumps(snapshot(name="earlier"))
    )  # 2024, touched last
    (folder / "broken.json").write_text("{")
    assert store.newest(root=tmp_path).name == "later.json"
