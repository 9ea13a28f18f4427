"""Hard links between the identical files of the session's real eb installs.

The suite installs the same real wheels many times over, once per easyblock, hooks file,
module syntax and module tool under test: the torch 2.13.0+cpu wheel nine times (760 MB
each), the torch 2.14.1 CUDA 13 stack twice with its nvidia wheels (5.3 GB each) and three
times on the CUDA modules (about 2 GB each). Each install stays what eb
made of it (its own folder, module file, fingerprint, logs); a file that is byte for byte one
that an earlier install of the session holds, with the same name, mode and owner, becomes a
hard link to it, so the run's temporary disk holds its content once. Linked: large files
anywhere in an install, and every file under site-packages, but `.py` and `.pyc` files: the
byte-code of each install records its own source's mtime and path, which a shared inode
would change (about 120 MB of a torch install stay its own).

The large files of uv's cache count as seen (`know`): the session's PyTorchWheels installs
hard-link from it ($TORCHSTACK_UV_CACHE), and what pip writes again of the same wheels becomes
links to it, even in the first install of a worker. A file that already is a seen file (uv
linked it from its cache) is left as it is, unread: uv keeps a copy of a wheel for each path it
was installed from, and linking one copy's files to another's would hash both and save nothing.

Safe because no test writes into an installed file in place: eb rewrites RPATHs (patchelf)
during its own install, before the install is linked; fingerprint files are replaced whole
(a new inode) and are not under site-packages; a rebuild removes its folder first.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from support.wheelbuild import sha256

MIN_SIZE = 256 * 1024  # outside site-packages, only files this large are linked
FINISHED_LOG = "easybuild/easybuild-*.log"  # what eb copies into an install that succeeded
# Left alone: each install's byte-code records its own .py's mtime and path (co_filename)
PYTHON_SUFFIXES = (".py", ".pyc")

# (name, size, mode, uid, gid): what two files must share before their contents are compared
_Key = tuple[str, int, int, int, int]
# (device, inode, size, mtime_ns): a file as it was when it was seen
_Identity = tuple[int, int, int, int]


def _identity(info: os.stat_result) -> _Identity:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


@dataclass
class Linker:
    """The files of the installs seen so far; `link(folder)` shares what repeats them."""

    min_size: int = MIN_SIZE
    _files: dict[_Key, list[tuple[Path, _Identity]]] = field(default_factory=dict)
    _folders: set[tuple[int, int]] = field(default_factory=set)

    def link(self, folder: Path) -> int:
        """Link the files of `folder` to identical ones seen before; the bytes this saved.

        A folder already linked (the same inode) is skipped: call it after every eb run."""
        info = folder.stat()
        if (info.st_dev, info.st_ino) in self._folders:
            return 0
        self._folders.add((info.st_dev, info.st_ino))
        return sum(self._link_one(path, found) for path, found in self._candidates(folder))

    def know(self, archive: Path) -> None:
        """Take the files in the folders of `archive` as seen, to link later files to, without
        touching them: uv's cache of unpacked wheels (archive-v0, one folder a wheel, never
        changed once there), whose files pip writes again. A folder is read once; call this
        after every eb run."""
        folders = sorted(archive.iterdir()) if archive.is_dir() else []
        for folder in folders:
            info = folder.stat()
            if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) in self._folders:
                continue
            self._folders.add((info.st_dev, info.st_ino))
            for path, found in self._candidates(folder):
                key = (path.name, found.st_size, found.st_mode, found.st_uid, found.st_gid)
                self._files.setdefault(key, []).append((path, _identity(found)))

    def link_installs(self, software: Path) -> int:
        """`link` every finished install of an EasyBuild software tree (NAME/VERSION): one
        whose log eb copied in at its end. A failed install is left as eb left it."""
        return sum(self.link(log.parent.parent)
                   for log in sorted(software.glob(f"*/*/{FINISHED_LOG}")))

    def _candidates(self, folder: Path) -> list[tuple[Path, os.stat_result]]:
        found = []
        for top, _, names in os.walk(folder):
            in_site = "site-packages" in Path(top).parts
            for name in names:
                path = Path(top, name)
                info = path.lstat()
                if (stat.S_ISREG(info.st_mode) and not name.endswith(PYTHON_SUFFIXES)
                        and (in_site or info.st_size >= self.min_size)):
                    found.append((path, info))
        return found

    def _link_one(self, path: Path, info: os.stat_result) -> int:
        key = (path.name, info.st_size, info.st_mode, info.st_uid, info.st_gid)
        known = self._files.setdefault(key, [])
        if any(identity[:2] == (info.st_dev, info.st_ino) for _, identity in known):
            # already one file with one seen (uv hard-linked it from its cache): relinking it
            # to another cache copy of the same wheel would save nothing and hash both
            return 0
        for entry in list(known):
            same = self._same_content(entry, path, info)
            if same is None:  # gone or changed since it was seen: forget it
                known.remove(entry)
            elif same:
                return _replace_with_link(entry[0], path, info.st_size)
        known.append((path, _identity(info)))
        return 0

    def _same_content(self, entry: tuple[Path, _Identity], path: Path,
                      info: os.stat_result) -> bool | None:
        earlier, identity = entry
        try:
            was = earlier.lstat()
        except FileNotFoundError:
            return None
        if _identity(was) != identity:
            return None
        if was.st_dev != info.st_dev or was.st_ino == info.st_ino:
            return False  # another file system, or already one file
        return sha256(earlier) == sha256(path)  # each file hashed once while it is unchanged


def _replace_with_link(earlier: Path, path: Path, size: int) -> int:
    """Swap `path` for a hard link to `earlier` in one rename: never a moment without it."""
    staging = path.with_name(f".{path.name}.dedupe-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    os.link(earlier, staging)
    os.replace(staging, path)
    return size


SESSION = Linker()  # one per pytest process: every real eb install of the run goes through it
