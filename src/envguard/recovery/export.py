"""Export a snapshot as a pinned requirements.txt or a PEP 751 pylock.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from envguard.errors import ActionError
from envguard.recovery.plan import (
    Sources,
    check_python_version,
    index_args,
    pins,
    requirements_text,
    safe_label,
    torch_build_label,
    variant_args,
    variant_index,
)
from envguard.recovery.scratch import scratch_folder
from envguard.snapshots.models import Snapshot

# A pylock export resolves exact pins (no search): a few thousand packages take seconds. A
# snapshot listing 100,000 is not an environment; the export stops instead of hanging.
COMPILE_SECONDS = 600

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_TRIPLES = {
    ("linux", "x86_64"): "x86_64-unknown-linux-gnu",
    ("linux", "aarch64"): "aarch64-unknown-linux-gnu",
    ("darwin", "arm64"): "aarch64-apple-darwin",
    ("darwin", "x86_64"): "x86_64-apple-darwin",
    ("windows", "amd64"): "x86_64-pc-windows-msvc",
}


def requirements_export(
    snapshot: Snapshot, options: Sources, *, skip_editables: bool = False
) -> str:
    """One pinned requirements.txt, with the index lines the torch variants need."""
    found = pins(snapshot, skip_editables=skip_editables, check_paths=False)
    python = check_python_version(snapshot.interpreter.version)
    head = [f"# envguard export of snapshot {safe_label(snapshot.name)} (Python {python})"]
    build = torch_build_label(snapshot)
    if build is not None:
        head.append(f"# torch build: {build}")
    if options.index_url:
        head.append(f"--index-url {options.index_url}")
    head += [f"--extra-index-url {url}" for url in options.extra_index_urls]
    head += [f"--find-links {link}" for link in options.find_links]
    for variant in sorted(found.variants):
        head.append(f"--extra-index-url {variant_index(options, variant)}")
    if found.variants:
        head += [
            "# The +variant pins exist only on the PyTorch index(es) above. pip picks each pin",
            "# from whichever index has it; uv prefers extra indexes, so install this file with",
            "# `uv pip sync --index-strategy unsafe-best-match`, or export --format pylock,",
            "# which pins every package to its own index.",
        ]
    lines = list(found.base)
    for group in found.variants.values():
        lines += group
    return "\n".join([*head, *sorted(lines)]) + "\n"


def _compile(
    reqs: list[str],
    uv: str,
    snapshot: Snapshot,
    index: list[str],
    workdir: Path,
    label: str,
) -> str:
    path = workdir / f"{label}.in"
    try:
        path.write_text(requirements_text(reqs, header=label), encoding="utf-8")
    except OSError as exc:
        raise ActionError(f"{path}: cannot write ({exc.strerror or exc})") from None
    interp = snapshot.interpreter
    argv = [
        uv,
        "pip",
        "compile",
        "--quiet",
        "--no-header",
        "--no-deps",
        "--format",
        "pylock.toml",
        "--python-version",
        check_python_version(interp.version),
        *index,
        str(path),
    ]
    triple = _TRIPLES.get((interp.os, interp.machine.lower()))
    if triple:
        argv[argv.index("--python-version") : argv.index("--python-version")] = [
            "--python-platform",
            triple,
        ]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=COMPILE_SECONDS
        )
    except subprocess.TimeoutExpired:
        raise ActionError(
            f"uv pip compile ({label}) took over {COMPILE_SECONDS}s; stopped",
            hint="export --format requirements needs no resolver and has no such limit",
        ) from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise ActionError(
            f"uv pip compile ({label}) failed: {lines[-1] if lines else proc.returncode}"
        )
    return proc.stdout


def pylock_text(
    snapshot: Snapshot, options: Sources, *, uv: str, skip_editables: bool = False
) -> str:
    """A PEP 751 lock with each package's own index and hashes, resolved by uv (--no-deps).

    Torch variants are compiled against their PyTorch index alone, so no other package can
    come from it; the per-group locks are then joined into one [[packages]] array.
    """
    found = pins(snapshot, skip_editables=skip_editables, check_paths=False)
    tmp = scratch_folder("export")  # named so a later run removes it after a SIGKILL
    try:
        parts = [_compile(found.base, uv, snapshot, index_args(options), tmp, "base")]
        for variant in sorted(found.variants):
            index = variant_args(options, variant)
            parts.append(
                _compile(found.variants[variant], uv, snapshot, index, tmp, f"torch-{variant}")
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = parts[0].rstrip("\n") + "\n"
    for extra in parts[1:]:
        start = extra.find("[[packages]]")
        if start >= 0:
            text += "\n" + extra[start:].rstrip("\n") + "\n"
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - uv's output is valid TOML
        raise ActionError(f"joined pylock.toml does not parse: {exc}") from None
    return text
