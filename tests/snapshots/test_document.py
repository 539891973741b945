"""`envguard snapshot` writes its document without building the pydantic models: the plain
check (snapshots.document.fits) must only ever vouch for a document the model takes as it
is, and what is written must be byte for byte what the model would write."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envguard.errors import ProbeError
from envguard.probe.payload import probe_payload
from envguard.probe.report import parse_report
from envguard.snapshots import document, store
from envguard.snapshots.models import Snapshot
from envguard.snapshots.request import CaptureRequest, probe_args
from factories import make_git_repo

_REAL: list[tuple[dict[str, Any], CaptureRequest]] = []


def _real() -> tuple[dict[str, Any], CaptureRequest]:
    """A real report of this interpreter with a git repo, a tracked file and a compile
    cache, and the request that asked for them (measured once)."""
    if not _REAL:
        # The report is read whole before the folder goes: nothing is left in /tmp.
        with tempfile.TemporaryDirectory(prefix="envguard-doc-") as tmp:
            base = Path(tmp)
            repo = make_git_repo(base / "proj", {"train.py": "print('train')\n"})
            (repo / "train.py").write_text("print('patched')\n")  # dirty: a diff hash
            cache = base / "inductor"
            (cache / "fx").mkdir(parents=True)
            (cache / "fx" / "kernel.py").write_text("x = 1\n")
            request = CaptureRequest(
                python=sys.executable,
                name="doc",
                cwd=repo,
                repos=(repo,),
                files=(str(repo / "train.py"),),
                caches=(("inductor", str(cache)),),
                default_caches=False,
                metrics={"tok_s": 21500, "loss": 1.25, "run": "a"},
                note="good run",
                command=("envguard", "snapshot"),
            )
            args = probe_args(request, [repo])
            out = subprocess.run(
                [sys.executable, "-I", "-S", "-"],
                input=probe_payload(args),
                capture_output=True, text=True, check=True, timeout=120,
            )  # fmt: skip
            _REAL.append((json.loads(out.stdout), request))
    report, request = _REAL[0]
    return json.loads(json.dumps(report)), request


def _model_of(doc: dict[str, Any]) -> Snapshot | None:
    from pydantic import ValidationError

    try:
        return Snapshot.model_validate(doc)
    except ValidationError:
        return None


def test_a_real_report_is_written_without_the_models_exactly_as_they_write_it() -> None:
    report, request = _real()
    parsed = parse_report(json.dumps(report).encode(), label="t", returncode=0, stderr_tail="")
    doc = document.from_report(parsed, request)
    assert doc["repos"] and doc["files"] and doc["caches"] and doc["packages"]
    proj = next(r for r in doc["repos"] if r["path"].endswith("/proj"))  # not the checkout's
    assert proj["dirty"] and doc["files"][0]["rel"] == "train.py"
    assert document.fits(doc)  # else `envguard snapshot` always pays for pydantic
    model = _model_of(doc)
    assert model is not None
    assert store.dumps(document.stored(doc)) == store.dumps(model)
    assert store.loads(store.dumps(document.stored(doc)), source="t") == model


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["0" * 64, "a" * 300, "x\u202ey", "ghp_" + "a" * 30, "1.0", 5.0, 2**70])
    # Lone surrogates (JSON's "\ud800" escapes): pydantic refuses them in constrained fields.
    | st.sampled_from(["a\ud800b", "\udcff", "2.1\ud800"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def _holders(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object in a report that a forged one could change a field of."""
    out: list[dict[str, Any]] = [report, report["interpreter"], report["accelerator"]]
    out += report["packages"][:5] + report["files"] + report["repos"] + report["caches"]
    out += [p["direct_url"] for p in report["packages"] if isinstance(p["direct_url"], dict)]
    if report["torch"]:
        out.append(report["torch"])
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_reports_fit_only_where_the_model_writes_the_same(data: Any) -> None:
    """A real report with one field (anywhere) replaced by any JSON value, or a package
    duplicated: where fits() vouches for the document, the model takes it and writes the
    same bytes; where the model refuses it, fits() never vouched."""
    report, request = _real()
    holders = _holders(report)
    if data.draw(st.booleans()):
        holder = data.draw(st.sampled_from(holders))
        key = data.draw(st.sampled_from(sorted(holder)) | st.text(max_size=6))
        holder[key] = data.draw(_VALUES)
    else:
        twin = dict(data.draw(st.sampled_from(report["packages"])))
        twin["location"] = data.draw(st.sampled_from(["/elsewhere", twin["location"]]))
        report["packages"].append(twin)
    try:
        raw = json.dumps(report).encode()
        parsed = parse_report(raw, label="t", returncode=0, stderr_tail="")
        doc = document.from_report(parsed, request)
    except (ValueError, ProbeError):
        return
    except Exception as exc:  # a repo or file error in a strict capture: the user's mistake
        from envguard.errors import UsageError

        assert isinstance(exc, UsageError), repr(exc)
        return
    model = _model_of(doc)
    if document.fits(doc):
        assert model is not None, doc
        assert store.dumps(document.stored(doc)) == store.dumps(model)
        # diff and check build the model directly from such a document: the same model.
        direct = document.built(doc)
        assert direct == model and store.dumps(direct) == store.dumps(model)
        assert repr(direct) == repr(model)  # types, key order and time zone too
        assert direct.model_fields_set == model.model_fields_set
        assert [p.model_fields_set for p in direct.packages] == [
            p.model_fields_set for p in model.packages
        ]


def run_envguard(argv: list[str], cwd: Path, watched: tuple[str, ...]) -> tuple[str, set[str]]:
    """envguard's main() run in a fresh interpreter: (its stdout, which of the ``watched``
    modules were loaded when it exited); it must exit 0."""
    program = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write("
        f"'\\nLOADED ' + ' '.join(m for m in {watched!r} if m in sys.modules)))\n"
        "from envguard.__main__ import main\n"
        f"sys.argv = ['envguard', *{argv!r}]\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True, text=True, cwd=cwd, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("LOADED"), proc.stderr
    return proc.stdout, set(last.split()[1:])


# The command line's modules, of which a run loads its own command's only.
OTHERS = tuple(f"envguard.cli.{m}" for m in ("capture", "compare", "gate", "guard", "restore"))
OTHERS += ("envguard.inuse",)


@pytest.mark.parametrize(
    ("options", "command_line"),
    [
        ([], set()),  # a plain snapshot: no typer (envguard.recording.run_plain)
        (["--timeout", "120"], {"typer", "envguard.cli.capture"}),  # typer's, its module only
    ],
)
def test_the_snapshot_command_loads_no_pydantic(
    tmp_path: Path, options: list[str], command_line: set[str]
) -> None:
    """`envguard snapshot` on the common path: the probe and the document only."""
    out = tmp_path / "s.json"
    argv = ["snapshot", "--python", sys.executable, "--out", str(out), *options]
    stdout, loaded = run_envguard(argv, tmp_path, ("pydantic", "rich", "typer", *OTHERS))
    assert loaded == command_line
    assert stdout.startswith(f"wrote {out}: Python ")
    assert store.load(out).name == "s" or store.load(out).packages


def test_the_api_document_is_the_snapshot_as_its_file_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envguard

    monkeypatch.chdir(tmp_path)  # the unique saves below go to ./snapshots/
    doc = envguard.snapshot_document(python=sys.executable, name="doc", metrics={"tok_s": 1})
    snap = envguard.snapshot(python=sys.executable, name="doc", metrics={"tok_s": 1})
    assert Snapshot.model_validate(doc).model_copy(update={"created": snap.created}) == snap
    path = envguard.save(doc, tmp_path / "doc.json")
    assert path.read_text() == store.dumps(doc)
    assert envguard.load(path) == Snapshot.model_validate(doc)
    first, second = envguard.save(doc, unique=True), envguard.save(doc, unique=True)
    assert (first.name, second.name) == ("doc.json", "doc-2.json")
    assert json.loads(second.read_text())["name"] == "doc-2"


def test_a_diff_builds_no_validator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`envguard diff` of an environment against its snapshot builds its models directly:
    no pydantic validator is built (building them cost every diff ~35 ms). (Its first diff:
    one told again builds no model at all, compare.identical.)"""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no answer kept yet
    snap = tmp_path / "good.json"
    run_envguard(["snapshot", "--python", sys.executable, "--out", str(snap)], tmp_path, ())
    argv = ["diff", str(snap), "--python", sys.executable]
    stdout, loaded = run_envguard(argv, tmp_path, ("pydantic", "pydantic.plugin._loader", *OTHERS))
    assert stdout.startswith("no drift"), stdout
    assert loaded == {"pydantic", "envguard.cli.compare"}, stdout


def test_past_the_budget_snapshots_are_validated_to_the_same_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process that reads many snapshots (fleet) builds the validators once its budget of
    directly built packages is spent: the models are the same either way."""
    report, request = _real()
    parsed = parse_report(json.dumps(report).encode(), label="t", returncode=0, stderr_tail="")
    text = store.dumps(document.stored(document.from_report(parsed, request)))
    monkeypatch.setattr(document, "_spent", [0])
    assert document.building_directly()
    direct = store.loads(text, source="t")
    # The budget is spent by the first document that does not fit in what is left: from
    # then on pydantic parses and validates each file in one pass (fleet read 1,000 files
    # through fits() and Python-side validation: 25% slower).
    monkeypatch.setattr(document, "_spent", [document._DIRECT_PACKAGES - 1])
    validated = store.loads(text, source="t")
    assert not document.building_directly()
    assert direct == validated == Snapshot.model_validate_json(text)


def _stored_holders(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object in a snapshot file that a forged one could change a field of."""
    out: list[dict[str, Any]] = [doc, doc["interpreter"], doc["accelerator"], doc["metrics"]]
    out += doc["packages"][:5] + [p["source"] for p in doc["packages"][:5]]
    out += doc["files"] + doc["repos"] + doc["caches"]
    return out + ([doc["torch"]] if doc["torch"] else [])


_FORGED = _VALUES | st.sampled_from(
    ["2026-02-31T00:00:00Z", "\u0662\u0660\u0662\u0666-01-01T00:00:00Z", "2026-01-01T00:00:00Z"]
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_forged_snapshot_file_is_built_directly_only_as_the_model_reads_it(data: Any) -> None:
    """A snapshot file is anyone's JSON: with one field anywhere replaced by any value, or a
    package listed twice, store.loads gives what the model's validation gives (the same model,
    or a one-line SnapshotError where the model refuses it), never a traceback."""
    from envguard.errors import SnapshotError

    report, request = _real()
    parsed = parse_report(json.dumps(report).encode(), label="t", returncode=0, stderr_tail="")
    doc = json.loads(store.dumps(document.stored(document.from_report(parsed, request))))
    if data.draw(st.booleans()):
        holder = data.draw(st.sampled_from(_stored_holders(doc)))
        key = data.draw(st.sampled_from(sorted(holder)) | st.text(max_size=6))
        holder[key] = data.draw(_FORGED)
    else:
        doc["packages"].append(dict(data.draw(st.sampled_from(doc["packages"]))))
    text = json.dumps(doc)
    model = _model_of(json.loads(text))
    try:
        loaded = store.loads(text, source="forged.json")
    except SnapshotError:
        assert model is None or model.schema_version > 1
        return
    assert model is not None and loaded == model
    assert store.dumps(loaded) == store.dumps(model) and repr(loaded) == repr(model)


@pytest.mark.parametrize("budget_left", [True, False])
def test_odd_but_valid_files_load_as_the_model_reads_them(
    monkeypatch: pytest.MonkeyPatch, budget_left: bool
) -> None:
    """Whichever path reads it: a file without schema_version (the model defaults it) still
    loads; an env written in another order comes back sorted, as the model sorts it."""
    report, request = _real()
    parsed = parse_report(json.dumps(report).encode(), label="t", returncode=0, stderr_tail="")
    doc = json.loads(store.dumps(document.stored(document.from_report(parsed, request))))
    monkeypatch.setattr(document, "_spent", [0 if budget_left else document._DIRECT_PACKAGES])
    doc["env"] = {"ZZ": "1", "AA": "2"}
    text = json.dumps(doc)
    loaded = store.loads(text, source="t")
    assert list(loaded.env) == ["AA", "ZZ"] and repr(loaded) == repr(_model_of(doc))
    del doc["schema_version"]
    assert store.loads(json.dumps(doc), source="t").schema_version == 1


@pytest.mark.parametrize(
    "ns",
    [0, 1_700_000_000_000_000_000, 1_700_000_000_123_456_789, 1_700_000_000_000_000_999,
     1_709_164_800_000_001_000, 253_402_300_799_999_999_000],
)  # fmt: skip
def test_created_is_spelt_as_datetime_spells_it(ns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """created_now() by the time module writes what datetime's isoformat (and the model)
    write: "Z", and no fraction when it is zero."""
    import time
    from datetime import datetime, timezone

    monkeypatch.setattr(time, "time_ns", lambda: ns)
    micro = ns // 1000
    at = datetime.fromtimestamp(micro // 10**6, timezone.utc).replace(microsecond=micro % 10**6)
    assert document.created_now() == at.isoformat().replace("+00:00", "Z")


@given(
    st.tuples(
        st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32),
        st.integers(0, 25), st.integers(0, 61), st.integers(0, 61),
        st.sampled_from(["", ".000000", ".999999"]),
    )
)  # fmt: skip
def test_a_created_time_is_real_as_datetime_tells_it(parts: tuple[Any, ...]) -> None:
    """The plain check of ``created`` (without datetime) takes exactly the times
    datetime.fromisoformat takes: no 29th of February outside a leap year, no hour 24."""
    from datetime import datetime

    from envguard.snapshots.checks import created

    year, month, day, hour, minute, second, fraction = parts
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}Z"
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
        real = True
    except ValueError:
        real = False
    assert created(text) is real
