"""No module of torchstack reads a file but through torchstack._files, read from source with ast.

_files opens regular files only (a FIFO never waits, a device is never read for ever) and reads
each kind of file up to its bound, wheel members too. A read anywhere else escapes both rules,
so this test lists every call that reads a file by another way: open() (and io.open, os.fdopen)
for reading, os.open without O_WRONLY or O_DIRECTORY, Path.read_text/read_bytes, any .open()
method (Path, zipfile, tarfile), json.load and its kin, a ConfigParser's read/read_file, .read()
in a module that handles zip or tar archives (a member read whole), EasyBuild's parsers given a
path instead of the text, and read_regular without a bound. What must stay is in ALLOWED, with
why.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import torchstack

PACKAGE = Path(torchstack.__file__).resolve().parent
READER = "_files.py"
_WRITE_MODES = ("w", "a", "x")
_LOADERS = {"json.load", "tomllib.load", "pickle.load", "marshal.load", "plistlib.load",
            "hashlib.file_digest"}
_PATH_READERS = {"read_text", "read_bytes", "open"}
_ARCHIVE_MODULES = {"zipfile", "tarfile"}
# EasyBuild's readers that take a path and open it themselves, and the keyword that hands
# them the text instead
_EASYBUILD = {"EasyConfig": "rawtxt", "EasyConfigParser": "rawcontent", "read_file": None,
              "parse_easystack": None}

# (file below torchstack/, the call as written) -> why it may read a file by itself
ALLOWED = {
    ("output.py", "os.open"):
        "the lock file of --out: opened O_NONBLOCK|O_NOFOLLOW to be locked, never read",
    ("install/bytecode.py", "os.open"):
        "runs as a script in the target Python, which has no torchstack: read_source restates "
        "_files' rule (regular only, O_NONBLOCK, MAX_SOURCE)",
    ("install/bytecode.py", "os.fdopen"):
        "the descriptor read_source opened and checked with fstat",
    ("generator/jobs.py", "parse_easystack"):
        "EasyBuild's parser opens a path itself: it gets a private copy of the text that "
        "_files.read_text read",
}


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode of an open()-like call when written as a string constant; "r" when absent."""
    node = call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    if node is None:
        return "r"
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _reads(mode: str | None) -> bool:
    return mode is None or not any(m in mode for m in _WRITE_MODES)


def _names(node: ast.AST) -> set[str]:
    return {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(node)
            if isinstance(n, (ast.Attribute, ast.Name))}


def _imports(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def _config_parsers(tree: ast.Module) -> set[str]:
    """Names bound to a ConfigParser in the module (`parser = configparser.RawConfigParser()`)."""
    return {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).endswith("ConfigParser")
            for target in node.targets if isinstance(target, ast.Name)}


def _why_it_reads(call: ast.Call, text: str, archives: bool, parsers: set[str]) -> str | None:
    """Why `call` reads a file other than through _files, or None."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else None
    if text in ("open", "io.open") and _reads(_mode(call, 1)):
        return "open() for reading"
    if text == "os.fdopen" and _reads(_mode(call, 1)):
        return "os.fdopen() for reading"
    if text == "os.open":  # a folder opened to be locked or listed holds nothing to read
        flags = _names(call.args[1]) if len(call.args) > 1 else set()
        return None if flags & {"O_WRONLY", "O_DIRECTORY"} else "os.open() without O_WRONLY"
    if text in _LOADERS:
        return f"{text}() of an open file"
    if receiver is not None and receiver != "os" and name in _PATH_READERS:
        return f".{name}() of a path or an archive"
    if receiver in parsers and name in ("read", "read_file"):
        return "a ConfigParser reading the file itself"
    if archives and name in ("read", "extract", "extractall"):
        return f".{name}() in a module that reads zip or tar archives"
    if name in _EASYBUILD:
        keyword = _EASYBUILD[name]
        if keyword is None or keyword not in {k.arg for k in call.keywords}:
            return "EasyBuild reading the file itself"
    if name == "read_regular" and len(call.args) < 3 and "limit" not in {
            k.arg for k in call.keywords}:
        return "read_regular() without a bound"
    return None


def bare_reads(root: Path) -> Iterator[tuple[str, str, int, str]]:
    """(file below `root`, call as written, line, why) of each read outside _files."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative == READER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        archives = bool(_imports(tree) & _ARCHIVE_MODULES)
        parsers = _config_parsers(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                text = ast.unparse(node.func)
                why = _why_it_reads(node, text, archives, parsers)
                if why is not None:
                    yield relative, text, node.lineno, why


def test_every_read_goes_through_files() -> None:
    found = [f"torchstack/{file}:{line}: {text} ({why})"
             for file, text, line, why in bare_reads(PACKAGE) if (file, text) not in ALLOWED]
    assert found == [], "read through torchstack._files instead:\n" + "\n".join(found)


def test_allowlist_is_current() -> None:
    # an entry whose read is gone is removed, so the list shows what is left to do
    used = {(file, text) for file, text, _, _ in bare_reads(PACKAGE)}
    assert sorted(set(ALLOWED) - used) == []


SAMPLES = {
    # a source with one bare read -> the call as written that the test must name
    "open": ("open(p)\n", "open"),
    "open-rb": ("open(p, 'rb')\n", "open"),
    "open-mode-kw": ("open(p, mode='r')\n", "open"),
    "path-read-text": ("p.read_text()\n", "p.read_text"),
    "path-read-bytes": ("p.read_bytes()\n", "p.read_bytes"),
    "path-open": ("p.open()\n", "p.open"),
    "os-open-read": ("os.open(p, os.O_RDONLY)\n", "os.open"),
    "os-fdopen-read": ("os.fdopen(fd)\n", "os.fdopen"),
    "json-load": ("json.load(h)\n", "json.load"),
    "configparser": ("c = configparser.RawConfigParser()\nc.read(p)\n", "c.read"),
    "zip-member": ("import zipfile\na.read('x')\n", "a.read"),
    "easyconfig": ("EasyConfig(p)\n", "EasyConfig"),
    "unbounded": ("read_regular(p)\n", "read_regular"),
}
FINE = {
    "open-write": "open(p, 'w')\n",
    "os-open-write": "os.open(p, os.O_WRONLY | os.O_CREAT)\n",
    "os-open-folder": "os.open(p, os.O_RDONLY | os.O_DIRECTORY)\n",
    "fdopen-write": "os.fdopen(fd, 'w', encoding='utf-8')\n",
    "json-loads": "json.loads(text)\n",
    "configparser-string": "c = configparser.RawConfigParser()\nc.read_string(t)\n",
    "stream-read": "handle.read(4)\n",
    "easyconfig-text": "EasyConfig(p, rawtxt=t)\n",
    "bounded": "read_regular(p, E, 10)\nread_regular(p, limit=10)\n",
}


class TestTheCheck:
    @pytest.mark.parametrize("source, call", list(SAMPLES.values()), ids=list(SAMPLES))
    def test_finds(self, tmp_path: Path, source: str, call: str) -> None:
        (tmp_path / "m.py").write_text(source)
        assert [text for _, text, _, _ in bare_reads(tmp_path)] == [call]

    @pytest.mark.parametrize("source", list(FINE.values()), ids=list(FINE))
    def test_lets_pass(self, tmp_path: Path, source: str) -> None:
        (tmp_path / "m.py").write_text(source)
        assert list(bare_reads(tmp_path)) == []

    def test_the_reader_itself_is_exempt(self, tmp_path: Path) -> None:
        (tmp_path / READER).write_text("os.fdopen(fd, 'rb')\n")
        assert list(bare_reads(tmp_path)) == []
