"""Developer commands: ``python -m envguard.dev regenerate`` writes every generated file from
the one declaration of each shape, ``python -m envguard.dev check`` says which are stale.

Generated here:
- src/envguard/snapshots/shape.py: from snapshots/models.py, the key sets, the schema's
  minor version, the pydantic-free checker (``fits``) and builder (``built``) of a snapshot
  document, and what a reader of an older minor version reads past;
- src/envguard/probe/spec.py: from the TypedDicts of probe/report_shape.py, the spec the probe's
  report is checked against;
- schema/*.json: the published JSON schemas (``envguard schema KIND``).

Nothing here runs in a user's command: it imports pydantic and every model, and writes
into the checkout. It is left out of the wheel (pyproject.toml); an editable install
(`pip install -e ".[dev]"`) runs it from the source tree.
"""

from __future__ import annotations

import os
import sys
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from envguard.snapshots.checks import LINE_PATTERN, SERIALIZERS_ALLOWED, VALIDATOR_HOOKS

SRC = Path(__file__).resolve().parent
REPO = SRC.parent.parent
SHAPE = SRC / "snapshots" / "shape.py"
BUILDERS = SRC / "snapshots" / "builders.py"
SPEC = SRC / "probe" / "spec.py"
SCHEMA_DIR = REPO / "schema"

_HEADER = (
    '"""GENERATED from {source} by `python -m envguard.dev regenerate`: do not edit.\n\n'
    "{what}\n"
    '"""\n'
    "\n"
    "from __future__ import annotations\n"
)


class GenerationError(Exception):
    """A declaration the generator cannot translate: say what to add or change."""


# ---- snapshots/shape.py ---------------------------------------------------------------------


@dataclass
class _Shape:
    """What is written out for the snapshot models, built up while walking them."""

    models: list[type[BaseModel]] = field(default_factory=list)
    patterns: dict[str, str] = field(default_factory=dict)  # pattern -> constant name
    minor: int = 0


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model nested in it, each once, parents first."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for info in model.model_fields.values():
            for nested in _nested_models(info.annotation):
                visit(nested)

    visit(root)
    return seen


def _nested_models(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for arg in get_args(tp) for m in _nested_models(arg)]


def _since(info: FieldInfo) -> int:
    from envguard.snapshots.models import Since

    found = [m.minor for m in info.metadata if isinstance(m, Since)]
    found += [m.minor for m in _annotated_metadata(info.annotation) if isinstance(m, Since)]
    return max(found, default=0)


def _annotated_metadata(tp: Any) -> list[Any]:
    """Metadata of an Annotated inside a union (``Annotated[X | None, Since(1)]``)."""
    if get_origin(tp) is typing.Annotated:
        return list(get_args(tp)[1:])
    return []


def _constraints(metadata: list[Any]) -> dict[str, Any]:
    """The constraints a fast check must apply, from a field's metadata."""
    from pydantic import Strict, StringConstraints

    from envguard.snapshots.models import Since

    out: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, FieldInfo):
            out.update(_constraints(list(m.metadata)))
        elif isinstance(m, StringConstraints):
            if m.min_length or m.strip_whitespace or m.to_lower or m.to_upper:
                raise GenerationError(f"{m} has no fast check: add one to dev.py")
            out.update({k: v for k in ("pattern", "max_length") if (v := getattr(m, k))})
        elif isinstance(m, annotated_types.MaxLen):
            out["max_length"] = m.max_length
        elif isinstance(m, annotated_types.Ge):
            out["ge"] = m.ge
        elif isinstance(m, annotated_types.Le):
            out["le"] = m.le
        elif isinstance(m, Strict | Since):
            pass  # a type check is strict already; Since is the generator's own
        elif getattr(m, "pattern", None) is not None:  # Field(pattern=...)
            out["pattern"] = m.pattern
        else:
            raise GenerationError(f"{m!r} has no fast check: add one to dev.py")
    return out


def _check(shape: _Shape, tp: Any, v: str, meta: list[Any], depth: int) -> str:
    """A Python expression true when the model takes the JSON value ``v`` unchanged."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        base, *more = get_args(tp)
        return _check(shape, base, v, [*meta, *more], depth)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            inner = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
            return f"({v} is None or {_check(shape, inner, v, meta, depth)})"
        if set(args) == {int, float, str}:
            return f"_c.number({v})"
        raise GenerationError(f"union {tp} has no fast check: add one to dev.py")
    c = _constraints(meta)
    if tp is str:
        pattern, most = c.get("pattern"), c.get("max_length")
        if pattern == LINE_PATTERN:
            return f"(_c.line({v}) and len({v}) <= {most})" if most else f"_c.line({v})"
        if pattern is not None:
            name = shape.patterns.setdefault(pattern, f"_PATTERN_{len(shape.patterns)}")
            return f"_c.matches({v}, {name}" + (f", {most})" if most else ")")
        if most is not None:
            return f"_c.bounded({v}, {most})"
        return f"type({v}) is str"
    if tp is bool:
        return f"type({v}) is bool"
    if tp is int:
        low, high = c.get("ge"), c.get("le")
        if low is not None and high is not None:
            return f"(type({v}) is int and {low} <= {v} <= {high})"
        if low is not None:
            return f"(type({v}) is int and {v} >= {low})"
        if high is not None:
            return f"(type({v}) is int and {v} <= {high})"
        return f"type({v}) is int"
    if tp is float:
        return f"_c.finite_float({v})"
    if tp is datetime:
        return f"_c.created({v})"
    if origin is Literal:
        values: tuple[Any, ...] = get_args(tp)
        if not all(type(x) is str for x in values):
            raise GenerationError(f"{tp}: only literal strings have a fast check")
        return f"(type({v}) is str and {v} in {values!r})"
    if origin is tuple:
        items = get_args(tp)
        if len(items) != 2 or items[1] is not Ellipsis:
            raise GenerationError(f"{tp}: only tuple[X, ...] has a fast check")
        x = f"x{depth}"
        most = f" and len({v}) <= {c['max_length']}" if "max_length" in c else ""
        item = _check(shape, items[0], x, [], depth + 1)
        if item == f"type({x}) is str":
            return f"_c.strs({v}){most}"
        return f"(type({v}) is list{most} and all({item} for {x} in {v}))"
    if origin is dict:
        key, value = get_args(tp)
        if key is not str:
            raise GenerationError(f"{tp}: only str keys have a fast check")
        x, k = f"x{depth}", f"k{depth}"
        item = _check(shape, value, x, [], depth + 1)
        return (
            f"(type({v}) is dict and all(type({k}) is str and {item} for {k}, {x} in {v}.items()))"
        )
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"_fits_{tp.__name__}({v})"
    raise GenerationError(f"type {tp} has no fast check: add one to dev.py")


def _value(tp: Any, v: str, depth: int) -> str | None:
    """An expression making the model's value of JSON value ``v``, None where it is ``v``."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _value(get_args(tp)[0], v, depth)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        inner = [_value(a, v, depth) for a in args]
        if all(i is None for i in inner):
            return None
        if len(args) == 1 and len(args) < len(get_args(tp)):
            return f"(None if {v} is None else {inner[0]})"
        raise GenerationError(f"{tp}: a union of values to build has no fast builder")
    if tp is datetime:
        return f"_c.created_value({v})"
    if origin is tuple:
        x = f"x{depth}"
        item = _value(get_args(tp)[0], x, depth + 1)
        return f"tuple({v})" if item is None else f"tuple({item} for {x} in {v})"
    if origin is dict:
        x, k = f"x{depth}", f"k{depth}"
        item = _value(get_args(tp)[1], x, depth + 1)
        return f"dict({v})" if item is None else f"{{{k}: {item} for {k}, {x} in {v}.items()}}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"_built_{tp.__name__}({v}, m)"
    return None


def _validators(model: type[BaseModel]) -> tuple[dict[str, str], list[str]]:
    """The model's field validators by field, and its model validators, as hook names."""
    decorators = model.__pydantic_decorators__
    for name in [*decorators.field_serializers, *decorators.model_serializers]:
        if name not in SERIALIZERS_ALLOWED:
            raise GenerationError(
                f"{model.__name__}.{name}: a serializer changes what is written, which fits()"
                " promises is the document itself; make from_report() write that value and"
                " add it to SERIALIZERS_ALLOWED in snapshots/checks.py"
            )
    fields: dict[str, str] = {}
    for name, dec in decorators.field_validators.items():
        _hook(model, name)
        for f in dec.info.fields:
            fields[f] = name
    for name in decorators.model_validators:
        _hook(model, name)
    return fields, list(decorators.model_validators)


def _hook(model: type[BaseModel], name: str) -> None:
    if name not in VALIDATOR_HOOKS:
        raise GenerationError(
            f"{model.__name__}.{name}: a validator with no fast twin; add it to"
            " VALIDATOR_HOOKS in snapshots/checks.py"
        )


def _hook_name(name: str, which: int) -> str:
    fn = VALIDATOR_HOOKS[name][which]
    assert fn is not None
    return f"_c.{fn.__name__}"


def _optional(model: type[BaseModel], name: str, info: FieldInfo) -> bool:
    """A key a document may lack: added after 1.0, or only ever carried by a live side."""
    optional = bool(info.exclude) or _since(info) > 0
    if optional and info.is_required():
        # fits() would vouch for a document without it, which the model refuses (and
        # every file written before it was added).
        raise GenerationError(
            f"{model.__name__}.{name}: a field added after 1.0 (or never written) needs a"
            " default: files written without it must still read"
        )
    return optional


def _fits_function(shape: _Shape, model: type[BaseModel]) -> list[str]:
    name = model.__name__
    field_hooks, model_hooks = _validators(model)
    optional = [f for f, i in model.model_fields.items() if _optional(model, f, i)]
    keys = (
        f"type(d) is dict and d.keys() == _KEYS_{name}"
        if not optional
        else f"type(d) is dict and _REQUIRED_{name} <= d.keys() <= _KEYS_{name}"
    )
    terms = [keys]
    for f, info in model.model_fields.items():
        shape.minor = max(shape.minor, _since(info))
        check = _check(shape, info.annotation, f"d[{f!r}]", list(info.metadata), 0)
        if f in field_hooks:
            check = f"{_hook_name(field_hooks[f], 0)}(d[{f!r}])"
        terms.append(f"({f!r} not in d or {check})" if f in optional else f"({check})")
    terms += [f"{_hook_name(h, 0)}(d)" for h in model_hooks]
    body = "\n        and ".join(terms)
    return [f"def _fits_{name}(d: Any) -> bool:", f"    return (\n        {body}\n    )", ""]


def _built_function(model: type[BaseModel]) -> list[str]:
    name = model.__name__
    field_hooks, _ = _validators(model)
    required: list[tuple[str, str]] = []
    optional: list[tuple[str, str]] = []
    for f, info in model.model_fields.items():
        made = _value(info.annotation, f"d[{f!r}]", 0)
        if f in field_hooks and VALIDATOR_HOOKS[field_hooks[f]][1] is not None:
            made = f"{_hook_name(field_hooks[f], 1)}(d[{f!r}])"
        if made is not None:
            (optional if _optional(model, f, info) else required).append((f, made))
    lines = [f"def _built_{name}(d: Any, m: Any) -> Any:"]
    pairs = "".join(f", {f!r}: {made}" for f, made in required)
    if not optional:
        made_all = f"{{**d{pairs}}}" if pairs else "d"
        lines.append(f"    return m.{name}.model_construct(**{made_all})")
    else:
        lines.append(f"    v = {{**d{pairs}}}")
        for f, made in optional:
            lines += [f"    if {f!r} in d:", f"        v[{f!r}] = {made}"]
        lines.append(f"    return m.{name}.model_construct(**v)")
    return [*lines, ""]


def shape_source() -> str:
    from envguard.snapshots.models import Snapshot

    shape = _Shape(models=_models(Snapshot))
    fits = [line for m in shape.models for line in _fits_function(shape, m)]
    out = [
        _HEADER.format(
            source="snapshots/models.py",
            what="A snapshot document's shape for the paths that must not load pydantic: the key\n"
            "sets, the schema's minor version, fits() (snapshots/document.py uses it; built() is\n"
            "in builders.py), and what a reader of an older minor version reads past\n"
            "(snapshots/store.py).",
        ),
        "import re",
        "",
        "from envguard.snapshots import checks as _c",
        "",
        _NO_TYPING,
        "if TYPE_CHECKING:",
        "    from typing import Any",
        "",
        "# The largest Since(minor) of any field: what a file written now is.",
        f"SCHEMA_MINOR = {shape.minor}",
        "",
    ]
    for m in shape.models:
        fields = list(m.model_fields)
        opt = [f for f, i in m.model_fields.items() if _optional(m, f, i)]
        out.append(f"_KEYS_{m.__name__} = frozenset({fields!r})")
        if opt:
            out.append(f"_REQUIRED_{m.__name__} = _KEYS_{m.__name__} - frozenset({opt!r})")
    out += [
        "",
        "# Every model's fields: what a reader knows (store.py reads past the rest of a newer",
        "# minor version's file).",
        "FIELDS: dict[str, frozenset[str]] = {",
        *(f"    {m.__name__!r}: _KEYS_{m.__name__}," for m in shape.models),
        "}",
        "# Where a model nests another: model -> field -> the nested model.",
        "NESTED: dict[str, dict[str, str]] = {",
    ]
    for m in shape.models:
        nested = {
            f: _nested_models(i.annotation)[0].__name__
            for f, i in m.model_fields.items()
            if _nested_models(i.annotation)
        }
        if nested:
            out.append(f"    {m.__name__!r}: {nested!r},")
    out += [
        "}",
        "SNAPSHOT_KEYS = _KEYS_Snapshot",
        "# What only a live side carries (Field(exclude=True)), by the snapshot's field.",
        "LIVE_ONLY: dict[str, frozenset[str]] = {",
    ]
    for f, info in Snapshot.model_fields.items():
        inner = _nested_models(info.annotation)
        if inner:
            live = sorted(n for n, i in inner[0].model_fields.items() if i.exclude)
            if live:
                out.append(f"    {f!r}: frozenset({live!r}),")
    out += ["}", ""]
    out += [f"{name} = re.compile({pattern!r})" for pattern, name in shape.patterns.items()]
    out += [
        "",
        "",
        "def fits(doc: Any) -> bool:",
        '    """True when ``Snapshot.model_validate(doc)`` takes ``doc`` as it is (and writes it',
        '    back unchanged, when it holds every key); False when unsure: the model decides."""',
        "    return _fits_Snapshot(doc)",
        "",
        "",
        *fits,
        "",
    ]
    return "\n".join(out).rstrip() + "\n"


def builders_source() -> str:
    """snapshots/builders.py: built() and a builder per model (shape.py would be over 800
    lines with them)."""
    from envguard.snapshots.models import Snapshot

    built = [line for m in _models(Snapshot) for line in _built_function(m)]
    out = [
        _HEADER.format(
            source="snapshots/models.py",
            what="built(): the Snapshot model of a document shape.fits() vouched for, without\n"
            "validation (snapshots/document.py uses it).",
        ),
        "from envguard.snapshots import checks as _c",
        "",
        _NO_TYPING,
        "",
        "if TYPE_CHECKING:",
        "    from types import ModuleType",
        "    from typing import Any",
        "",
        "    from envguard.snapshots.models import Snapshot",
        "",
        "",
        "def built(doc: Any, models: ModuleType) -> Snapshot:",
        '    """The model of a document fits() vouched for, without validation: each field as',
        "    the model's validation makes it (tuples, a datetime, nested models); ``models`` is",
        '    snapshots.models, passed in: the models import shape.py, a sibling of this module."""',
        "    snapshot: Snapshot = _built_Snapshot(doc, models)",
        "    return snapshot",
        "",
        "",
        # The builders take the models module as an argument: this module never imports it.
        *built,
    ]
    return "\n".join(out).rstrip() + "\n"


# ---- probe/spec.py -----------------------------------------------------------------------------


def _report_kind(tp: Any, where: str) -> Any:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = get_args(tp)
        kinds = [m for m in meta if isinstance(m, str)]
        if base is not str or len(kinds) != 1:
            raise GenerationError(f"{where}: Annotated[str, KIND] takes one kind")
        return kinds[0]
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise GenerationError(f"{where}: only X | None is a report kind")
        return ("?", _report_kind(args[0], where))
    if origin is list:
        return ("list", _report_kind(get_args(tp)[0], where))
    if origin is dict:
        key, value = get_args(tp)
        if value is Any:
            return "object"  # any JSON object, read further where it is used
        if get_origin(key) is not typing.Annotated:
            raise GenerationError(f"{where}: a map's keys are Line")
        return ("map", _report_kind(value, where))
    if tp is bool:
        return "bool"
    if tp is int:
        return "int"
    if tp is float:
        return "number"
    if typing_is_typeddict(tp):
        return _report_object(tp)
    if tp is str:
        raise GenerationError(f"{where}: say which text: Line, Text or HostName")
    raise GenerationError(f"{where}: {tp} is not a report kind")


def typing_is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "__required_keys__")


def _report_object(td: Any) -> Any:
    import typing_extensions

    from envguard.probe import report

    hints = typing_extensions.get_type_hints(
        td,
        include_extras=True,
        localns={**vars(report), "NotRequired": typing_extensions.NotRequired},
    )
    fields = {k: _report_kind(_strip_required(v), f"{td.__name__}.{k}") for k, v in hints.items()}
    # Under `from __future__ import annotations` the TypedDict cannot see NotRequired in a
    # string: the evaluated hints say which keys may be absent.
    optional = {k for k, v in hints.items() if _not_required(v)}
    return ("fields", fields, frozenset(optional | set(td.__optional_keys__)))


def _not_required(tp: Any) -> bool:
    import typing_extensions

    origin: object = get_origin(tp)
    return origin is typing_extensions.NotRequired


def _strip_required(tp: Any) -> Any:
    import typing_extensions

    if get_origin(tp) in (typing_extensions.NotRequired, typing_extensions.Required):
        return get_args(tp)[0]
    return tp


_SPEC_DOC = """The spec the probe's report (its TypedDicts) is checked against:
("fields", {key: kind}, optional keys) for an object; ("?", kind) may be null;
("list", kind); ("map", kind) with line keys; "line", "text", "host", "int", "bool",
"number", "object"."""


def spec_source() -> str:
    from envguard.probe.report_shape import ProbeReport

    spec = _report_object(ProbeReport)
    header = _HEADER.format(source="probe/report_shape.py", what=_SPEC_DOC)
    typing_only = f"\n{_NO_TYPING}\n\nif TYPE_CHECKING:\n    from typing import Any\n\n"
    return header + typing_only + f"REPORT_SPEC: Any = {_pretty(spec)}\n"


# The generated modules are on a snapshot's path, where typing is not loaded (its import is
# 3 ms of CPU of the snapshot's own process while the probe needs both cores).
_NO_TYPING = "TYPE_CHECKING = False  # typing is not loaded for a command's start"


def _pretty(value: Any) -> str:
    """repr, with frozensets in a stable order (ruff lays the text out)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_pretty(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + "".join(f"{_pretty(v)}, " for v in value) + ")"
    if isinstance(value, frozenset):
        return f"frozenset({sorted(value)!r})"
    return repr(value)


# ---- all of them ---------------------------------------------------------------------------


def generated() -> dict[Path, str]:
    """Every generated file and the text it must hold."""
    from envguard.schemas import KINDS, schema_text

    files = {SHAPE: shape_source(), BUILDERS: builders_source(), SPEC: spec_source()}
    for kind in KINDS:
        files[SCHEMA_DIR / f"{kind}.v1.json"] = schema_text(kind)
    return files


def _formatted(path: Path, text: str) -> str:
    """Python as ruff formats it (the same text on every machine with ruff installed)."""
    if path.suffix != ".py":
        return text
    import shutil
    import subprocess

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:  # the same code, laid out as generated; `ruff format` tidies it
        print(f"note: ruff is not installed: {path.name} is written unformatted", file=sys.stderr)
        return text
    done = subprocess.run(
        [ruff, "format", "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise GenerationError(f"ruff could not format {path.name}: {done.stderr.strip()}")
    return done.stdout


def stale() -> list[Path]:
    """The generated files whose content on disk is not what the declarations make: Python
    compared as code (its syntax tree), so the check needs no formatter and no particular
    ruff version; the rest as text."""
    out = []
    for path, text in generated().items():
        try:
            on_disk = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            out.append(path)
            continue
        if _as_code(path, on_disk) != _as_code(path, text):
            out.append(path)
    return out


def _as_code(path: Path, text: str) -> str:
    if path.suffix != ".py":
        return text
    import ast

    try:
        return ast.dump(ast.parse(text))
    except SyntaxError:
        return text  # a file edited into nonsense is stale


def regenerate() -> list[Path]:
    """Write every stale generated file; the files written."""
    written = []
    for path in stale():
        path.write_text(_formatted(path, generated()[path]), encoding="utf-8")
        written.append(path)
    if SHAPE in written and not os.environ.get("_ENVGUARD_DEV_AGAIN"):
        # The models take SCHEMA_MINOR from shape.py (schema_minor's default, in the JSON
        # schema too): a new one is only seen by a process that imports them anew.
        import subprocess

        env = {**os.environ, "_ENVGUARD_DEV_AGAIN": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC.parent), env.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-m", "envguard.dev", "regenerate"],
            capture_output=True, text=True, check=False, cwd=REPO, env=env,
        )  # fmt: skip
        if done.returncode != 0:
            raise GenerationError(f"regenerating again failed: {done.stderr.strip()}")
        again = [REPO / line.removeprefix("wrote ") for line in done.stdout.splitlines()]
        written += [p for p in again if p not in written]
    return written


def main(argv: list[str]) -> int:
    if argv == ["regenerate"]:
        for path in regenerate():
            print(f"wrote {path.relative_to(REPO)}")
        return 0
    if argv == ["check"]:
        paths = stale()
        for path in paths:
            print(f"stale: {path.relative_to(REPO)}")
        return 1 if paths else 0
    print("usage: python -m envguard.dev regenerate|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
