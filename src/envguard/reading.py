"""Reading files on behalf of untrusted input: regular files only, never blocking, capped."""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from re import Pattern
    from typing import Any, AnyStr, Optional

# ASCII's digits, and its letters, digits and "_" (regular expressions' [0-9] and
# [A-Za-z0-9_]): what str.strip() tells a text made of, where re is not loaded.
DIGITS = "0123456789"
WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" + DIGITS + "_"

# Caps per kind of file: a damaged or hostile site-packages must not exhaust memory.
METADATA_CAP = 16 << 20
RECORD_CAP = 64 << 20
SMALL_CAP = 1 << 20  # INSTALLER, direct_url.json, torch/version.py


# Characters that must never reach a terminal or a one-line field as themselves: C0 and C1
# controls, DEL, and the bidirectional marks and overrides that reorder what a terminal
# shows (U+061C, U+200E/F, U+202A-E, U+2066-9); U+2028/9 end a line as "\n" does. A regular
# expression character class body, shared by the output escaping (render.text.printable),
# the snapshot models' one-line fields and the probe report's validator.
UNSAFE_CHARS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"


def escaped_line(text: str) -> str:
    """``text`` with each character UNSAFE_CHARS names (and each byte that was not UTF-8,
    read as a lone surrogate) written as its escape (``\\x1b``, ``\\u202e``, ``\\udcff``):
    one printable line that still says what is there. For what a target names itself (a
    git branch, a remote's URL) and the report carries as one line of text: the host
    refuses a report holding such a character whole."""
    if text.isprintable():  # the common case, at C speed (see escaped_name)
        return text
    import re

    unsafe = "[" + UNSAFE_CHARS + "\ud800-\udfff]"
    return re.sub(unsafe, lambda m: ascii(m.group(0))[1:-1], text)


def escaped_name(text: str) -> str:
    """escaped_line(), less the lone surrogates of bytes that are not UTF-8: for a path or a
    name a snapshot has always recorded with those as themselves (the host takes them, and
    JSON writes them as ``\\udcff``), so that an older snapshot of the same folder still
    matches. What the host refuses in a line is escaped all the same."""
    if text.isprintable():  # every character UNSAFE_CHARS names is unprintable
        return text
    import re

    return re.sub("[" + UNSAFE_CHARS + "]", lambda m: ascii(m.group(0))[1:-1], text)


def named_by(line: str) -> str:
    """The path a recorded one-line ``line`` names: itself, or, where nothing is there and
    it is escaped_line() of a path that is, that path. A probe is sent back the paths a
    snapshot recorded (its caches, its files): a folder named with U+202E was recorded as
    its escape, and is measured again where it is, not as missing."""
    if "\\" not in line or os.path.lexists(line):
        return line
    import re

    def one(match: Any) -> str:
        code = match.group(0)[1:]
        return {"n": "\n", "r": "\r", "t": "\t"}.get(code) or chr(int(code[1:], 16))

    path = re.sub(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[nrt])", one, line)
    # Only the exact escape of a path that is there: "\\x41" is no escape of "A".
    exact = line in (escaped_name(path), escaped_line(path))
    return path if exact and os.path.lexists(path) else line


def report_line(text: str, cap: int = 4096) -> Optional[str]:
    """``text`` as a one-line field of the probe's report may carry it: as itself when it
    is printable (the common case, tested at C speed), else escaped_line(text); None when
    that is over ``cap`` characters (the host refuses a line over 4096). The same text
    always gives the same value, so both sides of a diff record an odd value alike."""
    if not text.isprintable():  # every character UNSAFE_CHARS names is unprintable
        text = escaped_line(text)
    return text if len(text) <= cap else None


def not_json_constant(name: str) -> object:
    """json's ``parse_constant``: NaN and Infinity are not JSON (Python's json takes them),
    and a number that is not one must not reach a snapshot, a report or a cache."""
    raise ValueError("%s is not a JSON number" % name)


class _Scanning:
    """What json's C scanner reads of a decoder: json.loads' defaults, NaN and Infinity
    refused (not_json_constant)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(not_json_constant)


_SCANNER: list[Any] = []  # json's C scanner, made once (None: this Python has none)
_JSON_SPACE = " \t\n\r"


def parse_json(text: str) -> Any:
    """The str ``text`` read as ``json.loads(text, parse_constant=not_json_constant)`` reads it,
    ValueError where it is not JSON, without importing json: json's package imports re,
    and re imports enum, about 10 ms of every probe's start before its first step
    (payload.booting_payload). json's own C scanner reads it; json itself where this
    Python has none."""
    if not _SCANNER:
        try:
            from _json import make_scanner
        except ImportError:
            _SCANNER.append(None)
        else:
            _SCANNER.append(make_scanner(_Scanning()))  # type: ignore[arg-type]
    scan = _SCANNER[0]
    if scan is None:
        import json

        return json.loads(text, parse_constant=not_json_constant)
    start = len(text) - len(text.lstrip(_JSON_SPACE))
    try:
        value, end = scan(text, start)
    except StopIteration:
        raise ValueError("not JSON: no value at character %d" % start) from None
    if text[end:].strip(_JSON_SPACE):
        raise ValueError("not JSON: more after the value, at character %d" % end)
    return value


def _not_serializable(value: Any) -> Any:
    raise TypeError("Object of type %s is not JSON serializable" % value.__class__.__name__)


_ENCODER: list[Any] = []  # json's C encoder as json.dumps makes it (None: use json itself)
# What json.dumps writes for it: the C encoder is used only where it writes the same.
_SAMPLE = (
    {"a": [1, 2.5, "\u00e9\n", None, True, -0.0]},
    '{"a": [1, 2.5, "\\u00e9\\n", null, true, -0.0]}',
)


def dump_json(value: Any) -> str:
    """``json.dumps(value)``, character for character, without importing json (its package
    imports re, and re enum: about 10 ms of a probe's CPU, spent only to write its
    report): json's own C encoder, made with json.dumps' defaults; json itself where this
    Python has none, or where that encoder does not write what json.dumps writes."""
    if not _ENCODER:
        encode = None
        try:
            from _json import encode_basestring_ascii, make_encoder

            made = make_encoder(*_encoder_arguments(encode_basestring_ascii))
            if "".join(made(_SAMPLE[0], 0)) == _SAMPLE[1]:
                encode = make_encoder
        except Exception:  # no C encoder, or one made otherwise in this Python
            encode = None
        _ENCODER.append(encode)
    make = _ENCODER[0]
    if make is None:
        import json

        return json.dumps(value)
    from _json import encode_basestring_ascii

    # A new encoder for each value: its first argument holds the containers being written.
    return "".join(make(*_encoder_arguments(encode_basestring_ascii))(value, 0))


def _encoder_arguments(encode_string: Any) -> tuple[Any, ...]:
    """json.encoder.JSONEncoder.iterencode's arguments to the C encoder, json.dumps'
    defaults: markers, default, the string encoder, indent, the key and item separators,
    sort_keys, skipkeys, allow_nan."""
    return ({}, _not_serializable, encode_string, None, ": ", ", ", False, False, True)


if TYPE_CHECKING:  # to a type checker, the pattern it compiles to

    def Regex(pattern: AnyStr) -> Pattern[AnyStr]:
        """A regular expression compiled when first used (see the class below)."""

else:

    class Regex:
        """A regular expression compiled when first used; its methods are then the compiled
        pattern's own. Importing re (enum with it) and compiling the patterns of the target
        modules at their import was 10-15 ms of every probe's start, and most runs use few
        of them. Flags go in the pattern: ``(?m)``."""

        def __init__(self, pattern: Any) -> None:
            self.pattern = pattern

        def __getattr__(self, name: str) -> Any:
            if name.startswith("__") or name == "pattern":  # copy, pickle: not the pattern's
                raise AttributeError(name)
            import re

            compiled = re.compile(self.pattern)
            for method in ("match", "fullmatch", "search", "sub", "split", "findall", "finditer"):
                setattr(self, method, getattr(compiled, method))
            return getattr(compiled, name)


class NotRegular(OSError):
    """A FIFO, socket, device or directory where a regular file was expected."""


def envguard_cache(environ: Any) -> Optional[str]:
    """This user's envguard cache folder: ``$XDG_CACHE_HOME/envguard``, else
    ``~/.cache/envguard``; None without an absolute base. (probe/loader.py finds it on its
    own: it runs before any module of the target package is installed.)"""
    base = environ.get("XDG_CACHE_HOME") or (
        os.path.join(environ["HOME"], ".cache") if environ.get("HOME") else None
    )
    return os.path.join(base, "envguard") if base and os.path.isabs(base) else None


def open_regular(path: str) -> int:
    """An fd for ``path`` if it is a regular file; never blocks on a FIFO or a device."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(0, "not a regular file", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str, cap: int) -> bytes:
    """At most ``cap`` bytes of a regular file; OSError (incl. NotRegular, EFBIG) otherwise."""
    fd = open_regular(path)
    try:
        return read_open(fd, cap, path)
    finally:
        os.close(fd)


def read_open(fd: int, cap: int, path: str) -> bytes:
    """All of an open file's bytes, at most ``cap`` (OSError EFBIG past it): for a caller
    that checks the open file (fstat) before it reads. A file is read whole in its first
    read when its size says how much there is (no join of 1 MiB blocks: the probe's
    2.5 MB distribution cache spent 1 ms copying them); past that size (a file that grew,
    or /proc's, of size 0), a block at a time."""
    chunks = []
    total = 0
    size = os.fstat(fd).st_size
    block_size = max(size + 1, 1 << 20)
    while True:
        block = os.read(fd, min(block_size, cap + 1 - total))
        block_size = 1 << 20
        if not block:
            break
        chunks.append(block)
        total += len(block)
        if total > cap:
            raise OSError(27, "larger than %d bytes" % cap, path)  # EFBIG
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` written to the open file ``fd`` (os.write may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_text(path: str, cap: int = SMALL_CAP) -> Optional[str]:
    """A small regular file as text (bad bytes replaced), or None when it cannot be read."""
    try:
        return read_bytes(path, cap).decode("utf-8", "replace")
    except OSError:
        return None


LOCKFILE_CAP = 64 << 20  # uv.lock of a large monorepo is a few MB; 64 MiB is not a lockfile


# The one reader of numbers from files, streams and options. A JSON number of more digits
# than any envguard writes (nanosecond times have 19) is refused before int() sees it:
# Python's int() refuses 4,300 digits with a message about sys.set_int_max_str_digits, and
# a float of 5,000 digits is silently inf. inf, nan and what overflows to them (1e309) are
# no number a snapshot, a report or an option means.
MAX_DIGITS = 40
MAX_NUMBER_TEXT = 64  # characters of one number: digits, sign, point and exponent
_NUMBER_CHARS = frozenset("0123456789+-.eE")


def read_number(text: str, integer: bool = False) -> float:
    """``text`` as a finite number (an int when ``integer``); ValueError saying what is
    wrong (never echoing more than a few characters of it) otherwise."""
    text = text.strip()
    shown = text if len(text) <= 24 else text[:12] + "..." + text[-6:]
    if not text or not set(text) <= _NUMBER_CHARS:
        raise ValueError("%r is not a number" % shown)
    digits = sum(c.isdigit() for c in text.partition("e")[0].partition("E")[0])
    if digits > MAX_DIGITS:
        raise ValueError("a number of %d digits (at most %d)" % (digits, MAX_DIGITS))
    if len(text) > MAX_NUMBER_TEXT:
        raise ValueError("a number of %d characters (at most %d)" % (len(text), MAX_NUMBER_TEXT))
    if integer:
        if not text.lstrip("+-").isdigit() or text[:2] in ("+-", "-+", "--", "++"):
            raise ValueError("%r is not a whole number" % shown)
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise ValueError("%r is not a number" % shown) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("%r is out of range" % shown)
    return value


def json_int(text: str) -> int:
    """json's ``parse_int``: a bounded int."""
    return int(read_number(text, integer=True))


def json_float(text: str) -> float:
    """json's ``parse_float``: a bounded, finite float."""
    return read_number(text)


def json_loads(text: str | bytes) -> Any:
    """JSON whose every number went through read_number (ValueError otherwise). A text with
    no long run of digits and no exponent of three digits is parsed without the per-number
    hooks (as fast as json itself): it holds no number they would refuse."""
    import json

    if suspect_numbers(text):
        return json.loads(
            text, parse_int=json_int, parse_float=json_float, parse_constant=not_json_constant
        )
    return json.loads(text, parse_constant=not_json_constant)


# Where a JSON value starts, a number read_number may refuse: more than MAX_DIGITS digits,
# or an exponent of three digits or more (1e309 is inf). Text inside a string may match too
# (digits after a comma): that costs the hooks, never a wrong answer. A value after ":" is
# one after a key's closing quote: a colon inside a string ("sha256:e123...", a digest's
# hex after it) sent one text in fifty or so to pydantic's slower parser.
# The text's start, a value after "[" or ",", and one after a key are searched for apart
# where the patterns are used (_found_by_patterns): a pattern that starts with a character
# class or a literal is scanned for at C speed, one that starts with "(?:^|[...])" is tried
# at every character.
_NUMBER = r"\s*-?[0-9.]*(?:[0-9]{%d}|[eE][+-]?[0-9]{3})" % (MAX_DIGITS + 1)
_AFTER = r"[\[,]" + _NUMBER
_AFTER_KEY = r'"\s*:' + _NUMBER
# The last text found clean: `diff` scans its snapshot's text before the probe starts, then
# again to read it (once to choose the parser, once in json_loads). A larger text (a fleet's
# stream) is not kept alive for it.
_CLEAN: list[str | bytes] = []
_CLEAN_CAP = 8 << 20
# What only such a number (or a string's text) holds, found by a translate and a find at C
# speed: the patterns above try every "," and "[" of a text in the regular expression
# engine, 2.5 ms of every 140 KB report or snapshot read. A digit reads as 0, E as e, - as +:
# "e000" and "e+000" are the exponents, MAX_DIGITS + 1 zeros the run of digits.
_MARK = bytes.maketrans(b"123456789E-", b"000000000e+")
_EXPONENTS = (b"e000", b"e+000")
_DIGIT_RUN = b"0" * (MAX_DIGITS + 1)
# How far back from such a find its value's start is looked for (a number's own digits, its
# sign, the blanks of an indented document before it); how many finds are looked at, one per
# 256 bytes of text, and how many runs of digits: past any, the patterns scan the text (exact
# on any text, and linear in it; finds looked at one by one in Python are not).
_LOOK_BACK = 160
_FINDS_PER = 256
_MOST_RUNS = 64
# What \s is in a pattern of bytes, and the ASCII part of what it is in one of str (a
# blank past ASCII, U+2003 say, is looked for by the patterns: JSON has none).
_BYTES_SPACE = b" \t\n\r\x0b\x0c"
_TEXT_SPACE = _BYTES_SPACE + b"\x1c\x1d\x1e\x1f"


def suspect_numbers(text: str | bytes) -> bool:
    """Whether ``text`` may hold a number read_number refuses (a parser that takes any
    number, such as pydantic's, must not read it first): whether a value starts there as
    ``(?:^|[\\[,]|"\\s*:)`` then _NUMBER say (tests/test_numbers.py holds it to that
    pattern)."""
    if _CLEAN and type(_CLEAN[0]) is type(text) and _CLEAN[0] == text:
        return False
    if isinstance(text, bytes):
        found = _found_marked(text, _BYTES_SPACE)
    else:  # its UTF-8: a character past ASCII is never a digit, a sign or a "[,:"
        found = _found_marked(text.encode("utf-8", "surrogatepass"), _TEXT_SPACE)
    if found is None:
        found = _found_by_patterns(text)
    if not found and len(text) <= _CLEAN_CAP:
        _CLEAN[:] = [text]
    return found


def _found_marked(data: bytes, spaces: bytes) -> Optional[bool]:
    """suspect_numbers() of ``data``: each exponent or run of digits found in its marked
    copy (_MARK) checked back to where its value starts (_starts_value); None when there
    are too many to look at, or one is too far from its value's start to tell."""
    marked = data.translate(_MARK)
    found = [marked.count(needle) for needle in (*_EXPONENTS, _DIGIT_RUN)]
    if not any(found):
        return False
    if sum(found) > len(marked) // _FINDS_PER + 16:
        return None
    for needle in _EXPONENTS:
        at = marked.find(needle)
        while at >= 0:
            starts = _starts_value(data, at, spaces)
            if starts is not False:
                return starts
            at = marked.find(needle, at + 1)
    at = marked.find(_DIGIT_RUN)
    for _ in range(_MOST_RUNS):
        if at < 0:
            return False
        starts = _starts_value(data, at, spaces)
        if starts is not False:
            return starts
        at = marked.find(_DIGIT_RUN, at + 1)
    return None if at >= 0 else False


def _starts_value(data: bytes, at: int, spaces: bytes) -> Optional[bool]:
    """Whether what is at ``at`` in ``data`` (an exponent, a run of digits) is part of a
    number whose value starts where _NUMBER's match can: back over digits and points, a
    minus sign, blanks, to the text's start, a "[" or ",", or a colon after a key's closing
    quote. None when that is more than _LOOK_BACK bytes back, or a byte past ASCII stands
    where a blank may (a blank of Unicode's, in a text of str)."""
    low = max(0, at - _LOOK_BACK)
    head = data[low:at].rstrip(b"0123456789.")
    if head.endswith(b"-"):
        head = head[:-1]
    head = head.rstrip(spaces)
    if not head:
        return True if low == 0 else None
    last = head[-1]
    if last in b"[,":
        return True
    if last != 58:  # ":"
        return None if last > 127 and spaces is _TEXT_SPACE else False
    key = head[:-1].rstrip(spaces)
    if not key:
        return False if low == 0 else None
    if key[-1] > 127 and spaces is _TEXT_SPACE:
        return None
    return key[-1] == 34  # '"'


def _found_by_patterns(text: str | bytes) -> bool:
    """suspect_numbers() by the patterns themselves (any text, at the speed of the regular
    expression engine)."""
    import re

    if isinstance(text, bytes):
        return bool(
            re.match(_NUMBER.encode(), text)
            or re.search(_AFTER.encode(), text)
            or re.search(_AFTER_KEY.encode(), text)
        )
    return bool(re.match(_NUMBER, text) or re.search(_AFTER, text) or re.search(_AFTER_KEY, text))
