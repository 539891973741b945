"""Redaction: secrets given on the command line, found in the environment, in a snapshot
file, a lockfile URL or a forged probe report are never stored or shown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from envguard import redact
from envguard.cli import app
from envguard.redact import is_secret_name, redact_argv, redact_text
from envguard.snapshots import store
from envguard.snapshots.models import Source
from factories import package, snapshot
from hostile.helpers import diff, pair, pkg
from hostile.helpers import write_json as _write

runner = CliRunner()
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
HF = "hf_" + "abcdefghijklmnopqrstuvwxyzABCD"
TOKEN = "ghp_" + "A1b2C3d4E5" * 4  # a GitHub token shape
SECRET = "supersecret123"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"token {GHP}", GHP),
        (f"hf {HF}", HF),
        ("sk-proj-abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnop"),
        ("AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
        ("xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
        ("gitlab glpat-" + "x1Y2z3W4v5U6t7S8r9Q0", "x1Y2z3W4v5U6t7S8r9Q0"),
        ("key AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "SyA1b2C3d4E5f6G7h8I9"),
        ("npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "a1B2c3D4e5F6g7H8i9J0"),
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
        # a far side's stderr: prompts and echoed settings, the value after a space
        ("password: hunter2", "hunter2"),
        ("remote: Password:   hunter2 (cached)", "hunter2"),
        ("[sudo] Passphrase: hunter2", "hunter2"),
        ("X-Api-Key: hunter2", "hunter2"),
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
    said = "ssh: connect to host gpu1 port 22: Connection refused; typer 0.28.0: same version"
    assert redact_text(said) == said
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


def test_lockfile_urls_never_print_their_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    commit = "a" * 40
    pkg = package(
        "rich", "13.0", source=Source(kind="vcs", url="https://github.com/x/rich", commit=commit)
    )
    _write(tmp_path / "s.json", json.loads(store.dumps(snapshot([pkg]))))
    (tmp_path / "r.txt").write_text(
        f"rich @ git+https://user:{SECRET}@github.com/x/rich@{'b' * 40}\n"
        f"other @ https://example.invalid/o.whl?token={SECRET}\n"
    )
    for fmt in ("table", "json", "markdown", "github"):
        result = runner.invoke(app, ["check", "s.json", "--lock", "r.txt", "--format", fmt])
        assert result.exit_code == 1, result.stderr
        assert SECRET not in result.output, fmt
    assert "rich" in summary.read_text() and SECRET not in summary.read_text()


def test_secret_env_values_in_a_snapshot_file_are_never_shown(tmp_path: Path) -> None:
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    base = _write(tmp_path / "base.json", data)
    data["env"] = {"MY_CI_SECRET_TOKEN": SECRET, "NCCL_DEBUG": f"INFO {TOKEN}"}
    evil = _write(tmp_path / "evil.json", data)
    for fmt in ("table", "json", "markdown"):
        result = runner.invoke(app, ["diff", str(evil), "--against", str(base), "--format", fmt])
        assert result.exit_code == 1
        assert SECRET not in result.output and TOKEN not in result.output
    assert store.load(evil).env["MY_CI_SECRET_TOKEN"].startswith("<redacted:")


def test_a_forged_reports_secrets_are_redacted_here_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from envguard.probe.payload import probe_payload

    report = json.loads(
        subprocess.run(
            [sys.executable, "-I", "-S", "-"],
            input=probe_payload({"default_caches": False}),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    report["env"] = {"MY_CI_SECRET_TOKEN": SECRET}
    report["host"] = f"h-{TOKEN}"
    report["warnings"] = [f"\x1b]0;pwn\x07 {TOKEN}"]
    report["packages"][0]["direct_url"] = {
        "url": f"https://user:{SECRET}@example.invalid/x.git",
        "vcs_info": {"vcs": "git", "commit_id": "c" * 40},
    }
    (tmp_path / "answer").write_text(json.dumps(report))
    fake = tmp_path / "fake-ssh"
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\ncat '{tmp_path / 'answer'}'\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["snapshot", "--via", f"{fake} gpu01", "--name", "f"])
    assert result.exit_code == 0, result.stderr
    written = (tmp_path / "snapshots" / "f.json").read_text()
    for text in (written, result.output):
        assert (
            SECRET not in text and TOKEN not in text and "\x1b" not in text and "\x07" not in text
        )


def test_names_and_versions_are_redacted_in_the_verdict_groups_and_fleet(tmp_path: Path) -> None:
    a, b = pair(
        tmp_path,
        [pkg("base")],
        [
            pkg("base"),
            pkg("rootsec", f"1.0+{TOKEN}", requires=(TOKEN.lower(),)),
            pkg(TOKEN.lower()),
        ],
    )
    for fmt in ("table", "json", "markdown", "github", "html"):
        out = diff(a, b, "--format", fmt, "--expand").stdout
        assert TOKEN not in out and TOKEN.lower() not in out, fmt
    fleet = runner.invoke(app, ["fleet", a, b, "--format", "json"]).stdout
    assert TOKEN.lower() not in fleet


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: To\u212aen supersecret123",
        "---password supersecret123",
        "-_password supersecret123",
    ],
)
def test_the_redaction_precheck_folds_case_and_dashes(text: str) -> None:
    assert "supersecret123" not in redact_text(text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/opt/w -p hunter2 --", "/opt/w -p <redacted> --"),
        ("docker login -p s3cret registry", "docker login -p <redacted> registry"),
        ("mysql -ps3cret", "mysql -p<redacted>"),
        ("curl -u me:s3cret https://x", "curl -u me:<redacted> https://x"),
        ("ssh -p 2222 gpu01", "ssh -p 2222 gpu01"),  # a port
        ("mkdir -p /tmp/x", "mkdir -p /tmp/x"),  # a path
    ],
)
def test_password_options_are_redacted(text: str, shown: str) -> None:
    from envguard.redact import redact_text

    assert redact_text(text) == shown


def test_the_recorded_command_line_keeps_no_token(tmp_path: Path) -> None:
    """The snapshot's `command` is committed with it: a token in --note or --metric is hidden
    there as it is in `note` and `metrics` (by its shape, whatever the option)."""
    aws = "AKIA" + "IOSFODNN7EXAMPLE"
    out = tmp_path / "s.json"
    argv = ["snapshot", "--python", sys.executable, "--note", f"deploy key {GHP}"]
    argv += ["--metric", f"run={aws}", "--metric", "tok_s=1", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "envguard", *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert GHP not in text and aws not in text
    command = json.loads(text)["command"]
    assert "--note" in command and "deploy key <redacted>" in command
    assert "run=<redacted>" in command and "tok_s=1" in command


@pytest.mark.parametrize(
    "text",
    [
        "a:" + "x" * (128 << 10),
        "x1" * (64 << 10) + ": a",
        "a:" * (64 << 10),  # a pair at every other place of one word: 34 s, once
        "a=" * (64 << 10),
    ],
)
def test_a_long_line_from_a_far_side_is_redacted_in_linear_time(text: str) -> None:
    """A far side's stderr tail goes through redact_text: a pattern that could start inside
    a long word read it to its end from every place in it (seconds for 64 KiB)."""
    import time

    start = time.monotonic()
    assert redact_text(text + " password: hunter2").endswith("password: <redacted>")
    assert time.monotonic() - start < 2


@pytest.mark.parametrize(
    "via",
    [
        "docker exec --env=HF_TOKEN=hunter2 c",
        "docker exec -e=API_KEY=hunter2 c",
        "kubectl exec --env=WANDB_API_KEY=hunter2 pod --",
    ],
)
def test_a_secret_set_through_an_option_equals_is_hidden(via: str) -> None:
    """`--env=NAME=VALUE` (docker, podman, kubectl) in --via: the option's own name is not
    a secret's, but the NAME inside its value is (the value was recorded in clear)."""
    argv = redact_argv(["--via", via])
    assert "hunter2" not in " ".join(argv), argv
    assert "<redacted>" in argv[1]


def test_a_via_with_env_equals_keeps_no_secret_in_the_snapshot(tmp_path: Path) -> None:
    via = tmp_path / "fakedocker"  # drops everything up to the container name
    via.write_text('#!/bin/sh\nwhile [ "$1" != c ]; do shift; done; shift; exec "$@"\n')
    via.chmod(0o755)
    out = tmp_path / "s.json"
    argv = ["snapshot", "--via", f"{via} exec --env=HF_TOKEN=hunter2 c", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "envguard", *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in out.read_text()


@pytest.mark.parametrize(
    "text",
    [
        "password = hunter2",  # ~/.pypirc, an ini file a far side cats or echoes
        "[pypi]\nusername = me\npassword = hunter2\n",
        "password : hunter2",
        "HF_TOKEN = hunter2",
    ],
)
def test_a_label_spaced_from_its_separator_still_hides_the_value(text: str) -> None:
    """`password: x` hid x; `password = x` and `password : x` (an ini file, a prompt) kept
    it: the label's separator stood as a word of its own."""
    assert "hunter2" not in redact_text(text), redact_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "--python /srv/auth/bin/python: cannot run it as a Python interpreter",
        "/data/keyboard/good.json: not a snapshot (line 1)",
        "./auth/venv: directory holds no bin/python",
        "~/tokens/run.py: no such file",
    ],
)
def test_a_path_an_error_is_about_is_no_secrets_label(text: str) -> None:
    """A path holding a secret's word (passwd, key, auth, token) before the ":" of an error
    line: the words after it are the error, and stay."""
    assert redact_text(text) == text


def test_a_label_that_is_no_path_still_hides_its_value() -> None:
    assert redact_text("secret/data/db: hunter2") == "secret/data/db: <redacted>"
    # a file named as a secret is: its value may follow (`grep -H`, a far side's echo)
    assert redact_text("/run/secrets/db_password: hunter2").endswith(": <redacted>")
    assert redact_text("/etc/app password: hunter2") == "/etc/app password: <redacted>"


# Pieces of a variable's value around what redact_text hides: path and list characters,
# secret words (any case, the Kelvin sign and the long s among them), each token shape's
# start and a long tail for it (one holding no other start: "efgh" holds "gh"), labels, pairs, URLs and options.
_VALUE_PIECES = [
    "/", ".", "_", "+", ":", ",", ";", "-", "a", "Z", "9", "0", "lib64", "/usr/lib", "user",
    "KEY", "key", "token", "TOK", "tok", "pass", "pwd", "PWD", "OLDPWD", "auth", "cred",
    "secret", "ssh", "Bearer", "basic", "\u017f", "\u212a",
    "ghp_", "gho-", "github_pat_", "github-pat-", "hf_", "hf-", "sk-", "sk-proj-", "AKIA",
    "ASIA", "xoxb-", "eyJ", "glpat-", "AIza", "npm_", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "ABCDEFGHIJKLMNOP", "ABCDEFGHIJ.ABCDEFGHIJ.ABCDEFGHIJ",
    "=", "@", " ", "\t", "?", "&", "#", "http://", "-p", "-u", "--token", "<redacted>",
]  # fmt: skip


@settings(max_examples=5000, deadline=None)
@example("/opt/keys:/usr/lib")  # a secret's name before ":" (NAME:value): the patterns
@example("/data/hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ/x")  # a token inside a path
@example("/x/github_pat_ABCDEFGHIJKLMNOPQRSTUVWXYZ")
@example("/usr/local/cuda/lib64:/usr/lib")
@example("1tok:abc")  # _PAIR's NAME after its leading digits: TOK, a secret's last word
@example("x/ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # each token shape, inside a path
@example("x/sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ")
@example("x/AKIAABCDEFGHIJKLMNOP")
@example("x/ASIAABCDEFGHIJKLMNOP")
@example("x/xoxb-ABCDEFGHIJKL")
@example("x/eyJABCDEFGHIJ.ABCDEFGHIJ.ABCDEFGHIJ")
@example("x/glpat-ABCDEFGHIJKLMNOPQRSTUVWXYZ")
@example("x/AIzaABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
@example("x/npm_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
@given(st.lists(st.sampled_from(_VALUE_PIECES), max_size=8).map("".join))
def test_a_value_passed_without_the_patterns_holds_nothing_they_hide(text: str) -> None:
    """A probe records its variables' values at every run, most of them a path, a list or
    a count, and tells those that hold no secret form without re (its import is 8 ms of
    every probe): none of them is one the patterns would change."""
    assert redact_text(text) == redact._redacted(text)
    if redact._plain(text):
        assert redact._redacted(text) == text


def test_plain_values_are_told_without_the_patterns() -> None:
    """The values a node's variables hold (a count, a level, paths) pass as they are."""
    for value in ("0,1,2,3", "INFO", "8", "/data/hf", "/usr/local/cuda/lib64:/usr/lib",
                  "expandable_segments:True", "en_US.UTF-8", ""):  # fmt: skip
        assert redact._plain(value) and redact_text(value) == value
    for value in ("/opt/keys:/usr/lib", "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ", "a=b", "--token"):
        assert not redact._plain(value)
