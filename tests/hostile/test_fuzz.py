"""Untrusted documents mutated at random: a snapshot file (store.loads), the three lockfile
readers and a probe report (parse_report) end in a value or their module's one-line
EnvguardError, never another exception. Real documents, bounded runs (CI runs them)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envguard.compare.lockfiles import read_lock
from envguard.errors import EnvguardError, ProbeError, SnapshotError
from envguard.probe.report import parse_report
from envguard.snapshots import store
from factories import package, real_report, snapshot

_SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_N", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Characters that matter to the formats: quotes, brackets, separators, escapes, controls.
_NOISE = st.text(
    alphabet=st.sampled_from([*"\"'[]{}=,.:;#@<>!~\\\n\t -0129aZ", "\x00", "\u202e"]), max_size=8
)


def _nodes(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document, the root included."""
    found = [at]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _nodes(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _nodes(value, (*at, i))
    return found


@st.composite
def _json_mutation(draw: Any, doc: Any) -> str:
    """``doc`` with one place replaced by any JSON value, removed, or a new key added; or
    its text cut, or noise spliced into it."""
    doc = json.loads(json.dumps(doc))
    how = draw(st.sampled_from(["replace", "remove", "add", "text"]))
    if how == "text":
        return draw(_text_mutation(json.dumps(doc, indent=1)))
    places = _nodes(doc)
    at = draw(st.sampled_from(places))
    value = draw(_VALUES)
    if not at:
        doc = value if how == "replace" else doc
    else:
        holder = doc
        for key in at[:-1]:
            holder = holder[key]
        if how == "replace":
            holder[at[-1]] = value
        elif how == "remove":
            del holder[at[-1]]
        elif isinstance(holder, dict):
            holder[draw(st.text(max_size=6))] = value
        else:
            holder.append(value)
    try:
        return json.dumps(doc, allow_nan=draw(st.booleans()))
    except ValueError:  # NaN refused: say it as the text does
        return json.dumps(doc)


@st.composite
def _text_mutation(draw: Any, text: str) -> str:
    """``text`` cut short, or with noise spliced in, or a stretch deleted or doubled."""
    i = draw(st.integers(0, len(text)))
    j = draw(st.integers(i, min(len(text), i + 40)))
    how = draw(st.sampled_from(["cut", "splice", "delete", "double"]))
    if how == "cut":
        return text[:i]
    if how == "splice":
        return text[:i] + draw(_NOISE) + text[j:]
    if how == "delete":
        return text[:i] + text[j:]
    return text[:j] + text[i:j] + text[j:]


_SNAPSHOT = json.loads(
    store.dumps(snapshot([package("torch", "2.4.0"), package("numpy", "1.26.4")]))
)


@_SETTINGS
@given(st.data())
def test_a_mutated_snapshot_file_loads_or_is_one_line(data: Any) -> None:
    text = data.draw(_json_mutation(_SNAPSHOT))
    try:
        store.loads(text, source="fuzz.json")
    except SnapshotError as exc:
        assert "\n" not in exc.message


_REQUIREMENTS = (
    "# pinned\n"
    "numpy==1.26.4 ; python_version >= '3.8'\n"
    "torch==2.4.0+cu121 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    "requests[socks]==2.32.3\n"
    "-e ./src/demo\n"
)
_PYLOCK = """lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.8"

[[packages]]
name = "numpy"
version = "1.26.4"
marker = "python_version >= '3.8'"

[[packages.wheels]]
url = "https://files.example/numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl"
hashes = { sha256 = "1111111111111111111111111111111111111111111111111111111111111111" }

[[packages]]
name = "torch"
version = "2.4.0"
index = "https://download.pytorch.org/whl/cu121"

[[packages.wheels]]
name = "torch-2.4.0-cp311-cp311-linux_x86_64.whl"
url = "https://download.pytorch.org/whl/cu121/torch-2.4.0-cp311-cp311-linux_x86_64.whl"
hashes = { sha256 = "2222222222222222222222222222222222222222222222222222222222222222" }
"""
_UV_LOCK = (Path(__file__).parent / "data" / "git-and-url.uv.lock").read_text()
_LOCKS = {"requirements.txt": _REQUIREMENTS, "pylock.toml": _PYLOCK, "uv.lock": _UV_LOCK}


@pytest.mark.parametrize("name", sorted(_LOCKS))
def test_the_documents_fuzzed_are_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The mutations start from documents the readers take: the fuzz reaches past parsing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(_LOCKS[name])
    assert {"numpy", "torch"} <= set(read_lock(tmp_path / name, None).pins) or name == "uv.lock"
    assert read_lock(tmp_path / name, None).pins
    store.loads(json.dumps(_SNAPSHOT), source="fuzz.json")
    parse_report(json.dumps(real_report()).encode(), label="host", returncode=0, stderr_tail="")


@_SETTINGS
@given(data=st.data(), name=st.sampled_from(sorted(_LOCKS)))
def test_a_mutated_lockfile_gives_pins_or_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Any, name: str
) -> None:
    monkeypatch.chdir(tmp_path)  # no pyproject.toml here or beside: envguard's own walk
    path = tmp_path / name
    path.write_text(data.draw(_text_mutation(_LOCKS[name])))
    try:
        read_lock(path, None)
    except EnvguardError as exc:
        assert "\n" not in exc.message


@_SETTINGS
@given(st.data())
def test_a_mutated_probe_report_parses_or_is_one_line(data: Any) -> None:
    raw = data.draw(_json_mutation(real_report())).encode()
    try:
        parse_report(raw, label="host", returncode=0, stderr_tail="")
    except ProbeError as exc:
        assert "\n" not in exc.message


def test_a_nul_byte_in_a_lockfile_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzzer's find: `-e\\x00 ./src/demo` reached os.path as a path (a ValueError)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "requirements.txt").write_text("-e\x00 ./src/demo\n")
    with pytest.raises(EnvguardError, match="a NUL byte at offset 2"):
        read_lock(tmp_path / "requirements.txt", None)
