"""torchstack.install.torchcheck: an installation's consumers checked at install time against
the torch they run on, symbols included, on prefixes unpacked from the g++-built wheels of
symbolwheels.py (the real eb runs of test_easyblock_wheels.py go through the same function)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.symbolwheels import build_symbol_wheels
from support.synthetic import install_prefix

from torchstack.install.torchcheck import InstallationError, examine


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    wheels = build_symbol_wheels(tmp_path_factory)
    root = tmp_path_factory.mktemp("prefixes")
    return {key: install_prefix(wheels[key], root / key)
            for key in ("old", "new", "caller", "registrar")}


class TestExamine:
    def test_verified_and_recorded_as_built_on_its_torch(self, prefixes: dict[str, Path]) -> None:
        # the caller names no torch release: every symbol resolves in 2.12.1, so it is
        # recorded as built on it, which the guards then hold it to
        found = examine(prefixes["caller"], prefixes["old"])
        assert found.fingerprint is not None and found.provider is not None
        assert found.fingerprint.torch.release == "2.12.1"
        assert found.fingerprint.abi_tag == "torch-2.12.1-unknownabi-cpu"  # no std::string

    def test_missing_symbol_fails_the_install(self, prefixes: dict[str, Path]) -> None:
        with pytest.raises(InstallationError, match=re.escape(
                "incompatible: 1 of 4 libtorch symbols missing in torch 2.13.0+cpu, e.g. "
                "c10::impl::cow::materialize_cow_storage(int)")):
            examine(prefixes["caller"], prefixes["new"])

    def test_dispatcher_registrar_on_its_torch(self, prefixes: dict[str, Path]) -> None:
        # installed on a torch that exports its symbols: taken as built there, as before
        found = examine(prefixes["registrar"], prefixes["new"])
        assert found.fingerprint is not None
        assert found.fingerprint.registers_kernels is True
        assert found.fingerprint.torch.release == "2.13.0"
