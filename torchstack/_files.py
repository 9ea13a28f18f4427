"""Open only regular files: a FIFO must never block a read, a device never be read forever.

`open(path)` of a FIFO waits for a writer, and reading /dev/zero never ends. Every file that
torchstack reads from a wheel's folder, an installation or the command line is opened here:
without blocking (O_NONBLOCK), then checked with fstat on the open descriptor, so that a file
swapped for a FIFO between a check and the open is refused all the same.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from torchstack.errors import TorchstackError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileKindError(TorchstackError):
    """A path that is not a regular file where torchstack reads one (a FIFO, a device, ...)."""


def kind_of(mode: int) -> str:
    """`a FIFO`, `a folder`, `a character device`, ...: what a non-regular file is."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def describe_os_error(path: str, exc: OSError) -> str:
    """One phrase for a path that cannot be opened; a symlink loop named as such."""
    if exc.errno == errno.ELOOP:
        return f"{path!r} is a symlink loop"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return f"{path!r} is a dangling symlink"
    if exc.errno == errno.ENOENT:
        return f"{path!r} does not exist"
    return f"cannot read {path!r}: {exc.strerror or exc}"


def open_regular(
    path: str | os.PathLike[str], error: type[TorchstackError] = FileKindError
) -> BinaryIO:
    """`path` opened for binary reading; `error` naming the file when it is no regular file.

    A symlink loop or a dangling symlink is `error` too. As with open(), a folder is
    IsADirectoryError, and other OSErrors (a missing file, no permission) propagate unchanged.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOENT and os.path.islink(name)):
            raise error(describe_os_error(name, exc)) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
        if not stat.S_ISREG(mode):
            raise error(f"{name!r} is {kind_of(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | os.PathLike[str],
    error: type[TorchstackError] = FileKindError,
    limit: int | None = None,
) -> bytes:
    """The content of a regular file (see `open_regular`), refused when over `limit` bytes."""
    with open_regular(path, error) as handle:
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(f"{os.fspath(path)!r} is larger than {limit} bytes")
    return data
