"""What the probe reads before its check starts, read without re or json (reading.Regex,
reading.parse_json): the same answers as json and re give, the same refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envguard import reading
from envguard.reading import Regex, not_json_constant, parse_json
from factories import json_values

VALUES = json_values(max_leaves=20)


def _json(text: str) -> object:
    """json's answer, or the kind of error it gives."""
    try:
        return json.loads(text, parse_constant=not_json_constant)
    except ValueError:
        return ValueError


def _ours(text: str) -> object:
    try:
        return parse_json(text)
    except ValueError:
        return ValueError


@settings(max_examples=400, deadline=None)
@given(VALUES, st.sampled_from([None, 0, 2]), st.sampled_from(["", " ", "\n\t\r "]))
def test_json_text_reads_as_json_reads_it(value: object, indent: int | None, space: str) -> None:
    text = space + json.dumps(value, indent=indent) + space
    assert parse_json(text) == json.loads(text)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='{}[]":,.-+0123456789eEtrufalsnNIy \n\t\r\\\x00\ufeffé', max_size=30))
def test_any_text_is_read_or_refused_as_json_does(text: str) -> None:
    assert _ours(text) == _json(text)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "NaN", '{"a": Infinity}', "[-Infinity]", "1 2", '{"a": 1}x', "\ufeff{}", "[1,]"],
)
def test_what_is_not_json_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_json(text)


def test_without_json_s_scanner_json_itself_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)  # a Python built without it
    monkeypatch.setattr(reading, "_SCANNER", [])
    assert parse_json(' {"a": [1, 2.5, "x", null, true]} ') == {"a": [1, 2.5, "x", None, True]}
    assert reading._SCANNER == [None]
    with pytest.raises(ValueError):
        parse_json('{"a": NaN}')
    assert math.isinf(parse_json("1e400"))  # as json reads it (the callers check what they need)


def test_a_pattern_is_compiled_when_first_used() -> None:
    code = (
        "import sys\n"
        "from envguard.reading import Regex\n"
        "lines = Regex(r'(?m)^([a-z]+)=([0-9]+)$')\n"
        "print('re' in sys.modules)\n"
        "print(lines.findall('a=1\\nB=2\\nc=3'), lines.match('x=9').group(2), lines.pattern[:4])\n"
        "print('re' in sys.modules, Regex(rb'\\x7fELF').match(b'\\x7fELF1') is not None)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.splitlines() == [
        "False",
        "[('a', '1'), ('c', '3')] 9 (?m)",
        "True True",
    ]


def test_a_pattern_copies_and_pickles_as_what_it_was() -> None:
    import copy
    import pickle

    pattern = Regex(r"a(b)")
    for again in (copy.copy(pattern), copy.deepcopy(pattern), pickle.loads(pickle.dumps(pattern))):
        assert again.pattern == r"a(b)" and again.search("xab")[1] == "b"


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 5 << 20])
def test_read_bytes_gives_a_file_whole_and_refuses_one_past_its_cap(
    tmp_path: object, size: int
) -> None:
    """A file is read whole (in one read when its size says how much there is, else a
    block at a time), and one past the cap is refused (EFBIG), whatever its size."""
    import os
    from pathlib import Path

    path = Path(str(tmp_path)) / "f"
    data = os.urandom(size)
    path.write_bytes(data)
    assert reading.read_bytes(str(path), size) == data
    assert reading.read_bytes(str(path), size + 7) == data
    if size:
        with pytest.raises(OSError) as caught:
            reading.read_bytes(str(path), size - 1)
        assert caught.value.errno == 27


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_read_open_reads_a_file_whose_size_says_nothing() -> None:
    """/proc's files say size 0: they are read a block at a time to their end."""
    import os

    fd = os.open("/proc/self/status", os.O_RDONLY)
    try:
        text = reading.read_open(fd, 1 << 20, "/proc/self/status")
    finally:
        os.close(fd)
    assert text.startswith(b"Name:") and b"\nPid:" in text


def test_every_unsafe_character_is_refused_in_a_line_by_each_validator() -> None:
    """The one-line checks take a printable string at C speed (str.isprintable) before their
    patterns: that is only sound while every character UNSAFE_CHARS names, and every lone
    surrogate, is one isprintable() refuses. Each such character, in the middle of a
    printable line, is refused by the snapshot's fast path, and each of UNSAFE_CHARS by the
    probe report's validator; a line of printable characters (NBSP, a joiner, a non-Latin
    script) is taken."""
    import re

    from envguard.probe import report
    from envguard.snapshots import checks

    unsafe = re.compile("[" + reading.UNSAFE_CHARS + "\ud800-\udfff]")
    refused = [chr(c) for c in range(0x110000) if unsafe.match(chr(c))]
    assert len(refused) == 32 + 33 + 1 + 2 + 2 + 5 + 4 + 2048
    for char in refused:
        text = "torch" + char + "2.14"
        assert not checks.line(text)
        if "\ud800" <= char <= "\udfff":  # (odd bytes a report carries escaped this way)
            assert not checks.bounded(text, 100)
            continue
        with pytest.raises(report._Invalid):
            report._check(text, "line", "x")
    for text in ("torch 2.14.1+cu128", "caf\xe9\xa0\u200d\u4e2d", ""):
        report._check(text, "line", "x")
        assert checks.line(text) and checks.bounded(text, 100)
