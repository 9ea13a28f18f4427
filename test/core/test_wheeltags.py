"""torchstack.wheeltags: which wheel filenames fit a Python version on this host's architecture.

The manylinux tags a host accepts come from its own glibc, so the cases use this machine's
architecture (`HOST`) and a foreign one (`OTHER`), and manylinux levels every current
distribution meets (2.17, 2.28).
"""

from __future__ import annotations

import platform

import pytest
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename

from torchstack.errors import TorchstackError
from torchstack.wheeltags import WheelTagError, misfit, supported_tags

HOST = platform.machine()
OTHER = "aarch64" if HOST == "x86_64" else "x86_64"
PY311 = (3, 11)


class TestSupportedTags:
    def test_holds_the_interpreter_abi3_and_pure_tags(self) -> None:
        found = supported_tags(PY311, HOST)
        assert Tag("cp311", "cp311", f"linux_{HOST}") in found
        assert Tag("cp39", "abi3", f"linux_{HOST}") in found
        assert Tag("py3", "none", "any") in found
        assert Tag("cp311", "none", "any") in found

    def test_holds_no_other_python_or_architecture(self) -> None:
        found = supported_tags(PY311, HOST)
        assert not [t for t in found if t.interpreter in ("cp312", "cp310") and t.abi != "abi3"]
        assert not [t for t in found if t.platform.endswith(OTHER)]

    def test_manylinux_tags_of_the_host(self) -> None:
        # the host's glibc admits manylinux2014 (glibc 2.17) on any current distribution
        assert Tag("cp311", "cp311", f"manylinux_2_17_{HOST}") in supported_tags(PY311, HOST)


class TestMisfit:
    @pytest.mark.parametrize(
        ("filename", "python_version"),
        [
            # a CPython 3.11 manylinux wheel of the host's architecture
            (f"numpy-2.3.0-cp311-cp311-manylinux_2_28_{HOST}.whl", PY311),
            # a pure-Python wheel fits any Python 3 anywhere
            ("six-1.17.0-py3-none-any.whl", PY311),
            # a py2.py3 compressed tag set
            ("six-1.16.0-py2.py3-none-any.whl", PY311),
            # the stable ABI of 3.9 is offered by 3.11
            (f"cryptography-45.0.0-cp39-abi3-manylinux_2_17_{HOST}.manylinux2014_{HOST}.whl",
             PY311),
            # a local version, URL-encoded as download.pytorch.org serves it
            (f"torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_{HOST}.whl", PY311),
            # the same with lower-case hex digits, equally valid percent-encoding (RFC 3986)
            (f"torch-2.13.0%2bcpu-cp311-cp311-manylinux_2_28_{HOST}.whl", PY311),
            # a local version with a literal plus
            (f"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_{HOST}.whl", PY311),
            # a 3.12 wheel for Python 3.12
            (f"torch-2.13.0-cp312-cp312-manylinux_2_28_{HOST}.whl", (3, 12)),
        ],
        ids=[
            "cp311-manylinux-host-arch", "py3-none-any", "py2.py3-none-any", "cp39-abi3-on-3.11",
            "local-version-%2B", "local-version-%2b", "local-version-plus", "cp312-on-3.12",
        ],
    )
    def test_fits(self, filename: str, python_version: tuple[int, int]) -> None:
        assert misfit(filename, python_version, HOST) is None

    @pytest.mark.parametrize(
        ("filename", "python_version", "offered"),
        [
            # built for another CPython
            (f"torch-2.13.0-cp312-cp312-manylinux_2_28_{HOST}.whl", PY311,
             f"cp312-cp312-manylinux_2_28_{HOST}"),
            # built for another architecture
            (f"torch-2.13.0-cp311-cp311-manylinux_2_28_{OTHER}.whl", PY311,
             f"cp311-cp311-manylinux_2_28_{OTHER}"),
            # a stable-ABI wheel needs at least the Python it names
            (f"ext-1.0-cp312-abi3-manylinux_2_17_{HOST}.whl", PY311,
             f"cp312-abi3-manylinux_2_17_{HOST}"),
            # macOS
            ("torch-2.13.0-cp311-none-macosx_11_0_arm64.whl", PY311,
             "cp311-none-macosx_11_0_arm64"),
            # the URL-encoded local version, for another Python
            (f"torch-2.13.0%2Bcpu-cp310-cp310-manylinux_2_28_{HOST}.whl", PY311,
             f"cp310-cp310-manylinux_2_28_{HOST}"),
        ],
        ids=["cp312-on-3.11", "other-arch", "abi3-too-new", "macos", "local-version-cp310"],
    )
    def test_misfits(
        self, filename: str, python_version: tuple[int, int], offered: str
    ) -> None:
        reason = misfit(filename, python_version, HOST)
        assert reason is not None
        assert reason.startswith(f"{filename} is for ")
        assert offered in reason
        assert reason.endswith(f"not for Python {python_version[0]}.{python_version[1]} on {HOST}")

    def test_lists_every_tag_a_compressed_set_offers(self) -> None:
        filename = f"x-1.0-cp39-abi3-manylinux_2_17_{OTHER}.manylinux2014_{OTHER}.whl"
        reason = misfit(filename, PY311, HOST)
        assert reason is not None
        assert f"cp39-abi3-manylinux2014_{OTHER}, cp39-abi3-manylinux_2_17_{OTHER}" in reason

    @pytest.mark.parametrize(
        "filename",
        [
            # not a wheel at all
            "torch-2.13.0.tar.gz",
            # too few parts: no tags
            "torch-2.13.0.whl",
            # the local version still encoded in another way
            f"torch-2.13.0%252Bcpu-cp311-cp311-manylinux_2_28_{HOST}.whl",
            # an invalid version
            "torch-two-py3-none-any.whl",
        ],
        ids=["sdist", "no-tags", "double-encoded-plus", "invalid-version"],
    )
    def test_invalid_filename_raises(self, filename: str) -> None:
        with pytest.raises(WheelTagError, match=r"is not a valid wheel filename") as caught:
            misfit(filename, PY311, HOST)
        assert repr(filename) in str(caught.value)
        assert isinstance(caught.value.__cause__, InvalidWheelFilename)
        assert isinstance(caught.value, TorchstackError)


class TestMisfitForATarget:
    """misfit with a glibc: the generator's question about a cluster it is told of, answered
    by the same function (and in the same words) as the easyblock's about this host."""

    @pytest.mark.parametrize(("filename", "glibc", "fits"), [
        # manylinux_2_28 on glibc 2.28
        ("torch-2.13.0-cp311-cp311-manylinux_2_28_aarch64.whl", (2, 28), True),
        # manylinux_2_28 needs more than glibc 2.17
        ("torch-2.13.0-cp311-cp311-manylinux_2_28_aarch64.whl", (2, 17), False),
        # the legacy alias manylinux2014 is glibc 2.17
        ("x-1.0-cp311-cp311-manylinux2014_aarch64.whl", (2, 17), True),
        # a pure-Python wheel fits everywhere
        ("x-1.0-py3-none-any.whl", (2, 17), True),
    ], ids=["2.28-on-2.28", "2.28-on-2.17", "manylinux2014", "pure"])
    def test_fits(self, filename: str, glibc: tuple[int, int], fits: bool) -> None:
        # aarch64 whatever the host: the target is not asked of the running machine
        assert (misfit(filename, PY311, "aarch64", glibc) is None) is fits

    def test_reason_names_what_the_wheel_is_for(self) -> None:
        filename = "torch-2.13.0-cp312-cp312-manylinux_2_28_aarch64.whl"
        assert misfit(filename, PY311, "aarch64", (2, 28)) == (
            f"{filename} is for cp312-cp312-manylinux_2_28_aarch64, not for Python 3.11 on "
            f"aarch64 with glibc 2.28")

    def test_invalid_filename_raises(self) -> None:
        with pytest.raises(WheelTagError, match=r"'torch\.whl' is not a valid wheel filename"):
            misfit("torch.whl", PY311, "aarch64", (2, 28))
