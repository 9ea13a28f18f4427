"""What the rest of torchstack may rely on of an index: the `Index` protocol, the `IndexFile`
it lists, and the errors an index raises.

Every index kind (the simple-index client, the catalog's recording and replaying indexes)
answers through `Index`; resolution and generation know no other. A new index kind implements
these four members and raises `IndexAccessError` (or a subclass) when it cannot answer,
`ProjectNotFoundError` when it does not list a project.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from typing import Protocol

from torchstack.errors import TorchstackError

__all__ = ["FileHashError", "Index", "IndexAccessError", "IndexFile", "IndexUnreachableError",
           "InsecureURLError", "ProjectNotFoundError", "RangeRequestError", "SizeLimitError",
           "WheelMetadataError"]


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
    yanked_reason: str | None = None  # PEP 592: why, when the index says
    upload_time: str | None = None  # PEP 700 (JSON pages only): ISO 8601, e.g. 2025-12-10T15:55Z


class Index(Protocol):
    """What resolution needs of an index: its file lists and the metadata of one file."""

    @property
    def location(self) -> str: ...

    def files(self, project: str) -> list[IndexFile]: ...

    def metadata(self, file: IndexFile) -> Message: ...

    def download_sha256(self, file: IndexFile) -> str: ...


class IndexAccessError(TorchstackError):
    """An index that cannot be read: unreachable, refusing, or answering what is not an index."""


class ProjectNotFoundError(IndexAccessError):
    """A project the index does not list (HTTP 404), or a name no index can list."""


class InsecureURLError(IndexAccessError):
    """A URL of a remote index that is not https:// (http:// is for loopback hosts only)."""


class RangeRequestError(IndexAccessError):
    """A server that does not answer range requests with 206 and Content-Range."""


class WheelMetadataError(IndexAccessError):
    """Core metadata that fails its hash, or a wheel whose METADATA cannot be read."""


class FileHashError(IndexAccessError):
    """A downloaded file whose sha256 differs from the one the index gives."""


class IndexUnreachableError(IndexAccessError):
    """A host whose name does not resolve or that refuses connections: no retry would help."""


class SizeLimitError(IndexAccessError):
    """An answer over one of the size limits (a page, a METADATA, a zip directory)."""
