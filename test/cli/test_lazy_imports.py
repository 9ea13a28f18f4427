"""Each subcommand imports what it needs: `torchstack fingerprint` of an installed torch loads
no other subcommand and none of the heavy modules that only other paths use.

Which modules are loaded is checked, never how long it takes (bench/fingerprint.py measures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import torchstack
from torchstack.cli import COMMANDS, build_parser, named_command, subcommand

Factory = Callable[[str], Path]

# Modules the fingerprint of a provider must not load: consumers' link rules (torch-abi-audit),
# the tag machinery of packaging, and the subsystems and libraries of other commands.
NOT_ON_THE_FINGERPRINT_PATH = (
    "torch_abi_audit",
    "pycxxfilt",
    "packaging.tags",
    "packaging.specifiers",
    "jinja2",
    "easybuild",
    "urllib3",
    "http.client",
    "torchstack.elf.loader",
    "torchstack.fingerprint.compat",
    "torchstack.generator",
    "torchstack.index.simple",
    "torchstack.guards",
    "torchstack.install",
    "torchstack.doctor",
    "torchstack.rollout",
    "torchstack.venv",
)

# Modules of the standard library and of torchstack that the fingerprint of a provider no
# longer loads (issue 29): they are imported where a wheel, a RECORD, a consumer, an error or
# a closed pipe needs them; and the metadata readers it never needed (email, importlib.metadata,
# pkg_resources). Checked without the interpreter's site hooks (python -S), since a .pth file
# may load some of them (zipfile, tempfile) in every process before any command runs.
NOT_IMPORTED_BY_THE_FINGERPRINT_PATH = (
    "zipfile",  # only a wheel is a zip
    "tempfile",  # only a wheel member over the in-memory limit is spooled
    "csv",  # only a listing reads RECORD
    "select",  # only an error or a closed pipe asks whether stdout's reader is gone
    "torchstack.index",  # URL redaction: only errors and log records
    "torchstack.variants",  # a consumer's variant tag
    "email",  # core metadata's headers are parsed by hand
    "importlib.metadata",  # the tree is read from its own dist-info folders, not the host's
    "pkg_resources",
)

PROBE = """
import sys
from torchstack.cli import main
code = main(["fingerprint", sys.argv[1], "--json"])
sys.stderr.write("\\n".join(sorted(sys.modules)))
raise SystemExit(code)
"""


@pytest.fixture(scope="module")
def fingerprint_modules(real_tree: Factory) -> tuple[dict[str, object], set[str]]:
    """The fingerprint of an installed torch 2.13.0+cpu, and every module the run loaded."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(real_tree("torch-2.13.0"))],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout), set(done.stderr.split())


# The same run without site hooks: torchstack and the libraries from this interpreter's path.
BARE_PROBE = """
import sys
sys.path[:0] = sys.argv[2:]
from torchstack.cli import main
code = main(["fingerprint", sys.argv[1], "--json"])
sys.stderr.write("\\n".join(sorted(sys.modules)))
raise SystemExit(code)
"""


@pytest.fixture(scope="module")
def bare_modules(real_tree: Factory) -> tuple[dict[str, object], set[str]]:
    """The fingerprint of an installed torch 2.13.0+cpu under `python -S`, and every module
    the interpreter and the run loaded."""
    home = str(Path(torchstack.__file__).resolve().parents[1])  # an editable install too
    path = [home, *(p for p in sys.path if p and Path(p).is_dir())]
    done = subprocess.run([sys.executable, "-S", "-c", BARE_PROBE, str(real_tree("torch-2.13.0")),
                           *path], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout), set(done.stderr.split())


class TestFingerprintPath:
    def test_fingerprints(self, fingerprint_modules: tuple[dict[str, object], set[str]]) -> None:
        found, _ = fingerprint_modules
        assert found["abi_tag"] == "torch-2.13.0-cxx11-cpu"

    @pytest.mark.parametrize("heavy", NOT_ON_THE_FINGERPRINT_PATH)
    def test_does_not_import(self, fingerprint_modules: tuple[dict[str, object], set[str]],
                             heavy: str) -> None:
        _, loaded = fingerprint_modules
        assert sorted(m for m in loaded if m == heavy or m.startswith(heavy + ".")) == []

    def test_loads_its_own_subcommand_alone(
            self, fingerprint_modules: tuple[dict[str, object], set[str]]) -> None:
        _, loaded = fingerprint_modules
        assert sorted(m for m in loaded if m.startswith("torchstack.cli.")) == [
            "torchstack.cli.fingerprint"]

    def test_reads_elf_through_pyelftools(
            self, fingerprint_modules: tuple[dict[str, object], set[str]]) -> None:
        # the provider's C++ ABI comes from libc10's symbols: this path does need the reader
        _, loaded = fingerprint_modules
        assert {"torchstack.elf.reader", "elftools.elf.elffile"} <= loaded


class TestFingerprintPathWithoutSiteHooks:
    def test_fingerprints(self, bare_modules: tuple[dict[str, object], set[str]]) -> None:
        found, _ = bare_modules
        assert found["abi_tag"] == "torch-2.13.0-cxx11-cpu"

    @pytest.mark.parametrize("cut", NOT_IMPORTED_BY_THE_FINGERPRINT_PATH)
    def test_does_not_import(self, bare_modules: tuple[dict[str, object], set[str]],
                             cut: str) -> None:
        _, loaded = bare_modules
        assert sorted(m for m in loaded if m == cut or m.startswith(cut + ".")) == []

    def test_reads_elf_through_pyelftools(
            self, bare_modules: tuple[dict[str, object], set[str]]) -> None:
        # the probe is real: the modules the path needs are there
        _, loaded = bare_modules
        assert {"torchstack.cli.fingerprint", "elftools.elf.elffile", "json"} <= loaded


class TestSubcommandRegistry:
    @pytest.mark.parametrize("name", COMMANDS)
    def test_module_is_named_after_its_command(self, name: str) -> None:
        assert name == subcommand(name).NAME

    @pytest.mark.parametrize(("argv", "named"), [
        (["fingerprint", "x"], "fingerprint"),
        (["-v", "easyblocks-path"], "easyblocks-path"),  # after the global -v
        (["--help"], None),  # every subcommand, for the list
        (["fingerprnt", "x"], None),  # argparse's 'invalid choice' names them all
        ([], None),
    ], ids=["first", "after-verbose", "help", "unknown", "none"])
    def test_named_command(self, argv: list[str], named: str | None) -> None:
        assert named_command(argv) == named

    def test_only_one_configured(self) -> None:
        args = build_parser("fingerprint").parse_args(["fingerprint", "p", "--json"])
        assert (args.path, args.json) == ("p", True)
        with pytest.raises(SystemExit):  # no other one is built
            build_parser("fingerprint").parse_args(["check", "a", "b"])

    @pytest.mark.parametrize("argv", [
        ["fingerprint", "--help"],
        ["fingerprint"],  # PATH missing
        ["fingerprint", "a", "b"],  # one argument too many
        ["-v", "fingerprint", "a", "--jsn"],
    ], ids=["help", "missing", "extra", "unknown-option"])
    def test_reads_as_with_every_subcommand(self, argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
        # usage lines, help and errors are the same whether the others are built or not
        outputs = []
        for only in (None, "fingerprint"):
            with pytest.raises(SystemExit) as ended:
                build_parser(only).parse_args(argv)
            outputs.append((ended.value.code, capsys.readouterr()))
        assert outputs[0] == outputs[1]
