"""The one reader of torchstack: regular files only, and never more than a bound.

`open(path)` of a FIFO waits for a writer, and reading /dev/zero never ends. Every file that
torchstack reads from a wheel's folder, an installation, a module tree or the command line is
opened here: without blocking (O_NONBLOCK), then checked with fstat on the open descriptor, so
that a file swapped for a FIFO between a check and the open is refused all the same. Each kind
of file is read up to its bound (the MAX_* constants below), and so is each member of a wheel's
zip: a 2 MB wheel can hold a member that inflates to gigabytes, whatever size it declares.
test/core/test_readers.py fails when a module of torchstack reads a file any other way.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, TYPE_CHECKING, BinaryIO

from torchstack.errors import TorchstackError

if TYPE_CHECKING:  # zipfile (with bz2, lzma, shutil) is imported by whoever opens a wheel
    import zipfile

# Bounds, one per kind of file: each about a hundred times the largest real file of its kind,
# so that no real input is refused and no hostile one (a link to /dev/zero, a 2 GB file where
# a few lines belong) is held in memory.
MAX_LIST = 1 << 20  # a --with-file list of requirements, one a line: a few hundred bytes
MAX_CONFIG = 1 << 20  # pip.conf, pyvenv.cfg, ld.so.conf, CUDA's version.json/version.txt,
# torchstack-venv.json: a few kB (a venv record pins a few dozen distributions)
MAX_METADATA = 8 << 20  # METADATA, PKG-INFO, a version.py: a few kB; torch's METADATA is 3 kB
MAX_RECORD = 64 << 20  # RECORD, installed-files.txt, top_level.txt: torch's RECORD is 1.3 MB
MAX_CATALOG = 64 << 20  # a catalog file of index answers: the shipped ones are 60-130 kB
MAX_EASYCONFIG = 8 << 20  # an easyconfig: upstream's largest, PyTorch's, are about 30 kB
MAX_MODULE_FILE = 8 << 20  # a Lua or Tcl module file: EasyBuild's are a few kB
MAX_SOURCE = 64 << 20  # a Python source compiled to bytecode: the largest real ones are ~5 MB
MAX_SHARED_OBJECT = 4 << 30  # a wheel member inflated to read its ELF: libcublasLt is 0.5 GB
_CHUNK = 1 << 20  # read in steps, so that a bound of gigabytes is never allocated at once

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

    A symlink loop, a dangling symlink or a socket is `error` too. As with open(), a folder is
    IsADirectoryError, and other OSErrors (a missing file, no permission) propagate unchanged.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOENT and os.path.islink(name)):
            raise error(describe_os_error(name, exc)) from exc
        if exc.errno == errno.ENXIO:  # a socket cannot be opened at all: say what it is
            raise error(f"{name!r} is {kind_of(os.stat(name).st_mode)}, not a regular "
                        "file") from exc
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
    """The content of a regular file (see `open_regular`), refused when over `limit` bytes.

    Every caller passes a bound (test/core/test_readers.py checks that); None is for tests.
    """
    with open_regular(path, error) as handle:
        data = handle.read() if limit is None else _read_bounded(handle, limit)
    if data is None:
        raise error(f"{os.fspath(path)!r} is larger than {limit} bytes")
    return data


def read_text(
    path: str | os.PathLike[str],
    limit: int,
    error: type[TorchstackError] = FileKindError,
    *,
    replace: bool = False,
) -> str:
    """A regular file's UTF-8 text (see `read_regular`); `error` naming the first byte that
    is no UTF-8, or with `replace` that byte replaced, where the text is only informational."""
    data = read_regular(path, error, limit)
    if replace:
        return data.decode("utf-8", "replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{os.fspath(path)!r} is not UTF-8 text (byte {exc.start} is "
                    f"{data[exc.start]:#04x})") from None


def read_tail(
    path: str | os.PathLike[str], limit: int, error: type[TorchstackError] = FileKindError
) -> str:
    """The UTF-8 text of a regular file's last `limit` bytes (all of it when smaller), bad
    bytes replaced: for logs that grow, whose end says what happened."""
    with open_regular(path, error) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            handle.seek(size - limit)
        data = handle.read(limit)  # a log still being written may have grown since
    return data.decode("utf-8", "replace")


def read_member(
    archive: zipfile.ZipFile,
    name: str,
    limit: int,
    error: type[TorchstackError] = FileKindError,
    label: str = "",
) -> bytes:
    """A member of a zip archive (`label` names it in errors), inflated up to `limit` bytes."""
    where = f"{label!r}: member {name!r}"
    _check_declared(archive, name, limit, error, where)
    try:
        with archive.open(name) as member:
            data = _read_bounded(member, limit)
    except _member_errors() as exc:
        raise error(f"{where} cannot be read: {exc}") from exc
    if data is None:
        raise error(f"{where} inflates to more than {limit} bytes; not read further")
    return data


def spool_member(
    archive: zipfile.ZipFile,
    name: str,
    target: BinaryIO,
    limit: int,
    error: type[TorchstackError] = FileKindError,
    label: str = "",
) -> None:
    """A member of a zip archive copied to `target`, refused when it inflates over `limit`."""
    where = f"{label!r}: member {name!r}"
    _check_declared(archive, name, limit, error, where)
    written = 0
    try:
        with archive.open(name) as member:
            while written <= limit:
                chunk = member.read(min(_CHUNK, limit + 1 - written))
                if not chunk:
                    return
                target.write(chunk)
                written += len(chunk)
    except _member_errors() as exc:
        raise error(f"{where} cannot be read: {exc}") from exc
    raise error(f"{where} inflates to more than {limit} bytes; not read further")


def _member_errors() -> tuple[type[BaseException], ...]:
    """What reading a member of a damaged zip raises: bad CRC, truncated data, a corrupt
    deflate stream, a compression method zipfile lacks, an encrypted member. A function, so
    that only a wheel's reader imports zipfile (an `except` clause is evaluated only when
    something was raised)."""
    import zipfile
    import zlib

    return (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error,
            NotImplementedError, RuntimeError)


def _check_declared(archive: zipfile.ZipFile, name: str, limit: int,
                    error: type[TorchstackError], where: str) -> None:
    """Refuse at once a member that says it is too large; one that lies is stopped reading."""
    declared = archive.getinfo(name).file_size
    if declared > limit:
        raise error(f"{where} is {declared} bytes, over the bound of {limit} bytes")


def _read_bounded(stream: IO[bytes], limit: int) -> bytes | None:
    """All of `stream`, or None once it has given more than `limit` bytes."""
    data = bytearray()
    while len(data) <= limit:
        chunk = stream.read(min(_CHUNK, limit + 1 - len(data)))
        if not chunk:
            return bytes(data)
        data += chunk
    return None
