"""Bad input through `torchstack.cli.main`: one `torchstack: error: ...` line, exit 2, no traceback.

The damaged inputs are made from real synthetic wheels and libraries (truncated, corrupted,
replaced), so every failure comes from the real zip and ELF readers.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.synthetic import (
    SyntheticLibs,
    SyntheticWheels,
    install_prefix,
    install_tree,
    version_py,
    write_wheel,
)

from torchstack.cli import main
from torchstack.fingerprint.read import fingerprint_path

pytest_plugins = ["support.synthetic"]

PREFIX = "torchstack: error: "


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of `main(argv)`; argparse's usage errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else -1
    return code, capsys.readouterr().err


def assert_one_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], *fragments: str
) -> None:
    """`main(argv)` exits 2 with exactly one stderr line: the error, naming every fragment."""
    code, err = run_main(argv, capsys)
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX), err
    assert all(f in lines[0] for f in fragments), err
    assert "Traceback" not in err


def python_files_only(root: Path) -> Path:
    """A folder with a Python package but no *.dist-info."""
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    return root


def empty_prefix(root: Path) -> Path:
    """An install prefix whose site-packages is empty."""
    (root / "lib/python3.11/site-packages").mkdir(parents=True)
    return root


def member_data_offset(archive: Path, member: str) -> tuple[int, int]:
    """Offset and size of a member's stored (possibly compressed) data in a zip file."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(member)
    with open(archive, "rb") as fh:
        fh.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", fh.read(4))
    return info.header_offset + 30 + name_length + extra_length, info.compress_size


def zero_member(source: Path, target: Path, member: str) -> Path:
    """A copy of a deflated wheel whose member's compressed stream is all zero bytes."""
    data = bytearray(source.read_bytes())
    offset, size = member_data_offset(source, member)
    data[offset:offset + size] = bytes(size)
    target.write_bytes(bytes(data))
    return target


def flip_stored_byte(source: Path, target: Path, member: str) -> Path:
    """A stored (uncompressed) copy of a wheel with one byte of `member` flipped: bad CRC."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, zin.read(name))
    data = bytearray(target.read_bytes())
    offset, _ = member_data_offset(target, member)
    data[offset + 100] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


def torch_wheel_with(directory: Path, libc10: bytes) -> Path:
    """A torch wheel whose torch/lib/libc10.so holds `libc10`."""
    files = {"torch/version.py": version_py("2.13.0+cpu").encode(), "torch/lib/libc10.so": libc10}
    return write_wheel(directory, "torch", "2.13.0+cpu", files)


class TestUsage:
    @pytest.mark.parametrize(
        ("argv", "fragment"),
        [
            # a subcommand that does not exist
            (["frobnicate"], "invalid choice: 'frobnicate'"),
            # no subcommand at all
            ([], "the following arguments are required: COMMAND"),
            # fingerprint without its PATH
            (["fingerprint"], "the following arguments are required: PATH"),
            # check with only a provider
            (["check", "x.whl"], "the following arguments are required: CONSUMER"),
            # an option nobody declared
            (["fingerprint", "--bogus", "x.whl"], "unrecognized arguments: --bogus"),
        ],
        ids=["unknown-subcommand", "no-subcommand", "no-path", "no-consumer", "unknown-option"],
    )
    def test_usage(
        self, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
    ) -> None:
        assert_one_error(argv, capsys, fragment)


class TestPaths:
    def test_missing_path(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert_one_error(["fingerprint", str(tmp_path / "nope")], capsys,
                         f"{str(tmp_path / 'nope')!r} does not exist")

    @pytest.mark.parametrize("slot", ["provider", "consumer"], ids=["provider", "consumer"])
    def test_missing_path_in_check(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], slot: str,
    ) -> None:
        # a missing .json falls through to a missing path, on either side
        missing, good = str(tmp_path / "fp.json"), str(synthetic_wheels["torch-cpu-cxx11"])
        argv = ["check", missing, good] if slot == "provider" else ["check", good, missing]
        assert_one_error(argv, capsys, "does not exist")

    @pytest.mark.parametrize(
        "make",
        [
            # an empty folder
            lambda root: root,
            # Python files but no *.dist-info
            python_files_only,
            # a prefix whose site-packages is empty
            empty_prefix,
        ],
        ids=["empty", "no-dist-info", "empty-prefix"],
    )
    def test_no_python_packages(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path]
    ) -> None:
        assert_one_error(["fingerprint", str(make(tmp_path))], capsys,
                         "holds no Python distributions")

    def test_no_torch_anywhere(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        # a distribution that needs torch only through an extra
        prefix = install_prefix(synthetic_wheels["unrelated"], tmp_path)
        assert_one_error(["fingerprint", str(prefix)], capsys,
                         "no distribution contains torch or depends on it")

    @pytest.mark.parametrize(
        ("name", "content"),
        [
            # text named like a library
            ("libc10.so", b"not an ELF file"),
            # a real ELF library is still not a wheel or a folder
            ("libtorch_cpu.so", None),
            # a JSON fingerprint is for `check`, not `fingerprint`
            ("fingerprint.json", b"{}"),
        ],
        ids=["text-so", "real-so", "json"],
    )
    def test_file_that_is_no_wheel(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], name: str, content: bytes | None,
    ) -> None:
        path = tmp_path / name
        path.write_bytes(synthetic_libs.read("cxx11/libc10.so") if content is None else content)
        assert_one_error(["fingerprint", str(path)], capsys,
                         "is not a .whl file, a site-packages folder or a prefix")

    @pytest.mark.parametrize(
        ("name", "command"),
        [
            # PATH itself loops
            ("loop", "fingerprint"),
            ("loop.whl", "fingerprint"),
            # a JSON file argument of check loops
            ("loop.json", "check"),
        ],
        ids=["folder", "wheel", "json"],
    )
    def test_symlink_loop(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], name: str, command: str,
    ) -> None:
        loop = tmp_path / name
        os.symlink(loop, loop)
        argv = ["fingerprint", str(loop)] if command == "fingerprint" else [
            "check", str(synthetic_wheels["torch-cpu-cxx11"]), str(loop)]
        assert_one_error(argv, capsys, f"{str(loop)!r}")

    def test_symlink_loop_inside_prefix(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # lib/ points at itself: the prefix holds nothing readable
        (tmp_path / "lib").symlink_to(tmp_path / "lib")
        assert_one_error(["fingerprint", str(tmp_path)], capsys, "holds no Python distributions")


class TestBrokenWheels:
    @pytest.mark.parametrize(
        ("damage", "fragment"),
        [
            # bytes that are no zip
            (lambda data: bytes(range(256)) * 8, "is not a readable wheel"),
            # an empty file
            (lambda data: b"", "is not a readable wheel"),
            # cut in half: no central directory
            (lambda data: data[: len(data) // 2], "is not a readable wheel"),
            # one byte short: a damaged end-of-central-directory record
            (lambda data: data[:-1], "is not a readable wheel"),
            # the central directory cut, its end record kept
            (lambda data: data[: len(data) - 200] + data[-22:], "is not a readable wheel"),
        ],
        ids=["garbage", "empty", "half", "minus-one-byte", "no-central-directory"],
    )
    def test_unreadable_zip(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], damage: Callable[[bytes], bytes], fragment: str,
    ) -> None:
        wheel = tmp_path / synthetic_wheels["torch-cpu-cxx11"].name
        wheel.write_bytes(damage(synthetic_wheels["torch-cpu-cxx11"].read_bytes()))
        assert_one_error(["fingerprint", str(wheel)], capsys, fragment)

    @pytest.mark.parametrize(
        ("key", "member", "damage", "fragment"),
        [
            # a corrupt deflate stream in libc10.so (zlib refuses it)
            ("torch-cpu-cxx11", "torch/lib/libc10.so", zero_member,
             "member 'torch/lib/libc10.so' cannot be read: Error -3"),
            # a flipped byte in a stored libc10.so (CRC mismatch)
            ("torch-cpu-cxx11", "torch/lib/libc10.so", flip_stored_byte,
             "member 'torch/lib/libc10.so' cannot be read: Bad CRC-32"),
            # a consumer's extension module, deflated and corrupt
            ("vision-cxx11", "fakevision/_C.so", zero_member,
             "member 'fakevision/_C.so' cannot be read"),
            # the torch version.py itself
            ("torch-cpu-cxx11", "torch/version.py", zero_member,
             "member 'torch/version.py' cannot be read"),
        ],
        ids=["libc10-deflate", "libc10-crc", "consumer-deflate", "version-py"],
    )
    def test_damaged_member(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], key: str, member: str,
        damage: Callable[[Path, Path, str], Path], fragment: str,
    ) -> None:
        wheel = damage(synthetic_wheels[key], tmp_path / synthetic_wheels[key].name, member)
        assert_one_error(["fingerprint", str(wheel)], capsys, fragment)

    @pytest.mark.parametrize(
        ("files", "fragment"),
        [
            # no .dist-info at all
            ({"torch/version.py": b"__version__ = '2.13.0'\n"},
             "has no single .dist-info/METADATA"),
            # METADATA without a Version
            ({"x-1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: x\n"}, "no Name or Version"),
        ],
        ids=["no-metadata", "no-version"],
    )
    def test_bad_metadata(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        files: dict[str, bytes], fragment: str,
    ) -> None:
        wheel = tmp_path / "x-1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, data in files.items():
                archive.writestr(name, data)
        assert_one_error(["fingerprint", str(wheel)], capsys, fragment)

    @pytest.mark.parametrize(
        ("version_py_text", "fragment"),
        [
            # no torch/version.py
            (None, "torch/version.py' is missing"),
            # not Python
            (b"__version__ = (\n", "version.py does not parse"),
            # a NUL byte
            (b"__version__ = '2.13.0'\x00\n", "version.py does not parse"),
            # not PEP 440
            (b"__version__ = 'garbage!'\n", "invalid __version__ 'garbage!'"),
            # no __version__ string
            (b"__version__ = 2.13\n", "has no string __version__"),
        ],
        ids=["missing", "syntax", "nul", "not-pep440", "not-a-string"],
    )
    def test_bad_torch_version_py(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        version_py_text: bytes | None, fragment: str,
    ) -> None:
        files = {"torch/__init__.py": b""}
        if version_py_text is not None:
            files["torch/version.py"] = version_py_text
        wheel = write_wheel(tmp_path, "torch", "2.13.0", files)
        assert_one_error(["fingerprint", str(wheel)], capsys, fragment)


CONTENTS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    # text, not ELF
    "not-elf": (lambda real: b"hello, I am not a shared library\n", "not an ELF file"),
    # an empty file
    "empty": (lambda real: b"", "not an ELF file"),
    # the magic number only
    "magic-only": (lambda real: b"\x7fELF", "is a damaged ELF file"),
    # the ELF header without the rest
    "header-only": (lambda real: real[:64], "is a damaged ELF file"),
    # a real library cut in half
    "half": (lambda real: real[: len(real) // 2], "is a damaged ELF file"),
}


class TestBrokenLibraries:
    @pytest.mark.parametrize("layout", ["wheel", "tree"], ids=["wheel", "tree"])
    @pytest.mark.parametrize("content", list(CONTENTS), ids=list(CONTENTS))
    def test_provider_libc10(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], layout: str, content: str,
    ) -> None:
        make, fragment = CONTENTS[content]
        wheel = torch_wheel_with(tmp_path / "dist", make(synthetic_libs.read("cxx11/libc10.so")))
        path = wheel if layout == "wheel" else install_tree(wheel, tmp_path / "site-packages")
        assert_one_error(["fingerprint", str(path)], capsys, "torch/lib/libc10.so", fragment)

    @pytest.mark.parametrize("layout", ["wheel", "tree"], ids=["wheel", "tree"])
    @pytest.mark.parametrize("content", ["not-elf", "half"], ids=["not-elf", "half"])
    def test_consumer_extension(
        self, synthetic_libs: SyntheticLibs, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], layout: str, content: str,
    ) -> None:
        make, fragment = CONTENTS[content]
        files = {"fakevision/_C.so": make(synthetic_libs.read("cxx11/_C.so"))}
        wheel = write_wheel(tmp_path / "dist", "fakevision", "0.1.0", files, ("torch==2.13.0",))
        path = wheel if layout == "wheel" else install_prefix(wheel, tmp_path / "prefix")
        assert_one_error(["fingerprint", str(path)], capsys, "fakevision/_C.so", fragment)
        assert_one_error(["check", str(path), str(path)], capsys, "fakevision/_C.so", fragment)


def _json_cases() -> list[tuple[str, object, str]]:
    """(id, JSON value, error fragment) of fingerprints that break the contract."""
    consumer: dict[str, object] = {
        "schema": 1, "role": "consumer", "name": "fakevision", "version": "0.1.0+cpu",
        "torch": {"release": "2.13.0", "local": "cpu", "cxx11_abi": True, "cuda": None,
                  "hip": None},
        "link": "cxx", "requires_torch": "==2.13.0", "cuda_major": None,
        "abi_tag": "torch-2.13.0-cxx11-cpu", "torch_libraries": ["libc10.so"],
    }
    torch = consumer["torch"]
    assert isinstance(torch, dict)
    return [
        # another schema of the contract
        ("schema-2", consumer | {"schema": 2}, "fingerprint schema 2 is not 1"),
        # JSON, but not an object
        ("list", [consumer], "a fingerprint must be a JSON object"),
        ("string", "torch-2.13.0-cxx11-cpu", "a fingerprint must be a JSON object"),
        # an object of something else
        ("package-json", {"name": "x", "version": "1.0"}, "fingerprint schema None is not 1"),
        # required fields missing
        ("no-torch", {k: v for k, v in consumer.items() if k != "torch"},
         "fingerprint lacks or mistypes a field: 'torch'"),
        ("torch-incomplete", consumer | {"torch": {"release": "2.13.0"}},
         "fingerprint lacks or mistypes a field"),
        ("torch-extra-field", consumer | {"torch": torch | {"triton": "3.5"}},
         "unexpected keyword argument 'triton'"),
        # fields of the wrong type
        ("torch-string", consumer | {"torch": "2.13.0"}, "fingerprint lacks or mistypes a field"),
        ("requires-int", consumer | {"requires_torch": 5},
         "fingerprint mistypes a field: requires_torch 5"),
        ("cuda-number", consumer | {"torch": torch | {"cuda": 13.0}}, "torch.cuda 13.0"),
        ("release-number", consumer | {"torch": torch | {"release": 2.13}}, "torch.release 2.13"),
        ("abi-string", consumer | {"torch": torch | {"cxx11_abi": "yes"}}, "torch.cxx11_abi 'yes'"),
        ("version-number", consumer | {"version": 0.1}, "version 0.1"),
        ("name-null", consumer | {"name": None}, "name None"),
        ("cuda-major-string", consumer | {"cuda_major": "13"}, "cuda_major '13'"),
        ("cuda-major-bool", consumer | {"cuda_major": True}, "cuda_major True"),
        ("libraries-string", consumer | {"torch_libraries": "libc10.so"},
         "torch_libraries 'libc10.so'"),
        # every mistyped field at once
        ("several", consumer | {"name": 1, "cuda_major": "x"}, "name 1, cuda_major 'x'"),
        # values outside the contract
        ("role", consumer | {"role": "plugin"},
         "fingerprint role 'plugin' is not provider/consumer"),
        ("link", consumer | {"link": "rust"}, "consumer link 'rust' is not cxx/stable/python"),
    ]


JSON_CASES = _json_cases()


class TestBadJson:
    @pytest.mark.parametrize(
        ("value", "fragment"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES]
    )
    def test_not_a_fingerprint(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], value: object, fragment: str,
    ) -> None:
        path = tmp_path / "torchstack-fingerprint.json"
        path.write_text(json.dumps(value), encoding="utf-8")
        provider = str(synthetic_wheels["torch-cpu-cxx11"])
        assert_one_error(["check", provider, str(path)], capsys, fragment)
        assert_one_error(["check", str(path), provider], capsys, fragment)

    @pytest.mark.parametrize(
        ("content", "fragment"),
        [
            # not JSON at all
            (b"{not json", "is not a fingerprint JSON file: Expecting property name"),
            # not UTF-8
            (b"\xff\xfe{}", "is not a fingerprint JSON file: 'utf-8' codec can't decode"),
            # empty
            (b"", "is not a fingerprint JSON file: Expecting value"),
        ],
        ids=["syntax", "not-utf8", "empty"],
    )
    def test_not_json(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], content: bytes, fragment: str,
    ) -> None:
        path = tmp_path / "fingerprint.json"
        path.write_bytes(content)
        assert_one_error(["check", str(synthetic_wheels["torch-cpu-cxx11"]), str(path)],
                         capsys, fragment)


class TestWrongRoles:
    @pytest.mark.parametrize(
        ("provider", "consumer", "fragment"),
        [
            # a provider in the consumer's place
            ("torch-cpu-cxx11", "torch-cu130",
             "torch 2.13.0+cu130 is a torch provider, not a consumer"),
            # a consumer in the provider's place
            ("vision-cxx11", "vision-cxx11",
             "fakevision 0.1.0+cpu is a consumer, not a torch provider"),
            # swapped arguments
            ("pure", "torch-cpu-cxx11", "fake-pure 1.0.0 is a consumer, not a torch provider"),
        ],
        ids=["provider-as-consumer", "consumer-as-provider", "swapped"],
    )
    def test_wheels(
        self, synthetic_wheels: SyntheticWheels, capsys: pytest.CaptureFixture[str],
        provider: str, consumer: str, fragment: str,
    ) -> None:
        assert_one_error(["check", str(synthetic_wheels[provider]),
                          str(synthetic_wheels[consumer])], capsys, fragment)

    def test_json_provider_as_consumer(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        # a provider's own fingerprint file passed as the consumer
        path = tmp_path / "torchstack-fingerprint.json"
        data = fingerprint_path(synthetic_wheels["torch-cu130"]).to_json()
        path.write_text(json.dumps(data), encoding="utf-8")
        tree = install_tree(synthetic_wheels["torch-cpu-cxx11"], tmp_path / "site-packages")
        assert_one_error(["check", str(tree), str(path)], capsys,
                         "torch 2.13.0+cu130 is a torch provider, not a consumer")

