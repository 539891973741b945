"""The registry of sections: a new section is one module here and one line below.

Each module defines a ``SECTION`` (see base.py): its comparison, its identity for fleet
grouping, its title and its restore hint. The order here is the order of reports.
"""

from __future__ import annotations

from envguard.compare.sections import (
    accelerator,
    caches,
    env,
    files,
    fit,
    host_layer,
    installed,
    interpreter,
    libraries,
    packages,
    repos,
    siblings,
    torch,
)
from envguard.compare.sections.base import Section

REGISTRY: tuple[Section, ...] = (
    interpreter.SECTION,
    torch.SECTION,
    libraries.SECTION,
    fit.SECTION,
    siblings.SECTION,
    packages.SECTION,
    installed.SECTION,
    accelerator.SECTION,
    host_layer.SECTION,
    repos.SECTION,
    files.SECTION,
    caches.SECTION,
    env.SECTION,
)
SECTIONS: tuple[str, ...] = tuple(s.name for s in REGISTRY)
BY_NAME: dict[str, Section] = {s.name: s for s in REGISTRY}
