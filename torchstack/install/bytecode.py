"""Byte-compile a folder of Python files on several cores, as `python -m compileall -q -j N`.

Run as a script by the Python the files are for (`python bytecode.py [-j N] FOLDER`), so that
the bytecode is that Python's; it uses the standard library only and imports nothing of
torchstack.

compileall -j hands every file to its worker pool on its own. For torch's 2,400 files those
hand-offs cost a good share of the processor time of the whole compile, in the parent process
and the workers (the figures: bench/README.rst). Here each worker gets a share of the files at
once and compiles them with compileall.compile_file. The .pyc files are compileall's, byte
for byte: timestamp-based, or checked hashes under SOURCE_DATE_EPOCH; fresh ones are left
alone. As compileall, it does not follow symbolic links to folders, and files that do not
compile are reported and left as sources, with exit code 1.

The order only decides how soon each file is done. The modules that importing the top-level
packages loads come first, in import order as far as their module-level import statements tell,
so that an import started meanwhile (the sanity check's) finds them compiled instead of
compiling them again in memory: for torch 691 files, of which 689 are among the 731 that
`import torch` loads. The rest follows in shares of every k-th file, so that large and small
files mix.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import stat
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

SHARES_PER_WORKER = 8  # small enough shares that no worker is left alone with a long tail
# torchstack._files.MAX_SOURCE, which this script cannot import: the largest real Python
# sources are about 5 MB; one over the bound is compiled but not scanned for imports.
MAX_SOURCE = 64 << 20

# Module-level import statements: `import a.b as c, d`, `from ..x import (y, z)`,
# `from .x import *`.
IMPORT = re.compile(rb"^(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+(?:\(([^)]*)\)|([\w, \t]*\w|\*))"
                    rb"|import[ \t]+([.\w, \t]*\w))", re.M)
COMMENT = re.compile(rb"#[^\n]*")


def read_source(path: str) -> bytes | None:
    """A source's bytes as torchstack._files reads a file: only a regular one (opened without
    blocking, so a FIFO never waits for a writer) and up to MAX_SOURCE; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = handle.read(MAX_SOURCE + 1)
    return data if len(data) <= MAX_SOURCE else None


def sources(folder: str) -> Iterator[str]:
    """The .py files under `folder`, as compileall finds them."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"
                       and not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def module_name(folder: str, path: str) -> str:
    name = os.path.relpath(path, folder)[:-len(".py")].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def with_parents(name: str) -> Iterator[str]:
    """`a.b.c` loads `a`, `a.b` and `a.b.c`."""
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        yield ".".join(parts[:end])


def listed_names(listed: bytes) -> Iterator[str]:
    for item in COMMENT.sub(b"", listed).split(b","):
        words = item.split()  # `name` or `name as alias`
        if words:
            yield words[0].decode("ascii", "replace")


def imports(path: str, name: str) -> Iterator[str]:
    """The modules that the module-level import statements of module `name` may load, in
    statement order; `from p import x` may load the module p.x."""
    package = name if os.path.basename(path) == "__init__.py" else name.rpartition(".")[0]
    text = read_source(path)
    if text is None:  # compile_file reports it when its turn comes
        return
    for match in IMPORT.finditer(text):
        base, parenthesised, listed, plain = match.groups()
        if plain is not None:
            for imported in listed_names(plain):
                yield from with_parents(imported)
            continue
        module = base.decode("ascii", "replace")
        level = len(module) - len(module.lstrip("."))
        if level:  # relative to the package, or to its parents for more dots
            anchor = package.rsplit(".", level - 1)[0] if level > 1 else package
            module = ".".join(part for part in (anchor, module[level:]) if part)
        yield from with_parents(module)
        for imported in listed_names(parenthesised if parenthesised is not None else listed):
            if imported != "*":
                yield f"{module}.{imported}"


def import_order(folder: str, files: Sequence[str]) -> list[str]:
    """The files of `files` that importing each top-level package of `folder` loads by its
    module-level import statements, in the order Python first compiles them: each module
    before the modules it imports, which come in statement order (a depth-first walk)."""
    by_name = {module_name(folder, path): path for path in files}
    order: list[str] = []
    seen: set[str] = set()
    stack = sorted((name for name in by_name if "." not in name), reverse=True)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        order.append(by_name[name])
        found = [n for n in imports(by_name[name], name) if n in by_name and n not in seen]
        stack.extend(reversed(found))
    return order


def compile_files(paths: Sequence[str]) -> list[str]:
    """Compile `paths`; the ones that failed."""
    return [path for path in paths if not compileall.compile_file(path, quiet=1)]


def compile_folder(folder: str, jobs: int) -> list[str]:
    """Compile every source under `folder` with `jobs` processes; the files that failed."""
    files = sorted(sources(folder))
    first = import_order(folder, files)
    chosen = set(first)
    rest = [path for path in files if path not in chosen]
    if jobs <= 1 or len(files) < 2:
        return compile_files(first + rest)
    count = jobs * SHARES_PER_WORKER
    size = -(-len(first) // count) or 1  # consecutive runs: the pool hands them out in order
    shares = [first[start:start + size] for start in range(0, len(first), size)]
    shares += [rest[start::count] for start in range(count)]
    with ProcessPoolExecutor(jobs) as pool:
        return [path for failed in pool.map(compile_files, shares) for path in failed]


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-j", "--jobs", type=int, default=0,
                        help="processes to use (default 0: one per available core)")
    parser.add_argument("folder")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.folder):
        parser.error(f"not a folder: {args.folder}")
    failed = compile_folder(args.folder, args.jobs if args.jobs > 0 else available_cores())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
