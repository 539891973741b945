"""Secrets given on the command line or found in the environment are never stored or shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.redact import is_secret_name, redact_argv, redact_text

runner = CliRunner()
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
HF = "hf_" + "abcdefghijklmnopqrstuvwxyzABCD"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"token {GHP}", GHP),
        (f"hf {HF}", HF),
        ("sk-proj-abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnop"),
        ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
        ("xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
        ("see https://user:hunter2@host.example/x", "hunter2"),
        ("https://host.example/x?token=hunter2", "hunter2"),
        ("api_key=hunter2", "hunter2"),
        ("--password hunter2", "hunter2"),
        ("--password=hunter2", "hunter2"),
        ("sshpass -phunter2 ssh host", "hunter2"),
        ("sshpass -p hunter2 ssh host", "hunter2"),
        ("env MYPASS=hunter2 ssh host", "hunter2"),
        ("curl --header=X-Api-Key:hunter2 x", "hunter2"),
        ("Authorization: Bearer hunter2hunter2", "hunter2"),
    ],
)
def test_every_secret_form_is_hidden_in_free_text(text: str, secret: str) -> None:
    assert secret not in redact_text(text)


@pytest.mark.parametrize("name", ["SGLANG_HF_TOK", "CUDA_PASS", "HF_ACCESS", "DB_PWD", "MY_CRED"])
def test_secret_names_by_pattern(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["tok_s", "TOKENIZERS_PARALLELISM", "PWD", "NCCL_DEBUG"])
def test_ordinary_names_are_kept(name: str) -> None:
    assert not is_secret_name(name)


def test_ordinary_text_is_unchanged() -> None:
    text = "warm inductor cache, tok_s=21500 on 8 x H200; see https://example.org/run?id=3"
    assert redact_text(text) == text
    assert redact_argv(["ssh", "-p", "2222", "gpu1"]) == ["ssh", "-p", "2222", "gpu1"]


def test_snapshot_stores_note_metrics_and_cache_paths_without_secrets(
    tmp_path: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app,
        [
            "snapshot",
            "--python",
            str(good_venv),
            "--name",
            "s",
            "--note",
            f"token {GHP} https://u:pw1secret@x.example",
            "--metric",
            "api_key=hunter2",
            "--metric",
            "tok_s=21500",
            "--cache",
            "https://u:pw2secret@x.example/c",
        ],
    )
    assert result.exit_code == 0, result.stderr
    text = Path("snapshots/s.json").read_text()
    for secret in (GHP, "pw1secret", "hunter2", "pw2secret"):
        assert secret not in text
    assert json.loads(text)["metrics"]["tok_s"] == 21500
    shown = runner.invoke(app, ["show", "s"]).stdout
    assert "hunter2" not in shown and GHP not in shown


def test_error_lines_never_repeat_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["snapshot", "--via", "sshpass -phunter2 ssh 'unclosed"])
    assert result.exit_code == 2 and "error:" in result.stderr
    assert "hunter2" not in result.stderr
