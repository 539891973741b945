"""Pure rebuild planner: a snapshot becomes argv steps and pinned requirement files.

A snapshot is untrusted input (it may arrive in a pull request), so every name, version,
URL and path taken from it is validated here before it can reach an argv or a file that
uv reads. Nothing is ever run through a shell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import Field

from envguard.errors import UsageError
from envguard.recovery.sources import Sources as Sources
from envguard.snapshots.models import Model, Package, Snapshot

DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl"
# Distributions the PyTorch indexes publish per variant (+cu128, +cpu, +rocm6.3, +xpu).
TORCH_FAMILY = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchdata",
        "torchrec",
        "torchao",
        "fbgemm-gpu",
        "fbgemm-gpu-genai",
        "pytorch-triton",
        "pytorch-triton-rocm",
        "pytorch-triton-xpu",
    }
)
_VARIANT = re.compile(r"^(cu\d{2,3}|cpu|rocm\d+(\.\d+)*|xpu)$")
# The CUDA that torch's PyPI wheels were built with, per release: a torch whose
# version.py names another CUDA came from the PyTorch index even without a local label.
PYPI_TORCH_CUDA = {
    "2.4": "12.1",
    "2.5": "12.4",
    "2.6": "12.4",
    "2.7": "12.6",
    "2.8": "12.8",
    "2.9": "12.8",
}
# Index settings from the environment that would add sources to the torch variant step.
INDEX_VARIABLES = (
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
)
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_PY_VERSION = re.compile(r"^\d+\.\d+\.\d+((a|b|rc)\d+)?$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")
_HASH = re.compile(r"^(sha256|sha384|sha512|md5)[=:]([0-9a-fA-F]{32,128})$")
# RFC 3986 characters only: no whitespace, quotes, backslashes or control characters.
_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+$")
_SCHEMES = {"https", "http", "file", "ssh"}


class PlanError(UsageError):
    """A snapshot value that cannot be planned safely: exit 2."""


@dataclass(frozen=True)
class PlanOptions:
    """Where to build, with which tools, and which package sources uv may use."""

    venv: Path
    snapshot_ref: str
    sources: Sources = field(default_factory=Sources)
    uv: str = "uv"
    envguard: tuple[str, ...] = ("envguard",)  # how the shell script calls envguard back
    in_place: bool = False
    build: Path | None = None  # fresh mode: the sibling directory built into
    workdir: Path | None = None  # where the requirement files are written
    skip_editables: bool = False
    base_python: str | None = None
    check_paths: bool = True  # editables and local sources must exist (off for a dry print)
    # In place: packages whose installed files are not what they installed (edited,
    # missing, another package's bytes), reinstalled by the sync though their version is.
    reinstall: tuple[str, ...] = ()
    # Packages found edited: taken from their wheels (uv --no-cache), never from uv's
    # unpacked cache, which holds the edit when the venv's files were links to it.
    from_wheels: tuple[str, ...] = ()


class RunStep(Model):
    """A program to run: uv creating the venv, installing the torch builds, syncing."""

    kind: Literal["venv", "install", "sync"]
    purpose: str
    argv: tuple[str, ...]
    unset_env: tuple[str, ...] = ()  # variables removed from the step's environment


class VerifyStep(Model):
    """Measure the built venv and compare it with the snapshot: these sections must match."""

    kind: Literal["verify"] = "verify"
    purpose: str
    python: str
    snapshot: str  # the snapshot file, for the shell script's `envguard diff`
    sections: tuple[str, ...] = ("packages", "interpreter", "installed")


class SwapStep(Model):
    """Put the build at the venv's path, atomically, keeping the old venv as a backup."""

    kind: Literal["swap"] = "swap"
    purpose: str
    build: str
    venv: str


Step = Annotated[RunStep | VerifyStep | SwapStep, Field(discriminator="kind")]


class PlanFile(Model):
    path: str
    content: str


class Plan(Model):
    schema_: Literal["envguard.plan"] = Field(default="envguard.plan", alias="schema")
    schema_version: Literal[1] = 1
    snapshot: str
    venv: str
    build: str | None
    in_place: bool
    python: str
    files: tuple[PlanFile, ...]
    steps: tuple[Step, ...]
    packages: int
    # torch as its build says ("2.14.1+cu130, CUDA 13.0"), when the snapshot has torch.
    torch: str | None = None
    envguard: tuple[str, ...] = ("envguard",)
    skipped: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def safe_label(text: str) -> str:
    """Snapshot text fit for a comment line: no newline, no control or shell character."""
    return re.sub(r"[^A-Za-z0-9._@+:/=-]", "_", text)[:128]


def _where(pkg: Package, index: int) -> str:
    return f"snapshot packages[{index}] ({pkg.name!r})"


def check_name(name: str, where: str) -> str:
    if not _NAME.match(name):
        raise PlanError(f"{where}: name {name!r} is not a valid PEP 508 distribution name")
    return canonicalize_name(name)


def check_version(version: str, where: str) -> str:
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise PlanError(f"{where}: version {version!r} is not a valid PEP 440 version") from None
    if version != version.strip() or not re.fullmatch(r"[A-Za-z0-9.+!_-]+", version):
        raise PlanError(f"{where}: version {version!r} is not a valid PEP 440 version")
    return str(parsed) if parsed.local is None else version


def check_url(url: str, where: str, warnings: list[str], *, vcs: bool = False) -> str:
    """An URL safe to put in a requirement: allowed scheme, RFC 3986 characters only."""
    if not url or url.startswith("-") or not _URL_CHARS.match(url):
        raise PlanError(f"{where}: URL {url!r} contains characters a requirement cannot carry")
    scheme = urlsplit(url).scheme.lower()
    base = scheme.split("+", 1)[1] if "+" in scheme else scheme
    if vcs and "+" in scheme and scheme.split("+", 1)[0] != "git":
        raise PlanError(f"{where}: only git VCS URLs are supported, not {scheme!r}")
    if base not in _SCHEMES or (base == "ssh" and not vcs):
        raise PlanError(
            f"{where}: URL scheme {scheme!r} is not allowed (https, http, file,"
            " git+https, git+ssh, git+file)"
        )
    if base == "http":
        warnings.append(f"{where}: plain http URL {url} (not encrypted)")
    return url


def check_path(path: str | None, where: str) -> Path:
    if not path or "\n" in path or "\r" in path or "\x00" in path or not path.startswith("/"):
        raise PlanError(f"{where}: path {path!r} is not an absolute local path")
    return Path(path)


def check_python_version(version: str) -> str:
    if not _PY_VERSION.match(version):
        raise PlanError(f"snapshot interpreter.version {version!r} is not a Python version")
    return version


def torch_variant(pkg: Package, snapshot: Snapshot) -> str | None:
    """``cu128``/``cpu``/``rocm6.3``/``xpu`` when ``pkg`` must come from a PyTorch index."""
    if pkg.name not in TORCH_FAMILY:
        return None
    try:
        local = Version(pkg.version).local
    except InvalidVersion:
        return None
    if local and _VARIANT.match(local):
        return local
    torch = snapshot.torch
    if pkg.name == "torch" and not local and torch is not None and torch.cuda:
        default = PYPI_TORCH_CUDA.get(".".join(pkg.version.split(".")[:2]))
        if default is not None and default != torch.cuda:
            return "cu" + torch.cuda.replace(".", "")
    return None


def requirement(pkg: Package, where: str, warnings: list[str]) -> str:
    """The pinned requirement line for one package, by its recorded source."""
    name = check_name(pkg.name, where)
    version = check_version(pkg.version, where)
    src = pkg.source
    if src.kind == "index":
        return f"{name}=={version}"
    if src.kind == "editable":
        return f"-e {check_path(src.path, where).as_uri()}"
    if src.kind == "dir":
        return f"{name} @ {check_path(src.path, where).as_uri()}"
    if src.kind == "vcs":
        url = check_url(src.url or "", where, warnings, vcs=True)
        vcs = (src.vcs or "git").lower()
        if vcs != "git":
            raise PlanError(f"{where}: only git VCS sources are supported, not {vcs!r}")
        if not src.commit or not _COMMIT.match(src.commit):
            raise PlanError(f"{where}: VCS commit {src.commit!r} is not a commit hash")
        full = url if url.startswith("git+") else f"git+{url}"
        line = f"{name} @ {full}@{src.commit}"
        if src.subdirectory:
            if not re.fullmatch(r"[A-Za-z0-9._/-]+", src.subdirectory) or ".." in src.subdirectory:
                raise PlanError(f"{where}: subdirectory {src.subdirectory!r} is not safe")
            line += f"#subdirectory={src.subdirectory}"
        return line
    url = check_url(src.url or "", where, warnings)
    if src.archive_hash and "#" not in url:
        match = _HASH.match(src.archive_hash)
        if match is None:
            raise PlanError(f"{where}: archive hash {src.archive_hash!r} is not ALGO=HEX")
        url += f"#{match.group(1)}={match.group(2)}"
    return f"{name} @ {url}"


@dataclass
class Pins:
    """The snapshot split into what `uv pip sync` installs and what each torch index does."""

    base: list[str] = field(default_factory=list)
    variants: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    count: int = 0
    # line -> its package's canonical name (an editable's line, ``-e file:///...``, has none)
    name_of: dict[str, str] = field(default_factory=dict)


def pins(snapshot: Snapshot, *, skip_editables: bool = False, check_paths: bool = True) -> Pins:
    """Validated requirement lines for every package of ``snapshot``."""
    out = Pins()
    for i, pkg in enumerate(p for p in snapshot.packages if not p.shadowed):
        where = _where(pkg, i)
        if pkg.source.kind == "editable":
            path = check_path(pkg.source.path, where)
            if skip_editables:
                out.skipped.append(f"{pkg.name} (editable {path}, --skip-editables)")
                continue
            if check_paths and not path.is_dir():
                raise PlanError(
                    f"editable {pkg.name}: {path} no longer exists",
                    hint="restore the checkout there, or pass --skip-editables",
                )
        line = requirement(pkg, where, out.warnings)
        out.name_of[line] = canonicalize_name(pkg.name)
        variant = torch_variant(pkg, snapshot) if pkg.source.kind == "index" else None
        if variant is not None:
            out.variants.setdefault(variant, []).append(line)
        else:
            out.base.append(line)
        out.count += 1
    return out


def requirements_text(lines: list[str], *, header: str) -> str:
    return "\n".join([f"# {header}", *sorted(lines)]) + "\n"


def index_args(options: Sources) -> list[str]:
    """uv's source options as the user gave them."""
    args: list[str] = []
    if options.no_index:
        args.append("--no-index")
    if options.index_url:
        args += ["--index-url", options.index_url]
    for url in options.extra_index_urls:
        args += ["--extra-index-url", url]
    for link in options.find_links:
        args += ["--find-links", link]
    if options.offline:
        args.append("--offline")
    return args


def python_request(snapshot: Snapshot, options: PlanOptions) -> str:
    if options.base_python:
        return options.base_python
    version = check_python_version(snapshot.interpreter.version)
    impl = snapshot.interpreter.implementation
    if impl not in ("cpython", "pypy"):
        raise PlanError(f"snapshot interpreter.implementation {impl!r} is not supported")
    return version if impl == "cpython" else f"pypy@{version}"


def variant_index(options: Sources, variant: str) -> str:
    return f"{(options.torch_index or DEFAULT_TORCH_INDEX).rstrip('/')}/{variant}"


def variant_args(options: Sources, variant: str, pins: Sequence[str] = ()) -> list[str]:
    """uv's source options for one torch variant: its PyTorch index alone (never the user's
    indexes, so nothing else resolves there), plus the user's local --find-links wheels.
    The --find-links wheels alone when the machine is air-gapped (--no-index), or when the
    wheelhouse already holds every pin of the variant (``pins``) and no --torch-index was
    asked for: the PyTorch index is then never contacted."""
    local = (
        bool(pins)
        and options.torch_index is None
        and all(in_wheelhouse(pin, options.wheelhouse) for pin in pins)
    )
    air_gapped = options.no_index and options.torch_index is None
    index = (
        ["--no-index"] if air_gapped or local else ["--index-url", variant_index(options, variant)]
    )
    links = [arg for link in options.find_links for arg in ("--find-links", link)]
    return [*index, *links, *(["--offline"] if options.offline else [])]


def in_wheelhouse(pin: str, wheels: Sequence[str]) -> bool:
    """Whether ``name==version`` (a variant pin) has a wheel among the file names ``wheels``
    (``torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl``)."""
    name, _, version = pin.partition("==")
    prefix = f"{re.sub(r'[-_.]+', '_', name.strip()).lower()}-{version.strip()}-"
    return any(w.lower().startswith(prefix) and w.endswith(".whl") for w in wheels)


def plan(snapshot: Snapshot, options: PlanOptions) -> Plan:
    """The ordered steps that recreate ``snapshot``'s packages in ``options.venv``."""
    found = pins(snapshot, skip_editables=options.skip_editables, check_paths=options.check_paths)
    sources = options.sources
    target = options.venv if options.in_place else (options.build or options.venv)
    workdir = options.workdir or target.parent
    python_path = str(target / "bin" / "python")
    uv = options.uv
    every_pin = found.base + [line for group in found.variants.values() for line in group]
    files = [
        PlanFile(
            path=str(workdir / "requirements.txt"),
            content=requirements_text(every_pin, header="envguard rebuild: pinned packages"),
        )
    ]
    steps: list[Step] = []
    request = python_request(snapshot, options)
    if not options.in_place:
        steps.append(
            RunStep(
                kind="venv",
                purpose=f"create a fresh venv with Python {request}",
                # --allow-existing: the executor marks the build dir as its own first.
                argv=(
                    uv,
                    "venv",
                    "--relocatable",
                    "--allow-existing",
                    "--python",
                    request,
                    str(target),
                ),
            )
        )
    for variant in sorted(found.variants):
        path = str(workdir / f"torch-{variant}.txt")
        files.append(
            PlanFile(
                path=path,
                content=requirements_text(
                    found.variants[variant], header=f"envguard rebuild: the {variant} builds"
                ),
            )
        )
        # First, and --no-deps from their own index: the sync after it finds them already
        # installed at their pinned versions and keeps them; nothing else comes from here.
        source = variant_args(sources, variant, found.variants[variant])
        where = "--find-links" if "--no-index" in source else variant_index(sources, variant)
        names = ", ".join(_names(found.variants[variant]))
        edited = [
            n
            for n in _names(found.variants[variant])
            if canonicalize_name(n) in options.from_wheels
        ]
        steps.append(
            RunStep(
                kind="install",
                purpose=f"install the {variant} builds of {names} from {where} only",
                # --no-config and no index variables: only the source named here applies.
                argv=(
                    uv,
                    "pip",
                    "install",
                    "--no-config",
                    "--python",
                    python_path,
                    "--no-deps",
                    *_from_wheels(edited),
                    *source,
                    "-r",
                    path,
                ),
                unset_env=INDEX_VARIABLES,
            )
        )
    edited_pins = [line for line in found.base if found.name_of[line] in options.from_wheels]
    if edited_pins:
        path = str(workdir / "from-wheels.txt")
        files.append(
            PlanFile(
                path=path,
                content=requirements_text(
                    edited_pins, header="envguard rebuild: packages found edited"
                ),
            )
        )
        edited_names = sorted(found.name_of[line] for line in edited_pins)
        names = ", ".join(edited_names)
        steps.append(
            RunStep(
                kind="install",
                purpose=f"install {names} from their wheels, not from uv's unpacked cache"
                " (found edited: the cache may hold the edit)",
                argv=(
                    uv,
                    "pip",
                    "install",
                    "--python",
                    python_path,
                    "--no-deps",
                    *_from_wheels(edited_names),
                    *index_args(sources),
                    "-r",
                    path,
                ),
            )
        )
    steps.append(
        RunStep(
            kind="sync",
            purpose=f"install exactly the {found.count} pinned packages, removing all else",
            argv=(
                uv,
                "pip",
                "sync",
                "--python",
                python_path,
                *index_args(sources),
                *(a for name in options.reinstall for a in ("--reinstall-package", name)),
                files[0].path,
            ),
        )
    )
    steps += owner_steps(snapshot, every_pin, uv, python_path, sources, options.from_wheels)
    steps.append(
        VerifyStep(
            purpose="verify packages, installed files and the interpreter against the snapshot",
            python=python_path,
            snapshot=options.snapshot_ref,
        )
    )
    if not options.in_place:
        steps.append(
            SwapStep(
                purpose=f"swap the new venv into {options.venv}, keeping the old one as a backup",
                build=str(target),
                venv=str(options.venv),
            )
        )
    return Plan(
        snapshot=snapshot.name,
        venv=str(options.venv),
        build=None if options.in_place else str(target),
        in_place=options.in_place,
        python=request,
        files=tuple(files),
        steps=tuple(steps),
        packages=found.count,
        torch=torch_build_label(snapshot),
        envguard=options.envguard,
        skipped=tuple(found.skipped),
        warnings=tuple(found.warnings),
    )


def _from_wheels(names: Sequence[str]) -> list[str]:
    """uv's options that reinstall ``names`` from their wheels: --no-cache reads each wheel
    into a cache of its own for this call (uv's shared one is neither read nor changed)."""
    if not names:
        return []
    return ["--no-cache", *(a for name in names for a in ("--reinstall-package", name))]


def owner_steps(
    snapshot: Snapshot,
    pins: list[str],
    uv: str,
    python: str,
    sources: Sources,
    from_wheels: Sequence[str] = (),
) -> list[RunStep]:
    """One reinstall per distribution whose bytes the snapshot found on a path that two
    distributions claim, after everything else: the last one installed owns the file, as
    in the good environment."""
    by_name = {n: line for line in pins for n in _names([line])}
    # An owner that is none of the path's claimants (a snapshot edited by hand) is no reason
    # to reinstall anything.
    clashes = [
        c
        for c in snapshot.clashes or ()
        if c.owner is not None
        and canonicalize_name(c.owner) in {canonicalize_name(n.name) for n in c.claimants}
    ]
    steps = []
    for owner in sorted({c.owner for c in clashes if c.owner is not None}):
        pin = by_name.get(str(canonicalize_name(owner)))
        if pin is None:
            continue
        paths = sorted(c.path for c in clashes if c.owner == owner)
        steps.append(
            RunStep(
                kind="install",
                purpose=f"reinstall {safe_label(owner)} last: its copy of"
                f" {safe_label(paths[0])}{' and more' if len(paths) > 1 else ''} is the"
                " good environment's",
                argv=(
                    uv,
                    "pip",
                    "install",
                    "--python",
                    python,
                    "--no-deps",
                    "--reinstall-package",
                    str(canonicalize_name(owner)),
                    *(["--no-cache"] if canonicalize_name(owner) in from_wheels else []),
                    *index_args(sources),
                    pin,
                ),
            )
        )
    return steps


def torch_build_label(snapshot: Snapshot) -> str | None:
    """``2.14.1+cu130 (CUDA 13.0)``: the build torch's version.py names, for plans and
    exports whose pins carry PyPI's unlabelled version."""
    from envguard.compare.sections.packages import torch_version

    label = torch_version(snapshot)
    if label is None:
        return None
    torch = snapshot.torch
    gpu = (
        f"CUDA {safe_label(torch.cuda)}"
        if torch is not None and torch.cuda
        else (f"HIP {safe_label(torch.hip)}" if torch is not None and torch.hip else "CPU")
    )
    return f"{safe_label(label)} ({gpu})"


def _names(lines: list[str]) -> list[str]:
    return sorted(re.split(r"[=@ ]", line, maxsplit=1)[0] for line in lines)
