"""A simple-index client: file lists with hashes and wheel metadata, without downloading wheels.

Remote indexes answer PEP 691 JSON or PEP 503 HTML (one Accept header asks for both, JSON
first). A wheel's core metadata comes from its PEP 658 `.metadata` file when the index
announces one and serves it, otherwise from HTTP range reads of the wheel's zip directory and
METADATA member, never from the whole wheel. A local folder (a PEP 503 tree or a flat folder of
wheels, as a path or a file:// URL) answers the same questions from disk.

Remote URLs must be https://; http:// is accepted for loopback hosts only, for every URL
fetched (redirects and file URLs included). 5xx answers, connection errors, timeouts, missed
deadlines and truncated pages are retried with exponential backoff, a bounded number of times.

Bounds: each attempt of a request has an overall deadline (`deadline`, 60 s; a whole-file
download one more second per 512 KiB it announces), whatever the server trickles; a project
page may inflate to `max_page` bytes (64 MiB), a METADATA file or member to `max_metadata`
(8 MiB), a wheel's zip directory to 64 MiB. The error says which limit was hit.

Credentials in a URL (https://user:token@host/simple/) are sent, as HTTP basic auth, to that
scheme, host and port only, and never appear in `location`, in file URLs or in messages. An
index URL with an '@' after its host part (a password with an unencoded '/', '?' or '#') is
refused before any request (see `_userinfo`).
"""

from __future__ import annotations

import dataclasses
import email.message
import email.parser
import email.policy
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar
from urllib.parse import urljoin, urlsplit
from urllib.request import url2pathname

import requests
import urllib3
from packaging.utils import canonicalize_name

from torchstack import __version__
from torchstack._files import describe_os_error, open_regular
from torchstack.index import _http, _userinfo, _zipdir
from torchstack.index._http import Transient as _Transient
from torchstack.index._http import check_url, is_loopback
from torchstack.index._userinfo import redact, without_userinfo
from torchstack.index.pages import (
    JSON_TYPE,
    NotAnIndexPageError,
    PageError,
    flat_files,
    parse_page,
)
from torchstack.index.protocol import (
    FileHashError,
    IndexAccessError,
    IndexFile,
    IndexUnreachableError,
    ProjectNotFoundError,
    RangeRequestError,
    SizeLimitError,
    WheelMetadataError,
)

__all__ = ["ACCEPT", "SimpleIndex", "check_url", "is_loopback", "redact",
           "without_userinfo"]

log = logging.getLogger(__name__)

ACCEPT = (f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
_ENCODINGS = "gzip, deflate"  # those _decoder undoes
_HEADERS = {"User-Agent": f"torchstack/{__version__}"}
_MAX_REDIRECTS = 5
_MAX_BACKOFF = 30.0
_CHUNK = 1 << 16
_DOWNLOAD_RATE = 512 << 10  # bytes a second a whole-file download is given time for
MAX_PAGE = 64 << 20
_T = TypeVar("_T")


class SimpleIndex:
    """One index: an https:// (or loopback http://) URL, a file:// URL, or a folder.

    `timeout` bounds each socket read, `deadline` each attempt of a request as a whole (None:
    no deadline); `max_page` and `max_metadata` cap what a page and a METADATA may inflate to.
    """

    def __init__(self, location: str, *, timeout: float = 30.0, deadline: float | None = 60.0,
                 retries: int = 4, backoff: float = 0.5, max_page: int = MAX_PAGE,
                 max_metadata: int = _zipdir.MAX_METADATA,
                 session: requests.Session | None = None) -> None:
        self._credentials: dict[str, tuple[str, str]] = {}
        self.location = self._own(_typed(location)) if "://" in location else location
        self.has_credentials = bool(self._credentials)
        self.timeout, self.deadline = timeout, deadline
        self.retries, self.backoff = retries, backoff
        self.max_page, self.max_metadata = max_page, max_metadata
        self.bytes_transferred = 0  # response bodies received, before content decoding
        self._folder = _local_folder(self.location)
        self._base = "" if self._folder else check_url(self.location.rstrip("/") + "/")
        self._session = session or requests.Session()
        self._local_hashes: dict[Path, str] = {}

    def files(self, project: str) -> list[IndexFile]:
        """Every file the index lists for `project`; yanked ones included, flagged."""
        if not _NAME.match(project):
            raise ProjectNotFoundError(f"{project!r} is not a valid project name")
        name = canonicalize_name(project)
        files = self._folder_files(name) if self._folder else self._page_files(name)
        files = [f if f.url == (url := self._own(f.url)) else dataclasses.replace(f, url=url)
                 for f in files]
        log.debug("%s: %d files of %s", self.location, len(files), name)
        return files

    def metadata(self, file: IndexFile) -> email.message.Message:
        """The core metadata of a wheel: its PEP 658 file, else range reads of the wheel."""
        data = self._metadata_file(file) if file.core_metadata else None
        if data is None:
            data = self._metadata_from_wheel(file)
        message = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(data)
        if not message.get("Name") or not message.get("Version"):
            raise WheelMetadataError(f"the metadata of {file.filename!r} has no Name or Version")
        return message

    def download_sha256(self, file: IndexFile) -> str:
        """The sha256 of the whole file, streamed; checked against the index's when it has one."""
        if self._is_local(file.url):
            digest = self._local_sha256(self._path_of(file.url))
        else:
            digest = self._retrying(file.url, lambda: self._download_hash(file.url))
        if file.sha256 is not None and file.sha256 != digest:
            raise FileHashError(f"{file.url!r} has sha256 {digest}, the index says {file.sha256}")
        log.debug("sha256 of %s: %s", file.url, digest)
        return digest

    def _own(self, url: str) -> str:
        """`url` without credentials, which are kept for its origin (the first ones seen)."""
        clean, credentials = _userinfo.split_userinfo(url)
        if credentials is not None:
            self._credentials.setdefault(_userinfo.origin(clean), credentials)
        return clean

    # -- file lists -----------------------------------------------------------------------

    def _folder_files(self, name: str) -> list[IndexFile]:
        assert self._folder is not None
        page = self._folder / name / "index.html"
        if os.path.lexists(page):  # a FIFO or a dangling link is named, not taken as none
            log.debug("%s: reading %s", self.location, page)
            try:
                return parse_page(name, _read_capped(page, self.max_page, "project page"),
                                  "text/html", page.as_uri())
            except PageError as exc:
                raise IndexAccessError(f"{str(page)!r}: {exc}") from exc
        found = flat_files(self._folder, name, self._local_sha256)
        if not found:
            raise ProjectNotFoundError(f"project {name!r} is not in the index folder "
                                       f"{self.location!r} (no {name}/index.html, no archives)")
        return found

    def _page_files(self, name: str) -> list[IndexFile]:
        url = self._base + name + "/"

        def attempt() -> list[IndexFile]:
            response = self._get(url, {"Accept": ACCEPT, "Accept-Encoding": _ENCODINGS})
            if response.status_code in (404, 410):
                response.close()
                raise ProjectNotFoundError(f"{url} answered HTTP {response.status_code} for "
                                           f"{name}")
            self._expect(response, 200)
            body = self._body(response, self.max_page, "project page", "max_page")
            try:
                return parse_page(name, body, response.headers.get("Content-Type", ""),
                                  response.url)
            except NotAnIndexPageError as exc:  # complete, and no retry would change it
                raise IndexAccessError(f"{response.url} answered {exc}") from exc
            except PageError as exc:
                raise _Transient(f"{response.url} answered {exc}") from exc

        return self._retrying(url, attempt)

    def _local_sha256(self, path: Path) -> str:
        if path not in self._local_hashes:
            with _open_local(path) as handle:  # a FIFO would wait, /dev/zero never end
                self._local_hashes[path] = _http.hash_stream(
                    iter(lambda: handle.read(_CHUNK), b""))
        return self._local_hashes[path]

    # -- metadata ---------------------------------------------------------------------------

    def _metadata_file(self, file: IndexFile) -> bytes | None:
        """The PEP 658 file, hash-checked; None when it is not there after all."""
        url = file.url + ".metadata"
        if self._is_local(url):
            path = self._path_of(url)
            data = (_read_capped(path, self.max_metadata, "METADATA file") if path.is_file()
                    else None)
        else:
            data = self._retrying(url, lambda: self._optional_body(url))
        if data is None:
            log.debug("%s announced but not served: reading the wheel's zip directory", url)
            return None
        actual = hashlib.sha256(data).hexdigest()
        if file.metadata_sha256 is not None and actual != file.metadata_sha256:
            raise WheelMetadataError(f"{url!r} has sha256 {actual}, the index says "
                                     f"{file.metadata_sha256}")
        return data

    def _optional_body(self, url: str) -> bytes | None:
        response = self._get(url, {"Accept-Encoding": _ENCODINGS})
        if response.status_code in (404, 410):
            response.close()
            return None
        self._expect(response, 200)
        return self._body(response, self.max_metadata, "METADATA file", "max_metadata")

    def _metadata_from_wheel(self, file: IndexFile) -> bytes:
        if not file.filename.endswith(".whl"):
            raise WheelMetadataError(f"{file.filename!r} is not a wheel and the index "
                                     "announces no metadata file for it")
        try:
            if self._is_local(file.url):
                return _zipdir.file_dist_info_metadata(self._path_of(file.url), file.project,
                                                       limit=self.max_metadata)
            return self._remote_metadata(file.url, file.project)
        except _zipdir.ZipDirectoryError as exc:
            raise WheelMetadataError(f"{file.url!r}: {exc}") from exc

    def _remote_metadata(self, url: str, project: str) -> bytes:
        """METADATA through range reads: the tail, the central directory, the member."""
        read, size, tail = self.ranges(url)
        return _zipdir.read_dist_info_metadata(read, size, tail, project,
                                               limit=self.max_metadata)

    def ranges(self, url: str) -> tuple[_zipdir.Reader, int, bytes]:
        """Range reads of a remote file: a reader of (offset, length), the file's size and its
        last `_zipdir.TAIL` bytes (fetched now). RangeRequestError when the server does not
        answer ranges with 206 and Content-Range."""

        def ranged(spec: str) -> tuple[bytes, int, int]:
            return self._retrying(url, lambda: self._range(url, spec))

        def read(offset: int, length: int) -> bytes:
            data, first, _ = ranged(f"{offset}-{offset + length - 1}")
            if first != offset:
                raise RangeRequestError(f"{url} answered bytes from {first}, not {offset}")
            return data

        tail, first, size = ranged(f"-{_zipdir.TAIL}")
        if first + len(tail) != size:
            raise RangeRequestError(f"{url} answered a suffix range with bytes "
                                    f"{first}-{first + len(tail) - 1} of {size}")
        return read, size, tail

    # -- HTTP -----------------------------------------------------------------------------

    def _retrying(self, what: str, attempt: Callable[[], _T]) -> _T:
        """attempt(), within the deadline, again after transient failures (a missed deadline
        is one), with exponential backoff."""
        last = _Transient(f"{what}: not attempted")
        for number in range(self.retries + 1):
            try:
                return _http.within(self.deadline, what, attempt)
            except _Transient as exc:
                last = exc
                if number < self.retries:
                    delay = min(self.backoff * 2 ** number, _MAX_BACKOFF)
                    log.debug("%s: %s; retrying in %.2fs", what, exc, delay)
                    time.sleep(delay)
        raise IndexAccessError(f"{last} (gave up after {self.retries + 1} attempts)") from last

    def _get(self, url: str, headers: dict[str, str]) -> requests.Response:
        """A streamed GET, redirects followed and each target checked; 5xx raises _Transient."""
        for _ in range(_MAX_REDIRECTS + 1):
            check_url(url, allow_file=False)
            try:
                response = self._session.get(url, headers={**_HEADERS, **headers},
                                             timeout=self.timeout, stream=True,
                                             allow_redirects=False,
                                             auth=self._credentials.get(_userinfo.origin(url)))
            except (requests.ConnectionError, requests.Timeout) as exc:
                unreachable = _http.unreachable(exc)
                if unreachable:
                    raise IndexUnreachableError(f"{url}: {unreachable}") from exc
                raise _Transient(f"{url}: {exc}") from exc
            except requests.RequestException as exc:  # an unusable URL: no retry helps
                raise IndexAccessError(f"{url!r}: {exc}") from exc
            _http.watch(response)
            log.debug("GET %s%s -> HTTP %s", url, f" ({headers['Range']})" if "Range" in headers
                      else "", response.status_code)
            if response.is_redirect:
                response.close()
                url = self._own(urljoin(url, response.headers["Location"]))
                continue
            if response.status_code >= 500:
                response.close()
                raise _Transient(f"{url} answered HTTP {response.status_code}")
            return response
        raise IndexAccessError(f"{url!r}: more than {_MAX_REDIRECTS} redirects")

    @staticmethod
    def _expect(response: requests.Response, status: int) -> None:
        if response.status_code != status:
            response.close()
            hint = " (credentials needed or refused)" if response.status_code in (401, 403) else ""
            raise IndexAccessError(f"{response.url} answered HTTP {response.status_code}, "
                                   f"{status} expected{hint}")

    def _body(self, response: requests.Response, limit: int, what: str, name: str) -> bytes:
        """The decoded body, read no further than `limit` bytes; truncation and read errors
        raise _Transient, a larger body SizeLimitError naming the limit."""
        pieces, size = [], 0
        for piece in self._decoded_chunks(response):
            size += len(piece)
            if size > limit:
                response.close()
                raise SizeLimitError(f"{response.url}: the {what} is larger than the limit of "
                                     f"{_http.size_text(limit)} ({name}); not read further")
            pieces.append(piece)
        return b"".join(pieces)

    def _decoded_chunks(self, response: requests.Response) -> Iterator[bytes]:
        return _http.decoded(self._raw_chunks(response, None),
                             response.headers.get("Content-Encoding", ""), response.url)

    def _raw_chunks(self, response: requests.Response, limit: int | None) -> Iterator[bytes]:
        """The body as received, counted into bytes_transferred."""
        received = 0
        try:
            for chunk in response.raw.stream(_CHUNK, decode_content=False):
                _http.check(response.url)
                received += len(chunk)
                self.bytes_transferred += len(chunk)
                if limit is not None and received > limit:
                    raise IndexAccessError(f"{response.url} sent more than the {limit} bytes "
                                           "asked for")
                yield chunk
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _Transient(f"{response.url}: body cut off after {received} bytes ({exc})") \
                from exc
        finally:
            response.close()

    def _download_hash(self, url: str) -> str:
        response = self._get(url, {"Accept-Encoding": "identity"})
        self._expect(response, 200)
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit():
            _http.extend(int(announced) / _DOWNLOAD_RATE)
        return _http.hash_stream(self._decoded_chunks(response))

    def _range(self, url: str, spec: str) -> tuple[bytes, int, int]:
        """One range read: (data, first byte, file size); requires 206 with Content-Range."""
        response = self._get(url, {"Range": f"bytes={spec}", "Accept-Encoding": "identity"})
        if response.status_code == 200:
            response.close()  # before the body: it may be gigabytes
            raise RangeRequestError(
                f"{urlsplit(url).netloc} does not do range requests: it answered "
                f"'Range: bytes={spec}' for {url} with the whole file (HTTP 200); without a "
                "PEP 658 metadata file the wheel's metadata cannot be read")
        self._expect(response, 206)
        found = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if found is None:
            response.close()
            raise RangeRequestError(f"{url} answered 206 without a usable Content-Range "
                                    f"({response.headers.get('Content-Range')!r})")
        first, last, size = (int(group) for group in found.groups())
        data = b"".join(self._raw_chunks(response, last - first + 1))
        if len(data) != last - first + 1:
            raise _Transient(f"{url}: {len(data)} of {last - first + 1} bytes of a range")
        return data, first, size

    def _is_local(self, url: str) -> bool:
        """Whether `url` is read from disk: file:// URLs, of local indexes only."""
        if urlsplit(url).scheme != "file":
            return False
        check_url(url, allow_file=self._folder is not None)
        return True

    @staticmethod
    def _path_of(url: str) -> Path:
        return Path(url2pathname(urlsplit(url).path))


def _typed(location: str) -> str:
    """An index URL as typed, refused before any request when an '@' follows its host part."""
    if _userinfo.misplaced(location):
        raise IndexAccessError(
            f"{_userinfo.redact_url(location)!r}: an '@' after the host part; if the URL "
            "holds user:password@, percent-encode each '/', '?', '#' and '@' in them (%2F, "
            "%3F, %23, %40); an '@' of the path, as %40")
    return location


def _local_folder(location: str) -> Path | None:
    """The folder of a local index (a path or file:// URL), None for a remote one."""
    if location.startswith("file:"):
        folder = Path(url2pathname(urlsplit(location).path))
    elif "://" in location:
        return None
    else:
        folder = Path(location).absolute()
    if not folder.is_dir():
        raise IndexAccessError(f"index folder {location!r} does not exist")
    return folder


def _read_capped(path: Path, limit: int, what: str) -> bytes:
    """A local file's bytes; SizeLimitError when it is larger than `limit`."""
    with _open_local(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise SizeLimitError(f"{str(path)!r}: the {what} is larger than the limit of "
                             f"{_http.size_text(limit)}; not read further")
    return data


def _open_local(path: Path) -> BinaryIO:
    """A file of a local index, opened only when it is a regular one; IndexAccessError
    naming it otherwise (a FIFO, a device, a dangling symlink, a missing file)."""
    try:
        return open_regular(path, IndexAccessError)
    except OSError as exc:
        raise IndexAccessError(describe_os_error(str(path), exc)) from exc
