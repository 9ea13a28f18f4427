"""torchstack.guards.protocol: the Lua and Tcl texts take the protocol's names from it alone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from torchstack.fingerprint.read import Fingerprint, TorchFacts, abi_tag
from torchstack.guards import halves, lua, protocol, siteconfig, sitepackage, tcl
from torchstack.guards.lua import lua_string
from torchstack.guards.protocol import (
    CONSUMERS_VARIABLE,
    DELIMITER,
    FINGERPRINT_FILE,
    MODULE_VARIABLE,
    PROVIDER_VARIABLE,
)

TEMPLATES = {
    "lua evaluator": lua.EVALUATOR_TEMPLATE,
    "lua provider": lua.PROVIDER_TEMPLATE,
    "lua consumer": lua.CONSUMER_TEMPLATE,
    "tcl evaluator": tcl.EVALUATOR_TEMPLATE,
    "tcl provider": tcl.PROVIDER_TEMPLATE,
    "tcl consumer": tcl.CONSUMER_TEMPLATE,
    "sitepackage head": sitepackage.HEAD_TEMPLATE,
    "sitepackage reader": sitepackage.READER_TEMPLATE,
    "sitepackage body": sitepackage.BODY_TEMPLATE,
    "siteconfig hook": siteconfig.HOOK_TEMPLATE,
}
# what a template must never spell out itself
STALE = ("TORCHSTACK_", "torchstack-fingerprint", "easybuild/", "[^;]", "[^|]", '";"')

TORCH = TorchFacts("2.13.0", "cpu", True, None, None)
PROVIDER = Fingerprint("provider", "torch", "2.13.0+cpu", TORCH, None, None, None,
                       abi_tag("provider", None, TORCH))
CONSUMER = Fingerprint("consumer", "fakevision", "0.1.0", TORCH, "stable", ">=2.13", None,
                       abi_tag("consumer", "stable", TORCH, None))


def _generated() -> dict[str, str]:
    return {
        "provider lua": halves.provider_lua(PROVIDER, "PyTorch/2.13.0"),
        "consumer lua": halves.consumer_lua(CONSUMER, "vision/0.1", "PyTorch/2.13.0"),
        "provider tcl": halves.provider_tcl(PROVIDER, "PyTorch/2.13.0"),
        "consumer tcl": halves.consumer_tcl(CONSUMER, "vision/0.1", "PyTorch/2.13.0"),
        "sitepackage": halves.sitepackage_lua(),
        "siteconfig": halves.siteconfig_tcl(),
    }


class TestTemplates:
    @pytest.mark.parametrize("name", TEMPLATES)
    def test_no_stale_literal(self, name: str) -> None:
        found = [s for s in STALE if s in TEMPLATES[name]]
        assert not found, f"{name} spells out {found}"

    @pytest.mark.parametrize("name", TEMPLATES)
    def test_filled_with_other_names(self, name: str) -> None:
        # a protocol of other names and separators leaves nothing of the real one behind
        other = {key: f"<{key}>" for key in protocol.PLACEHOLDERS}
        other.update(ENTRY_PATTERN="<ENTRY>", MAX_BYTES="1", MAX_DEPTH="1", ERROR_CODE="<E>")
        text = protocol.fill(TEMPLATES[name], other)
        assert not re.search(r"TORCHSTACK_|torchstack-fingerprint|@[A-Z_]+@", text)

    def test_unknown_placeholder_is_a_key_error(self) -> None:
        with pytest.raises(KeyError, match="NO_SUCH"):
            protocol.fill("x @NO_SUCH@ y")


class TestGenerated:
    @pytest.mark.parametrize("name", list(_generated()))
    def test_every_placeholder_filled(self, name: str) -> None:
        assert not re.search(r"@[A-Z_]+@", _generated()[name])

    def test_lua_provider(self) -> None:
        text = _generated()["provider lua"]
        assert f"os.getenv({lua_string(CONSUMERS_VARIABLE)})" in text
        assert f'gmatch("[^{DELIMITER}]+")' in text
        assert f'entry:match("{lua.ENTRY_PATTERN}")' in text
        assert f"setenv({lua_string(PROVIDER_VARIABLE)}, tag)" in text
        assert f"setenv({lua_string(MODULE_VARIABLE)}, name)" in text

    def test_lua_consumer(self) -> None:
        text = _generated()["consumer lua"]
        assert f"local loaded = os.getenv({lua_string(PROVIDER_VARIABLE)})" in text
        assert f"os.getenv({lua_string(MODULE_VARIABLE)})" in text
        entry = protocol.entry("vision/0.1", "stable", halves.requirement(CONSUMER).payload,
                               "PyTorch/2.13.0")
        assert (f"prepend_path({lua_string(CONSUMERS_VARIABLE)}, {lua_string(entry)}, "
                f"{lua_string(DELIMITER)})") in text

    def test_tcl_provider(self) -> None:
        text = _generated()["provider tcl"]
        assert f"[info exists env({CONSUMERS_VARIABLE})]" in text
        assert f'[split $env({CONSUMERS_VARIABLE}) "{DELIMITER}"]' in text
        assert f"regexp {{{tcl.ENTRY_PATTERN}}} $entry" in text
        assert f"setenv {PROVIDER_VARIABLE} $torchstack_tag" in text
        assert f"setenv {MODULE_VARIABLE} $torchstack_name" in text

    def test_tcl_consumer(self) -> None:
        text = _generated()["consumer tcl"]
        assert f"set torchstack_loaded $env({PROVIDER_VARIABLE})" in text
        assert f"{{set other $env({MODULE_VARIABLE})}}" in text
        assert f"prepend-path -d \"{DELIMITER}\" {CONSUMERS_VARIABLE} " in text

    def test_sitepackage(self) -> None:
        text = _generated()["sitepackage"]
        assert f'local path = root .. "/{FINGERPRINT_FILE.as_posix()}"' in text
        assert f"os.getenv({lua_string(CONSUMERS_VARIABLE)})" in text
        assert f"local tag = os.getenv({lua_string(PROVIDER_VARIABLE)})" in text
        assert f"os.getenv({lua_string(MODULE_VARIABLE)})" in text
        assert f'entry:match("{lua.ENTRY_PATTERN}")' in text

    def test_siteconfig(self) -> None:
        text = _generated()["siteconfig"]
        assert f'[split $::env({CONSUMERS_VARIABLE}) "{DELIMITER}"]' in text
        assert f"regexp {{{tcl.ENTRY_PATTERN}}} $entry" in text
        assert f"set tag $::env({PROVIDER_VARIABLE})" in text
        assert f"{{set name $::env({MODULE_VARIABLE})}}" in text
        assert "proc torchstack_fits" in text


ENTRIES = [("vision/0.1", "stable", "torch-2.13.0-stable-cpu,>=2.13.0", "PyTorch/2.13.0"),
           ("tv/0.28.0", "cxx", "torch-2.13.0-cxx11-cpu", "PyTorch/a")]


class TestEntryPatterns:
    """The registration patterns of Lua and Tcl read back what `protocol.entry` writes."""

    def _registrations(self) -> str:
        return DELIMITER.join(protocol.entry(*fields) for fields in ENTRIES)

    def test_lua(self, tmp_path: Path) -> None:
        script = tmp_path / "entries.lua"
        script.write_text(
            f'for entry in io.read("a"):gmatch("[^{DELIMITER}]+") do\n'
            f'   print(table.concat({{entry:match("{lua.ENTRY_PATTERN}")}}, "\\t"))\n'
            "end\n", encoding="utf-8")
        out = subprocess.run(["lua5.3", str(script)], input=self._registrations(),
                             capture_output=True, text=True, check=True).stdout
        assert [tuple(line.split("\t")) for line in out.splitlines()] == ENTRIES

    def test_tcl(self, tmp_path: Path) -> None:
        script = tmp_path / "entries.tcl"
        script.write_text(
            f'foreach entry [split [read stdin] "{DELIMITER}"] {{\n'
            f"    regexp {{{tcl.ENTRY_PATTERN}}} $entry -> who kind payload home\n"
            '    puts [join [list $who $kind $payload $home] "\\t"]\n'
            "}\n", encoding="utf-8")
        out = subprocess.run(["tclsh", str(script)], input=self._registrations(),
                             capture_output=True, text=True, check=True).stdout
        assert [tuple(line.split("\t")) for line in out.splitlines()] == ENTRIES
