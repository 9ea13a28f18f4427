"""Byte-compile a folder of Python files on several cores, as `python -m compileall -q -j N`.

Run as a script by the Python the files are for (`python bytecode.py [-j N] FOLDER`), so that
the bytecode is that Python's; it uses the standard library only and imports nothing of
torchstack.

compileall -j hands every file to its worker pool on its own. For torch's 2,400 files those
hand-offs cost about a third of the processor time of the whole compile, in the parent process
and the workers. Here each worker gets a share of the files at once, every k-th one of the
sorted list so that large and small files mix, and compiles them with
compileall.compile_file. The .pyc files are compileall's, byte for byte: timestamp-based, or
checked hashes under SOURCE_DATE_EPOCH; fresh ones are left alone. As compileall, it does not
follow symbolic links to folders, and files that do not compile are reported and left as
sources, with exit code 1.
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

SHARES_PER_WORKER = 8  # small enough shares that no worker is left alone with a long tail


def sources(folder: str) -> Iterator[str]:
    """The .py files under `folder`, as compileall finds them."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"
                       and not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def compile_files(paths: Sequence[str]) -> list[str]:
    """Compile `paths`; the ones that failed."""
    return [path for path in paths if not compileall.compile_file(path, quiet=1)]


def compile_folder(folder: str, jobs: int) -> list[str]:
    """Compile every source under `folder` with `jobs` processes; the files that failed."""
    files = sorted(sources(folder))
    if jobs <= 1 or len(files) < 2:
        return compile_files(files)
    count = jobs * SHARES_PER_WORKER
    shares = [files[start::count] for start in range(count)]
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
