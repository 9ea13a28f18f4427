"""The index client's bounds and words against the real local server (test/support/indexserver.py):
deadlines against trickling servers, size caps against gzip and METADATA bombs, credentials
kept out of everything recorded, and what a 404 or a login page is called.

Caps and deadlines are passed small to SimpleIndex so that each fault costs well under a
second; one case per bomb also runs with the default caps, as generate uses them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.indexserver import JSON_TYPE, IndexServer, metadata_bomb
from support.wheelbuild import build_wheel

from torchstack.errors import TorchstackError
from torchstack.generator import render
from torchstack.index import _zipdir, catalog
from torchstack.index.protocol import (
    IndexAccessError,
    IndexFile,
    ProjectNotFoundError,
    SizeLimitError,
    WheelMetadataError,
)
from torchstack.index.simple import SimpleIndex, redact

SECRET = "s3cr%3At"  # percent-quoted in the URL: the password is "s3cr:t"
MiB = 1 << 20


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheels"), "demo", "1.0",
                       {"demo/__init__.py": b"x = 1\n" * 200}, ("torch>=2",))


@pytest.fixture
def server(demo: Path) -> Iterator[IndexServer]:
    with IndexServer([demo]) as running:
        yield running


def fast(server: IndexServer, **options: Any) -> SimpleIndex:
    settings: dict[str, Any] = {"timeout": 10.0, "deadline": 0.5, "retries": 1, "backoff": 0.0,
                                **options}
    return SimpleIndex(server.index_url, **settings)


def only_range_reads(server: IndexServer) -> None:
    """Serve no PEP 658 file: metadata must come from range reads of the wheel."""
    for served in server.files_of("demo"):
        served.metadata = "none"


# Each way a request is made, with the path its fault goes on.
REQUESTS: dict[str, tuple[Callable[[IndexServer], str], Callable[[SimpleIndex], object]]] = {
    "page": (lambda s: s.page_path("demo"), lambda i: i.files("demo")),
    "metadata-file": (lambda s: s.metadata_path("demo-1.0-py3-none-any.whl"),
                      lambda i: i.metadata(i.files("demo")[0])),
    "range-read": (lambda s: s.file_path("demo-1.0-py3-none-any.whl"),
                   lambda i: i.metadata(i.files("demo")[0])),
    "download": (lambda s: s.file_path("demo-1.0-py3-none-any.whl"),
                 lambda i: i.download_sha256(i.files("demo")[0])),
}


class TestDeadline:
    """requests' timeout bounds each read; a trickle passes it for ever. The deadline does not."""

    @pytest.mark.parametrize("headers", [False, True], ids=["body", "headers"])
    @pytest.mark.parametrize("request_kind", list(REQUESTS))
    def test_trickle_cut_at_the_deadline(self, server: IndexServer, request_kind: str,
                                         headers: bool) -> None:
        path, call = REQUESTS[request_kind]
        if request_kind == "range-read":
            only_range_reads(server)
        server.trickle(path(server), 0.05, headers=headers)
        index = fast(server)
        # the error says the deadline cut both attempts (no timing threshold here: the
        # trickle would otherwise pass requests' per-read timeout for ever)
        with pytest.raises(IndexAccessError, match=r"no complete answer within the deadline of "
                                                   r"0\.5 s per request \(gave up after 2 "
                                                   r"attempts\)"):
            call(index)
        assert len(server.hits_of(path(server))) == 2

    def test_a_missed_deadline_is_retried(self, server: IndexServer) -> None:
        server.trickle(server.page_path("demo"), 0.05, times=2)
        assert len(fast(server, retries=2).files("demo")) == 1
        assert len(server.hits_of(server.page_path("demo"))) == 3

    def test_a_slow_but_steady_answer_within_the_deadline(self, server: IndexServer) -> None:
        server.delay(server.page_path("demo"), 0.2)
        assert len(fast(server, deadline=2.0).files("demo")) == 1

    def test_no_deadline_when_none(self, server: IndexServer) -> None:
        server.delay(server.page_path("demo"), 0.3, times=1)
        assert len(fast(server, deadline=None).files("demo")) == 1


class TestSizeCaps:
    @pytest.mark.parametrize(("bomb", "cap", "limit"), [
        (16 * MiB, {"max_page": MiB}, r"1 MiB \(max_page\)"),
        (1 << 30, {}, r"64 MiB \(max_page\)"),  # the default cap against a 1 GiB page
    ], ids=["small-cap", "default-1GiB"])
    def test_gzip_bomb_page(self, server: IndexServer, bomb: int, cap: dict[str, int],
                            limit: str) -> None:
        server.gzip_bomb(server.page_path("demo"), bomb)
        index = fast(server, deadline=30.0, **cap)
        with pytest.raises(SizeLimitError, match=rf"the project page is larger than the limit "
                                                 rf"of {limit}; not read further"):
            index.files("demo")
        assert index.bytes_transferred < bomb // 500  # stopped early: a fraction of the bomb
        assert len(server.hits) == 1  # a size limit is final: no retry

    def test_gzip_bomb_metadata_file(self, server: IndexServer) -> None:
        server.gzip_bomb(server.metadata_path("demo-1.0-py3-none-any.whl"), 16 * MiB)
        index = fast(server, max_metadata=MiB)
        with pytest.raises(SizeLimitError, match=r"METADATA file is larger than the limit of "
                                                 r"1 MiB \(max_metadata\)"):
            index.metadata(index.files("demo")[0])

    @pytest.mark.parametrize(("inflated", "claimed", "cap", "message"), [
        (1 << 30, None, None, r"is 1073741824 bytes, over the limit of 8 MiB"),
        (1 << 30, 300, None, r"inflates to more than the limit of 8 MiB"),
        (16 * MiB, None, MiB, r"is 16777216 bytes, over the limit of 1 MiB"),
        (16 * MiB, 300, MiB, r"inflates to more than the limit of 1 MiB"),
    ], ids=["honest-1GiB", "lying-1GiB", "honest-small-cap", "lying-small-cap"])
    def test_metadata_bomb_by_range(self, server: IndexServer, inflated: int,
                                    claimed: int | None, cap: int | None, message: str) -> None:
        server.add("bomb", "bomb-1.0-py3-none-any.whl",
                   metadata_bomb("bomb", "1.0", inflated, claimed),
                   metadata="none", metadata_bytes=b"")
        index = fast(server, deadline=30.0, **({"max_metadata": cap} if cap else {}))
        with pytest.raises(WheelMetadataError, match=message + r" for a METADATA file"):
            index.metadata(index.files("bomb")[0])
        assert index.bytes_transferred < 2 * MiB

    def test_zip_directory_cap(self, demo: Path) -> None:
        with pytest.raises(_zipdir.ZipDirectoryError, match="over the limit of 64 bytes"):
            data = demo.read_bytes()
            _zipdir.read_dist_info_metadata(lambda o, n: data[o:o + n], len(data),
                                            data[-_zipdir.TAIL:], "demo", max_directory=64)

    def test_local_page_cap(self, tmp_path: Path) -> None:
        (tmp_path / "demo").mkdir()
        (tmp_path / "demo" / "index.html").write_bytes(b"<a href='d-1.tar.gz'>d</a>" * 100)
        with pytest.raises(SizeLimitError, match="larger than the limit of 1 KiB"):
            SimpleIndex(str(tmp_path), max_page=1024).files("demo")


class TestCredentials:
    @pytest.fixture
    def guarded(self, server: IndexServer) -> IndexServer:
        server.credentials = ("user", "s3cr:t")
        return server

    def with_credentials(self, server: IndexServer, **options: Any) -> SimpleIndex:
        settings: dict[str, Any] = {"timeout": 10.0, "deadline": 5.0, "retries": 1,
                                    "backoff": 0.0, **options}
        return SimpleIndex(server.index_url.replace("http://", f"http://user:{SECRET}@"),
                           **settings)

    @pytest.mark.parametrize("range_reads", [False, True], ids=["metadata-file", "ranges"])
    def test_used_for_every_request_recorded_nowhere(self, guarded: IndexServer,
                                                     range_reads: bool) -> None:
        if range_reads:
            only_range_reads(guarded)
        index = self.with_credentials(guarded)
        (found,) = index.files("demo")
        assert index.metadata(found)["Name"] == "demo"
        assert index.download_sha256(found) == found.sha256
        assert index.location == guarded.index_url and index.has_credentials
        assert found.url == guarded.url + guarded.file_path(found.filename)
        assert {hit.status for hit in guarded.hits} <= {200, 206}
        assert all(hit.authorization for hit in guarded.hits)
        assert "s3cr" not in repr(found) + index.location

    def test_without_them(self, guarded: IndexServer) -> None:
        with pytest.raises(IndexAccessError, match=r"answered HTTP 401, 200 expected "
                                                   r"\(credentials needed or refused\)"):
            fast(guarded).files("demo")

    @pytest.mark.parametrize("fault", ["fail", "trickle", "missing"])
    def test_never_in_messages(self, guarded: IndexServer, fault: str) -> None:
        path = guarded.page_path("demo")
        if fault == "fail":
            guarded.fail(path, times=None)
        elif fault == "trickle":
            guarded.trickle(path, 0.05)
        index = self.with_credentials(guarded, **({"deadline": 0.3} if fault == "trickle"
                                                  else {}))
        with pytest.raises(TorchstackError) as caught:
            index.files("nothing" if fault == "missing" else "demo")
        assert "s3cr" not in str(caught.value) and "user:" not in str(caught.value)

    def test_not_sent_to_another_host(self, guarded: IndexServer, demo: Path) -> None:
        with IndexServer([demo]) as mirror:
            guarded.redirect(guarded.page_path("demo"), mirror.index_url + "demo/")
            assert len(self.with_credentials(guarded).files("demo")) == 1
            assert [hit.authorization for hit in mirror.hits] == [None]

    def test_learnt_from_a_page_and_stripped(self, guarded: IndexServer) -> None:
        auth_url = guarded.url.replace("http://", f"http://user:{SECRET}@")
        page = ('{"meta": {"api-version": "1.1"}, "files": [{"filename": '
                '"demo-1.0-py3-none-any.whl", "url": "AUTH/files/demo-1.0-py3-none-any.whl", '
                '"hashes": {}}]}').replace("AUTH", auth_url)
        guarded.credentials = None  # the page is public, the files are not
        guarded.answer(guarded.page_path("demo"), 200, page.encode(), JSON_TYPE)
        index = fast(guarded)
        (found,) = index.files("demo")
        assert found.url == guarded.url + "/files/demo-1.0-py3-none-any.whl"
        guarded.credentials = ("user", "s3cr:t")
        assert index.metadata(found)["Name"] == "demo"

    @settings(max_examples=100, deadline=None)
    @given(user=st.text("abcxyz019-._~%!$&'()*+,;=:", min_size=1, max_size=12),
           password=st.text("abcxyz019-._~%!$&'()*+,;=:@", max_size=12))
    def test_rendered_without_them(self, user: str, password: str) -> None:
        url = f"https://{user}:{password}@files.example.org/t/demo-1.0-py3-none-any.whl"
        file = IndexFile("demo", "demo-1.0-py3-none-any.whl", url, "ab" * 32, 1, None, False,
                         False)
        source = render.source(file)
        assert source.url == "https://files.example.org/t"
        assert redact(f"see {url} and {url}") == (
            "see https://files.example.org/t/demo-1.0-py3-none-any.whl and "
            "https://files.example.org/t/demo-1.0-py3-none-any.whl")

    @pytest.mark.parametrize("unreachable", [False, True], ids=["answered", "failed"])
    def test_recorded_without_them(self, guarded: IndexServer, tmp_path: Path,
                                   unreachable: bool) -> None:
        index = self.with_credentials(guarded)
        if unreachable:
            guarded.fail(guarded.page_path("demo"), times=None, status=503)
        recorder = catalog.RecordingIndex(index)
        try:
            recorder.metadata(recorder.files("demo")[0])
        except IndexAccessError:
            assert unreachable
        written = catalog.save("9.9", [recorder], tmp_path).read_text()
        assert "s3cr" not in written and "user:" not in written
        assert guarded.index_url in written


class TestWhatHappened:
    def test_404_named(self, server: IndexServer) -> None:
        with pytest.raises(ProjectNotFoundError, match=rf"^{server.index_url}torch/ answered "
                                                       r"HTTP 404 for torch$"):
            fast(server).files("torch")

    @pytest.mark.parametrize("page", [
        b'<html><body><form method="post"><input type="password" name="p"></form></body></html>',
        b"<html><body><h1>Welcome</h1><a href='/login'>Sign in</a></body></html>",
    ], ids=["password-form", "portal"])
    def test_login_page_named_not_retried(self, server: IndexServer, page: bytes) -> None:
        server.answer(server.page_path("demo"), 200, page, "text/html; charset=utf-8")
        with pytest.raises(IndexAccessError, match=r"answered a page that is not a simple "
                                                   r"index \(.*a login page\?\)$"):
            fast(server, retries=3).files("demo")
        assert len(server.hits) == 1

    def test_mistyped_json_named_not_retried(self, server: IndexServer) -> None:
        server.answer(server.page_path("demo"), 200,
                      b'{"meta": [], "files": []}', JSON_TYPE)
        with pytest.raises(IndexAccessError, match=r"'meta' is a list, not an object"):
            fast(server, retries=3).files("demo")
        assert len(server.hits) == 1
