"""Schema evolution under attack: a snapshot file is untrusted, and one that says it was
written by a newer envguard (a larger ``schema_minor``) is read past, not trusted more.

The fast paths (snapshots/shape.py, generated) must agree with the model on every document
they vouch for, the new optional fields (``schema_minor``, ``FileDigest.mode``) included; a
newer-minor file is either loaded with one short note or refused with one error line; the
generator must notice what it cannot translate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envguard import dev, notices
from envguard.errors import SnapshotError
from envguard.snapshots import document, shape, store
from envguard.snapshots.models import FileDigest, Model, Since, Snapshot
from factories import package, snapshot

_FILE = {
    "path": "/work/proj/run.sh",
    "sha256": "0" * 64,
    "size": 12,
    "root": "/work/proj",
    "rel": "run.sh",
    "mode": 0o755,
}


def _doc() -> dict[str, Any]:
    """A snapshot document as this envguard writes it: every key, a tracked file."""
    snap = snapshot(
        [package("torch", "2.3.0"), package("numpy", "1.26.4")],
        files=(FileDigest.model_validate(_FILE),),
    )
    doc: dict[str, Any] = json.loads(store.dumps(snap))
    assert shape.fits(doc)
    return doc


def _model_of(doc: dict[str, Any]) -> Snapshot | None:
    from pydantic import ValidationError

    try:
        return Snapshot.model_validate(doc)
    except ValidationError:
        return None


_HOSTILE = st.sampled_from([True, False, 1.0, 0.0, 1.5, 2**70, -(2**70), -1, 0, 1, 2, 7])
_HOSTILE |= st.sampled_from([0o755, 0o7777, 0o10000, "1", "2", "0755", "", None, [], {}])
_ABSENT = object()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(minor=st.just(_ABSENT) | _HOSTILE, modes=st.lists(st.just(_ABSENT) | _HOSTILE, max_size=3))
def test_fits_vouches_only_for_what_the_model_builds_and_writes_the_same(
    minor: Any, modes: list[Any]
) -> None:
    """fits(doc) True => built(doc) == model (same repr); and when doc holds every key, the
    model writes what document.stored(doc) writes."""
    doc = _doc()
    if minor is _ABSENT:
        del doc["schema_minor"]
    else:
        doc["schema_minor"] = minor
    doc["files"] = []
    for i, mode in enumerate(modes):
        entry = {**_FILE, "path": f"/work/proj/f{i}"}
        if mode is _ABSENT:
            del entry["mode"]
        else:
            entry["mode"] = mode
        doc["files"].append(entry)
    model = _model_of(doc)
    if not shape.fits(doc):
        return
    assert model is not None, doc
    direct = document.built(doc)
    assert direct == model and repr(direct) == repr(model)
    assert direct.model_fields_set == model.model_fields_set
    assert [f.model_fields_set for f in direct.files] == [f.model_fields_set for f in model.files]
    every_key = "schema_minor" in doc and all("mode" in f for f in doc["files"])
    if every_key:
        assert model.model_dump(mode="json") == document.stored(doc)


def test_an_older_minor_document_is_written_as_the_model_writes_it() -> None:
    """fits() vouches for schema_minor 0 with every key; the model writes SCHEMA_MINOR (its
    field_serializer), so stored(doc) must too (the generator ignores serializers)."""
    doc = _doc()
    doc["schema_minor"] = 0
    assert shape.fits(doc)
    assert Snapshot.model_validate(doc).model_dump(mode="json") == document.stored(doc)


def test_mode_is_a_number_not_true_or_text() -> None:
    """A hostile ``"mode": true`` is not 0o001, nor ``"0755"`` decimal 755 (0o1363): the
    model takes them (lax int) and diff then reports a mode nobody had."""
    from pydantic import ValidationError

    for bad in (True, False, "0755", "493", 493.0):
        with pytest.raises(ValidationError):
            FileDigest.model_validate({**_FILE, "mode": bad})
        with pytest.raises(ValidationError):
            FileDigest.model_validate_json(json.dumps({**_FILE, "mode": bad}))


# ---- read_past_newer ------------------------------------------------------------------------


def _future(**extra: Any) -> dict[str, Any]:
    doc = _doc()
    doc["schema_minor"] = shape.SCHEMA_MINOR + 1
    doc.update(extra)
    return doc


def _notes_of(text: str, source: str) -> tuple[Snapshot | None, str | None, list[str]]:
    before = len(notices.said())
    try:
        snap, error = store.loads(text, source=source), None
    except SnapshotError as exc:
        snap, error = None, exc.message
    return snap, error, notices.said()[before:]


@pytest.mark.parametrize(
    "change",
    [
        {"packages": {"clobbers": 1}},
        {"files": [5]},
        {"interpreter": "x"},
        {"schema_version": 1.0},
    ],
    ids=["packages-a-dict", "files-non-dict", "interpreter-a-string", "version-a-float"],
)
def test_a_refused_newer_file_says_no_note_only_the_error(change: dict[str, Any]) -> None:
    """A newer-minor file that is then refused is one error line: no note before it saying
    it was read as far as this envguard knows."""
    doc = _future(cluster={"x": 1}, **change)
    if "packages" in change:
        doc["packages"] = {"clobbers": 1, "name": "torch"}
    snap, error, notes = _notes_of(json.dumps(doc), f"refused-{sorted(change)[0]}.json")
    assert snap is None and error is not None
    assert notes == [], notes


def test_the_note_is_bounded_whatever_the_minor() -> None:
    doc = _future(cluster=1)
    doc["schema_minor"] = 10**39  # as many digits as a number may have (reading.MAX_DIGITS)
    snap, error, notes = _notes_of(json.dumps(doc), "huge-minor.json")
    assert error is None and snap is not None
    (note,) = notes
    assert len(note) <= 400 and note.isprintable(), len(note)


def test_a_minor_past_the_digit_cap_is_one_error_and_no_note() -> None:
    doc = _future(cluster=1)
    doc["schema_minor"] = 10**4000  # JSON reads up to 4300 digits; envguard, 40
    snap, error, notes = _notes_of(json.dumps(doc), "huge-minor.json")
    assert snap is None and notes == []
    assert error == "huge-minor.json: not valid JSON (a number of 4001 digits (at most 40))"


def test_the_note_counts_every_field_ignored_even_alike_when_cut() -> None:
    """Two unknown 1 MB keys that share their first 64 characters are two fields."""
    doc = _future(**{"y" * 1_000_000: 1, "y" * 1_000_001: 2})
    snap, error, notes = _notes_of(json.dumps(doc), "long-keys.json")
    assert error is None and snap is not None
    (note,) = notes
    assert "2 fields ignored" in note and len(note) <= 400, note


@pytest.mark.parametrize(
    "key",
    ["a\x1b[31mred", "bidi\u202eevil", "line\nbreak", "\ud800", "x" * 1_000_000],
    ids=["escape", "bidi", "newline", "surrogate", "1MB"],
)
def test_hostile_unknown_keys_make_one_printable_short_note(key: str) -> None:
    doc = _future(**{key: 1})
    snap, error, notes = _notes_of(json.dumps(doc), f"key-{len(key)}-{ord(key[0])}.json")
    assert error is None and snap is not None
    (note,) = notes
    assert note.isprintable() and len(note) <= 400, note


def test_ten_thousand_unknown_keys_are_one_short_note() -> None:
    doc = _future(**{f"k{i}": i for i in range(10_000)})
    snap, error, notes = _notes_of(json.dumps(doc), "many.json")
    assert error is None and snap is not None
    (note,) = notes
    assert "10000 fields ignored" in note and len(note) <= 400


def test_unknown_containers_nested_deep_are_one_error_line() -> None:
    doc = _future(deep="X")
    text = json.dumps(doc).replace('"X"', "[" * 100_000 + "]" * 100_000)
    snap, error, _ = _notes_of(text, "deep.json")
    assert snap is None and error == "deep.json: not a snapshot (JSON nested too deeply)"


@pytest.mark.parametrize("minor", [True, 1.5, "2", -1, None])
def test_a_minor_that_is_not_a_count_is_refused_without_a_note(minor: Any) -> None:
    doc = _future(cluster=1)
    doc["schema_minor"] = minor
    snap, error, notes = _notes_of(json.dumps(doc), f"minor-{minor!r}.json")
    assert snap is None and error is not None and "schema_minor" in error
    assert notes == []


def test_the_cli_refusing_a_newer_file_prints_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "wrong.json"
    doc = _future(cluster=1)
    doc["interpreter"]["version"] = 3
    path.write_text(json.dumps(doc))
    done = subprocess.run(
        [sys.executable, "-m", "envguard", "show", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: {path}: invalid snapshot at interpreter.version: Input should be a valid string"
    ]


# ---- the generator --------------------------------------------------------------------------


def test_a_required_field_added_after_1_0_stops_the_generator() -> None:
    """A field with Since(n) and no default: fits() took it for optional (a document without
    it fit, and built() made a model lacking it) while the model refuses every older file."""

    class Grown(Model):
        name: str
        owner: Annotated[str, Since(1)]

    with pytest.raises(dev.GenerationError, match="default"):
        dev._fits_function(dev._Shape(), Grown)


def test_regenerate_is_done_in_one_run_when_the_minor_grows(tmp_path: Path) -> None:
    """The models take SCHEMA_MINOR from shape.py: a field with a new Since(minor) changes
    shape.py, and the schema (its default schema_minor) only on a second regenerate."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(dev.REPO / "src", repo / "src")
    shutil.copytree(dev.REPO / "schema", repo / "schema")
    models = repo / "src" / "envguard" / "snapshots" / "models.py"
    text = models.read_text()
    field = "    mode: Annotated[FileMode | None, Since(1)] = None\n"
    assert field in text
    models.write_text(
        text.replace(field, field + "    owner: Annotated[str | None, Since(9)] = None\n")
    )
    env = {
        "PYTHONPATH": str(repo / "src"),
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
    }

    def dev_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envguard.dev", *args],
            capture_output=True, text=True, env=env, cwd=repo,
        )  # fmt: skip

    assert dev_run("regenerate").returncode == 0
    after = dev_run("check")
    assert (after.returncode, after.stdout) == (0, ""), after.stdout
