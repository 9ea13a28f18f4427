"""torch/version.py as torch writes it, as people damage it, and as hypothesis makes it up.

`cuda` decides the flavour a provider serves (cpu, cu12, cu13): a string that is no version
must be refused (one line naming the file, exit 2), never read as CPU-only and never a
traceback; a number is the version it spells (`cuda = 12` is CUDA 12). A version.py that does
not parse is refused with its path. Each case runs from a wheel and from an installed tree.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.badinput import assert_one_error, run_cli
from support.synthetic import SyntheticLibs, install_tree, write_wheel

pytest_plugins = ["support.synthetic"]

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)
CUDA_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")  # what a CUDA version is: dotted numbers


def torch_with(directory: Path, libs: SyntheticLibs, text: str, layout: str) -> Path:
    """A torch 2.13.0 wheel (or its installed tree) whose version.py is `text`."""
    files = {"torch/version.py": text.encode("utf-8", "surrogatepass"),
             "torch/lib/libc10.so": libs.read("cxx11/libc10.so")}
    wheel = write_wheel(directory, "torch", "2.13.0", files)
    return wheel if layout == "wheel" else install_tree(wheel, directory / "site-packages")


def fingerprint_json(path: Path) -> tuple[int, dict[str, Any] | None, str]:
    code, out, err = run_cli(["fingerprint", "--json", str(path)])
    return code, (json.loads(out) if code == 0 else None), err


def version_py(cuda_source: str | None, hip_source: str = "None") -> str:
    lines = ["from typing import Optional", "__version__ = '2.13.0'"]
    if cuda_source is not None:
        lines.append(f"cuda: Optional[str] = {cuda_source}")
    lines.append(f"hip: Optional[str] = {hip_source}")
    return "\n".join(lines) + "\n"


LAYOUTS = pytest.mark.parametrize("layout", ["wheel", "tree"])


class TestCuda:
    @LAYOUTS
    @pytest.mark.parametrize(
        ("source", "cuda", "flavour"),
        [
            ("'12.8'", "12.8", "cu12"),  # as torch writes it
            ("'13.0'", "13.0", "cu13"),
            ("'13'", "13", "cu13"),
            ("12", "12", "cu12"),  # an integer: CUDA 12, not CPU-only
            ("13", "13", "cu13"),
            ("12.8", "12.8", "cu12"),  # a float
            ("None", None, "cpu"),  # a CPU build
            ("''", None, "cpu"),
            (None, None, "cpu"),  # no cuda line at all (very old torch)
        ],
    )
    def test_accepted(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path, layout: str,
        source: str | None, cuda: str | None, flavour: str,
    ) -> None:
        code, found, err = fingerprint_json(
            torch_with(tmp_path, synthetic_libs, version_py(source), layout))
        assert code == 0 and found is not None, err
        assert found["torch"]["cuda"] == cuda
        assert found["cuda_major"] == (int(cuda.split(".")[0]) if cuda else None)
        assert str(found["abi_tag"]).endswith(f"-{flavour}")

    @LAYOUTS
    @pytest.mark.parametrize(
        "source",
        [
            "'abc'", "'.13'", "'12.'", "'12..8'", "'cu128'", "'12.8 '", "' 12.8'", "'12.8\\n'",
            "'١٢'",  # Arabic-Indic digits: \d, but no CUDA version
            "True", "-12", "'1' + '2'", "get_cuda()", "[12]", "b'12'", "12j", "1e400", "1e-05",
        ],
    )
    def test_refused(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path, layout: str, source: str
    ) -> None:
        code, _, err = fingerprint_json(
            torch_with(tmp_path, synthetic_libs, version_py(source), layout))
        assert_one_error(code, err, "torch/version.py", "cuda")

    @LAYOUTS
    @pytest.mark.parametrize(
        ("source", "flavour"),
        [("'6.4.43484-123'", "rocm6.4"), ("'7.0'", "rocm7.0"), ("'abc'", None), ("'.6'", None),
         ("False", None)],
    )
    def test_hip(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path, layout: str, source: str,
        flavour: str | None,
    ) -> None:
        code, found, err = fingerprint_json(
            torch_with(tmp_path, synthetic_libs, version_py("None", source), layout))
        if flavour is None:
            assert_one_error(code, err, "torch/version.py", "hip")
        else:
            assert code == 0 and found is not None, err
            assert str(found["abi_tag"]).endswith(f"-{flavour}")

    @settings(PROPERTY)
    @given(text=st.text(max_size=12))
    def test_any_string(
        self, synthetic_libs: SyntheticLibs, tmp_path_factory: pytest.TempPathFactory, text: str
    ) -> None:
        # a version string is taken as it is; anything else is refused
        directory = tmp_path_factory.getbasetemp() / "cuda-strings"
        code, found, err = fingerprint_json(
            torch_with(directory, synthetic_libs, version_py(repr(text)), "wheel"))
        if text == "" or CUDA_VERSION.fullmatch(text):
            assert code == 0 and found is not None, err
            assert found["torch"]["cuda"] == (text or None)
        else:
            assert_one_error(code, err, "torch/version.py", "cuda")

    @settings(PROPERTY)
    @given(number=st.one_of(st.integers(0, 10**6), st.floats(min_value=0, allow_nan=False)))
    def test_any_number(
        self, synthetic_libs: SyntheticLibs, tmp_path_factory: pytest.TempPathFactory,
        number: float,
    ) -> None:
        # a number is the version it spells: 12 is '12', 12.8 is '12.8'; 1e+100 spells none
        directory = tmp_path_factory.getbasetemp() / "cuda-numbers"
        spelled = repr(number)
        code, found, err = fingerprint_json(
            torch_with(directory, synthetic_libs, version_py(spelled), "wheel"))
        if CUDA_VERSION.fullmatch(spelled) and not math.isinf(number):
            assert code == 0 and found is not None, err
            assert found["cuda_major"] == int(spelled.split(".")[0])
        else:
            assert_one_error(code, err, "torch/version.py", "cuda")


class TestDoesNotParse:
    @LAYOUTS
    @pytest.mark.parametrize(
        "text",
        [
            "__version__ = (\n",  # a syntax error
            "__version__ = '2.13.0'\x00\n",  # a NUL byte
            "x = " + "(" * 5000 + "\n",  # nested too deeply for the parser
            "x = " + "-" * 200000 + "1\n",  # too deep for the compiler's stack
            "\tcuda = '12.8'\n",  # an indentation error
        ],
        ids=["syntax", "nul", "nested", "unary-chain", "indent"],
    )
    def test_names_the_file(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path, layout: str, text: str
    ) -> None:
        code, _, err = fingerprint_json(torch_with(tmp_path, synthetic_libs, text, layout))
        assert_one_error(code, err, "torch/version.py'", "does not parse")
