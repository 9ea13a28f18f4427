"""torchstack.distributions: core metadata headers, project names, a wheel's top-level modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from support.wheelbuild import build_wheel

from torchstack.distributions import (
    DistributionError,
    importable_top_level,
    normalize_name,
    parse_headers,
)

EXT = ".cpython-311-x86_64-linux-gnu.so"


class TestParseHeaders:
    def test_lower_cased_names_values_in_order(self) -> None:
        text = (
            "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n"
            "Requires-Dist: filelock\nREQUIRES-DIST: sympy>=1.13.3\n"
            "Requires-Dist: nvidia-cuda-runtime==13.0.96; platform_system == \"Linux\"\n"
        )
        assert parse_headers(text) == {
            "metadata-version": ["2.1"],
            "name": ["torch"],
            "version": ["2.13.0+cpu"],
            "requires-dist": [
                "filelock", "sympy>=1.13.3",
                'nvidia-cuda-runtime==13.0.96; platform_system == "Linux"',
            ],
        }

    @pytest.mark.parametrize(
        ("text", "key", "expected"),
        [
            # a value folded onto an indented line (RFC 822), joined with one space
            ("Name: x\nSummary: first half\n  second half\n", "summary",
             ["first half second half"]),
            # tab-indented continuations, several of them
            ("Summary: a\n\tb\n\tc\nName: x\n", "summary", ["a b c"]),
            # a folded line continues the last of repeated headers
            ("Requires-Dist: a\nRequires-Dist: b;\n   extra == 'x'\n", "requires-dist",
             ["a", "b; extra == 'x'"]),
            # a colon inside the value stays in the value
            ("Home-page: https://pytorch.org\n", "home-page", ["https://pytorch.org"]),
            # spaces around name and value are dropped
            ("Name :  torch  \n", "name", ["torch"]),
        ],
        ids=["folded", "folded-tabs", "folded-repeated", "colon-in-value", "spaces"],
    )
    def test_header(self, text: str, key: str, expected: list[str]) -> None:
        assert parse_headers(text)[key] == expected

    def test_stops_at_the_body(self) -> None:
        text = "Name: x\nVersion: 1\n\nRequires-Dist: not-a-header\nthe description\n"
        assert parse_headers(text) == {"name": ["x"], "version": ["1"]}

    def test_skips_lines_without_a_colon(self) -> None:
        assert parse_headers("garbage\nName: x\n") == {"name": ["x"]}

    def test_indented_first_line_is_not_a_continuation(self) -> None:
        assert parse_headers("  Name: x\n") == {"name": ["x"]}

    def test_crlf_line_ends(self) -> None:
        assert parse_headers("Name: x\r\nVersion: 1\r\n\r\nbody\r\n") == {
            "name": ["x"], "version": ["1"],
        }

    def test_empty(self) -> None:
        assert parse_headers("") == {}


class TestNormalizeName:
    @pytest.mark.parametrize(
        "name",
        [
            "torch",  # already normal
            "Django",  # case
            "oslo.concurrency",  # a dot
            "typing_extensions",  # an underscore
            "nvidia-cuda-runtime-cu12",  # hyphens stay
            "NVIDIA_CUDNN_CU13",  # upper case and underscores
            "ruamel.yaml.clib",  # several dots
            "Foo__Bar",  # a run of one separator
            "a-_.-b",  # a run of mixed separators
            "zope.interface",  # PEP 503's own example style
            "pytorch-triton-rocm",  # a ROCm wheel
            "x.",  # a trailing separator
        ],
        ids=[
            "normal", "case", "dot", "underscore", "hyphens", "upper-underscores", "dots",
            "double-underscore", "mixed-run", "zope", "rocm", "trailing",
        ],
    )
    def test_agrees_with_packaging(self, name: str) -> None:
        assert normalize_name(name) == canonicalize_name(name)


class TestImportableTopLevel:
    @pytest.mark.parametrize(
        ("files", "expected"),
        [
            # a package
            ({"torchvision/__init__.py": b"", "torchvision/io.py": b""}, ["torchvision"]),
            # a top-level module
            ({"six.py": b""}, ["six"]),
            # a top-level extension module
            ({f"fastpkg{EXT}": b"\x7fELF"}, ["fastpkg"]),
            # several, sorted, each once
            ({"b/__init__.py": b"", "a.py": b"", "b/c/__init__.py": b""}, ["a", "b"]),
            # private modules are not imported by the check
            ({"_private.py": b"", "_ext/__init__.py": b"", "pub/__init__.py": b""}, ["pub"]),
            # vendored libraries (auditwheel's .libs) are not modules
            ({"pkg/__init__.py": b"", "pkg.libs/libgomp-1.so": b"\x7fELF"}, ["pkg"]),
            # a .pth file and a data file are not modules
            ({"distutils-precedence.pth": b"", "LICENSE.txt": b""}, []),
            # a namespace-only layout (nvidia-* wheels): nothing to import by itself
            ({"nvidia/cu13/lib/libcudart.so.13": b"\x7fELF",
              "nvidia/cu13/include/cuda.h": b""}, []),
            # a metapackage: only its dist-info
            ({}, []),
        ],
        ids=[
            "package", "module", "extension", "several", "private", "vendored-libs",
            "pth-and-data", "namespace-only", "metapackage",
        ],
    )
    def test_modules(self, tmp_path: Path, files: dict[str, bytes], expected: list[str]) -> None:
        wheel = build_wheel(tmp_path, "demo", "1.0", files, requires=("torch",))
        assert importable_top_level(wheel) == expected

    def test_data_folder_is_not_a_module(self, tmp_path: Path) -> None:
        files = {"demo-1.0.data/scripts/run.py": b"", "demo/__init__.py": b""}
        assert importable_top_level(build_wheel(tmp_path, "demo", "1.0", files)) == ["demo"]

    def test_not_a_wheel_raises(self, tmp_path: Path) -> None:
        path = tmp_path / "demo-1.0-py3-none-any.whl"
        path.write_bytes(b"not a zip")
        with pytest.raises(DistributionError, match=r"is not a readable wheel"):
            importable_top_level(path)
