"""PythonBundle's search of an installation for .pth files, done once.

Each time PythonBundle writes a module (the sanity check's two fake modules, the module itself
twice), its make_module_extra walks the whole installation with EasyBuild's
filetools.search_file to choose between $PYTHONPATH and $EBPYTHONPREFIXES: 0.2 s each over the
29,000 files of torch's CPU wheel, two of them while the module step runs alone. Once the wheels
are installed, what PythonBundle asks (is there any .pth file?) cannot change: the byte-compile
running meanwhile adds only .pyc files, and search_file matches file names, where the name of a
.pyc holds '.pth' exactly when its source's does (`<name>.py` becomes
`__pycache__/<name>.<tag>.pyc`). EasyBuild has no setting for this, so `searched_once`
replaces the name search_file in PythonBundle's module for the duration of a block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from easybuild.easyblocks.generic import pythonbundle

Answer = tuple[list[Any], list[str]]  # search_file's (var_defs, hits)
Searches = dict[tuple[Any, ...], Answer]


@contextlib.contextmanager
def searched_once(searches: Searches) -> Iterator[None]:
    """Within the block, PythonBundle's search_file runs each distinct search once: the first
    call asks EasyBuild's and records the answer in `searches`, later ones get a copy of it."""
    search_file = getattr(pythonbundle, "search_file", None)
    if search_file is None:  # an EasyBuild whose PythonBundle searches otherwise
        yield
        return

    def search_file_once(paths: list[str], query: str, *args: Any, **kwargs: Any) -> Answer:
        key = (tuple(paths), query, args, tuple(sorted(kwargs.items())))
        if key not in searches:
            searches[key] = search_file(paths, query, *args, **kwargs)
        var_defs, hits = searches[key]
        return list(var_defs), list(hits)

    pythonbundle.search_file = search_file_once
    try:
        yield
    finally:
        pythonbundle.search_file = search_file
