"""The program sent to the target interpreter on stdin: the target package, then a call.

The command line stays ``python -I -S -``, so it survives any prefix unquoted (ssh's remote
shell, pct exec, docker exec, srun). The payload opens with a version check that any Python
parses, then installs each module of probe/target/ (and envguard/redact.py and
envguard/reading.py, which both sides use) as the package ``envguard_probe`` from string
literals, and runs ``main.main``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

# Dependency order: a module is installed after everything it imports.
TARGET_MODULES = (
    "redact",
    "reading",
    "confine",
    "system",
    "hostlayer",
    "distcache",
    "forked",
    "loaded",
    "dists",
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
# The loader (probe/loader.py) installs (name, source) pairs as submodules of one package,
# so `from .x import y` works; its text goes first, as the payload carries it.
LOADER = (Path(__file__).parent / "loader.py").read_text(encoding="utf-8")


@cache
def target_sources() -> tuple[tuple[str, str], ...]:
    """(module name, source) of every target module, in install order."""
    here = Path(__file__).parent
    out = []
    for name in TARGET_MODULES:
        shared = name in SHARED_MODULES
        path = here.parent / f"{name}.py" if shared else here / "target" / f"{name}.py"
        out.append((name, path.read_text(encoding="utf-8")))
    return tuple(out)


_RELATIVE_IMPORT = re.compile(r"^\s*from \.(\w+) import", re.M)


@cache
def entry_sources(entry: str) -> tuple[tuple[str, str], ...]:
    """The target modules ``entry`` needs (its relative imports, followed), in install
    order: the probe does not carry restore's operations, nor a restore the probe's."""
    sources = dict(target_sources())
    needed, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(_RELATIVE_IMPORT.findall(sources[name]))
    return tuple((n, src) for n, src in target_sources() if n in needed)


@cache
def code_key(entry: str) -> str:
    """Names the compiled code of ``entry``'s modules in the target's cache: a hash of the
    exact sources (and the package name), so another envguard version never uses it."""
    import hashlib

    digest = hashlib.sha256(PACKAGE.encode())
    for name, source in entry_sources(entry):
        digest.update(b"\0" + name.encode() + b"\0" + source.encode("utf-8"))
    return digest.hexdigest()[:32]


@cache
def packed_sources(entry: str) -> tuple[tuple[str, ...], str]:
    """(names, packed text) of ``entry``'s modules, as loader._envguard_install unpacks
    them: base64 of the zlib-compressed sources joined by NUL."""
    import base64
    import zlib

    pairs = entry_sources(entry)
    assert not any("\0" in src for _, src in pairs)
    text = "\0".join(src for _, src in pairs).encode("utf-8")
    # Level 1, the fastest: every probe waits for this compression, and the target unpacks
    # it only when it keeps no compiled code; a smaller payload is not worth the wait.
    packed = base64.b64encode(zlib.compress(text, 1)).decode("ascii")
    return tuple(name for name, _ in pairs), packed


def install_call(entry: str, target: str = "_pkg") -> str:
    """The payload line that installs ``entry``'s modules as ``target``."""
    names, packed = packed_sources(entry)
    return (
        f"{target} = _envguard_install({PACKAGE!r}, {packed!r}, {code_key(entry)!r},"
        f" names={names!r})\n"
    )


def probe_payload(args: Mapping[str, Any], *, entry: str = "main") -> str:
    """The whole program: version check, the target package, then ``<entry>.main(args)``
    (``main``: the probe; ``apply``: one restore operation)."""
    assert entry in TARGET_MODULES
    # ``code``: what the probe's caches on the target are tied to (distcache.py).
    arg_text = json.dumps({**args, "code": code_key(entry)}, sort_keys=True)
    return (
        _VERSION_CHECK
        + LOADER
        + install_call(entry)
        + f"sys.exit(_pkg.{entry}.main(__import__('json').loads({arg_text!r})))\n"
    )


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
    "sys.exit(_code)\n"
)


def standalone_payload(args: Mapping[str, Any]) -> str:
    """The probe as one self-contained script (`envguard probe-payload`): run by an engine's
    own fan-out (``srun python3 -I -S p.py``, ``clush python3 -I -S - < p.py``), it prints
    one line, ``{"node": NAME, "exit": CODE, "bytes": N, "report": REPORT}``, which
    `envguard fleet` reads."""
    arg_text = json.dumps({**args, "code": code_key("main")}, sort_keys=True)
    header = "# envguard probe: prints one JSON line about this node; needs only Python 3.8+\n"
    return header + _VERSION_CHECK + LOADER + install_call("main") + _ENVELOPE % arg_text


_INSTALLED: list[ModuleType] = []
_INSTALLING = threading.Lock()


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
