"""The comparison's sections by name, in the order of reports, without loading them: the
policy ([tool.envguard], --only) is read with these before any comparison runs (a clean
diff never loads the sections: compare/identical.py). compare/sections/ registers each
module named here, and nothing else."""

from __future__ import annotations

SECTIONS: tuple[str, ...] = (
    "interpreter",
    "torch",
    "libraries",
    "fit",
    "siblings",
    "packages",
    "installed",
    "accelerator",
    "host_layer",
    "repos",
    "files",
    "caches",
    "env",
)
