"""The documentation against the repository: every file path it names exists, and every
`torchstack SUBCOMMAND --option` it shows is one the parser accepts.

Read: README.rst, docs/*.rst and bench/README.rst. Commands are looked for in literal text
only (``inline literals``, literal blocks and code blocks), where prose does not reach.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchstack.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.rst", ROOT / "bench" / "README.rst",
               *(ROOT / "docs").glob("*.rst")])

# A repository path: one of the top-level folders, then a path (globs allowed), not part of a
# longer word, URL or absolute path; or one of the top-level files.
_TOP = r"(?:\.ci|bench|docs|easyblocks|easyconfigs|scripts|templates|test|torchstack)/[\w.*/-]*"
_FILES = r"(?:README\.rst|setup\.cfg|setup\.py|pyproject\.toml)"
_PATH = re.compile(rf"(?<![\w./$~-])(?:{_TOP}|{_FILES})(?![\w-])")
# `torchstack SUBCOMMAND`, as a command (`python -m torchstack ...` included).
_COMMAND = re.compile(r"(?<![\w./-])torchstack[ \t]+([a-z][\w-]*)")
# Where a command line ends: a shell operator, a comment, the end of a substitution.
_END = re.compile(r"&&|\|\||[|;)#>`]")
_OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def _relative(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def _paths(doc: Path) -> Iterator[str]:
    for match in _PATH.finditer(doc.read_text(encoding="utf-8")):
        yield match.group(0).rstrip(".")


def _literals(text: str) -> Iterator[str]:
    """Literal blocks (after `::` or a code-block directive) and inline literals, each with
    backslash continuations joined and an inline literal's line breaks made spaces."""
    prose: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        prose.append(line)
        i += 1
        if not (line.rstrip().endswith("::") or ".. code-block::" in line):
            continue
        indent = len(line) - len(line.lstrip())
        block: list[str] = []
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > indent):
            if lines[i].lstrip().startswith(":") and not block:  # a directive's option
                i += 1
                continue
            block.append(lines[i].strip())
            i += 1
        yield "\n".join(block).replace("\\\n", " ")
    for match in re.finditer(r"``(.+?)``", "\n".join(prose), re.DOTALL):
        yield " ".join(match.group(1).split())


def _commands(doc: Path) -> Iterator[tuple[str, list[str], str]]:
    """(subcommand, options after it on the same command line, the line) of each command."""
    for literal in _literals(doc.read_text(encoding="utf-8")):
        for line in literal.splitlines():
            for match in _COMMAND.finditer(line):
                rest = _END.split(line[match.end():], maxsplit=1)[0]
                yield match.group(1), _OPTION.findall(rest), line.strip()


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("torchstack's parser has no subcommands")


def test_docs_are_found() -> None:
    names = {_relative(doc) for doc in DOCS}
    assert {"README.rst", "bench/README.rst", "docs/index.rst", "docs/design.rst"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_named_paths_exist(doc: Path) -> None:
    missing = sorted({path for path in _paths(doc) if not any(ROOT.glob(path))})
    assert not missing, f"{_relative(doc)} names paths that do not exist: {missing}"


def test_paths_are_found() -> None:
    """Not vacuous: the documents do name many paths, and the expected ones."""
    found = {path for doc in DOCS for path in _paths(doc)}
    assert len(found) >= 30, sorted(found)
    assert {"scripts/demo", "scripts/test", "docs/design.rst", "test/support/slurm.py"} <= found


def test_commands_exist() -> None:
    subparsers = _subparsers()
    unknown = sorted({(_relative(doc), name, line) for doc in DOCS
                      for name, _, line in _commands(doc) if name not in subparsers})
    assert not unknown, f"subcommands that `torchstack --help` does not list: {unknown}"


def test_options_exist() -> None:
    subparsers = _subparsers()
    unknown = sorted({(_relative(doc), name, option, line) for doc in DOCS
                      for name, options, line in _commands(doc) if name in subparsers
                      for option in options
                      if option not in subparsers[name]._option_string_actions})
    assert not unknown, f"options that `torchstack SUBCOMMAND --help` does not list: {unknown}"


def test_commands_are_found() -> None:
    """Not vacuous: the documents show most subcommands, many of them with options."""
    commands = [(name, options) for doc in DOCS for name, options, _ in _commands(doc)]
    names = {name for name, _ in commands}
    assert len(commands) >= 40, commands
    assert len(names & set(_subparsers())) >= 10, names
    assert sum(len(options) for _, options in commands) >= 30, commands
    assert {"generate", "doctor", "venv", "rollout", "scan", "check"} <= names


# -- pointers from the code to docs/design.rst ----------------------------------------------

DESIGN = ROOT / "docs" / "design.rst"
POINTED_FROM = sorted([*(ROOT / "torchstack").rglob("*.py"), *(ROOT / "easyblocks").glob("*.py")])
# `docs/design.rst, "Title"` or `docs/design.rst ("Title")`, wrapped over lines of a docstring
# or of a comment; a mention without a quoted title right after it names no section.
_POINTER = re.compile(r'docs/design\.rst(?P<title>[\s,(#]*"[^"]+")?')
_UNDERLINE = re.compile(r"^([=\-~^\"'*+#`:.])\1+$")


def section_titles(text: str) -> set[str]:
    """The section titles of a reStructuredText document (underlined, overlined or not)."""
    lines = text.splitlines()
    return {line.strip() for line, under in zip(lines, lines[1:])
            if line.strip() and not line[0].isspace() and not _UNDERLINE.match(line.strip())
            and _UNDERLINE.match(under) and len(under) >= len(line.strip())}


def design_pointers(path: Path) -> Iterator[str | None]:
    """The section title each mention of docs/design.rst names in `path`, None for none."""
    for match in _POINTER.finditer(path.read_text(encoding="utf-8")):
        title = match.group("title")
        yield None if title is None else " ".join(title.split('"')[1].split())


class TestDesignPointers:
    def test_section_titles(self) -> None:
        # the parser on a small document: over- and underlined titles, a table is no title
        text = ("=====\nTop\n=====\n\nRule one\n--------\n\n===  ===\na    b\n===  ===\n\n"
                "Too long a title\n-----\n")
        assert section_titles(text) == {"Top", "Rule one"}

    def test_design_pointers(self, tmp_path: Path) -> None:
        # the forms the code uses, wrapped as docstrings and comments wrap them
        source = tmp_path / "m.py"
        source.write_text('"""See docs/design.rst, "The guard\n    protocol"; docs/design.rst\n'
                          '("Wheel tags")."""\n# (docs/design.rst,\n# "Link classes")\n'
                          '# docs/design.rst says so\n', encoding="utf-8")
        assert list(design_pointers(source)) == ["The guard protocol", "Wheel tags",
                                                 "Link classes", None]

    @pytest.mark.parametrize("path", POINTED_FROM, ids=_relative)
    def test_pointers_name_sections(self, path: Path) -> None:
        titles = section_titles(DESIGN.read_text(encoding="utf-8"))
        wrong = [title for title in design_pointers(path) if title not in titles]
        assert not wrong, (f"{_relative(path)} points at docs/design.rst sections that do not "
                           f"exist (None: no quoted title after the name): {wrong}")

    def test_pointers_are_found(self) -> None:
        """Not vacuous: the rules' modules point at their sections."""
        found = {title for path in POINTED_FROM for title in design_pointers(path)}
        assert {"The fingerprint", "Compatibility rules", "The guard protocol",
                "Symbol verification", "The CUDA series rule", "Wheel tags",
                "How Lmod resolves a load", "The abi tag of an official wheel"} <= found, found
