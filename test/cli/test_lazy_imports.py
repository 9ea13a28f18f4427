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
        with pytest.raises(SystemExit):  # another one is named, not configured
            build_parser("fingerprint").parse_args(["check", "a", "b"])
