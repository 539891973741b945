"""What to install from a lock (extras, dependency groups, workspace members), as the
command line takes it: a module of its own, so parsing ``diff``'s options loads no
lockfile reader."""

from __future__ import annotations

from dataclasses import dataclass


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

    def uv_args(self) -> list[str]:
        """The same selection as `uv export` / `uv sync` flags."""
        args: list[str] = []
        for flag, values in (
            ("--extra", self.extras),
            ("--group", self.groups),
            ("--only-group", self.only_groups),
            ("--package", self.packages),
        ):
            for value in values:
                args += [flag, value]
        for flag, on in (
            ("--all-extras", self.all_extras),
            ("--no-default-groups", self.no_default_groups),
            ("--all-groups", self.all_groups),
        ):
            if on:
                args.append(flag)
        return args
