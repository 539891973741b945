"""Severity policy: defaults that fit GPU training, and `[tool.envguard]` overrides."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from fnmatch import translate
from functools import lru_cache
from pathlib import Path
from typing import Any

from envguard.compare.names import SECTIONS
from envguard.compare.severity import Severity
from envguard.errors import UsageError
from envguard.toml_reading import toml_loads

# Distributions whose change (added, removed, any version or build) breaks GPU training.
GPU_STACK = (
    "torch",
    "torchvision",
    "torchaudio",
    "triton",
    "pytorch-triton*",
    "nvidia-*",
    "cuda-*",
    "cupy-cuda*",
    "flash-attn*",
    "flash-attention*",
    "flashinfer*",
    "xformers",
    "deepspeed",
    "apex",
    "transformer-engine*",
    "bitsandbytes",
    "vllm*",
    "sglang*",
    "liger-kernel*",
    "mamba-ssm",
    "causal-conv1d",
    "tensorrt*",
    "onnxruntime-gpu",
    "jax-cuda*",
    "jaxlib",
    "megatron-core",
    "torchao",
    "fbgemm-gpu*",
    "nvtx",
)

LEVELS = {"critical": Severity.critical, "warning": Severity.warning, "info": Severity.info}


@dataclass(frozen=True)
class Policy:
    """How much each change matters, and which changes to ignore."""

    critical_packages: tuple[str, ...] = GPU_STACK
    ignore_packages: tuple[str, ...] = ()
    ignore_sections: tuple[str, ...] = ()
    # "section.kind" (or "section") -> severity, overriding the defaults.
    severity: dict[str, Severity] = field(default_factory=dict)
    fail_on: Severity | None = Severity.warning
    # `uv sync --inexact`: packages a uv.lock does not list are kept, so they are not drift.
    inexact: bool = False
    source: str | None = None  # the pyproject.toml it came from

    def is_critical_package(self, name: str) -> bool:
        return _matcher(self.critical_packages)(name) is not None

    def ignores_package(self, name: str) -> bool:
        return bool(self.ignore_packages) and _matcher(self.ignore_packages)(name) is not None

    def level(self, section: str, kind: str, default: Severity) -> Severity:
        """The severity for a change, after user overrides."""
        return self.severity.get(f"{section}.{kind}", self.severity.get(section, default))


@lru_cache(maxsize=32)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    """One compiled regex for a list of fnmatch patterns (a diff asks once per package)."""
    if not patterns:
        return lambda _name: None
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns)).match


def parse_fail_on(value: str, *, where: str = "--fail-on") -> Severity | None:
    if value == "never":
        return None
    if value not in LEVELS:
        raise UsageError(f"{where}: {value!r} is not one of critical, warning, info, never")
    return LEVELS[value]


def _names(value: Any, *, key: str, where: str, patterns: bool = True) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: [tool.envguard] {key} must be a list of strings")
    from packaging.utils import canonicalize_name  # here: most projects set no policy

    return tuple(canonicalize_name(v) if patterns and "*" not in v else v.lower() for v in value)


def policy_from_table(table: dict[str, Any], *, where: str) -> Policy:
    """A Policy from a `[tool.envguard]` table; UsageError naming the bad key."""
    known = {
        "fail-on",
        "critical-packages",
        "ignore-packages",
        "ignore-sections",
        "severity",
        "inexact",
    }
    unknown = sorted(set(table) - known)
    if unknown:
        raise UsageError(
            f"{where}: unknown key [tool.envguard] {unknown[0]}",
            hint=f"known keys: {', '.join(sorted(known))}",
        )
    policy = Policy(source=where)
    if "fail-on" in table:
        value = table["fail-on"]
        if not isinstance(value, str):
            raise UsageError(f"{where}: [tool.envguard] fail-on must be a string")
        policy = replace(policy, fail_on=parse_fail_on(value, where=f"{where}: fail-on"))
    if "inexact" in table:
        if not isinstance(table["inexact"], bool):
            raise UsageError(f"{where}: [tool.envguard] inexact must be true or false")
        policy = replace(policy, inexact=table["inexact"])
    if "critical-packages" in table:
        extra = _names(table["critical-packages"], key="critical-packages", where=where)
        policy = replace(policy, critical_packages=GPU_STACK + extra)
    if "ignore-packages" in table:
        policy = replace(
            policy,
            ignore_packages=_names(table["ignore-packages"], key="ignore-packages", where=where),
        )
    if "ignore-sections" in table:
        sections = _names(
            table["ignore-sections"], key="ignore-sections", where=where, patterns=False
        )
        bad = [s for s in sections if s not in SECTIONS]
        if bad:
            raise UsageError(
                f"{where}: [tool.envguard] ignore-sections: unknown section {bad[0]!r}",
                hint=f"sections: {', '.join(SECTIONS)}",
            )
        policy = replace(policy, ignore_sections=sections)
    if "severity" in table:
        overrides = table["severity"]
        if not isinstance(overrides, dict):
            raise UsageError(f"{where}: [tool.envguard.severity] must be a table")
        levels: dict[str, Severity] = {}
        for key, value in overrides.items():
            if (
                key.split(".")[0] not in SECTIONS
                or not isinstance(value, str)
                or value not in LEVELS
            ):
                raise UsageError(
                    f"{where}: [tool.envguard.severity] {key} = {value!r}: expected"
                    ' SECTION[.KIND] = "critical"|"warning"|"info"'
                )
            levels[key] = LEVELS[value]
        policy = replace(policy, severity=levels)
    return policy


_PYPROJECT_CAP = 4 << 20


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml from ``start`` upward, not past the git work tree that
    holds ``start`` (a pyproject.toml above the project is someone else's: a planted
    /tmp/pyproject.toml must not set the gate's policy for every folder below it)."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():
            return None
    return None


def _read_policy_file(path: Path) -> bytes:
    """The policy file's bytes, checked on the very file read (one open, then fstat: a link
    swapped between a check and the read cannot pass a file the check did not see). A file
    or a link another user owns is refused (root's are the system's); this user's own file
    is read whatever its mode (a CI checkout made with umask 000 is still the project's)."""
    import os
    import stat

    from envguard.reading import NotRegular, open_regular, read_open

    def owner_ok(st: os.stat_result) -> bool:
        return st.st_uid in (os.getuid(), 0)

    refused = UsageError(
        f"{path}: owned by another user; its [tool.envguard] would set what the gate fails on",
        hint="run from your own project, or fix the file's owner",
    )
    try:
        if not owner_ok(os.lstat(path)):
            raise refused
        fd = open_regular(str(path))
    except NotRegular:
        raise UsageError(f"{path}: not a regular file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not owner_ok(st) or not stat.S_ISREG(st.st_mode):
            raise refused
        return read_open(fd, _PYPROJECT_CAP, str(path))
    except OSError as exc:  # past the cap
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def load_policy(start: Path | None = None) -> Policy:
    """The policy of the nearest pyproject.toml's [tool.envguard], else the defaults."""
    path = find_pyproject(Path.cwd() if start is None else start)
    if path is None:
        return Policy()
    try:
        data = toml_loads(_read_policy_file(path).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError and a refused number too
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UsageError(f"{path}: cannot read it as TOML ({reason})") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise UsageError(f"{path}: [tool] must be a table")
    table = tool.get("envguard")
    if table is None:
        return Policy()
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.envguard] must be a table")
    return policy_from_table(table, where=str(path))


def only_sections(policy: Policy, sections: Iterable[str]) -> Policy:
    """``policy`` narrowed to ``sections`` (--only); UsageError naming an unknown one."""
    wanted = tuple(sections)
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        raise UsageError(f"--only {unknown[0]}: not a section ({', '.join(SECTIONS)})")
    return replace(policy, ignore_sections=tuple(s for s in SECTIONS if s not in wanted))
