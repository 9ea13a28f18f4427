"""Credentials in index URLs whose password holds '/', '#', '?' or '@': read as a user meant them
or refused before any request, and never shown, whole or in part, against the real local
server (test/support/indexserver.py) and a host that is not there."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.indexserver import IndexServer
from support.wheelbuild import build_wheel

from torchstack.errors import TorchstackError
from torchstack.index import _userinfo
from torchstack.index.protocol import IndexAccessError
from torchstack.index.simple import SimpleIndex, redact

PASSWORD = "Xq7/Zt9#Kw3?Vb5@Mn1"
PIECES = ("Xq7", "Zt9", "Kw3", "Vb5", "Mn1")  # none of them may be shown
ENCODED = "Xq7%2FZt9%23Kw3%3FVb5%40Mn1"


def shows_no_secret(text: str) -> bool:
    return not any(piece in text for piece in PIECES)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheels"), "demo", "1.0",
                       {"demo/__init__.py": b"x = 1\n"}, ())


@pytest.fixture
def guarded(demo: Path) -> Iterator[IndexServer]:
    with IndexServer([demo]) as server:
        server.credentials = ("user", PASSWORD)
        yield server


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def typed(server_url: str, password: str) -> str:
    return server_url.replace("://", f"://user:{password}@", 1)


def fast(location: str) -> SimpleIndex:
    return SimpleIndex(location, timeout=5.0, deadline=5.0, retries=1, backoff=0.0)


class TestRedact:
    @pytest.mark.parametrize(("text", "shown"), [
        # pip's form: dropped up to the last '@' of the authority
        ("https://user:pw@host/simple/", "https://host/simple/"),
        ("see https://u:p@ss@host:8443/s/ and http://v:q@127.0.0.1/x",
         "see https://host:8443/s/ and http://127.0.0.1/x"),
        ("https://user:Xq7%2FZt9%23Kw3@host/simple/", "https://host/simple/"),
        # '/', '?', '#' unencoded: the authority ends early, the rest up to the last '@' hidden
        ("'https://user:Xq7/Zt9#Kw3?Vb5@Mn1@host/simple/torch/': failed",
         "'https://***@host/simple/torch/': failed"),
        ("https://user:Xq7?Zt9@host/", "https://***@host/"),
        ("https://user:Xq7#Zt9@host/", "https://***@host/"),
        ("https://us/er:Xq7@host/", "https://***@host/"),
        # '@' in the authority and after it: the later one ends what is hidden
        ("https://user:Xq7@Zt9/Kw3@host/", "https://***@host/"),
        # shown again: unchanged
        ("https://***@host/simple/", "https://***@host/simple/"),
        ("https://host/simple/ file:///srv/a@b/", "https://host/simple/ file:///srv/a@b/"),
        ("no URL: a@b", "no URL: a@b"),
    ], ids=["pip", "two-urls", "encoded", "all-four", "query", "fragment", "slash-in-user",
            "at-then-slash", "redacted-twice", "no-credentials", "no-url"])
    def test_shown(self, text: str, shown: str) -> None:
        assert redact(text) == shown
        assert redact(shown) == shown


class TestTyped:
    @pytest.mark.parametrize("password", ["Xq7/Zt9#Kw3?Vb5@Mn1", "Xq7?Zt9@Kw3", "Xq7#Zt9",
                                          "Xq7/Zt9"], ids=["all", "query", "fragment", "slash"])
    def test_unencoded_refused_before_any_request(self, guarded: IndexServer,
                                                  password: str) -> None:
        with pytest.raises(IndexAccessError, match=r"^'http://\*\*\*@127\.0\.0\.1:\d+/simple/': "
                                                   r"an '@' after the host part; .*%2F") as caught:
            fast(typed(guarded.index_url, password))
        assert shows_no_secret(str(caught.value)) and guarded.hits == []

    def test_unencoded_to_a_host_that_is_not_there(self) -> None:
        with pytest.raises(IndexAccessError) as caught:
            fast(f"https://user:{PASSWORD}@nohost.invalid/simple/")
        assert shows_no_secret(str(caught.value))

    def test_encoded_used(self, guarded: IndexServer) -> None:
        index = fast(typed(guarded.index_url, ENCODED))
        (found,) = index.files("demo")
        assert index.metadata(found)["Name"] == "demo"
        assert index.location == guarded.index_url
        assert all(hit.authorization for hit in guarded.hits)

    @pytest.mark.parametrize("where", ["closed-port", "no-such-host", "refused", "missing"])
    def test_encoded_never_shown(self, guarded: IndexServer, where: str,
                                 caplog: pytest.LogCaptureFixture) -> None:
        location = {"closed-port": f"http://127.0.0.1:{closed_port()}/simple/",
                    "no-such-host": "https://nohost.invalid/simple/"}.get(where,
                                                                          guarded.index_url)
        if where == "refused":
            guarded.credentials = ("user", "another")
        caplog.set_level(logging.DEBUG)
        with pytest.raises(TorchstackError) as caught:
            fast(typed(location, ENCODED)).files("nothing" if where == "missing" else "demo")
        shown = str(caught.value) + caplog.text
        assert shows_no_secret(shown) and "Xq7" not in shown and "user:" not in shown


class TestSplit:
    @pytest.mark.parametrize(("url", "clean", "credentials"), [
        ("https://user:p@ss@host/s/", "https://host/s/", ("user", "p@ss")),
        (f"https://user:{ENCODED}@host/s/", "https://host/s/", ("user", PASSWORD)),
        ("https://host/s/", "https://host/s/", None),
        ("https://cdn.example/a@b/f.whl", "https://cdn.example/a@b/f.whl", None),
    ], ids=["raw-at", "encoded", "none", "at-in-path-of-a-file-url"])
    def test_split(self, url: str, clean: str, credentials: tuple[str, str] | None) -> None:
        assert _userinfo.split_userinfo(url) == (clean, credentials)

    def test_a_file_url_keeps_its_at(self) -> None:
        assert not _userinfo.misplaced("file:///srv/a@b/simple/")
