"""The README and docs/ are read by newcomers and copied from: every relative link leads to
a file (and a heading) that exists, every `envguard ...` command shown parses with the
real command line (click's own parser, from the typer app), and the module map in
docs/development.md is the package as it is."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envguard.cli import command_line

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGE = ROOT / "src" / "envguard"


def _without_code(text: str) -> str:
    """``text`` with fenced blocks and inline code blanked (links in them are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lowercased, punctuation dropped, spaces
    to hyphens, a repeated one numbered)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _without_code_blocks(text), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n, candidate = 0, slug
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def broken_links(page: Path, *, root: Path = ROOT) -> list[str]:
    """Each relative link of ``page`` whose file or #anchor does not exist (or lies outside
    ``root``: the repository a reader has)."""
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or not where.is_relative_to(root):
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where.read_text())):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Lock changes: check --lock OLD --lock NEW\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#lock-changes-check---lock-old---lock-new) [web](https://example.org)\n"
        "[gone](missing.md) [no heading](other.md#nope) `[in code](missing.md)`\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nope (no such heading)",
    ]


@dataclass(frozen=True)
class Shown:
    """An `envguard ...` command as a page shows it: whole (in a shell block: parsed in
    full) or in running text (a synopsis: its subcommand and option names checked)."""

    page: str
    words: tuple[str, ...]
    whole: bool

    def __str__(self) -> str:
        return f"{self.page}: {shlex.join(self.words)}"


_SHELLS = ("bash", "sh", "shell", "console")


def shell_lines(text: str) -> Iterator[str]:
    """The command lines of ``text``'s fenced blocks: every line of a shell block (a line
    ending in a backslash joined with the next), and ``$ `` lines of a plain block (output
    with the command that printed it)."""
    language: str | None = None  # None: outside a block
    pending = ""
    for line in text.splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            language = fence.group(1) if language is None else None
            continue
        if language in _SHELLS or (language == "" and line.startswith("$ ")):
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            yield (pending + line).removeprefix("$ ")
        pending = ""


_OPERATORS = {"&&", "||", ";", "|", ">", ">>", "<", "&", "2>", "2>&1"}


def _invocation(words: list[str]) -> list[str] | None:
    """The arguments after the program when ``words`` run envguard (``envguard``, a path to
    it, ``python -m envguard``); None otherwise."""
    if words and Path(words[0]).name == "envguard":
        return words[1:]
    if (
        len(words) > 2
        and Path(words[0]).name.startswith("python")
        and words[1:3]
        == [
            "-m",
            "envguard",
        ]
    ):
        return words[3:]
    return None


def shown_commands(page: Path) -> Iterator[Shown]:
    text = page.read_text()
    for line in shell_lines(text):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for word in [*lexer, ";"]:
            if word not in _OPERATORS:
                words.append(word)
                continue
            args = _invocation(words)
            if args is not None:
                yield Shown(page.name, tuple(args), whole=True)
            words = []
    for span in re.findall(r"`envguard ([^`\n]+)`", _without_code_blocks(text)):
        yield Shown(page.name, tuple(span.replace("\\|", "|").split()), whole=False)


def _option_names(word: str) -> list[str]:
    """The option names a synopsis word holds: ``[--off|--check]`` is two."""
    names = []
    for part in re.split(r"[|\[\]()]", word):
        match = re.fullmatch(r"(--?[A-Za-z][\w-]*)(=.*)?,?", part)
        if match:
            names.append(match.group(1))
    return names


def problems(shown: Shown) -> list[str]:
    """What is wrong with ``shown`` as the real command line reads it (empty: nothing)."""
    group = command_line()
    root = group.make_context("envguard", [], resilient_parsing=True)
    root_opts = {o for p in group.params for o in (*p.opts, *p.secondary_opts)}
    words = list(shown.words)
    while words and words[0] in root_opts:
        words.pop(0)
    if not words or words[0] in ("--help", "--version"):
        return []
    name, rest = words[0], words[1:]
    if name not in group.commands:
        return [f"{shown}: no command {name!r}"]
    command = group.get_command(root, name)
    declared = {"--help"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    before_command = rest[: rest.index("--")] if "--" in rest else rest
    unknown = [
        option
        for word in before_command
        for option in _option_names(word)
        if option not in declared and option not in root_opts
    ]
    if unknown:
        return [f"{shown}: {name} has no option {', '.join(unknown)}"]
    if not shown.whole or "--help" in rest:
        return []
    try:
        command.make_context(name, list(rest), parent=root)
    except Exception as exc:  # click's UsageError and its kin: what a user would be told
        said = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return [f"{shown}: {said}"]
    return []


@pytest.fixture
def quiet_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """-q or -v in a command shown must not silence or trace the rest of the test run."""
    from envguard.cli import program

    monkeypatch.setattr(program, "loudness", lambda **_: None)


@pytest.mark.usefixtures("quiet_parsing")
def test_every_command_shown_runs_on_the_real_command_line() -> None:
    shown = [c for page in PAGES for c in shown_commands(page)]
    # Enough to mean something: the README's moments and the reference's examples.
    assert sum(c.whole for c in shown) >= 40 and sum(not c.whole for c in shown) >= 40
    assert {c.page for c in shown if c.whole} >= {"README.md", "commands.md", "guard.md"}
    assert [p for c in shown for p in problems(c)] == []


@pytest.mark.usefixtures("quiet_parsing")
def test_a_command_the_cli_would_refuse_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n"
        "envguard diff good --no-such-flag\n"
        "cd x && .venv/bin/python -m envguard snapshto --name a   # a typo\n"
        "envguard diff --fail-on sometimes > d.txt\n"
        "envguard guard --venv .venv --allow torch -- uv pip install --no-such x\n"
        "envguard rebuild good \\\n    --keep-backups many\n"
        "```\n"
        "Run `envguard check --lock FILE` or `envguard protect [--off|--chek]`.\n"
    )
    found = [p for c in shown_commands(page) for p in problems(c)]
    assert len(found) == 5, found
    assert "no option --no-such-flag" in found[0]
    assert "no command 'snapshto'" in found[1]
    assert "'sometimes'" in found[2]
    assert "'many'" in found[3]
    assert "no option --chek" in found[4]


def test_the_readme_keeps_what_restore_needs_after_a_good_run() -> None:
    """The snapshot a newcomer copies after a good run keeps the files and caches that
    `restore` brings back."""
    readme = [c for c in shown_commands(ROOT / "README.md") if c.whole]
    good_run = next(c for c in readme if c.words[:1] == ("snapshot",) and "--metric" in c.words)
    assert {"--keep-files", "--keep-cache", "--repo", "--file"} <= set(good_run.words)


def test_the_quickstart_is_what_ci_runs() -> None:
    """.ci/run installs as the Quickstart does and runs the Quickstart's test command."""
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    install, tests = quickstart.splitlines()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci
    assert install.startswith("python3 -m venv .venv && ") and "python3 -m venv .venv" in ci
    assert re.search(r'-e "\.\[test\]"', install) and any('-e ".[dev]"' in line for line in ci)
    assert '"envguard-ml[test]"' in (ROOT / "pyproject.toml").read_text()  # dev holds test


def mapped_modules(text: str) -> set[str]:
    """The modules the map in docs/development.md names, as paths under src/envguard: a
    line is ``name.py`` or ``package/`` indented two spaces a level."""
    block = text.split("## Module map", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    assert lines[0].startswith("src/envguard/")
    names: set[str] = {"__init__.py"}
    trail: list[str] = []
    for line in lines[1:]:
        match = re.match(r"( +)([\w.]+?)(/|\.py)(?: |$)", line)
        assert match, f"not a module line: {line!r}"
        depth = len(match.group(1)) // 2 - 1
        assert len(match.group(1)) % 2 == 0 and depth <= len(trail), line
        del trail[depth:]
        if match.group(3) == "/":
            trail.append(match.group(2))
            names.add("/".join([*trail, "__init__.py"]))
        else:
            names.add("/".join([*trail, match.group(2) + ".py"]))
    return names


def test_the_module_map_is_the_package() -> None:
    """Every module the map names exists, and every module of the package is named."""
    mapped = mapped_modules((ROOT / "docs" / "development.md").read_text())
    actual = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    assert sorted(mapped - actual) == [], "named in docs/development.md, not in src/envguard"
    assert sorted(actual - mapped) == [], "in src/envguard, not in docs/development.md's map"


def test_a_stale_module_map_is_found() -> None:
    text = "## Module map\n\n```\nsrc/envguard/\n  api/\n    capture.py  x\n  target.py  y\n```\n"
    assert mapped_modules(text) == {
        "__init__.py",
        "api/__init__.py",
        "api/capture.py",
        "target.py",
    }
