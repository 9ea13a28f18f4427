"""EasyBuild's permissions step, reading the installation once.

EasyBuild's permissions step walks the installation three times with filetools'
adjust_permissions (group and other lose write, everyone gains read, folders gain search), and
for every path asks os.path.islink and then os.lstat, with three debug log calls, over the
15,800 paths of torch's CPU wheel, at the end of the install, when nothing is left to overlap
with (the figures: bench/README.rst). Within `read_once`, the step's adjust_permissions makes
the same changes to the same paths, but lists each folder once (os.scandir, whose entries tell
symbolic links apart for free) and reads each path's mode once: the step itself is the only one
changing modes meanwhile, so the mode after a change is known. As EasyBuild's, it skips
symbolic links, lists every path before changing any (a folder that loses search permission is
still walked), counts failures against --max-fail-ratio-adjust-permissions and raises the same
errors. Calls it does not cover (not recursive, not relative, or changing the group) go to
EasyBuild's own, after which nothing read is trusted. EasyBuild has no setting for this, so the
name is replaced in its easyblock module for the block, as pthsearch does for PythonBundle, and
only on the EasyBuild releases it was tested with (install.ebversions).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from easybuild.base import fancylogger
from easybuild.framework import easyblock
from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.config import build_option

from torchstack.install import ebversions

# The parameters of EasyBuild's adjust_permissions this replacement knows; a call with any
# other goes to EasyBuild's.
KNOWN = {"provided_path", "permission_bits", "add", "onlyfiles", "onlydirs", "recursive",
         "group_id", "relative", "ignore_errors"}

_log = fancylogger.getLogger("filetools", fname=False)  # where EasyBuild's logs its own


class Entry(NamedTuple):
    path: str
    link: bool  # a symbolic link: never changed
    folder: bool  # a folder, or a symbolic link to one, as os.walk sorts them


def listing(top: str) -> list[Entry]:
    """Everything under `top` that os.walk(top) lists, not following symbolic links."""
    found = []
    pending = [top]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # os.walk skips what it cannot list
            continue
        for entry in entries:
            link = entry.is_symlink()
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            if is_folder and not link:
                pending.append(entry.path)
            found.append(Entry(entry.path, link, is_folder))
    return found


def chosen(entries: list[Entry], onlyfiles: bool, onlydirs: bool) -> list[Entry]:
    """The entries EasyBuild's adjust_permissions would visit: `top` always, then folders
    unless `onlyfiles` and everything else unless `onlydirs`."""
    return entries[:1] + [e for e in entries[1:]
                          if (not onlyfiles if e.folder else not onlydirs)]


@dataclass
class Installation:
    """What the block has read of the paths it was asked to adjust."""

    listings: dict[str, list[Entry]] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)

    def entries(self, top: str) -> list[Entry]:
        """`top`, then everything under it (`listing`)."""
        if top not in self.listings:
            try:
                mode: int | None = os.lstat(top).st_mode
            except OSError:
                mode = None
            link = mode is not None and stat.S_ISLNK(mode)
            if mode is not None and not link:
                self.modes[top] = mode
            self.listings[top] = [Entry(top, link, True), *listing(top)]
        return self.listings[top]

    def adjust(self, entries: list[Entry], bits: int, add: bool) -> list[tuple[str, OSError]]:
        """Add or remove `bits` on every entry that is not a symbolic link; those that failed."""
        failed = []
        for path, link, _ in entries:
            if link:
                continue
            try:
                mode = self.modes.get(path)
                if mode is None:
                    mode = self.modes[path] = os.lstat(path).st_mode
                wanted = mode | bits if add else mode & ~bits
                if wanted != mode:
                    os.chmod(path, wanted)
                    self.modes[path] = wanted
            except OSError as err:
                failed.append((path, err))
        return failed

    def forget(self) -> None:
        self.listings.clear()
        self.modes.clear()


def reading_once(original: Callable[..., Any], installation: Installation) -> Callable[..., Any]:
    """EasyBuild's adjust_permissions (`original`), reading through `installation` for
    recursive relative calls."""
    signature = inspect.signature(original)

    def adjust_permissions(*args: Any, **kwargs: Any) -> Any:
        try:
            given = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # to raise EasyBuild's own error
        given.apply_defaults()
        call = given.arguments
        if (set(call) != KNOWN or not call["recursive"] or not call["relative"]
                or call["group_id"]):
            installation.forget()
            return original(*args, **kwargs)
        top = os.path.abspath(call["provided_path"])
        entries = chosen(installation.entries(top), call["onlyfiles"], call["onlydirs"])
        failed = installation.adjust(entries, call["permission_bits"], call["add"])
        if failed and not call["ignore_errors"]:
            raise EasyBuildError("Failed to chmod/chown several paths: %s (last error: %s)",
                                 [path for path, _ in failed], failed[-1][1])
        for path, err in failed:
            _log.info("Failed to chmod/chown %s (but ignoring it): %s", path, err)
        _check_fail_ratio(len(failed), len(entries))
        return None

    return adjust_permissions


def _check_fail_ratio(failures: int, total: int) -> None:
    ratio = failures / float(total)
    most = float(build_option("max_fail_ratio_adjust_permissions"))
    if ratio > most:
        raise EasyBuildError("%.2f%% of permissions/owner operations failed (more than %.2f%%), "
                             "something must be wrong...", 100 * ratio, 100 * most)


@contextlib.contextmanager
def read_once(log: Any = _log) -> Iterator[bool]:
    """Within the block, EasyBuild's easyblock module adjusts permissions through one
    `Installation`: for a permissions step, nothing else may change the installation meanwhile.
    Yields whether it does: not on an EasyBuild release this was not tested with, which one
    line in `log` (the easyblock's) names."""
    original = getattr(easyblock, "adjust_permissions", None)
    if original is None or not ebversions.replacing(ebversions.PERMISSIONS, log):
        yield False  # EasyBuild's own adjust_permissions, as it is
        return
    easyblock.adjust_permissions = reading_once(original, Installation())
    try:
        yield True
    finally:
        easyblock.adjust_permissions = original
