"""What to install from a lock (extras, dependency groups, workspace members), as the
command line takes it: a module of its own, so parsing ``diff``'s options loads no
lockfile reader."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Selection:
    """What to install from a lock, as `uv sync` takes it: extras and dependency groups
    (default groups as the project declares them, ``[tool.uv] default-groups`` for uv)."""

    extras: tuple[str, ...] = ()
    all_extras: bool = False
    groups: tuple[str, ...] = ()
    only_groups: tuple[str, ...] = ()
    no_default_groups: bool = False
    all_groups: bool = False
    packages: tuple[str, ...] = ()
    # uv.lock only, as `uv sync` takes them: groups left out (--no-group, --no-dev), the
    # whole workspace (--all-packages), what of it is not installed (--no-install-project,
    # --no-install-workspace), and path packages installed as built, not editable.
    no_groups: tuple[str, ...] = ()
    no_dev: bool = False
    all_packages: bool = False
    no_install_project: bool = False
    no_install_workspace: bool = False
    no_editable: bool = False

    def uv_args(self) -> list[str]:
        """The same selection as `uv export` flags (`--no-emit-project` where `uv sync`
        says `--no-install-project`)."""
        args: list[str] = []
        for flag, values in (
            ("--extra", self.extras),
            ("--group", self.groups),
            ("--only-group", self.only_groups),
            ("--no-group", self.no_groups),
            ("--package", self.packages),
        ):
            for value in values:
                args += [flag, value]
        for flag, on in (
            ("--all-extras", self.all_extras),
            ("--no-default-groups", self.no_default_groups),
            ("--all-groups", self.all_groups),
            ("--no-dev", self.no_dev),
            ("--all-packages", self.all_packages),
            ("--no-emit-project", self.no_install_project),
            ("--no-emit-workspace", self.no_install_workspace),
            ("--no-editable", self.no_editable),
        ):
            if on:
                args.append(flag)
        return args


def narrowed(
    selection: Selection, data: dict[str, Any], *, where: str
) -> tuple[Selection, str | None]:
    """``selection`` without the extras and groups that the lock ``data`` (a uv.lock's or a
    pylock.toml's TOML) does not define, and a note naming them; the selection itself and
    None when it defines them all."""
    from packaging.utils import canonicalize_name

    extras: set[str] = set()
    groups: set[str] = set()
    if isinstance(data.get("package"), list):  # uv.lock: its workspace members' tables
        for pkg in data["package"]:
            source = pkg.get("source") if isinstance(pkg, dict) else None
            if isinstance(source, dict) and {"virtual", "editable", "directory"} & set(source):
                extras |= set(pkg.get("optional-dependencies") or {})
                groups |= set(pkg.get("dev-dependencies") or {})
    else:
        extras |= {e for e in data.get("extras") or () if isinstance(e, str)}
        groups |= {g for g in data.get("dependency-groups") or () if isinstance(g, str)}
    extras = {canonicalize_name(e) for e in extras}
    groups = {canonicalize_name(g) for g in groups}
    dropped = [f"extra `{e}`" for e in selection.extras if canonicalize_name(e) not in extras]
    dropped += [
        f"group `{g}`"
        for g in dict.fromkeys(selection.groups + selection.only_groups)
        if canonicalize_name(g) not in groups
    ]
    if not dropped:
        return selection, None
    kept = replace(
        selection,
        extras=tuple(e for e in selection.extras if canonicalize_name(e) in extras),
        groups=tuple(g for g in selection.groups if canonicalize_name(g) in groups),
        only_groups=tuple(g for g in selection.only_groups if canonicalize_name(g) in groups),
    )
    them = "it" if len(dropped) == 1 else "them"
    return kept, f"{where} has no {', '.join(dropped)}: read without {them}"
