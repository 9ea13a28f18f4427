"""A simple index on 127.0.0.1 for tests and benchmarks, with faults to inject.

    from support.indexserver import IndexServer

    with IndexServer() as server:                       # port 0: a free port; stops on exit
        server.add_wheel(path)                           # a real or synthetic wheel file
        server.add("torch", 'torch-2.0"x-py3-none-any.whl', data=b"...")  # any filename at all
        index = SimpleIndex(server.index_url)            # http://127.0.0.1:PORT/simple/

URLs. `index_url` is the PEP 503 root; project pages are /simple/<normalized>/ (without the
slash: a 301 to it), files /files/<percent-quoted filename>, metadata files the same plus
`.metadata`. Pages link files relatively (`../../files/...`). A page answers PEP 691 JSON
(`application/vnd.pypi.simple.v1+json`, api-version 1.1, with sizes) or PEP 503 HTML, chosen by
the q-values of the request's Accept header (no Accept header: HTML). Files answer single
Range requests with 206 and Content-Range (416 when unsatisfiable).

Per file, as keywords of add() and add_wheel():
- yanked: False, True, or a reason (a str)
- requires_python: None or a specifier such as ">=3.9"
- metadata: "announced" (default: served, announced with its sha256), "unhashed" (announced
  without a hash), "unannounced" (served, not announced), "missing" (announced, answers 404),
  "wrong-hash" (served, announced with a wrong sha256), "none" (neither). add() takes the
  metadata bytes as `metadata_bytes` (default: the zip's *.dist-info/METADATA, if any)
- sha256: "right" (default), "wrong" (the index lists a wrong hash), "none" (no hash listed)

Server-wide switches (attributes, change them at any time):
- formats: the page formats offered, ("json", "html") by default; ("html",) makes an HTML-only
  index, ("json",) a JSON-only one (406 when the client accepts neither)
- html_hashes: False drops the #sha256= fragments from HTML pages
- ranges: False answers Range requests with 200 and the whole file (still saying
  Accept-Ranges: bytes), like a server without range support
- gzip: True compresses pages and metadata files when the client accepts gzip
- credentials: None, or (user, password) that every request must carry as HTTP basic auth
  (401 without them)

Faults on one URL path (page_path(), file_path(), metadata_path() give them), for the next
`times` requests (None: every request):
- fail(path, times, status=500): answer `status` with a short body
- delay(path, seconds, times=None): wait before answering (interrupted when the server stops)
- truncate(path, times=None): send the first half of the body, with a matching
  Content-Length (a well-formed answer with a truncated JSON or HTML page)
- cut(path, times=None): announce the whole body, send half, close the connection
- redirect(path, location, times=None): answer 301 to `location` (any URL)
- trickle(path, interval, times=None, headers=False): send the body (with `headers`, the status
  line and headers too) one byte every `interval` seconds, like a server that never quite stalls
- answer(path, status, body, content_type, times=None): answer this instead (a login page, a
  page of any JSON)
- gzip_bomb(path, size, times=None): answer 200 with a gzip body (Content-Encoding: gzip, a JSON
  Content-Type) that inflates to `size` zero bytes; about a thousandth of that is sent

A wheel whose METADATA is a deflate bomb: `metadata_bomb(project, version, inflated, claimed)`
gives its bytes; serve it with add(..., metadata="none") so that clients read it by ranges.

What happened: `bytes_sent` counts response body bytes written to sockets, `hits` lists every
request as a Hit (method, path, status, range, accept, sent: the body bytes the answer carries),
recorded when its headers go out; `hits_of(path)` gives those of one path.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import io
import json
import re
import struct
import sys
import threading
import zipfile
import zlib
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO
from urllib.parse import quote, unquote, urlsplit

from packaging.utils import canonicalize_name, parse_wheel_filename

from support.wheelbuild import sha256 as file_sha256

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPE = "text/html"
_MEDIA = {"json": (JSON_TYPE, "application/vnd.pypi.simple.latest+json"),
          "html": ("application/vnd.pypi.simple.v1+html",
                   "application/vnd.pypi.simple.latest+html", HTML_TYPE)}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_WRONG = "0" * 64
_CHUNK = 1 << 16


@dataclass
class ServedFile:
    """One file of the index and how the index presents it."""

    project: str
    filename: str
    path: Path | None
    data: bytes | None
    sha256: str
    size: int
    metadata_bytes: bytes | None
    yanked: bool | str = False
    requires_python: str | None = None
    metadata: str = "announced"
    hash_listed: str = "right"
    upload_time: str | None = None  # PEP 700, on JSON pages

    def open(self) -> BinaryIO:
        return open(self.path, "rb") if self.path is not None else io.BytesIO(self.data or b"")


@dataclass(frozen=True)
class Hit:
    """One request the server answered."""

    method: str
    path: str
    status: int
    range: str | None
    accept: str | None
    sent: int
    authorization: str | None = None


@dataclass
class _Fault:
    kind: str
    times: int | None
    status: int = 500
    seconds: float = 0.0
    location: str = ""
    body: bytes = b""
    content_type: str = ""
    headers: bool = False


@dataclass
class _State:
    files: dict[str, ServedFile] = field(default_factory=dict)  # by filename
    faults: dict[str, list[_Fault]] = field(default_factory=dict)  # by unquoted path
    hits: list[Hit] = field(default_factory=list)
    bytes_sent: int = 0


class IndexServer:
    """The threaded index server; see the module docstring."""

    def __init__(self, wheels: Iterable[Path] = ()) -> None:
        self.formats: tuple[str, ...] = ("json", "html")
        self.html_hashes = True
        self.ranges = True
        self.gzip = False
        self.credentials: tuple[str, str] | None = None
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._state = _State()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.index = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        for wheel in wheels:
            self.add_wheel(wheel)

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> IndexServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def index_url(self) -> str:
        return self.url + "/simple/"

    # -- content ------------------------------------------------------------------------------

    def add_wheel(self, path: Path, *, yanked: bool | str = False,
                  requires_python: str | None = None, metadata: str = "announced",
                  sha256: str = "right", upload_time: str | None = None) -> ServedFile:
        """Serve a wheel file (read from disk when asked, never held in memory)."""
        project = str(parse_wheel_filename(path.name.replace("%2B", "+"))[0])
        return self._add(ServedFile(project, path.name, path, None, file_sha256(path),
                                    path.stat().st_size, _wheel_metadata(path), yanked,
                                    requires_python, metadata, sha256,
                                    upload_time=upload_time))

    def add(self, project: str, filename: str, data: bytes, *,
            metadata_bytes: bytes | None = None, yanked: bool | str = False,
            requires_python: str | None = None, metadata: str = "announced",
            sha256: str = "right") -> ServedFile:
        """Serve `data` as `filename` of `project`; the name may hold any character."""
        if metadata_bytes is None and metadata != "none":
            metadata_bytes = _wheel_metadata(data)
        return self._add(ServedFile(canonicalize_name(project), filename, None, data,
                                    hashlib.sha256(data).hexdigest(), len(data), metadata_bytes,
                                    yanked, requires_python, metadata, sha256))

    def _add(self, served: ServedFile) -> ServedFile:
        with self._lock:
            self._state.files[served.filename] = served
        return served

    def files_of(self, project: str) -> list[ServedFile]:
        name = canonicalize_name(project)
        with self._lock:
            return [f for f in self._state.files.values() if f.project == name]

    def file(self, filename: str) -> ServedFile | None:
        with self._lock:
            return self._state.files.get(filename)

    @staticmethod
    def page_path(project: str) -> str:
        return f"/simple/{canonicalize_name(project)}/"

    @staticmethod
    def file_path(filename: str) -> str:
        return "/files/" + quote(filename, safe="")

    def metadata_path(self, filename: str) -> str:
        return self.file_path(filename) + ".metadata"

    # -- faults -------------------------------------------------------------------------------

    def fail(self, path: str, times: int | None, status: int = 500) -> None:
        self._fault(path, _Fault("fail", times, status=status))

    def delay(self, path: str, seconds: float, times: int | None = None) -> None:
        self._fault(path, _Fault("delay", times, seconds=seconds))

    def truncate(self, path: str, times: int | None = None) -> None:
        self._fault(path, _Fault("truncate", times))

    def cut(self, path: str, times: int | None = None) -> None:
        self._fault(path, _Fault("cut", times))

    def redirect(self, path: str, location: str, times: int | None = None) -> None:
        self._fault(path, _Fault("redirect", times, location=location))

    def trickle(self, path: str, interval: float, times: int | None = None,
                headers: bool = False) -> None:
        self._fault(path, _Fault("trickle", times, seconds=interval, headers=headers))

    def answer(self, path: str, status: int, body: bytes, content_type: str,
               times: int | None = None) -> None:
        self._fault(path, _Fault("answer", times, status=status, body=body,
                                 content_type=content_type))

    def gzip_bomb(self, path: str, size: int, times: int | None = None) -> None:
        self._fault(path, _Fault("answer", times, status=200, body=gzip_zeros(size),
                                 content_type=JSON_TYPE, location="gzip"))

    def _fault(self, path: str, fault: _Fault) -> None:
        with self._lock:
            self._state.faults.setdefault(unquote(path), []).append(fault)

    def take_faults(self, path: str) -> list[_Fault]:
        """The faults that apply to this request of `path`, each counted down."""
        with self._lock:
            found = [f for f in self._state.faults.get(unquote(path), [])
                     if f.times is None or f.times > 0]
            for fault in found:
                if fault.times is not None:
                    fault.times -= 1
            return found

    # -- accounting ---------------------------------------------------------------------------

    @property
    def bytes_sent(self) -> int:
        with self._lock:
            return self._state.bytes_sent

    @property
    def hits(self) -> list[Hit]:
        with self._lock:
            return list(self._state.hits)

    def hits_of(self, path: str) -> list[Hit]:
        return [h for h in self.hits if unquote(h.path) == unquote(path)]

    def record(self, hit: Hit) -> None:
        with self._lock:
            self._state.hits.append(hit)

    def count(self, sent: int) -> None:
        with self._lock:
            self._state.bytes_sent += sent

    # -- pages --------------------------------------------------------------------------------

    def json_page(self, project: str) -> bytes:
        files = [self._json_file(f) for f in self.files_of(project)]
        page = {"meta": {"api-version": "1.1"}, "name": project, "files": files}
        return json.dumps(page).encode()

    def _json_file(self, served: ServedFile) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "filename": served.filename, "url": "../../files/" + quote(served.filename, safe=""),
            "hashes": {} if served.hash_listed == "none" else {"sha256": _listed_hash(served)},
            "size": served.size, "yanked": served.yanked,
        }
        if served.requires_python:
            entry["requires-python"] = served.requires_python
        if served.upload_time:
            entry["upload-time"] = served.upload_time
        announced = _announced_metadata(served)
        if announced is not None:
            value: Any = {"sha256": announced} if announced else True
            entry["core-metadata"] = entry["dist-info-metadata"] = value
        return entry

    def html_page(self, project: str) -> bytes:
        links = [self._html_link(f) for f in self.files_of(project)]
        head = f"<!DOCTYPE html>\n<html><head><title>Links for {html.escape(project)}</title>"
        return (head + "</head><body>\n" + "<br/>\n".join(links) + "\n</body></html>\n").encode()

    def _html_link(self, served: ServedFile) -> str:
        href = "../../files/" + quote(served.filename, safe="")
        if self.html_hashes and served.hash_listed != "none":
            href += "#sha256=" + _listed_hash(served)
        attributes = [f'href="{html.escape(href)}"']
        if served.requires_python:
            attributes.append(f'data-requires-python="{html.escape(served.requires_python)}"')
        if served.yanked is not False:
            reason = served.yanked if isinstance(served.yanked, str) else ""
            attributes.append(f'data-yanked="{html.escape(reason)}"')
        announced = _announced_metadata(served)
        if announced is not None:
            value = f"sha256={announced}" if announced else "true"
            attributes += [f'data-core-metadata="{value}"', f'data-dist-info-metadata="{value}"']
        return f"<a {' '.join(attributes)}>{html.escape(served.filename)}</a>"

    def root_page(self, kind: str) -> bytes:
        with self._lock:
            projects = sorted({f.project for f in self._state.files.values()})
        if kind == "json":
            return json.dumps({"meta": {"api-version": "1.1"},
                               "projects": [{"name": p} for p in projects]}).encode()
        return ("<!DOCTYPE html>\n<html><body>\n" + "\n".join(
            f'<a href="{p}/">{p}</a>' for p in projects) + "\n</body></html>\n").encode()

    def negotiate(self, accept: str | None) -> str | None:
        """The page format for an Accept header: "json", "html", or None (406)."""
        if not accept:
            return "html" if "html" in self.formats else None
        quality = {kind: _quality(accept, _MEDIA[kind]) for kind in self.formats}
        best = max(self.formats, key=lambda kind: quality[kind])
        return best if quality[best] > 0 else None


def _listed_hash(served: ServedFile) -> str:
    return _WRONG if served.hash_listed == "wrong" else served.sha256


def _announced_metadata(served: ServedFile) -> str | None:
    """The sha256 to announce ("" for no hash), or None when not announced."""
    if served.metadata in ("unannounced", "none"):
        return None
    if served.metadata in ("unhashed", "missing"):
        return ""
    if served.metadata_bytes is None:
        return None
    if served.metadata == "wrong-hash":
        return _WRONG
    return hashlib.sha256(served.metadata_bytes).hexdigest()


def _quality(accept: str, media: tuple[str, ...]) -> float:
    best = 0.0
    for item in accept.split(","):
        kind, *params = (part.strip() for part in item.split(";"))
        q = next((float(p[2:]) for p in params if p.startswith("q=")), 1.0)
        if kind in media or kind == "*/*" or kind == media[-1].split("/")[0] + "/*":
            best = max(best, q)
    return best


def _wheel_metadata(source: Path | bytes) -> bytes | None:
    """The *.dist-info/METADATA of a zip, or None when it is not one or has none."""
    try:
        with zipfile.ZipFile(source if isinstance(source, Path) else io.BytesIO(source)) as zf:
            names = [n for n in zf.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            return zf.read(names[0]) if names else None
    except zipfile.BadZipFile:
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThreadingHTTPServer

    @property
    def index(self) -> IndexServer:
        return self.server.index  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        try:
            self._get()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            self.close_connection = True

    def _get(self) -> None:
        path = urlsplit(self.path).path
        if not self._authorized():
            self._answer(401, b"credentials needed\n", "text/plain",
                         {"WWW-Authenticate": 'Basic realm="index"'})
            return
        faults = self.index.take_faults(path)
        for fault in faults:
            if fault.kind == "delay" and self.index.stopping.wait(fault.seconds):
                return
        self._trickle = next((f for f in faults if f.kind == "trickle"), None)
        failure = next((f for f in faults if f.kind in ("fail", "redirect", "answer")), None)
        if failure is not None and failure.kind == "fail":
            self._answer(failure.status, b"injected failure\n", "text/plain")
        elif failure is not None and failure.kind == "answer":
            extra = {"Content-Encoding": failure.location} if failure.location else {}
            self._answer(failure.status, failure.body, failure.content_type, extra)
        elif failure is not None:
            self._answer(301, b"", "text/plain", {"Location": failure.location})
        else:
            self._route(unquote(path), {f.kind for f in faults})

    def _authorized(self) -> bool:
        if self.index.credentials is None:
            return True
        expected = base64.b64encode(":".join(self.index.credentials).encode()).decode()
        return self.headers.get("Authorization") == f"Basic {expected}"

    def flush_headers(self) -> None:
        trickle = getattr(self, "_trickle", None)
        buffer: list[bytes] = getattr(self, "_headers_buffer", [])
        if trickle is not None and trickle.headers and buffer:
            data = b"".join(buffer)
            buffer.clear()
            self._slowly(data, trickle.seconds)
        else:
            super().flush_headers()

    def _slowly(self, data: bytes, interval: float) -> bool:
        """Write `data` a byte at a time, `interval` seconds apart; False when cut off."""
        for position in range(len(data)):
            if self.index.stopping.wait(interval):
                return False
            self.wfile.write(data[position:position + 1])
        return True

    def _route(self, path: str, faults: AbstractSet[str]) -> None:
        if path == "/simple/":
            kind = self.index.negotiate(self.headers.get("Accept"))
            self._page(self.index.root_page(kind or "html"), kind, faults)
        elif path.startswith("/simple/"):
            project = path[len("/simple/"):]
            if not project.endswith("/"):
                self._answer(301, b"", "text/plain", {"Location": f"/simple/{project}/"})
            elif not self.index.files_of(project.rstrip("/")):
                self._answer(404, b"no such project\n", "text/plain")
            else:
                self._project(project.rstrip("/"), faults)
        elif path.startswith("/files/"):
            self._file(path[len("/files/"):], faults)
        else:
            self._answer(404, b"not found\n", "text/plain")

    def _project(self, project: str, faults: AbstractSet[str]) -> None:
        kind = self.index.negotiate(self.headers.get("Accept"))
        if kind is None:
            self._answer(406, b"no acceptable page format\n", "text/plain")
            return
        page = self.index.json_page(project) if kind == "json" else self.index.html_page(project)
        self._page(page, kind, faults)

    def _page(self, body: bytes, kind: str | None, faults: AbstractSet[str]) -> None:
        content_type = JSON_TYPE if kind == "json" else f"{HTML_TYPE}; charset=utf-8"
        self._compressible(body, content_type, faults)

    def _compressible(self, body: bytes, content_type: str, faults: AbstractSet[str]) -> None:
        headers = {"Vary": "Accept, Accept-Encoding"}
        if self.index.gzip and "gzip" in (self.headers.get("Accept-Encoding") or ""):
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        self._answer(200, body, content_type, headers, faults)

    def _file(self, name: str, faults: AbstractSet[str]) -> None:
        base = name[:-len(".metadata")] if name.endswith(".metadata") else name
        served = self.index.file(base)
        if served is None and self.index.file(name) is not None:
            served, base = self.index.file(name), name
        if served is None:
            self._answer(404, b"no such file\n", "text/plain")
        elif base != name:
            self._metadata(served, faults)
        else:
            self._content(served, faults)

    def _metadata(self, served: ServedFile, faults: AbstractSet[str]) -> None:
        if served.metadata in ("missing", "none") or served.metadata_bytes is None:
            self._answer(404, b"no metadata file\n", "text/plain")
        else:
            self._compressible(served.metadata_bytes, "application/octet-stream", faults)

    def _content(self, served: ServedFile, faults: AbstractSet[str]) -> None:
        spec = self.headers.get("Range")
        if spec is None or not self.index.ranges:
            self._stream(200, served, 0, served.size, {}, faults)
            return
        found = _RANGE.match(spec.strip())
        bounds = _bounds(found, served.size) if found else None
        if bounds is None:
            self._answer(416, b"", "text/plain", {"Content-Range": f"bytes */{served.size}"})
            return
        first, last = bounds
        self._stream(206, served, first, last - first + 1,
                     {"Content-Range": f"bytes {first}-{last}/{served.size}"}, faults)

    def _stream(self, status: int, served: ServedFile, offset: int, length: int,
                headers: dict[str, str], faults: AbstractSet[str]) -> None:
        """Send `length` bytes of the file from `offset`, read in chunks."""
        headers = {"Accept-Ranges": "bytes", **headers}
        length = self._head(status, length, "application/octet-stream", headers, faults)
        with served.open() as handle:
            handle.seek(offset)
            while length > 0:
                chunk = handle.read(min(_CHUNK, length))
                if not self._write(chunk):
                    break
                length -= len(chunk)

    def _answer(self, status: int, body: bytes, content_type: str,
                headers: dict[str, str] | None = None,
                faults: AbstractSet[str] = frozenset()) -> None:
        length = self._head(status, len(body), content_type, headers or {}, faults)
        self._write(body[:length])

    def _write(self, chunk: bytes) -> bool:
        """Write and count a piece of body (counted first: the client may read it at once)."""
        self.index.count(len(chunk))
        trickle = getattr(self, "_trickle", None)
        try:
            if trickle is not None:
                if not self._slowly(chunk, trickle.seconds):
                    self.close_connection = True
                    return False
            else:
                self.wfile.write(chunk)
        except OSError:  # the client hung up (as it should on a 200 to a range request)
            self.index.count(-len(chunk))
            self.close_connection = True
            return False
        return True

    def _head(self, status: int, length: int, content_type: str, headers: dict[str, str],
              faults: AbstractSet[str]) -> int:
        """Record the hit, send status line and headers; the number of body bytes to send."""
        announced = length // 2 if "truncate" in faults else length
        send = length // 2 if faults & {"truncate", "cut"} else length
        self.index.record(Hit("GET", self.path, status, self.headers.get("Range"),
                              self.headers.get("Accept"), send,
                              self.headers.get("Authorization")))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(announced))
        for key, value in headers.items():
            self.send_header(key, value)
        if "cut" in faults:
            self.close_connection = True
        self.end_headers()
        return send


def _bounds(found: re.Match[str], size: int) -> tuple[int, int] | None:
    """First and last byte of a single range, or None when unsatisfiable."""
    start, end = found.group(1), found.group(2)
    if not start and not end:
        return None
    if not start:  # a suffix: the last `end` bytes
        return (max(0, size - int(end)), size - 1) if int(end) > 0 and size else None
    first = int(start)
    last = min(int(end), size - 1) if end else size - 1
    return (first, last) if first <= last else None


# -- bombs ----------------------------------------------------------------------------------------

_BLOCK = 1 << 20


@functools.lru_cache(maxsize=8)
def _deflated_zeros(size: int) -> tuple[bytes, int]:
    """A raw deflate stream of `size` zero bytes (a whole number of MiB, at least one), built from
    one compressed block repeated (full flushes make the blocks alike), and its CRC-32."""
    blocks = max(1, size // _BLOCK)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = compressor.compress(bytes(_BLOCK)) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(bytes(_BLOCK)) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(blocks):
        crc = zlib.crc32(bytes(_BLOCK), crc)
    return first + again * (blocks - 1) + compressor.flush(), crc


def gzip_zeros(size: int) -> bytes:
    """A gzip member that inflates to `size` zero bytes (rounded down to whole MiB)."""
    data, crc = _deflated_zeros(size)
    inflated = max(1, size // _BLOCK) * _BLOCK
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + data
            + struct.pack("<2L", crc, inflated & 0xFFFFFFFF))


def metadata_bomb(project: str, version: str, inflated: int, claimed: int | None = None) -> bytes:
    """A one-member wheel whose `*.dist-info/METADATA` is deflated zeros that inflate to
    `inflated` bytes (whole MiB); its zip headers say `claimed` (default: the truth)."""
    data, crc = _deflated_zeros(inflated)
    size = max(1, inflated // _BLOCK) * _BLOCK if claimed is None else claimed
    name = f"{project}-{version}.dist-info/METADATA".encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(data), size,
                        len(name), 0) + name
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(data),
                          size, len(name), 0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central),
                      len(local) + len(data), 0)
    return local + data + central + end
