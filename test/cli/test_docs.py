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
