"""HTTP for the index client: its errors, the URL policy, and the bounds of one
exchange (an overall deadline, a cap on what a body inflates to).

requests' timeout bounds each socket read, not an answer: a server that trickles a byte every
few seconds (into the body, or the status line and headers) would hold a read open for ever.
`within` runs one attempt in a daemon thread and stops waiting for it at its deadline; the
attempt's connection is then shut down, so its thread ends at its next read (one still reading
a status line or headers ends when they are complete, or at the per-read timeout, and nobody
waits for it). Content-Encoding
is undone in bounded pieces, so that the caller can stop at its size cap whatever a few
compressed bytes would inflate to.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar
from urllib.parse import urlsplit

import requests
import urllib3

from torchstack.index._userinfo import redact_url
from torchstack.index.protocol import IndexAccessError, InsecureURLError

_T = TypeVar("_T")
_PIECE = 1 << 20  # the most one step of inflation produces


class EncodingError(IndexAccessError):
    """A Content-Encoding that torchstack does not undo."""


def is_loopback(host: str) -> bool:
    """Whether `host` (as urlsplit's hostname gives it) names this machine."""
    if host.rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, *, allow_file: bool = False) -> str:
    """`url` itself when it may be fetched: https://, http:// on loopback, file:// if allowed."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError as exc:  # an unclosed IPv6 bracket, a port that is no number
        raise IndexAccessError(f"{redact_url(url)!r} is not a usable URL ({exc})") from exc
    if (parts.scheme == "https" and host) or (parts.scheme == "http" and is_loopback(host)):
        return url
    if parts.scheme == "file" and allow_file:
        return url
    also = ", file:// for local indexes" if allow_file else ""
    raise InsecureURLError(f"{redact_url(url)!r} refused: remote indexes must use https:// "
                           f"(http:// only on loopback hosts{also})")


class Transient(Exception):
    """A failure worth another attempt: 5xx, connection error, timeout, deadline, truncation."""


class _Attempt:
    """One attempt's deadline and connection, shared by the waiting and the working thread."""

    def __init__(self, seconds: float) -> None:
        self.ends = time.monotonic() + seconds
        self.cancelled = False
        self.response: requests.Response | None = None

    def cancel(self) -> None:
        """Stop the attempt: its next read raises (the socket's, or ours between chunks)."""
        self.cancelled = True
        response = self.response  # (a Response is false when its status is 4xx or 5xx)
        connection = getattr(response.raw, "connection", None) if response is not None else None
        sock = getattr(connection, "sock", None)
        if isinstance(sock, socket.socket):
            # socket.socket's own shutdown: an SSLSocket's would drop its state under a read
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Outcome(Generic[_T]):
    def __init__(self) -> None:
        self.value: _T | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


_local = threading.local()


def within(seconds: float | None, what: str, work: Callable[[], _T]) -> _T:
    """work(), or Transient naming the deadline when it has not returned after `seconds`
    (plus what `extend` added). None or 0: no deadline, work() runs in this thread."""
    if not seconds:
        return work()
    attempt = _Attempt(seconds)
    outcome: _Outcome[_T] = _Outcome()

    def run() -> None:
        _local.attempt = attempt
        try:
            outcome.value = work()
        except BaseException as exc:  # handed to the waiting thread
            outcome.error = exc
        finally:
            outcome.done.set()

    threading.Thread(target=run, name="torchstack-request", daemon=True).start()
    try:
        while not outcome.done.wait(max(0.0, attempt.ends - time.monotonic())):
            if time.monotonic() >= attempt.ends:
                raise Transient(f"{what}: no complete answer within the deadline of "
                                f"{seconds:g} s per request")
    except BaseException:
        attempt.cancel()
        raise
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]


def watch(response: requests.Response) -> None:
    """Make `response` the connection that the current attempt's deadline cuts."""
    attempt = getattr(_local, "attempt", None)
    if attempt is not None:
        attempt.response = response
        if attempt.cancelled:  # the headers came after the deadline: read no body
            response.close()
            raise Transient(f"{response.url}: answered after the deadline")


def extend(seconds: float) -> None:
    """Give the current attempt more time (a large download, by its announced size)."""
    attempt = getattr(_local, "attempt", None)
    if attempt is not None:
        attempt.ends += seconds


def check(url: str) -> None:
    """Transient when the current attempt's deadline has passed (its waiter left)."""
    attempt = getattr(_local, "attempt", None)
    if attempt is not None and attempt.cancelled:
        raise Transient(f"{url}: stopped at the deadline")


def decoded(chunks: Iterable[bytes], encoding: str, url: str) -> Iterator[bytes]:
    """The chunks with Content-Encoding undone, in pieces of at most 1 MiB each."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        yield from chunks
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise EncodingError(f"{url} answered with Content-Encoding {encoding!r}")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in encoding else 0))
    try:
        for chunk in chunks:
            while chunk:
                yield inflater.decompress(chunk, _PIECE)
                chunk = inflater.unconsumed_tail
        yield inflater.flush()
    except zlib.error as exc:
        raise Transient(f"{url}: a broken {encoding} body ({exc})") from exc


def size_text(size: int) -> str:
    """A byte count as limits are written: 64 MiB, 512 KiB, 1000 bytes."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


def hash_stream(chunks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def unreachable(exc: requests.RequestException) -> str | None:
    """Why a failed connection cannot succeed on a retry: a name that does not resolve, or a
    host that refuses the port. None for timeouts, resets and the like, which may pass."""
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    if isinstance(reason, urllib3.exceptions.NameResolutionError):
        return f"the host name does not resolve ({reason.__cause__ or reason})"
    if isinstance(reason, urllib3.exceptions.NewConnectionError) \
            and isinstance(reason.__cause__, ConnectionRefusedError):
        return "the host refuses connections"
    return None
