"""PythonBundle's search of an installation for .pth files, done once.

Each time PythonBundle writes a module (the sanity check's two fake modules, the module itself
twice), its make_module_extra walks the whole installation with EasyBuild's
filetools.search_file to choose between $PYTHONPATH and $EBPYTHONPREFIXES, each time over the
29,000 files of torch's CPU wheel, two of them while the module step runs alone (the figures:
bench/README.rst). Once the wheels
are installed, what PythonBundle asks (is there any .pth file?) cannot change: the byte-compile
running meanwhile adds only .pyc files, and search_file matches file names, where the name of a
.pyc holds '.pth' exactly when its source's does (`<name>.py` becomes
`__pycache__/<name>.<tag>.pyc`). EasyBuild has no setting for this, so `searched_once`
replaces the name search_file in PythonBundle's module for the duration of a block, with the
answers kept in a store that `store` hands out only on the EasyBuild releases this was tested
with (install.ebversions).

The one search that is left runs while the byte-compile adds files, before the sanity check
can load its module: EasyBuild's builds an index of every file first, with a relative path
computed per file, slower still beside the byte-compile. For the call
PythonBundle makes (silent, the other options at their defaults, no index file kept in the
folder) `matching_files` gives the same answer from one walk, matching the names as they come.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from easybuild.base import fancylogger
from easybuild.easyblocks.generic import pythonbundle
from easybuild.tools import filetools
from easybuild.tools.config import build_option
from easybuild.tools.utilities import natural_keys

from torchstack.install import ebversions

Answer = tuple[list[Any], list[str]]  # search_file's (var_defs, hits)
Searches = dict[tuple[Any, ...], Answer]

IGNORED = (".git", ".svn")  # the folders search_file leaves out by default
_log = fancylogger.getLogger("pthsearch", fname=False)


def matching_files(paths: list[str], query: str) -> list[str]:
    """What EasyBuild's search_file(paths, query, silent=True) finds (its hits): the files
    under each path whose name matches `query` (case-insensitive, '+' taken literally), links
    followed, .git and .svn left out, each path's hits in natural order."""
    pattern = _pattern(query)
    hits = []
    for path in paths:
        found = []
        for dirpath, dirnames, filenames in os.walk(path, topdown=True, followlinks=True):
            for name in filenames:
                if pattern.search(name):
                    relative = os.path.relpath(dirpath, path)
                    found.append(os.path.join(path, "" if relative == "." else relative, name))
            dirnames[:] = [d for d in dirnames if d not in IGNORED]
        hits.extend(sorted(found, key=natural_keys))
    return hits


def _pattern(query: str) -> re.Pattern[str]:
    """`query` as search_file compiles it: case-insensitive, '+' literal, other regex
    characters keeping their meaning."""
    return re.compile(re.sub("([+])", r"\\\1", query), re.I)


def _first_search(search_file: Callable[..., Answer], paths: list[str], query: str,
                  *args: Any, **kwargs: Any) -> Answer:
    """`matching_files` for the call PythonBundle makes; EasyBuild's for any other, for a
    folder with an index file (which EasyBuild would read instead of walking) and for what
    EasyBuild reports as an error (a path that is not a folder, a query that is no regex)."""
    plain = not args and set(kwargs) == {"silent"} and kwargs["silent"]
    indexed = not build_option("ignore_index") and any(
        os.path.exists(os.path.join(path, filetools.PATH_INDEX_FILENAME)) for path in paths)
    odd = any(os.path.exists(path) and not os.path.isdir(path) for path in paths)
    try:
        _pattern(query)
    except re.error:
        odd = True
    if not plain or indexed or odd:
        return search_file(paths, query, *args, **kwargs)
    start = time.perf_counter()
    hits = matching_files(paths, query)
    _log.info("torchstack: searched %s for %r in %.3f s: %d hits", ", ".join(paths), query,
              time.perf_counter() - start, len(hits))
    return [], hits


def store(log: Any) -> Searches | None:
    """Where `searched_once` keeps one installation's answers, from the sanity check on: None
    on an EasyBuild release this was not tested with (PythonBundle's own search runs), which
    one line in `log` (the easyblock's) names."""
    return {} if ebversions.replacing(ebversions.PTHSEARCH, log) else None


@contextlib.contextmanager
def searched_once(searches: Searches) -> Iterator[None]:
    """Within the block, PythonBundle's search_file runs each distinct search once: the first
    call searches (`_first_search`) and records the answer in `searches` (from `store`),
    later ones get a copy of it."""
    search_file = getattr(pythonbundle, "search_file", None)
    if search_file is None:  # an EasyBuild whose PythonBundle searches otherwise
        yield
        return

    def search_file_once(paths: list[str], query: str, *args: Any, **kwargs: Any) -> Answer:
        key = (tuple(paths), query, args, tuple(sorted(kwargs.items())))
        if key not in searches:
            searches[key] = _first_search(search_file, paths, query, *args, **kwargs)
        var_defs, hits = searches[key]
        return list(var_defs), list(hits)

    pythonbundle.search_file = search_file_once
    try:
        yield
    finally:
        pythonbundle.search_file = search_file
