"""Easyconfig and easystack text from the Jinja2 templates, from validated values only.

An index is input from outside: a project name, version, file name or URL that carries a
quote or a newline must never reach an easyconfig, which EasyBuild executes as Python. Every
value is validated here (PEP 503 names, PEP 440 versions, plain file names and URLs, hex
digests) and then rendered through `repr`, so the template cannot be broken out of. A URL's
credentials (user:token@) are never rendered: the site's EasyBuild needs its own for the host.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from urllib.parse import unquote, urlsplit

import jinja2
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torchstack.errors import TorchstackError
from torchstack.generator.release import Resolved
from torchstack.generator.toolchains import Dependency
from torchstack.index.protocol import IndexFile
from torchstack.index.simple import without_userinfo
from torchstack.paths import templates_path

_PEP503_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_MODULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_SUFFIX = re.compile(r"^(-[A-Za-z0-9._+]+|-%\(cudaver\)s)*$")
_SAFE_TEXT = re.compile(r"^[A-Za-z0-9._+%~-]*$")
_SAFE_URL_PATH = re.compile(r"^[A-Za-z0-9._+%~/:@-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# `eb --check-contrib` runs pycodestyle with 120 columns (MAX_LINE_LENGTH in
# easybuild/framework/easyconfig/style.py) and ignores only W291 and E741.
_MAX_LINE = 120
_HANG = 4  # the hanging indent under a key that ends its line


class RenderError(TorchstackError):
    """A value from an index or the command line that is unsafe to put in an easyconfig."""


@dataclass(frozen=True)
class Source:
    """One wheel of an extension as an easyconfig names it."""

    filename: str  # as stored and installed: torch-2.9.1+cpu-...whl
    url: str  # the folder the file is fetched from
    sha256: str
    download_filename: str | None = None  # as the URL spells it, when it differs (%2B)


@dataclass(frozen=True)
class Extension:
    """An exts_list entry: one wheel per architecture, or one for all."""

    name: str
    version: str
    sources: tuple[tuple[str, Source], ...]  # (architecture, source), sorted
    modulename: str | None = None  # the one module the sanity check imports, when set

    @property
    def per_arch(self) -> bool:
        return len({source.filename for _, source in self.sources}) > 1

    @property
    def checksums(self) -> tuple[tuple[str, str], ...]:
        """(file name, sha256) of each distinct wheel, once: a pure wheel that serves every
        architecture is one file, and a dict literal names each key once."""
        seen: dict[str, str] = {}
        for _, source in self.sources:
            if seen.setdefault(source.filename, source.sha256) != source.sha256:
                raise RenderError(f"{source.filename!r}: the index gives two sha256 for one file")
        return tuple(seen.items())


@dataclass(frozen=True)
class EasyconfigText:
    """What an easyconfig of the PyTorchWheels easyblock says."""

    name: str
    version: str
    versionsuffix: str
    toolchain: tuple[str, str]
    homepage: str
    description: str
    dependencies: tuple[str, ...]  # Python literals, from `dependency`
    exts: tuple[Extension, ...]
    cuda_libs: str | None = None
    abi_tag: str | None = None
    abi_role: str = "provides"

    @property
    def filename(self) -> str:
        """EasyBuild's name: name-version[-toolchain-version]suffix.eb (none for system)."""
        toolchain = "" if self.toolchain[0].lower() == "system" else "-" + "-".join(self.toolchain)
        return f"{self.name}-{self.version}{toolchain}{self.versionsuffix}.eb"


def extension(resolved: Resolved) -> Extension:
    """An exts_list entry for a resolved project, every value checked."""
    name = project_name(resolved.project)
    version = str(pep440(resolved.version, name))
    return Extension(name, version, tuple((arch, source(file))
                                          for arch, file in sorted(resolved.wheels.items())))


def source(file: IndexFile) -> Source:
    """The file name, folder URL (without credentials) and sha256 of an index file, checked."""
    if file.sha256 is None or not _SHA256.fullmatch(file.sha256):
        raise RenderError(f"{file.filename!r}: the index gives no valid sha256 ({file.sha256!r})")
    url = without_userinfo(file.url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise RenderError(f"{url!r} is not a plain file URL") from exc
    folder, _, filename = parts.path.rpartition("/")
    host = parts.netloc.rpartition("@")[2]
    if parts.scheme not in ("https", "http", "file") or not _SAFE_TEXT.fullmatch(filename) \
            or not _SAFE_URL_PATH.fullmatch(host + folder) or parts.query or not filename:
        raise RenderError(f"{url!r} is not a plain file URL")
    stored = unquote(filename)
    if not _SAFE_TEXT.fullmatch(stored) or "%" in stored:
        raise RenderError(f"{url!r} is not a plain file URL")
    return Source(stored, f"{parts.scheme}://{host}{folder}", file.sha256,
                  filename if filename != stored else None)


def project_name(name: str) -> str:
    """A PEP 503 project name, or RenderError."""
    if not _PEP503_NAME.fullmatch(name):
        raise RenderError(f"{name!r} is not a valid project name")
    return canonicalize_name(name)


def pep440(text: str, what: str) -> Version:
    """A PEP 440 version (local part allowed), or RenderError."""
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise RenderError(f"{what}: {text!r} is not a valid PEP 440 version") from exc


def dependency(name: str, version: str, versionsuffix: str = "", system: bool = False) -> str:
    """A dependency tuple as upstream easyconfigs write it: ('CUDA', '12.8.0', '', SYSTEM)."""
    for value in (name, version):
        if not _MODULE_NAME.fullmatch(value):
            raise RenderError(f"{value!r} cannot be part of a module name")
    if not _SUFFIX.fullmatch(versionsuffix):
        raise RenderError(f"{versionsuffix!r} is not a version suffix")
    fields = [repr(name), repr(version)]
    if versionsuffix or system:
        fields.append(repr(versionsuffix))
    if system:
        fields.append("SYSTEM")
    return f"({', '.join(fields)})"


def module_dependency(module: Dependency, versionsuffix: str | None = None) -> str:
    """`dependency` on a module of the robot path, with its own suffix unless another is
    given; one built with the system toolchain names it, as EasyBuild needs."""
    suffix = module.versionsuffix if versionsuffix is None else versionsuffix
    return dependency(module.name, module.version, suffix,
                      system=module.toolchain[0].lower() == "system")


def easyconfig(text: EasyconfigText) -> str:
    """The easyconfig file's content."""
    for value in (text.name, text.version, text.toolchain[0], text.toolchain[1]):
        if not _MODULE_NAME.fullmatch(value):
            raise RenderError(f"{value!r} cannot be part of an easyconfig name")
    return _environment().get_template("wheels.eb.j2").render(
        name=text.name, version=text.version, versionsuffix=text.versionsuffix,
        toolchain=text.toolchain, homepage=text.homepage, description=text.description,
        dependencies=text.dependencies, exts=text.exts, cuda_libs=text.cuda_libs,
        abi_tag=text.abi_tag, abi_role=text.abi_role)


def easystack(title: str, command: str, easyconfigs: Sequence[str]) -> str:
    """An EasyBuild easystack file building `easyconfigs` in the order given."""
    for filename in easyconfigs:
        if not _SAFE_TEXT.fullmatch(filename):
            raise RenderError(f"{filename!r} is not a plain easyconfig file name")
    return _environment().get_template("easystack.yaml.j2").render(
        title=title.replace("\n", " "), command=command.replace("\n", " "),
        easyconfigs=easyconfigs)


def _py(value: object) -> str:
    return repr(value)


def _py_lines(value: str, indent: int, end: str = "", cuts: str = "/") -> str:
    """repr(value) + end for a line at column `indent`, as implicitly concatenated pieces on
    lines of their own at that column where one line would pass _MAX_LINE columns. A piece ends
    after the last character of `cuts` that fits, else where the line ends: the pieces are
    always valid literals and their concatenation is `value`. The first line is not indented
    (the template indents it), the others are."""
    width = max(_MAX_LINE - indent - len(end), 3)
    pieces: list[str] = []
    rest = value
    while len(repr(rest)) > width:
        size = width - 2
        while size > 1 and len(repr(rest[:size])) > width:
            size -= 1
        cut = max(rest.rfind(c, 0, size) for c in cuts) + 1 if cuts else 0
        cut = cut or size
        pieces.append(repr(rest[:cut]))
        rest = rest[cut:]
    pieces.append(repr(rest) + end)
    return f"\n{' ' * indent}".join(pieces)


def _py_entry(value: str, key: str, indent: int, listed: bool = False, cuts: str = "/") -> str:
    """The dict entry `'key': 'value',` (or `'key': ['value'],` when `listed`) at column
    `indent`: on one line where it fits, else the value on lines of its own under the key with a
    hanging indent (cut by `_py_lines`) and, for a list, the closing `],` under the key. Both
    are layouts that pycodestyle accepts at any length (no visual indent to match)."""
    line = f"{key!r}: [{value!r}]," if listed else f"{key!r}: {value!r},"
    if indent + len(line) <= _MAX_LINE:
        return line
    inner = indent + _HANG
    if listed:
        return (f"{key!r}: [\n{' ' * inner}{_py_lines(value, inner, ',', cuts)}\n"
                f"{' ' * indent}],")
    return f"{key!r}:\n{' ' * inner}{_py_lines(value, inner, ',', cuts)}"


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_path())),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["py"] = _py
    env.filters["py_lines"] = _py_lines
    env.filters["py_entry"] = _py_entry
    return env
