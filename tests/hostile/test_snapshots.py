"""Hostile snapshot files: strict JSON, strict types, bounded strings, one-line fields
without bidi or C1 characters; one line, exit 2. `log` and `list` never trace back on one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from envguard.cli import app
from envguard.errors import SnapshotError
from envguard.render.text import printable
from envguard.snapshots import store
from factories import package, snapshot
from hostile.helpers import write_json as _write

runner = CliRunner()


def good() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(store.dumps(snapshot([package("ok", "1")])))
    return data


def forged(**changes: Any) -> str:
    data = good()
    data.update(changes)
    return json.dumps(data)


def _raw(name: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(store.dumps(snapshot([package("ok", "1")], name=name)))
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            forged().replace('"metrics": {}', '"metrics": {"tok_s": NaN}'),
            "NaN is not a JSON number",
        ),
        (forged().replace('"metrics": {}', '"metrics": {"x": Infinity}'), "Infinity"),
        (forged(schema_version=True), "schema_version"),
        (forged(schema_version=1.0), "schema_version"),
        (forged(packages=[good()["packages"][0]] * 2), "listed twice"),
        (
            forged(packages=[{**good()["packages"][0], "version": "1" * 10_000}]),
            "packages.0.version",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_hostile_snapshots_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("bad.json").write_text(text)
    Path("good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    with pytest.raises(SnapshotError, match=message):
        store.load("bad.json")
    for args in (["diff", "good.json", "--against", "bad.json"], ["show", "bad.json"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: bad.json") and len(result.stderr.splitlines()) == 1


def test_snapshots_are_written_as_strict_json() -> None:
    with pytest.raises(ValueError):
        snapshot([package("ok", "1")], metrics={"x": float("nan")})


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=12,
    ),
    st.sampled_from(
        ["packages", "interpreter", "metrics", "files", "caches", "env", "torch", "via", "name"]
    ),
)
def test_fuzzed_fields_load_or_fail_with_one_line(value: Any, field: str) -> None:
    try:
        text = forged(**{field: value})
    except ValueError:
        return  # not encodable as JSON
    try:
        store.loads(text, source="f.json")
    except SnapshotError as exc:
        assert "\n" not in exc.message and exc.message.startswith("f.json")


def test_cache_walks_are_bounded_and_never_walk_the_root(tmp_path: Path) -> None:
    from factories import load_target

    target = load_target()
    warnings: list[str] = []
    root = target.walk_tree("/", warnings)
    assert root["files"] == 0 and "not walked" in warnings[0]
    proc = target.walk_tree("/proc/self", warnings)
    assert proc["files"] == 0 and "not walked" in warnings[1]
    cache = tmp_path / "cache"
    cache.mkdir()
    for i in range(50):
        (cache / f"f{i}").write_bytes(b"x")
    cut = target.walk_tree(str(cache), warnings, max_files=10)
    assert cut["files"] <= 60 and cut["readable"] is False and "walk stopped" in warnings[2]
    assert target.walk_tree(str(cache), [])["files"] == 50


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EROFS", "EIO"])
def test_a_failed_write_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errno_name: str
) -> None:
    import errno
    import os

    from envguard.errors import ActionError

    def fail(fd: int) -> None:
        code = getattr(errno, errno_name)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", fail)
    target = tmp_path / "out" / "s.json"
    with pytest.raises(ActionError, match=f"{target}: cannot write"):
        store.write_atomic(target, "{}", force=False)
    assert list((tmp_path / "out").iterdir()) == []  # no temp file, no half snapshot


def test_out_onto_a_directory_is_usage_error(tmp_path: Path) -> None:
    from envguard.errors import UsageError

    with pytest.raises(UsageError, match="is a directory"):
        store.write_atomic(tmp_path, "{}", force=True)


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\x9b", "\x85", "\u061c", "\u2028"])
def test_a_name_with_bidi_or_c1_characters_is_refused(tmp_path: Path, char: str) -> None:
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    base = _write(tmp_path / "base.json", data)
    data["name"] = f"evil{char}name"
    evil = _write(tmp_path / "evil.json", data)
    for args in (
        ["diff", str(evil), "--against", str(base)],
        ["rebuild", str(evil), "--venv", "v"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert char not in result.output and len(result.stderr.strip().splitlines()) == 1
    assert printable(char) != char


def test_log_and_list_never_trace_back(in_tmp: Path) -> None:
    folder = in_tmp / "snapshots"
    folder.mkdir()
    (folder / "old.json").write_text(json.dumps(_raw("old", created="0001-01-01T00:00:00+05:00")))
    (folder / "big.json").write_text(json.dumps(_raw("big", metrics={"tok_s": 10**4000})))
    (folder / "hi.json").write_text(json.dumps(_raw("hi", metrics={"tok_s": 1e308})))
    (folder / "lo.json").write_text(json.dumps(_raw("lo", metrics={"tok_s": -1e308})))
    for args in (
        ["log"],
        ["log", "--metric", "tok_s"],
        ["log", "--format", "markdown", "--metric", "tok_s"],
        ["list"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)


@pytest.mark.parametrize(
    "changes",
    [{"schema_version": 999}, {"surprise": 1}, {"torch": {"version": "2.0\u202e" + "x" * 5000}}],
)
def test_log_shows_a_malformed_snapshot_as_unreadable(
    in_tmp: Path, changes: dict[str, Any]
) -> None:
    folder = in_tmp / "snapshots"
    folder.mkdir()
    (folder / "bad.json").write_text(json.dumps(_raw("bad", **changes)))
    doc = json.loads(runner.invoke(app, ["log", "--format", "json"]).stdout)
    assert set(doc["snapshots"][0]) == {"path", "error"}
