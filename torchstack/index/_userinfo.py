"""Credentials in index URLs (https://user:token@host/simple/): how they are read, and the one
function that takes them out of whatever is shown (messages, reports, logs).

A URL's credentials end at the last '@' of its authority, as pip reads them, so a password may
hold a raw '@'. A '/', '?' or '#' ends the authority, though: a password typed with one of them
unencoded (https://user:pa/ss@host/) parses as host `user`, port `pa`, and a path that holds
the rest of the secret. Such a URL typed as an index is refused before any request; in text,
everything up to the last '@' of such a URL is shown as `***`.

Standard library only: the command line's error line and log handler use `redact` too.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["misplaced", "origin", "redact", "redact_url", "split_userinfo", "without_userinfo"]

_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://\S+")


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it taken out: what may be shown."""
    return _URL.sub(lambda found: redact_url(found.group()), text)


def redact_url(url: str) -> str:
    """One URL without its credentials. As pip's redact_auth_from_url for the usual form
    (user:password@ dropped); an '@' after the authority (an unencoded '/', '?' or '#' in a
    password) hides everything from `//` to the last '@' as `***`: perhaps a host, never a
    part of the secret."""
    scheme, _, rest = url.partition("://")
    authority = _authority(rest)
    if scheme.lower() == "file":  # a local path, which may hold an '@' of its own
        return url
    if "@" in rest[len(authority):]:
        return f"{scheme}://***@{rest.rpartition('@')[2]}"
    if "@" in authority and rest[:authority.rindex("@")] != "***":  # (not redacted yet)
        return f"{scheme}://{rest[authority.rindex('@') + 1:]}"
    return url


def _authority(rest: str) -> str:
    """What URL parsers take for the authority of a URL without its `scheme://`."""
    return re.split(r"[/?#]", rest, maxsplit=1)[0]


def misplaced(url: str) -> bool:
    """Whether an '@' follows the authority of `url` (file URLs aside). Such an '@' most
    likely ends a user:password whose '/', '?' or '#' was not percent-encoded; read as the URL
    it is, the host would be a part of the user name and the secret would travel in the path
    of a request to that host."""
    scheme, _, rest = url.partition("://")
    return scheme.lower() != "file" and "@" in rest[len(_authority(rest)):]


def without_userinfo(url: str) -> str:
    """The URL to keep (in an easyconfig, the catalog): without its user:password@."""
    return split_userinfo(url)[0]


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without its user:password@, and the (unquoted) user and password, if any."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_url(url), None
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), (unquote(user), unquote(password))


def origin(url: str) -> str:
    """scheme://host:port of a URL without credentials: what credentials are kept for."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
        return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
    except ValueError:
        return ""
