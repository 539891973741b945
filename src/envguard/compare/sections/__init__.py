"""The registry of sections: a new section is one module here and its name in
compare/names.py.

Each module defines a ``SECTION`` (see base.py): its comparison, its identity for fleet
grouping, its title and its restore hint. The order here is the order of reports.
"""

from __future__ import annotations

from importlib import import_module

from envguard.compare.names import SECTIONS
from envguard.compare.sections.base import Section

# Each module's SECTION, in the order compare/names.py gives: a module of that name here.
REGISTRY: tuple[Section, ...] = tuple(
    import_module(f"envguard.compare.sections.{name}").SECTION for name in SECTIONS
)
BY_NAME: dict[str, Section] = {s.name: s for s in REGISTRY}
