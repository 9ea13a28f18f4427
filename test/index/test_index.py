"""torchstack.index.simple: the simple-index client against a real index server on 127.0.0.1.

The server (test/support/indexserver.py) serves small wheels built here with zipfile and this
machine's real torch and torchvision wheels, as PEP 691 JSON or PEP 503 HTML, with PEP 658
metadata files and range requests, and injects the faults each test asks for. Local indexes
(a PEP 503 tree like /opt/pypi-more/simple, a flat folder) are built in tmp_path.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import random
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.indexserver import IndexServer
from support.wheelbuild import build_wheel

from torchstack.errors import TorchstackError
from torchstack.index._zipdir import ZipDirectoryError, file_dist_info_metadata
from torchstack.index.pages import PageError, parse_html, parse_json, parse_page
from torchstack.index.protocol import (
    FileHashError,
    IndexAccessError,
    IndexFile,
    IndexUnreachableError,
    InsecureURLError,
    ProjectNotFoundError,
    RangeRequestError,
    WheelMetadataError,
)
from torchstack.index.simple import ACCEPT, SimpleIndex, check_url

REQUIRES = ("torch>=2.13", 'numpy>=1.26; extra == "np"')
HOSTILE = ('demo-1.0"-py3-none-any.whl', "demo-1.0\nx-py3-none-any.whl",
           "demo-1.0'; rm -rf /-py3-none-any.whl")


def read_metadata(data: bytes) -> list[tuple[str, str]]:
    message = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(data)
    return list(message.items())


def zip_metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return archive.read(name)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small synthetic wheels: two versions of demo, a 4 MiB incompressible one, a ZIP64 one."""
    dest = tmp_path_factory.mktemp("wheels")
    blob = random.Random(42).randbytes(4 << 20)
    built = {
        "demo-1.0": build_wheel(dest, "demo", "1.0", {"demo/__init__.py": b"x = 1\n"}, REQUIRES),
        "demo-1.1": build_wheel(dest, "demo", "1.1", {"demo/__init__.py": b"x = 2\n"}, REQUIRES),
        "big": build_wheel(dest, "bigdemo", "2.0", {"bigdemo/blob.bin": blob}, ("demo",)),
    }
    with pytest.MonkeyPatch.context() as patch:  # force ZIP64 records on a small file
        patch.setattr(zipfile, "ZIP64_LIMIT", 64)
        patch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
        built["zip64"] = build_wheel(dest, "zipsixtyfour", "1.0",
                                     {"zipsixtyfour/__init__.py": b"y = 1\n" * 100}, REQUIRES)
    return built


@pytest.fixture
def server(wheels: dict[str, Path]) -> Iterator[IndexServer]:
    with IndexServer([wheels["demo-1.0"], wheels["demo-1.1"]]) as running:
        yield running


def client(server: IndexServer, **options: Any) -> SimpleIndex:
    settings: dict[str, Any] = {"timeout": 10.0, "backoff": 0.0, **options}
    return SimpleIndex(server.index_url, **settings)


def demo(index: SimpleIndex, version: str = "1.0") -> IndexFile:
    return next(f for f in index.files("demo") if f.filename.startswith(f"demo-{version}-"))


# -- URL policy ------------------------------------------------------------------------------


class TestCheckUrl:
    @pytest.mark.parametrize("url", [
        "https://pypi.org/simple/",  # any https host
        "http://127.0.0.1:8080/simple/",  # loopback IPv4
        "http://127.8.9.10/simple/",  # the whole 127.0.0.0/8
        "http://localhost/simple/",  # by name
        "http://[::1]:9000/simple/",  # loopback IPv6
    ], ids=["https", "127.0.0.1", "127/8", "localhost", "ipv6"])
    def test_accepted(self, url: str) -> None:
        assert check_url(url) == url

    @pytest.mark.parametrize("url", [
        "http://pypi.org/simple/",  # plain http to a remote host
        "http://10.0.0.1/simple/",  # a private, not a loopback, address
        "http://localhost.example.org/",  # a name that merely starts like localhost
        "ftp://127.0.0.1/simple/",  # another scheme
        "file:///opt/pypi-more/simple/",  # file:// where only remote URLs may be
        "https:///simple/",  # no host
    ], ids=["http-remote", "http-private", "localhost-lookalike", "ftp", "file", "no-host"])
    def test_refused(self, url: str) -> None:
        with pytest.raises(InsecureURLError, match="refused"):
            check_url(url)

    def test_file_urls_for_local_indexes(self) -> None:
        assert check_url("file:///srv/simple/", allow_file=True) == "file:///srv/simple/"


class TestLocation:
    def test_remote_http_refused_before_any_request(self) -> None:
        with pytest.raises(InsecureURLError, match=r"'http://pypi.org/simple/' refused"):
            SimpleIndex("http://pypi.org/simple")

    def test_https_needs_no_request_to_construct(self) -> None:
        index = SimpleIndex("https://download.pytorch.org/whl/cpu")
        assert index.location == "https://download.pytorch.org/whl/cpu"
        assert index.bytes_transferred == 0

    def test_missing_folder(self, tmp_path: Path) -> None:
        with pytest.raises(IndexAccessError, match="does not exist"):
            SimpleIndex(str(tmp_path / "absent"))

    def test_errors_are_torchstack_errors(self) -> None:
        for error in (IndexAccessError, ProjectNotFoundError, InsecureURLError,
                      RangeRequestError, WheelMetadataError, FileHashError):
            assert issubclass(error, TorchstackError)


# -- page parsers ------------------------------------------------------------------------------

PAGE = "https://example.org/simple/demo/"


class TestParseHtml:
    def test_attributes(self) -> None:
        html = ('<a href="../../files/demo-1.0-py3-none-any.whl#sha256=ABCD" '
                'data-requires-python="&gt;=3.9" data-yanked="" '
                'data-core-metadata="sha256=EF01">demo-1.0-py3-none-any.whl</a>')
        (found,) = parse_html("Demo", html, PAGE)
        assert found == IndexFile(
            project="demo", filename="demo-1.0-py3-none-any.whl",
            url="https://example.org/files/demo-1.0-py3-none-any.whl", sha256="abcd", size=None,
            requires_python=">=3.9", yanked=True, core_metadata=True, metadata_sha256="ef01")

    @pytest.mark.parametrize(("anchor", "sha256", "metadata", "metadata_sha256"), [
        # another hash algorithm in the fragment: no sha256
        ('<a href="d-1-py3-none-any.whl#md5=aa">d-1-py3-none-any.whl</a>', None, False, None),
        # the PEP 658 attribute name, without a hash
        ('<a href="d-1-py3-none-any.whl" data-dist-info-metadata="true">x</a>', None, True, None),
        # an explicit "false" announces nothing
        ('<a href="d-1-py3-none-any.whl" data-core-metadata="false">x</a>', None, False, None),
    ], ids=["md5-fragment", "dist-info-metadata", "metadata-false"])
    def test_hashes(self, anchor: str, sha256: str | None, metadata: bool,
                    metadata_sha256: str | None) -> None:
        (found,) = parse_html("d", anchor, PAGE)
        assert (found.sha256, found.core_metadata, found.metadata_sha256) == (
            sha256, metadata, metadata_sha256)

    def test_base_href_and_filename_from_url(self) -> None:
        html = ('<html><head><base href="https://files.example.org/pkgs/"></head><body>'
                '<a href="torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl"></a></body></html>')
        (found,) = parse_html("torch", html, PAGE)
        assert found.url == "https://files.example.org/pkgs/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl"
        assert found.filename == "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"

    def test_anchors_without_href_are_not_files(self) -> None:
        page = '<a name="top">top</a><a href="d-1.tar.gz">d-1.tar.gz</a>'
        assert [f.filename for f in parse_html("d", page, PAGE)] == ["d-1.tar.gz"]


class TestParseJson:
    def test_fields(self) -> None:
        page = ('{"meta": {"api-version": "1.1"}, "name": "demo", "files": [{"filename": '
                '"demo-1.0-py3-none-any.whl", "url": "/f/demo-1.0-py3-none-any.whl", "hashes": '
                '{"sha256": "AB"}, "size": 12, "requires-python": ">=3.9", "yanked": "broken", '
                '"core-metadata": {"sha256": "CD"}}]}')
        (found,) = parse_json("demo", page, PAGE)
        assert found == IndexFile("demo", "demo-1.0-py3-none-any.whl",
                                  "https://example.org/f/demo-1.0-py3-none-any.whl", "ab", 12,
                                  ">=3.9", True, True, "cd", yanked_reason="broken")

    @pytest.mark.parametrize(("page", "match"), [
        ('{"meta": {"api-version": "1.0"}, "files": [{"filen', "invalid JSON"),  # truncated
        ('{"meta": {"api-version": "2.0"}, "files": []}', "api-version '2.0'"),  # a future major
        ('{"meta": {"api-version": "1.0"}}', "'files' list"),  # no files at all
        ('{"meta": {"api-version": "1.0"}, "files": [{"url": "x"}]}', "lacks 'filename'"),
    ], ids=["truncated", "api-version-2", "no-files", "no-filename"])
    def test_invalid(self, page: str, match: str) -> None:
        with pytest.raises(PageError, match=match):
            parse_json("demo", page, PAGE)


JSON_PAGE = ('{"meta": {"api-version": "1.1"}, "files": [{"filename": "d-1-py3-none-any.whl", '
             '"url": "d-1-py3-none-any.whl", "hashes": {}, "size": 3}]}')


class TestParsePage:
    @pytest.mark.parametrize(("body", "content_type", "size"), [
        # PEP 691 by its media type
        (JSON_PAGE.encode(), "application/vnd.pypi.simple.v1+json", 3),
        # no Content-Type at all: a JSON object is recognised by its first character
        (JSON_PAGE.encode(), "", 3),
        # HTML in the charset its Content-Type names
        ('<a href="d-1-py3-none-any.whl">d-1-py3-none-any.whl</a>\xe9'.encode("latin-1"),
         "text/html; charset=ISO-8859-1", None),
    ], ids=["json", "sniffed-json", "latin-1-html"])
    def test_format(self, body: bytes, content_type: str, size: int | None) -> None:
        (found,) = parse_page("d", body, content_type, PAGE)
        assert (found.filename, found.size) == ("d-1-py3-none-any.whl", size)

    @pytest.mark.parametrize(("body", "content_type"), [
        (b"<a href='x'>x</a>", "text/html; charset=no-such-charset"),  # an unknown charset
        (b"\xff\xfe<a>", "text/html"),  # not UTF-8, which is the default
    ], ids=["unknown-charset", "bad-utf8"])
    def test_undecodable(self, body: bytes, content_type: str) -> None:
        with pytest.raises(PageError, match="undecodable"):
            parse_page("d", body, content_type, PAGE)


# -- file lists from the server -------------------------------------------------------------


class TestFiles:
    def test_json_page(self, server: IndexServer) -> None:
        index = client(server)
        found = index.files("Demo")
        served = server.files_of("demo")
        assert [f.filename for f in found] == [s.filename for s in served]
        assert [f.sha256 for f in found] == [s.sha256 for s in served]
        assert [f.size for f in found] == [s.size for s in served]  # sizes: JSON only
        assert all(f.url == server.url + server.file_path(f.filename) for f in found)
        assert all(f.core_metadata and f.metadata_sha256 for f in found)
        (hit,) = server.hits_of(server.page_path("demo"))
        assert hit.accept == ACCEPT
        assert index.bytes_transferred == server.bytes_sent == hit.sent

    def test_html_fallback(self, server: IndexServer) -> None:
        server.formats = ("html",)
        found = client(server).files("demo")
        assert [f.sha256 for f in found] == [s.sha256 for s in server.files_of("demo")]
        assert [f.size for f in found] == [None, None]
        assert all(f.core_metadata and f.url.startswith(server.url + "/files/") for f in found)

    @pytest.mark.parametrize("formats", [("json",), ("html",)], ids=["json", "html"])
    def test_flags(self, server: IndexServer, wheels: dict[str, Path],
                   formats: tuple[str, ...]) -> None:
        server.formats = formats
        server.add_wheel(wheels["big"], yanked="broken upload", requires_python=">=3.10",
                         metadata="unannounced", sha256="none")
        (found,) = client(server).files("bigdemo")
        assert (found.yanked, found.requires_python, found.core_metadata, found.sha256) == (
            True, ">=3.10", False, None)

    def test_html_without_hashes(self, server: IndexServer) -> None:
        server.formats, server.html_hashes = ("html",), False
        assert [f.sha256 for f in client(server).files("demo")] == [None, None]

    def test_gzip_counted_as_received(self, server: IndexServer) -> None:
        server.gzip = True
        index = client(server)
        found = index.files("demo")
        assert len(found) == 2
        assert index.bytes_transferred == server.bytes_sent < len(server.json_page("demo"))

    @pytest.mark.parametrize("formats", [("json",), ("html",)], ids=["json", "html"])
    def test_hostile_names_skipped(self, server: IndexServer, formats: tuple[str, ...]) -> None:
        # no valid wheel name, so no file of demo (pip skips them alike); the rest is kept
        server.formats = formats
        for name in HOSTILE:
            server.add("demo", name, b"not a wheel")
        names = [f.filename for f in client(server).files("demo")]
        assert names and set(HOSTILE).isdisjoint(names)

    def test_missing_project(self, server: IndexServer) -> None:
        with pytest.raises(ProjectNotFoundError, match=rf"^{server.index_url}nothing-here/ "
                                                       "answered HTTP 404 for nothing-here$"):
            client(server).files("nothing_here")
        assert len(server.hits_of(server.page_path("nothing-here"))) == 1  # a 404 is final

    @pytest.mark.parametrize("name", ["../etc", "a/b", "", "-demo"], ids=str)
    def test_invalid_project_name(self, server: IndexServer, name: str) -> None:
        with pytest.raises(ProjectNotFoundError, match="not a valid project name"):
            client(server).files(name)
        assert server.hits == []

    def test_redirect_followed(self, server: IndexServer) -> None:
        server.redirect("/mirror/demo/", server.index_url + "demo/")
        index = SimpleIndex(server.url + "/mirror", backoff=0.0)
        assert len(index.files("demo")) == 2
        assert [h.status for h in server.hits] == [301, 200]

    def test_redirect_to_plain_http_refused(self, server: IndexServer) -> None:
        server.redirect(server.page_path("demo"), "http://example.org/simple/demo/")
        with pytest.raises(InsecureURLError, match=r"'http://example.org/simple/demo/' refused"):
            client(server).files("demo")


# -- retries ---------------------------------------------------------------------------------


class TestRetries:
    def test_500s_then_success(self, server: IndexServer) -> None:
        server.fail(server.page_path("demo"), times=3)
        assert len(client(server, retries=4).files("demo")) == 2
        assert [h.status for h in server.hits] == [500, 500, 500, 200]

    def test_500s_exhaust_the_retries(self, server: IndexServer) -> None:
        server.fail(server.page_path("demo"), times=None, status=503)
        with pytest.raises(IndexAccessError, match=r"HTTP 503.*gave up after 3 attempts"):
            client(server, retries=2).files("demo")
        assert len(server.hits) == 3

    def test_backoff_doubles(self, server: IndexServer, monkeypatch: pytest.MonkeyPatch) -> None:
        slept: list[float] = []
        monkeypatch.setattr(time, "sleep", slept.append)  # the index's only sleep
        server.fail(server.page_path("demo"), times=3)
        client(server, retries=3, backoff=0.25).files("demo")
        assert slept == [0.25, 0.5, 1.0]

    def test_timeout_then_success(self, server: IndexServer) -> None:
        server.delay(server.page_path("demo"), seconds=60, times=1)
        assert len(client(server, timeout=2.0).files("demo")) == 2
        assert len(server.hits_of(server.page_path("demo"))) == 1  # the first never answered

    def test_timeouts_exhaust_the_retries(self, server: IndexServer) -> None:
        server.delay(server.page_path("demo"), seconds=60)
        with pytest.raises(IndexAccessError, match=r"(?i)timed out.*gave up after 2 attempts"):
            client(server, timeout=1.0, retries=1).files("demo")

    def test_truncated_json_once(self, server: IndexServer) -> None:
        server.truncate(server.page_path("demo"), times=1)
        assert len(client(server).files("demo")) == 2

    def test_truncated_json_always(self, server: IndexServer) -> None:
        server.truncate(server.page_path("demo"))
        with pytest.raises(IndexAccessError, match=r"invalid JSON.*gave up after 2 attempts"):
            client(server, retries=1).files("demo")

    def test_connection_cut_mid_body(self, server: IndexServer) -> None:
        server.cut(server.page_path("demo"), times=2)
        assert len(client(server).files("demo")) == 2
        assert len(server.hits_of(server.page_path("demo"))) == 3

    def test_connection_refused_fails_fast(self, monkeypatch: pytest.MonkeyPatch) -> None:
        with socket.socket() as probe:  # a port that nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        slept: list[float] = []
        monkeypatch.setattr("torchstack.index.simple.time.sleep", slept.append)
        index = SimpleIndex(f"http://127.0.0.1:{port}/simple/", retries=3, backoff=1.0)
        with pytest.raises(IndexUnreachableError, match="the host refuses connections"):
            index.files("demo")
        assert slept == []  # a refused port stays refused: no retry, no backoff

    def test_name_that_does_not_resolve_fails_fast(self,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
        slept: list[float] = []
        monkeypatch.setattr("torchstack.index.simple.time.sleep", slept.append)
        index = SimpleIndex("https://no-such-host.invalid/simple/", retries=3, backoff=1.0)
        with pytest.raises(IndexUnreachableError, match="the host name does not resolve"):
            index.files("demo")
        assert slept == []

    def test_5xx_on_the_metadata_file(self, server: IndexServer) -> None:
        index = client(server)
        file = demo(index)
        server.fail(server.metadata_path(file.filename), times=2, status=502)
        assert index.metadata(file)["Version"] == "1.0"
        assert [h.status for h in server.hits_of(server.metadata_path(file.filename))] == [
            502, 502, 200]


# -- metadata ----------------------------------------------------------------------------------


class TestMetadata:
    def test_announced_metadata_file(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        index = client(server)
        file = demo(index)
        message = index.metadata(file)
        assert message.items() == read_metadata(zip_metadata(wheels["demo-1.0"]))
        assert message.get_all("Requires-Dist") == list(REQUIRES)
        assert server.hits_of(server.file_path(file.filename)) == []  # the wheel untouched

    @pytest.mark.parametrize("mode", ["unannounced", "missing"], ids=str)
    def test_range_reads_when_no_metadata_file(self, server: IndexServer,
                                               wheels: dict[str, Path], mode: str) -> None:
        served = server.add_wheel(wheels["big"], metadata=mode)
        index = client(server)
        (file,) = index.files("bigdemo")
        before = index.bytes_transferred
        message = index.metadata(file)
        assert message.items() == read_metadata(zip_metadata(wheels["big"]))
        ranges = server.hits_of(server.file_path(served.filename))
        assert ranges and all(h.status == 206 and h.range for h in ranges)
        assert index.bytes_transferred - before < served.size / 20
        assert len(server.hits_of(server.metadata_path(served.filename))) == (mode == "missing")

    def test_unhashed_metadata_file(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        server.add_wheel(wheels["big"], metadata="unhashed")
        index = client(server)
        (file,) = index.files("bigdemo")
        assert file.core_metadata and file.metadata_sha256 is None
        assert index.metadata(file).get_all("Requires-Dist") == ["demo"]

    def test_wrong_metadata_hash(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        server.add_wheel(wheels["big"], metadata="wrong-hash")
        index = client(server)
        (file,) = index.files("bigdemo")
        with pytest.raises(WheelMetadataError, match=r"\.metadata' has sha256 .*the index says 0+"):
            index.metadata(file)

    def test_server_without_ranges(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        served = server.add_wheel(wheels["big"], metadata="unannounced")
        server.ranges = False
        index = client(server)
        (file,) = index.files("bigdemo")
        before = index.bytes_transferred
        with pytest.raises(RangeRequestError, match=r"does not do range requests.*HTTP 200"):
            index.metadata(file)
        assert index.bytes_transferred == before  # the whole file was not read
        assert len(server.hits_of(server.file_path(served.filename))) == 1  # nor retried

    def test_zip64(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        server.add_wheel(wheels["zip64"], metadata="unannounced")
        index = client(server)
        (file,) = index.files("zipsixtyfour")
        assert index.metadata(file).items() == read_metadata(zip_metadata(wheels["zip64"]))

    def test_truncated_range_retried(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        served = server.add_wheel(wheels["big"], metadata="unannounced")
        server.cut(server.file_path(served.filename), times=1)
        index = client(server)
        (file,) = index.files("bigdemo")
        assert index.metadata(file)["Name"] == "bigdemo"

    def test_not_a_zip(self, server: IndexServer) -> None:
        server.add("junk", "junk-1.0-py3-none-any.whl", b"no zip here" * 10, metadata="none")
        index = client(server)
        (file,) = index.files("junk")
        with pytest.raises(WheelMetadataError, match="not a zip file"):
            index.metadata(file)

    def test_sdist_without_metadata_file(self, server: IndexServer) -> None:
        server.add("junk", "junk-1.0.tar.gz", b"\x1f\x8b", metadata="none")
        index = client(server)
        (file,) = index.files("junk")
        with pytest.raises(WheelMetadataError, match=r"'junk-1.0.tar.gz' is not a wheel"):
            index.metadata(file)

    def test_file_url_from_a_remote_index_refused(self, server: IndexServer,
                                                  wheels: dict[str, Path]) -> None:
        forged = IndexFile("demo", wheels["demo-1.0"].name, wheels["demo-1.0"].as_uri(), None,
                           None, None, False, False)
        with pytest.raises(InsecureURLError, match="file://"):
            client(server).metadata(forged)


class TestZipDirectory:
    def test_several_dist_infos_pick_the_projects(self, tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "outer", "1.0", {
            "inner-2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: inner\nVersion: 2.0\n"})
        assert b"Name: outer" in file_dist_info_metadata(wheel, "outer")

    def test_no_metadata_member(self, tmp_path: Path) -> None:
        path = tmp_path / "bare-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("bare/__init__.py", b"")
        with pytest.raises(ZipDirectoryError, match=r"0 \*\.dist-info/METADATA members"):
            file_dist_info_metadata(path, "bare")

    def test_stored_member(self, tmp_path: Path) -> None:
        path = tmp_path / "plain-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr("plain-1.0.dist-info/METADATA", b"Name: plain\nVersion: 1.0\n")
        assert file_dist_info_metadata(path, "plain") == b"Name: plain\nVersion: 1.0\n"

    def test_corrupt_member(self, tmp_path: Path, wheels: dict[str, Path]) -> None:
        data = bytearray(wheels["demo-1.0"].read_bytes())
        with zipfile.ZipFile(wheels["demo-1.0"]) as archive:
            info = archive.getinfo("demo-1.0.dist-info/METADATA")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
        data[start:start + 4] = b"\xff\xff\xff\xff"
        path = tmp_path / wheels["demo-1.0"].name
        path.write_bytes(bytes(data))
        with pytest.raises(ZipDirectoryError, match="METADATA"):
            file_dist_info_metadata(path, "demo")


# -- whole-file hashes ------------------------------------------------------------------------


class TestDownloadSha256:
    def test_streams_and_checks(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        index = client(server)
        file = demo(index)
        expected = hashlib.sha256(wheels["demo-1.0"].read_bytes()).hexdigest()
        before = index.bytes_transferred
        assert index.download_sha256(file) == expected == file.sha256
        assert index.bytes_transferred - before == wheels["demo-1.0"].stat().st_size

    def test_without_a_listed_hash(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        served = server.add_wheel(wheels["big"], sha256="none")
        index = client(server)
        (file,) = index.files("bigdemo")
        assert file.sha256 is None
        assert index.download_sha256(file) == served.sha256

    def test_wrong_listed_hash(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        served = server.add_wheel(wheels["big"], sha256="wrong")
        index = client(server)
        (file,) = index.files("bigdemo")
        with pytest.raises(FileHashError, match=f"has sha256 {served.sha256}, the index says 0+"):
            index.download_sha256(file)

    def test_cut_download_retried(self, server: IndexServer, wheels: dict[str, Path]) -> None:
        served = server.add_wheel(wheels["big"])
        server.cut(server.file_path(served.filename), times=1)
        index = client(server)
        (file,) = index.files("bigdemo")
        assert index.download_sha256(file) == served.sha256
        assert len(server.hits_of(server.file_path(served.filename))) == 2


# -- local indexes --------------------------------------------------------------------------


def pep503_tree(root: Path, wheels: list[Path], metadata: dict[str, bytes]) -> Path:
    """root/simple/<project>/index.html linking ../../files/<wheel>, as /opt/pypi-more is."""
    (root / "files").mkdir()
    by_project: dict[str, list[str]] = {}
    for wheel in wheels:
        (root / "files" / wheel.name).write_bytes(wheel.read_bytes())
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        extra = ""
        if wheel.name in metadata:
            (root / "files" / (wheel.name + ".metadata")).write_bytes(metadata[wheel.name])
            digest_of_metadata = hashlib.sha256(metadata[wheel.name]).hexdigest()
            extra = f' data-core-metadata="sha256={digest_of_metadata}"'
        project = wheel.name.split("-")[0]
        by_project.setdefault(project, []).append(
            f'<a href="../../files/{wheel.name}#sha256={digest}"{extra}>{wheel.name}</a>')
    for project, links in by_project.items():
        (root / "simple" / project).mkdir(parents=True)
        (root / "simple" / project / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return root / "simple"


class TestLocalIndex:
    @pytest.fixture
    def tree(self, tmp_path: Path, wheels: dict[str, Path]) -> Path:
        sidecar = zip_metadata(wheels["demo-1.1"]) + b"Summary: from the metadata file\n"
        return pep503_tree(tmp_path, [wheels["demo-1.0"], wheels["demo-1.1"], wheels["big"]],
                           {wheels["demo-1.1"].name: sidecar})

    @pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
    def test_pep503_tree(self, tree: Path, wheels: dict[str, Path], as_url: bool) -> None:
        index = SimpleIndex(tree.as_uri() if as_url else str(tree))
        old, new = index.files("demo")
        assert old.url == (tree.parent / "files" / old.filename).as_uri()
        assert old.sha256 == hashlib.sha256(wheels["demo-1.0"].read_bytes()).hexdigest()
        assert index.metadata(old).items() == read_metadata(zip_metadata(wheels["demo-1.0"]))
        assert index.metadata(new)["Summary"] == "from the metadata file"
        assert index.download_sha256(old) == old.sha256
        assert index.bytes_transferred == 0

    def test_pep503_tree_wrong_metadata_file(self, tree: Path) -> None:
        index = SimpleIndex(str(tree))
        new = index.files("demo")[1]
        Path(new.url[len("file://"):] + ".metadata").write_bytes(b"Name: demo\nVersion: 9\n")
        with pytest.raises(WheelMetadataError, match="the index says"):
            index.metadata(new)

    def test_pep503_tree_missing_project(self, tree: Path) -> None:
        with pytest.raises(ProjectNotFoundError, match="'torch' is not in the index folder"):
            SimpleIndex(str(tree)).files("torch")

    def test_flat_folder(self, tmp_path: Path, wheels: dict[str, Path]) -> None:
        for wheel in (wheels["demo-1.0"], wheels["big"]):
            (tmp_path / wheel.name).write_bytes(wheel.read_bytes())
        (tmp_path / "notes.txt").write_text("not an archive\n")
        index = SimpleIndex(str(tmp_path))
        (found,) = index.files("demo")
        assert (found.filename, found.size, found.core_metadata) == (
            wheels["demo-1.0"].name, wheels["demo-1.0"].stat().st_size, False)
        assert found.sha256 == hashlib.sha256(wheels["demo-1.0"].read_bytes()).hexdigest()
        assert index.metadata(found).get_all("Requires-Dist") == list(REQUIRES)
        with pytest.raises(ProjectNotFoundError, match="'torch'"):
            index.files("torch")


# -- this machine's real wheels -------------------------------------------------------------


@pytest.fixture(scope="module")
def real_server(real_wheel: Any) -> Iterator[tuple[IndexServer, dict[str, Path]]]:
    """torch 2.13.0+cpu and torchvision 0.28.0, announced without their metadata files."""
    found = {key: real_wheel(key) for key in ("torch-2.13.0", "torchvision-0.28.0")}
    with IndexServer() as running:
        for wheel in found.values():
            running.add_wheel(wheel, metadata="unannounced")
        yield running, found


class TestRealWheels:
    @pytest.mark.parametrize(("key", "project"), [
        ("torch-2.13.0", "torch"), ("torchvision-0.28.0", "torchvision")], ids=str)
    def test_range_read_metadata(self, real_server: tuple[IndexServer, dict[str, Path]],
                                 key: str, project: str) -> None:
        server, wheels = real_server
        index = client(server)
        (file,) = index.files(project)
        assert not file.core_metadata
        message = index.metadata(file)
        assert message.items() == read_metadata(zip_metadata(wheels[key]))
        size = wheels[key].stat().st_size
        assert index.bytes_transferred < size / 50, (index.bytes_transferred, size)

    def test_torch_requirements_by_range(
            self, real_server: tuple[IndexServer, dict[str, Path]]) -> None:
        server, _ = real_server
        index = client(server)
        (file,) = index.files("torch")
        assert file.filename.startswith("torch-2.13.0+cpu-")
        requires = index.metadata(file).get_all("Requires-Dist") or []
        assert any(line.startswith("filelock") for line in requires)

    def test_download_sha256(self, real_server: tuple[IndexServer, dict[str, Path]]) -> None:
        server, wheels = real_server
        index = client(server)
        (file,) = index.files("torchvision")
        expected = hashlib.sha256(wheels["torchvision-0.28.0"].read_bytes()).hexdigest()
        assert index.download_sha256(file) == expected

    def test_flat_folder_of_real_wheels(self, tmp_path: Path,
                                        real_server: tuple[IndexServer, dict[str, Path]]) -> None:
        _, wheels = real_server
        wheel = wheels["torchvision-0.28.0"]
        (tmp_path / wheel.name).symlink_to(wheel)
        index = SimpleIndex(tmp_path.as_uri())
        (file,) = index.files("torchvision")
        assert index.metadata(file).items() == read_metadata(zip_metadata(wheel))
