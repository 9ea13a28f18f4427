"""What a simple index says about one project: PEP 691 JSON, PEP 503 HTML, a flat folder.

Pure parsers: text in, `IndexFile` list out. Relative file URLs are resolved against the page
URL (or a `<base href>`), the hash travels in `sha256`, never in the URL fragment.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from torchstack.errors import TorchstackError

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ARCHIVES = (".whl", ".tar.gz", ".zip")


class PageError(TorchstackError):
    """A project page that is not valid PEP 691 JSON or PEP 503 HTML."""


@dataclass(frozen=True)
class IndexFile:
    """One file of a project as an index lists it."""

    project: str  # PEP 503-normalized project name
    filename: str
    url: str  # absolute, without fragment
    sha256: str | None
    size: int | None
    requires_python: str | None
    yanked: bool
    core_metadata: bool  # PEP 658/714: the index announces `<url>.metadata`
    metadata_sha256: str | None = None  # hash of that .metadata file, when the index gives one


def parse_page(project: str, body: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    """The files of a project page, JSON or HTML as its Content-Type says."""
    kind, _, params = content_type.partition(";")
    charset = re.search(r"charset=\"?([\w.:-]+)", params)
    try:
        text = body.decode(charset.group(1) if charset else "utf-8")
    except (LookupError, UnicodeDecodeError) as exc:
        raise PageError(f"an undecodable page ({exc})") from exc
    if "json" in kind or (not kind.strip() and text.lstrip().startswith("{")):
        return parse_json(project, text, page_url)
    return parse_html(project, text, page_url)


def parse_json(project: str, text: str, page_url: str) -> list[IndexFile]:
    """The files of a PEP 691 JSON project page (API version 1.x)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PageError(f"invalid JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise PageError("a JSON object with a 'files' list was expected")
    version = str((data.get("meta") or {}).get("api-version", ""))
    if not version.startswith("1."):
        raise PageError(f"unsupported PEP 691 api-version {version!r}")
    return [_json_file(canonicalize_name(project), entry, page_url) for entry in data["files"]]


def _json_file(project: str, entry: Any, page_url: str) -> IndexFile:
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) \
            or not isinstance(entry.get("url"), str):
        raise PageError(f"a file entry lacks 'filename' or 'url': {entry!r:.200}")
    hashes = entry.get("hashes") or {}
    metadata = entry.get("core-metadata", entry.get("dist-info-metadata", False))
    size = entry.get("size")
    requires = entry.get("requires-python")
    return IndexFile(
        project=project, filename=entry["filename"], url=_absolute(page_url, entry["url"]),
        sha256=_sha256_of(hashes), size=size if isinstance(size, int) else None,
        requires_python=requires if isinstance(requires, str) and requires else None,
        yanked=bool(entry.get("yanked", False)), core_metadata=bool(metadata),
        metadata_sha256=_sha256_of(metadata) if isinstance(metadata, dict) else None,
    )


def _sha256_of(hashes: Any) -> str | None:
    value = hashes.get("sha256") if isinstance(hashes, Mapping) else None
    return value.lower() if isinstance(value, str) else None


def _absolute(page_url: str, href: str) -> str:
    parts = urlsplit(urljoin(page_url, href))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))


def parse_html(project: str, text: str, page_url: str) -> list[IndexFile]:
    """The files of a PEP 503 HTML project page (hashes from `#sha256=` fragments)."""
    parser = _AnchorParser()
    try:
        parser.feed(text)
        parser.close()
    except AssertionError as exc:  # html.parser's way of refusing malformed markup
        raise PageError(f"unparsable HTML ({exc})") from exc
    base = urljoin(page_url, parser.base) if parser.base else page_url
    name = canonicalize_name(project)
    return [_html_file(name, attrs, text, base) for attrs, text in parser.anchors]


def _html_file(project: str, attrs: dict[str, str | None], text: str, base: str) -> IndexFile:
    url = urljoin(base, attrs.get("href") or "")
    fragment = urlsplit(url).fragment
    algorithm, _, digest = fragment.partition("=")
    metadata = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
    return IndexFile(
        project=project, filename=text.strip() or unquote(urlsplit(url).path.rpartition("/")[2]),
        url=_absolute(url, ""), sha256=digest.lower() if algorithm == "sha256" and digest else None,
        size=None, requires_python=attrs.get("data-requires-python") or None,
        yanked="data-yanked" in attrs, core_metadata=metadata is not None and metadata != "false",
        metadata_sha256=_fragment_sha256(metadata),
    )


def _fragment_sha256(value: str | None) -> str | None:
    algorithm, _, digest = (value or "").partition("=")
    return digest.lower() if algorithm == "sha256" and digest else None


class _AnchorParser(HTMLParser):
    """Collects `<a>` attributes and text, and the first `<base href>`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self.base: str | None = None
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "a" and any(key == "href" for key, _ in attrs):
            self._close_anchor()
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._close_anchor()

    def close(self) -> None:
        super().close()
        self._close_anchor()

    def _close_anchor(self) -> None:
        if self._open is not None:
            self.anchors.append((self._open, "".join(self._text)))
            self._open = None


def flat_files(folder: Path, project: str, sha256: Callable[[Path], str]) -> list[IndexFile]:
    """The archives of `project` in a find-links folder, hashed by `sha256`."""
    name = canonicalize_name(project)
    found = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_file() and _project_of(entry.name) == name:
            path = Path(entry.path)
            found.append(IndexFile(
                project=name, filename=entry.name, url=path.absolute().as_uri(),
                sha256=sha256(path), size=entry.stat().st_size, requires_python=None,
                yanked=False, core_metadata=False))
    return found


def _project_of(filename: str) -> str | None:
    """The normalized project name an archive's filename declares, or None."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename.replace("%2B", "+"))[0])
        if filename.endswith(_ARCHIVES):
            return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None
