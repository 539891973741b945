"""One bounded reader for every number from a file, a stream or an option: digits capped,
inf and nan refused with `error:` naming the thing, exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from envguard.cli import app
from envguard.reading import json_loads, read_number
from envguard.snapshots.fanout import NodeFailed, Source, read_document

runner = CliRunner()
HUGE = "9" * 5000


@pytest.mark.parametrize("text", [HUGE, "inf", "-inf", "nan", "1e309", "0x10", "1_000", ""])
def test_the_reader_refuses_what_is_no_finite_number(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        read_number(text)
    assert len(str(caught.value)) < 80  # never the 5,000 digits back
    if text == HUGE:
        assert str(caught.value) == "a number of 5000 digits (at most 40)"


@pytest.mark.parametrize("doc", ['{"a": ' + HUGE + "}", '{"a": 1e309}', '{"a": NaN}', "[-1e400]"])
def test_json_from_files_and_streams_is_bounded(doc: str) -> None:
    with pytest.raises(ValueError):
        json_loads(doc)
    with pytest.raises(ValueError):
        json_loads(doc.encode())
    doc = '{"a": 12, "b": 1.5e3, "c": "' + HUGE + '"}'
    assert json_loads(doc) == {"a": 12, "b": 1500.0, "c": HUGE}


def _snapshot(tmp_path: Path, number: str) -> Path:
    good = tmp_path / "good.json"
    result = runner.invoke(app, ["snapshot", "--python", sys.executable, "-o", str(good), "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads(good.read_text())
    data["metrics"] = {"loss": 1}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data).replace('"loss": 1', '"loss": ' + number))
    return bad


@pytest.mark.parametrize("number", [HUGE, "1e309"])
def test_a_snapshot_with_an_unbounded_number_is_refused(
    tmp_path: Path, in_tmp: Path, number: str
) -> None:
    bad = _snapshot(tmp_path, number)
    proc = subprocess.run(
        [sys.executable, "-m", "envguard", "show", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}")
    assert "Traceback" not in proc.stderr and "set_int_max_str_digits" not in proc.stderr


@pytest.mark.parametrize("number", [HUGE, "1e309", "NaN"])
def test_a_fleet_stream_with_an_unbounded_number_is_a_failed_node(
    tmp_path: Path, number: str
) -> None:
    node = tmp_path / "node.json"
    node.write_text('{"probe_version": ' + number + "}")
    with pytest.raises(NodeFailed) as caught:
        read_document(Source(path=str(node), host=None))
    assert str(caught.value).startswith("not a report")


def test_a_probe_report_with_an_unbounded_number_is_refused() -> None:
    from envguard.probe.report import _loads

    with pytest.raises(ValueError):
        _loads(b'{"probe_version": ' + HUGE.encode() + b"}")


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["guard", "--timeout", "inf", "--", "pip", "install", "x"], "--timeout"),
        (["guard", "--timeout", "nan", "--", "pip", "install", "x"], "--timeout"),
        (["guard", "--timeout", "1e309", "--", "pip", "install", "x"], "--timeout"),
        (["guard", "--keep", HUGE, "--", "pip", "install", "x"], "--keep"),
        (["snapshot", "--timeout", HUGE], "--timeout"),
        (["restore", "--warm-timeout", "inf"], "--warm-timeout"),
        (["bisect", "--min", "nan"], "--min"),
        (["gate", "--timeout", "inf"], "--timeout"),
    ],
)
def test_every_numeric_option_is_bounded(argv: list[str], option: str, in_tmp: Path) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert f"error: Invalid value for '{option}'" in result.output
    assert HUGE not in result.output


@pytest.mark.parametrize(
    ("number", "said"),
    [
        (HUGE, "a number of 5000 digits or more (at most 40)"),
        ("1e309", "'1e309' is out of range"),
        ("inf", "'inf' is not a number"),
        ("nan", "'nan' is not a number"),
    ],
)
def test_lockfiles_and_the_config_read_numbers_through_the_one_reader(
    tmp_path: Path, in_tmp: Path, number: str, said: str
) -> None:
    from envguard.compare.lockfiles.common import LockfileError, parse_toml
    from envguard.compare.policy import load_policy
    from envguard.errors import UsageError

    text = f"version = 1\nrevision = {number}\n"
    with pytest.raises(LockfileError) as caught:
        parse_toml(text, where="uv.lock")
    assert str(caught.value) == f"uv.lock: not valid TOML ({said})"
    (tmp_path / "pyproject.toml").write_text(f"[tool.envguard]\nx = {number}\n")
    with pytest.raises(UsageError) as refused:
        load_policy(tmp_path)
    assert str(refused.value).endswith(f"cannot read it as TOML ({said})")
    assert parse_toml('a = "' + HUGE + '"\nb = 1_000\n', where="x") == {"a": HUGE, "b": 1000}


def test_variables_and_metrics_read_numbers_through_the_one_reader() -> None:
    from envguard.distributed import _env_int, _timeout
    from envguard.errors import UsageError
    from envguard.snapshots.request import parse_metric

    for text in ("inf", "nan", "1e309", HUGE):
        with pytest.raises(UsageError, match=r"^ENVGUARD_GATE_TIMEOUT"):
            _timeout(None, {"ENVGUARD_GATE_TIMEOUT": text})  # inf: a rank waiting for ever
    with pytest.raises(UsageError, match=r"^RANK: a number of 5000 digits"):
        _env_int("RANK", {"RANK": HUGE})
    for text in ("1e309", HUGE):
        with pytest.raises(UsageError, match=r"^--metric loss: "):
            parse_metric(f"loss={text}")
    assert parse_metric("loss=nan") == ("loss", "nan")  # kept as text, as before
    assert parse_metric("tok_s=21500") == ("tok_s", 21500)


def test_a_fleet_stream_envelope_with_a_huge_byte_count_is_a_failed_node(tmp_path: Path) -> None:
    from envguard.snapshots.fanout import gather

    stream = tmp_path / "fleet.log"
    stream.write_bytes(
        b'{"node": "n1", "exit": 0, "bytes": ' + HUGE.encode() + b', "report": {}}\n'
    )
    found = gather([str(stream)])  # never int() of 5,000 digits
    assert found.sources
    for source in found.sources:
        with pytest.raises(NodeFailed):
            read_document(source)


# The scan as one pattern (a value at the start, after "[" or ",", or after a key's closing
# quote and its colon): the split one must answer as it does. A text of str is held to the
# pattern of str (\s: Unicode's blanks), its UTF-8 to the pattern of bytes (ASCII's).
_ONE_PATTERN = r'(?:^|[\[,]|"\s*:)\s*-?[0-9.]*(?:[0-9]{41}|[eE][+-]?[0-9]{3})'
# What a value may start with or be made of, blanks of both kinds, and what stands around it.
_SCANNED = ' \t\n\r\x0b\x0c\x1c\x85\xa0\u2003[]{}:,.-+eE0123456789"ax'


def _as_the_pattern_answers(text: str) -> None:
    import re

    from envguard import reading

    data = text.encode("utf-8")
    expected = re.search(_ONE_PATTERN, text) is not None
    expected_bytes = re.search(_ONE_PATTERN.encode(), data) is not None
    for _ in range(2):  # the second time from the memo of the last clean text
        assert reading.suspect_numbers(text) is expected
        assert reading.suspect_numbers(data) is expected_bytes
    reading._CLEAN.clear()


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=_SCANNED, max_size=120))
def test_the_suspect_number_scan_answers_as_the_one_pattern(text: str) -> None:
    _as_the_pattern_answers(text)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                " " * 50,  # blanks past how far the scan looks back
                "1" * 30,  # digits: a run of 41 and more where they meet
                ".5",
                "-",
                "e999",
                "E-300",
                '"',
                ":",
                ",",
                "[",
                "a",
                '"sha256:4e123f0e999"',  # a digest's hex: exponents inside a string
                "\u2003",
            ]
        ),
        max_size=40,
    )
)
def test_the_scan_answers_as_the_pattern_on_long_texts(parts: list[str]) -> None:
    """Long blanks, long runs of digits, many exponents inside strings: where the scan
    cannot tell from what it finds (too far back, too many finds), it answers as the
    pattern does."""
    _as_the_pattern_answers("".join(parts))


@pytest.mark.parametrize(
    "text",
    [
        "[" + " " * 500 + "1e999]",  # the value's start far back
        '{"k":' + "\n" * 300 + "-1.5E+400}",
        "[" + "7" * 5000 + "]",  # one run of digits, 5,000 long
        '["' + "1" * 41 + '", 2]',  # a run of digits inside a string
        '["' + "1" * 200 + '", ' + "2" * 41 + "]",  # a number's run after a long one
        ",".join(['"1e999"'] * 2000),  # more finds than the scan looks at
        ",".join(['"1e999"'] * 2000) + ",1e999",
        '{"digest": "sha256:e123f0", "k": 1}',
        '{"k": 1.5, "t": 1733500000123456789}',
        # blanks of str's \\s that a pattern of bytes does not take: U+001C, NEL, U+2003
        "[\x1c1e999]",
        '{"k"\x1d: 1e999}',
        '{"k":\x1f-1e999}',
        "[\x851e999]",
        "[\u20031e999]",
        '{"k"\u2003:1e999}',
        '{"k":\xa01e999}',
    ],
)
def test_the_scan_answers_as_the_pattern_where_it_cannot_tell(text: str) -> None:
    _as_the_pattern_answers(text)


def test_the_scan_of_a_hostile_text_looks_at_few_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text made of what looks like exponents or long numbers (a megabyte of "e999" or of
    digits inside strings) is scanned by the patterns, not find by find in Python: the scan
    looks at no more finds than one per 256 bytes, and answers as the pattern does."""
    from envguard import reading

    looked: list[int] = []
    real = reading._starts_value
    monkeypatch.setattr(reading, "_starts_value", lambda *args: looked.append(1) or real(*args))
    hostile = (
        '"' + "a1e999" * 200_000 + '"',
        '"' + "9" * 1_000_000 + '"',
        '"' + ("9" * 81 + "a" * 180) * 4000 + '"',  # runs of digits, one per 261 bytes
    )
    for text in hostile:
        _as_the_pattern_answers(text)
        assert len(looked) <= 2 * (len(text) // 256 + 16)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.one_of(
            st.integers(min_value=-(10**60), max_value=10**60),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(alphabet="ae0123456789:,[ ", max_size=12),
        ),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(alphabet="ab: ,", max_size=4), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    st.sampled_from([None, 0, 2]),
    st.sampled_from(["1e309", "-1E+999", "1" * 41, "0.5e-400"]),
)
def test_the_scan_finds_every_refused_number_where_json_puts_one(
    value: object, indent: int | None, refused: str
) -> None:
    """Any JSON document holding a number read_number refuses, anywhere a value goes and in
    any spacing (a key's colon with blanks around it too), is suspect: the scan misses
    none. A colon or digits inside a string do not make a document suspect on their own."""
    import json

    from envguard.reading import suspect_numbers

    text = json.dumps({"k": [value, "REFUSED"]}, indent=indent)
    for spaced in (text, text.replace('":', '" :')):
        assert suspect_numbers(spaced.replace('"REFUSED"', refused)) is True
    assert suspect_numbers('{"digest": "sha256:e123f0", "k": 1}') is False
