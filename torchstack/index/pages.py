"""What a simple index says about one project: PEP 691 JSON, PEP 503 HTML, a flat folder.

Pure parsers: text in, `IndexFile` list out. Relative file URLs are resolved against the page
URL (or a `<base href>`), the hash travels in `sha256`, never in the URL fragment. Every field
of a JSON page is type-checked; a page that cannot be an index (a login form, an HTML page
without links to distribution files) is refused as such rather than read as "no files".

Only the files of the page's project are kept, as pip's LinkEvaluator keeps them: a wheel whose
name, normalized (PEP 503), is the project's; an sdist or other archive whose name up to one of
its '-' normalizes to the project's. Both the listed filename and the file name at the end of
the URL must pass, so that a page for `torch` cannot hand over `torchvision`'s wheel, or a
look-alike's, under torch's name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import reprlib
from collections.abc import Callable, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torchstack.errors import TorchstackError
from torchstack.index.protocol import IndexFile

log = logging.getLogger(__name__)

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ARCHIVES = (".whl", ".tar.gz", ".zip")
_DISTRIBUTIONS = (*_ARCHIVES, ".tar.bz2", ".tar.xz", ".tgz", ".tar", ".egg", ".exe", ".msi",
                  ".rpm", ".dmg", ".deb")


class PageError(TorchstackError):
    """A project page that is not valid PEP 691 JSON or PEP 503 HTML (perhaps cut short)."""


class NotAnIndexPageError(PageError):
    """A complete page that is no project page: wrong JSON types, a login page, ... (no retry
    would change it)."""


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
    """The files of a PEP 691 JSON project page (API version 1.x), every field type-checked."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise NotAnIndexPageError("JSON nested too deeply to be a project page") from None
    except ValueError as exc:
        raise PageError(f"invalid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise NotAnIndexPageError(f"JSON that is not a PEP 691 project page (a "
                                  f"{kind_of(data)}, not an object)")
    meta, files = data.get("meta"), data.get("files")
    if not isinstance(meta, dict):
        raise NotAnIndexPageError(f"JSON that is not a PEP 691 project page ('meta' is "
                                  f"{kind_of(meta)}, not an object)")
    version = meta.get("api-version")
    if not isinstance(version, str) or not version.startswith("1."):
        raise NotAnIndexPageError(f"unsupported PEP 691 api-version {version!r:.40}")
    if not isinstance(files, list):
        raise NotAnIndexPageError(f"JSON that is not a PEP 691 project page (a 'files' list "
                                  f"was expected, not {kind_of(files)})")
    name = canonicalize_name(project)
    return _of_project(name, [_json_file(name, entry, position, page_url)
                              for position, entry in enumerate(files)])


def _json_file(project: str, entry: Any, position: int, page_url: str) -> IndexFile:
    where = f"files[{position}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) \
            or not isinstance(entry.get("url"), str):
        raise NotAnIndexPageError(f"{where} lacks 'filename' or 'url': {_short(entry)}")
    where = f"{where} ({entry['filename']!r:.80})"
    hashes = _typed(entry, "hashes", (dict, type(None)), where) or {}
    metadata = entry.get("core-metadata", entry.get("dist-info-metadata", False))
    if not isinstance(metadata, (bool, dict, type(None))):
        raise NotAnIndexPageError(f"{where}: 'core-metadata' is {kind_of(metadata)}, not a "
                                  "boolean or an object")
    size = _typed(entry, "size", (int, type(None)), where)
    requires = _typed(entry, "requires-python", (str, type(None)), where)
    yanked = _typed(entry, "yanked", (bool, str, type(None)), where)
    uploaded = _typed(entry, "upload-time", (str, type(None)), where)
    return IndexFile(
        project=project, filename=entry["filename"], url=_absolute(page_url, entry["url"]),
        sha256=_sha256_of(hashes, f"{where}: 'hashes'"),
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        requires_python=requires or None, yanked=yanked is not None and yanked is not False,
        core_metadata=bool(metadata),
        metadata_sha256=(_sha256_of(metadata, f"{where}: 'core-metadata'")
                         if isinstance(metadata, dict) else None),
        yanked_reason=yanked if isinstance(yanked, str) and yanked else None,
        upload_time=uploaded or None,
    )


def _typed(entry: dict[str, Any], key: str, types: tuple[type, ...], where: str) -> Any:
    value = entry.get(key)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise NotAnIndexPageError(f"{where}: {key!r} is {kind_of(value)}, not "
                                  f"{' or '.join(TYPE_NAMES[t] for t in types)}")
    return value


def _sha256_of(hashes: Mapping[str, Any], where: str) -> str | None:
    value = hashes.get("sha256")
    if value is not None and not isinstance(value, str):
        raise NotAnIndexPageError(f"{where}: the sha256 is {kind_of(value)}, not a string")
    return value.lower() if value else None


TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer",
              bool: "a boolean", float: "a number", type(None): "null"}


def kind_of(value: Any) -> str:
    """What a JSON value is, in words: "an object", "null", ..."""
    return TYPE_NAMES.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 200) -> str:
    """A repr bounded in depth, entries and length, whatever the page nests (reprlib bounds
    each string, not the escapes of the whole)."""
    text = reprlib.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _absolute(page_url: str, href: str) -> str:
    try:
        parts = urlsplit(urljoin(page_url, href))
        return urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise NotAnIndexPageError(f"an unusable file URL {href!r:.120} ({exc})") from exc


def parse_html(project: str, text: str, page_url: str) -> list[IndexFile]:
    """The files of a PEP 503 HTML project page (hashes from `#sha256=` fragments)."""
    parser = _AnchorParser()
    try:
        parser.feed(text)
        parser.close()
    except AssertionError as exc:  # html.parser's way of refusing malformed markup
        raise PageError(f"unparsable HTML ({exc})") from exc
    base = _absolute(page_url, parser.base) if parser.base else page_url
    name = canonicalize_name(project)
    files = [_html_file(name, attrs, text, base) for attrs, text in parser.anchors]
    why = _not_an_index(parser, files)
    if why:
        raise NotAnIndexPageError(f"a page that is not a simple index ({why}: a login page?)")
    return _of_project(name, files)


def _not_an_index(parser: _AnchorParser, files: list[IndexFile]) -> str | None:
    """Why an HTML page cannot be a project page, or None. A simple index lists distribution
    files; a page with a password field, or with no link to an archive and either a form or
    no PEP 629 repository version, is something else answering in its place."""
    if parser.password:
        return "it asks for a password"
    if any(name.lower().endswith(_DISTRIBUTIONS) for f in files
           for name in (f.filename, urlsplit(f.url).path)):
        return None
    if parser.form:
        return "a form and no links to distribution files"
    if not parser.repository_version:
        return "no links to distribution files"
    return None


def _html_file(project: str, attrs: dict[str, str | None], text: str, base: str) -> IndexFile:
    url = _absolute(base, attrs.get("href") or "")
    fragment = urlsplit(urljoin(base, attrs.get("href") or "")).fragment
    algorithm, _, digest = fragment.partition("=")
    metadata = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
    reason = attrs.get("data-yanked")
    listed = unquote(urlsplit(url).path.rpartition("/")[2])
    text = text.strip()  # PEP 503: the file name; else, as pip reads it, the URL's last part
    return IndexFile(
        project=project, filename=text if text.endswith(_DISTRIBUTIONS) or not listed else listed,
        url=url, sha256=digest.lower() if algorithm == "sha256" and digest else None,
        size=None, requires_python=attrs.get("data-requires-python") or None,
        yanked="data-yanked" in attrs,
        core_metadata=metadata is not None and metadata != "false",
        metadata_sha256=_fragment_sha256(metadata), yanked_reason=reason or None,
    )


def _fragment_sha256(value: str | None) -> str | None:
    algorithm, _, digest = (value or "").partition("=")
    return digest.lower() if algorithm == "sha256" and digest else None


class _AnchorParser(HTMLParser):
    """Collects `<a>` attributes and text, the first `<base href>`, and what marks a page as
    a simple index (PEP 629 meta) or as something else (a form, a password field)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self.base: str | None = None
        self.form = self.password = self.repository_version = False
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "base" and self.base is None:
            self.base = found.get("href")
        elif tag == "a" and "href" in found:
            self._close_anchor()
            self._open, self._text = found, []
        elif tag == "form":
            self.form = True
        elif tag == "input" and (found.get("type") or "").lower() == "password":
            self.password = True
        elif tag == "meta" and found.get("name") == "pypi:repository-version":
            self.repository_version = True

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
        if entry.is_file() and entry.name.endswith(_ARCHIVES) and is_of(name, entry.name):
            path = Path(entry.path)
            found.append(IndexFile(
                project=name, filename=entry.name, url=path.absolute().as_uri(),
                sha256=sha256(path), size=entry.stat().st_size, requires_python=None,
                yanked=False, core_metadata=False))
    return found


def _of_project(name: str, files: list[IndexFile]) -> list[IndexFile]:
    """The files of a page that belong to project `name` (see the module's docstring)."""
    kept = []
    for file in files:
        listed = unquote(urlsplit(file.url).path.rpartition("/")[2])
        if is_of(name, file.filename) and (not listed.endswith(_DISTRIBUTIONS)
                                           or is_of(name, listed)):
            kept.append(file)
        else:
            log.debug("skipped %s (%s): not a file of %s", file.filename, file.url, name)
    return kept


def is_of(project: str, filename: str) -> bool:
    """Whether `filename` is a distribution file of the (normalized) `project`: a valid wheel
    name whose project normalizes to it, or an archive whose name up to a '-' does, followed
    by a valid version (pip's rule for sdists, whose names may hold a '-' of their own)."""
    if filename.endswith(".whl"):
        try:
            return parse_wheel_filename(filename.replace("%2B", "+"))[0] == project
        except InvalidWheelFilename:
            return False
    stem = next((filename[:-len(suffix)] for suffix in _DISTRIBUTIONS
                 if filename.endswith(suffix)), None)
    if stem is None:
        return False
    return any(canonicalize_name(stem[:dash]) == project and _is_version(stem[dash + 1:])
               for dash, char in enumerate(stem) if char == "-")


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True
