"""The program sent to the target interpreter on stdin: the target package, then a call.

The command line stays ``python -I -S -``, so it survives any prefix unquoted (ssh's remote
shell, pct exec, docker exec, srun). The payload opens with a version check that any Python
parses, then installs each module of probe/target/ (and envguard/redact.py and
envguard/reading.py, which both sides use) as the package ``envguard_probe`` from string
literals, and runs ``main.main``. A local interpreter started before its argument is known
(booting.boot) runs ``python -I -S -c BOOT`` (booting.BOOT) instead: the same program, read
in two parts (booting_payload, then the argument).
"""

from __future__ import annotations

import _thread
import os

from envguard.probe import payload_cache

TYPE_CHECKING = False  # typing loads once the probe runs (envguard.api.early)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from functools import cache
    from types import ModuleType
    from typing import Any
else:

    class cache:
        """functools.cache, which this module cannot import: functools loads collections,
        milliseconds on the way to the probe's start (probe.booting)."""

        def __init__(self, function: Callable[..., Any]) -> None:
            self.function, self.memo = function, {}
            self.__doc__, self.__wrapped__ = function.__doc__, function

        def __call__(self, *args: Any) -> Any:
            if args not in self.memo:
                self.memo[args] = self.function(*args)
            return self.memo[args]

        def cache_clear(self) -> None:
            self.memo.clear()


# Dependency order: a module is installed after everything it imports.
TARGET_MODULES = (
    "reading",
    "redact",
    "confine",
    "system",
    "hostlayer",
    "distcache",
    "forked",
    "pycstamps",
    "records",
    "loaded",
    "dists",
    "sitefolders",
    "installed",
    "checking",
    "torchbuild",
    "compilekey",
    "elf",
    "fatbin",
    "symbols",
    "ldso",
    "libs",
    "fit",
    "trees",
    "gitrepos",
    "env",
    "fingerprint",
    "apply",
    "main",
)
# Modules of envguard/ itself that both sides use (they ship beside the target modules).
SHARED_MODULES = ("redact", "reading", "confine")
PACKAGE = "envguard_probe"
_VERSION_CHECK = (
    "import sys\n"
    "if sys.version_info < (3, 8):\n"
    '    sys.stdout.write(\'{"error": {"kind": "python_too_old", "message":'
    ' "Python %d.%d is too old; envguard needs Python 3.8 or newer there"}}\''
    " % sys.version_info[:2])\n"
    "    sys.exit(1)\n"
)
# A probe's process runs without the cyclic garbage collector, as the check's forked
# shares already did (forked.py). What it makes lives until it ends (the distribution
# cache, every RECORD row) or is freed by its reference count (it makes no cycles in bulk),
# and each collection walked all of it again: 11 ms of CPU of a probe of the bench venv.
# Only in a process of its own (the probe's, a fleet's): the rank gate runs the probe's
# modules in the training process (local_entry), whose collector is its own.
_NO_COLLECTOR = "import gc\ngc.disable()\n"
# The loader (probe/loader.py) installs (name, source) pairs as submodules of one package,
# so `from .x import y` works; its text goes first, as the payload carries it.
_HERE = os.path.dirname(__file__)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


LOADER = _read(os.path.join(_HERE, "loader.py"))


def _source_path(name: str) -> str:
    if name in SHARED_MODULES:
        return os.path.join(os.path.dirname(_HERE), f"{name}.py")
    return os.path.join(_HERE, "target", f"{name}.py")


def _built_from() -> list[str]:
    """Every file the payload is made of (this one says how): what its kept copy is keyed
    by."""
    here = [os.path.join(_HERE, "payload.py"), os.path.join(_HERE, "loader.py")]
    return here + [_source_path(name) for name in TARGET_MODULES]


@cache
def _stamp() -> str | None:
    """The stamp of the files the payload is built from, taken once and before any of
    them is read: a file changed after it no longer matches what is kept under it."""
    return payload_cache.stamp(_built_from())


@cache
def target_sources() -> tuple[tuple[str, str], ...]:
    """(module name, source) of every target module, in install order."""
    _stamp()
    return tuple((name, _read(_source_path(name))) for name in TARGET_MODULES)


@cache
def entry_sources(entry: str) -> tuple[tuple[str, str], ...]:
    """The target modules ``entry`` needs (its relative imports, followed), in install
    order: the probe does not carry restore's operations, nor a restore the probe's."""
    import re

    relative_import = re.compile(r"^\s*from \.(\w+) import", re.M)
    sources = dict(target_sources())
    needed, todo = set(), [entry, "reading"]  # reading: the ending parses the argument
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(relative_import.findall(sources[name]))
    return tuple((n, src) for n, src in target_sources() if n in needed)


@cache
def _kept(entry: str) -> tuple[tuple[str, ...], str, str] | None:
    """(names, packed text, code key) of ``entry`` as kept by an earlier run of this
    install (payload_cache), or None."""
    line = _stamp()
    return None if line is None else payload_cache.read(entry, line, allowed=TARGET_MODULES)


@cache
def code_key(entry: str) -> str:
    """Names the compiled code of ``entry``'s modules in the target's cache: a hash of the
    exact sources (and the package name), so another envguard version never uses it."""
    kept = _kept(entry)
    if kept is not None:
        return kept[2]
    import hashlib

    digest = hashlib.sha256(PACKAGE.encode())
    for name, source in entry_sources(entry):
        digest.update(b"\0" + name.encode() + b"\0" + source.encode("utf-8"))
    return digest.hexdigest()[:32]


@cache
def packed_sources(entry: str) -> tuple[tuple[str, ...], str]:
    """(names, packed text) of ``entry``'s modules, as loader._envguard_install unpacks
    them: base64 of the zlib-compressed sources joined by NUL. Kept between runs
    (payload_cache): a probe's start would wait for the compression otherwise."""
    kept = _kept(entry)
    if kept is not None:
        return kept[0], kept[1]
    names, packed = build_packed(entry)
    line = _stamp()
    if line is not None and payload_cache.settled(_built_from()):
        payload_cache.write(entry, line, names=names, packed=packed, key=code_key(entry))
    return names, packed


def build_packed(entry: str) -> tuple[tuple[str, ...], str]:
    """packed_sources(entry), built from the sources (nothing kept is read or written)."""
    import base64
    import zlib

    pairs = entry_sources(entry)
    assert not any("\0" in src for _, src in pairs)
    text = "\0".join(src for _, src in pairs).encode("utf-8")
    # Level 1, the fastest: a probe waits for this compression when nothing is kept, and
    # the target unpacks it only when it keeps no compiled code.
    packed = base64.b64encode(zlib.compress(text, 1)).decode("ascii")
    return tuple(name for name, _ in pairs), packed


def install_call(entry: str, target: str = "_pkg") -> str:
    """The payload line that installs ``entry``'s modules as ``target``."""
    names, packed = packed_sources(entry)
    return (
        f"{target} = _envguard_install({PACKAGE!r}, {packed!r}, {code_key(entry)!r},"
        f" names={names!r})\n"
    )


def probe_argument(args: Mapping[str, Any], entry: str) -> str:
    """``<entry>.main``'s one argument as JSON text. ``code``: what the probe's caches on
    the target are tied to (distcache.py)."""
    import json  # not on the way to a boot (booting)

    return json.dumps({**args, "code": code_key(entry)}, sort_keys=True)


def probe_payload(args: Mapping[str, Any], *, entry: str = "main") -> str:
    """The whole program: version check, the target package, then ``<entry>.main(args)``
    (``main``: the probe; ``apply``: one restore operation)."""
    assert entry in TARGET_MODULES
    arg_text = probe_argument(args, entry)
    return (
        _VERSION_CHECK
        + (_NO_COLLECTOR if entry == "main" else "")
        + LOADER
        + install_call(entry)
        + _ending(entry, f"_pkg.{entry}.main(_pkg.reading.parse_json({arg_text!r}))")
    )


def _ending(entry: str, call: str) -> str:
    """The payload's last lines: ``call``, its value the exit code. The probe's process
    then ends without the interpreter's finalization (its heap torn down object by object,
    milliseconds the host would wait for): its answer is written and flushed, its children
    collected, and it holds no other work; a restore's operation ends as ever."""
    if entry != "main":
        return f"sys.exit({call})\n"
    return (
        f"_code = {call}\nsys.stdout.flush()\nsys.stderr.flush()\n_pkg.main.ended()\n"
        "__import__('os')._exit(_code)\n"
    )


def booting_payload(entry: str = "main") -> bytes:
    """What a booted interpreter is sent first, with its length line: the version check and
    the target package, then a read of ``<entry>.main``'s argument (probe_argument) from
    the rest of stdin. The package loads while the host still builds that argument, and
    the probe takes its first steps meanwhile (main.begin); no argument (the host went
    away) ends it without a word.

    The package's packed sources follow the program as data, with a length line of their
    own, read by its install: not a string literal of the program, which the interpreter
    would tokenize (2 ms, for sources it does not unpack once its compiled code is kept)."""
    assert entry in TARGET_MODULES
    begin, call = "", f"_pkg.{entry}.main(_pkg.reading.parse_json(_arg.decode('utf-8')))"
    if entry == "main":
        begin = f"_begun = _pkg.main.begin({code_key(entry)!r})\n"
        call = "_pkg.main.main(_pkg.reading.parse_json(_arg.decode('utf-8')), _begun)"
    names, packed = packed_sources(entry)
    program = (
        _VERSION_CHECK
        + (_NO_COLLECTOR if entry == "main" else "")
        + LOADER
        + f"_pkg = _envguard_install({PACKAGE!r}, _b.read(int(_b.readline())).decode('ascii'),"
        + f" {code_key(entry)!r}, names={names!r})\n"
        + begin
        + "_arg = sys.stdin.buffer.read()\n"
        + "if not _arg.strip():\n"
        + "    sys.exit(3)\n"
        + _ending(entry, call)
    ).encode("utf-8")
    data = packed.encode("ascii")
    return b"%d\n" % len(program) + program + b"%d\n" % len(data) + data


# The standalone probe's one line: the node's name, the probe's exit code, the report's
# length and the report, newline-ended; an engine that splits long lines (srun --label
# every 1,024 bytes) is undone by its length (snapshots/fanout.py).
_ENVELOPE = (
    "import io, json, os\n"
    "_stdout, sys.stdout = sys.stdout, io.StringIO()\n"
    "try:\n"
    "    _code = _pkg.main.main(json.loads(%r))\n"
    "finally:\n"
    "    _text, sys.stdout = sys.stdout.getvalue(), _stdout\n"
    "_text = _text or 'null'\n"
    'sys.stdout.write(\'{"node": %%s, "exit": %%d, "bytes": %%d, "report": %%s}\\n\''
    " %% (json.dumps(os.uname().nodename), _code, len(_text.encode('utf-8')), _text))\n"
    "_pkg.forked.collect()\n"
    "sys.exit(_code)\n"
)


def standalone_payload(args: Mapping[str, Any]) -> str:
    """The probe as one self-contained script (`envguard probe-payload`): run by an engine's
    own fan-out (``srun python3 -I -S p.py``, ``clush python3 -I -S - < p.py``), it prints
    one line, ``{"node": NAME, "exit": CODE, "bytes": N, "report": REPORT}``, which
    `envguard fleet` reads."""
    arg_text = probe_argument(args, "main")
    header = "# envguard probe: prints one JSON line about this node; needs only Python 3.8+\n"
    return (
        header
        + _VERSION_CHECK
        + _NO_COLLECTOR
        + LOADER
        + install_call("main")
        + _ENVELOPE % arg_text
    )


_INSTALLED: list[ModuleType] = []
_INSTALLING = _thread.allocate_lock()


def local_package() -> ModuleType:
    """The target package installed in this process, exactly as the payload installs it on
    the far side: a local restore runs the same apply operations in-process. Once, under a
    lock (restore --hosts asks from many threads)."""
    with _INSTALLING:
        if not _INSTALLED:
            import sys

            namespace: dict[str, Any] = {"sys": sys}
            exec(LOADER, namespace)  # noqa: S102  # our own source, as the payload carries it
            _INSTALLED.append(namespace["_envguard_install"](PACKAGE, target_sources()))
        return _INSTALLED[0]


_ENTRIES: dict[str, ModuleType] = {}


def local_entry(entry: str) -> ModuleType:
    """``entry``'s modules (only those) installed in this process as a package of their
    own, their compiled code kept in the user's cache as the payload keeps it: the rank
    gate measures the training interpreter itself, where compiling every target module
    would be most of its cost. Once per process, under the lock ``local_package`` takes."""
    assert entry in TARGET_MODULES
    with _INSTALLING:
        if entry not in _ENTRIES:
            import hashlib
            import sys

            package = f"{PACKAGE}_{entry}"
            key = hashlib.sha256(f"{package}\0{code_key(entry)}".encode()).hexdigest()[:32]
            namespace: dict[str, Any] = {"sys": sys}
            exec(LOADER, namespace)  # noqa: S102  # our own source, as the payload carries it
            install = namespace["_envguard_install"]
            # The sources as pairs: packing them is for the wire, and costs a compression.
            _ENTRIES[entry] = install(package, entry_sources(entry), key)
        return _ENTRIES[entry]
