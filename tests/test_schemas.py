"""The published schemas: the committed files are what the models generate, and what
envguard writes validates against them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from envguard.cli import app
from envguard.compare.engine import diff
from envguard.compare.fleet import compare
from envguard.render.json import drift_json, fleet_json
from envguard.schemas import KINDS, DriftDocument, FleetDocument, schema_text
from factories import package, snapshot

SCHEMAS = Path(__file__).resolve().parents[1] / "schema"


@pytest.mark.version_pinned("schema/*.json is the text of the newest pydantic's JSON schema")
@pytest.mark.parametrize("kind", KINDS)
def test_committed_schema_is_the_generated_one(kind: str) -> None:
    committed = (SCHEMAS / f"{kind}.v1.json").read_text()
    assert committed == schema_text(kind), (
        f"regenerate: envguard schema {kind} > schema/{kind}.v1.json"
    )
    result = CliRunner().invoke(app, ["schema", kind])
    assert result.exit_code == 0 and result.stdout == committed


def test_json_output_validates_against_its_schema() -> None:
    good = snapshot([package("torch", "2.11.0+cu128"), package("numpy", "2.1.0")])
    bad = snapshot([package("torch", "2.11.0+cu130"), package("six", "1.16.0")])
    TypeAdapter(DriftDocument).validate_python(json.loads(drift_json(diff(good, bad))))
    report = compare({"a": good, "b": bad, "c": good})
    TypeAdapter(FleetDocument).validate_python(json.loads(fleet_json(report)))
