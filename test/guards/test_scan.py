"""torchstack.guards.scan and `torchstack scan`: fake EasyBuild install paths built in tmp_path.

The install path holds Lua and Tcl module files and software folders with recorded
fingerprints (written by torchstack.guards.record), plus one installation without
a record whose site-packages holds a small real wheel, fingerprinted on the fly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.climain import run
from support.scantree import (
    CPU,
    CU13,
    CU13_SOURCE,
    LIGHTNING,
    MODULES,
    PYTHON,
    RECORDED,
    TORCHDATA,
    VISION_CXX,
    VISION_STABLE,
    consumer,
    installpath_fixture,  # noqa: F401  (the fixture `installpath`)
    write_module,
)

from torchstack.cli import main
from torchstack.fingerprint import compat
from torchstack.guards.moduleloads import parse_lua_dependencies, parse_tcl_dependencies
from torchstack.guards.moduletree import read_tree
from torchstack.guards.record import FINGERPRINT_FILE, write_fingerprint
from torchstack.guards.scan import plan_swap, scan_installpath

PREFIX = "torchstack: error: "


# -- the module file parser ------------------------------------------------------------------


class TestParseLuaDependencies:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            pytest.param('depends_on("PyTorch/2.13.0-whl")', ("PyTorch/2.13.0-whl",),
                         id="depends_on"),
            pytest.param('if not ( isloaded("A/1") ) then\n  load("A/1")\nend', ("A/1",),
                         id="easybuild-load-isloaded-not-counted"),
            pytest.param("load('A/1', \"B/2\")\nalways_load(\"C/3\")", ("A/1", "B/2", "C/3"),
                         id="several-args-single-quotes-always_load"),
            pytest.param('unload("A/1")\ntry_load("B/1")\nm:load("C/1")', (),
                         id="unload-try_load-method-not-loads"),
            pytest.param('-- load("A/1")\n--[[ load("B/1") ]]\nload("C/1") -- load("D/1")',
                         ("C/1",), id="comments"),
            pytest.param('help([==[ load("A/1") ]==])\nwhatis([[ depends_on("B/1") ]])', (),
                         id="long-strings-of-help-text"),
            pytest.param('setenv("X", "a--b")\nload("A/1")', ("A/1",),
                         id="dashes-inside-a-string-are-no-comment"),
            pytest.param('load(atleast("PyTorch", "2.13"))', (), id="atleast-not-followed"),
            pytest.param('load("A/1")\ndepends_on("A/1")', ("A/1",), id="repeats-once"),
        ],
    )
    def test_parse(self, text: str, expected: tuple[str, ...]) -> None:
        assert parse_lua_dependencies(text) == expected


class TestParseTclDependencies:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            pytest.param("module load PyTorch/2.13.0-whl", ("PyTorch/2.13.0-whl",),
                         id="module-load"),
            pytest.param("if { ![ is-loaded A/1 ] } {\n    module load A/1\n}", ("A/1",),
                         id="easybuild-is-loaded-not-counted"),
            pytest.param("if { ![ is-loaded A/1 ] } { module load A/1 }", ("A/1",),
                         id="one-line-braces"),
            pytest.param("depends-on A/1 B/2\nmodule add C/3", ("A/1", "B/2", "C/3"),
                         id="depends-on-several-and-module-add"),
            pytest.param('depends-on --optional "A/1"', ("A/1",), id="options-and-quotes"),
            pytest.param("# module load A/1\n  # depends-on B/1\nmodule unload C/1", (),
                         id="comments-and-unload"),
            pytest.param("module load A/1 ; module load B/1", ("A/1", "B/1"),
                         id="semicolon"),
            pytest.param("module load \\\n    A/1", ("A/1",), id="line-continuation"),
        ],
    )
    def test_parse(self, text: str, expected: tuple[str, ...]) -> None:
        assert parse_tcl_dependencies(text) == expected


class TestModuleFiles:
    def test_lua_tcl_and_not_modules(self, tmp_path: Path) -> None:
        write_module(tmp_path, "A/1", "lua", "")
        write_module(tmp_path, "B/2-x", "tcl", "#%Module\n")
        folder = tmp_path / "modules" / "all"
        (folder / "B" / "notes.txt").write_text("not a module\n", encoding="utf-8")
        (folder / "B" / ".version").write_text("#%Module\n", encoding="utf-8")
        (folder / "A" / ".1.lua.bak_20250101").write_text("", encoding="utf-8")
        assert list(read_tree(folder).modules) == ["A/1", "B/2-x"]


# -- scanning ---------------------------------------------------------------------------------


class TestScanInstallpath:
    def test_every_module_listed(self, installpath: Path) -> None:
        found = scan_installpath(installpath)
        assert [m.name for m in found.modules] == sorted(MODULES)

    @pytest.mark.parametrize(
        ("name", "role", "source", "runs_on"),
        [
            pytest.param(CPU, "provider", "recorded", None, id="provider-cpu"),
            pytest.param(CU13_SOURCE, "provider", "recorded", None, id="provider-tcl"),
            pytest.param(VISION_CXX, "consumer", "recorded", CPU, id="cxx-on-cpu"),
            pytest.param(VISION_STABLE, "consumer", "recorded", CU13, id="stable-tcl-on-cu13"),
            pytest.param(LIGHTNING, "consumer", "recorded", CPU, id="python-two-arg-load"),
            # No record: read from its site-packages; PyTorch reached through torchvision.
            pytest.param(TORCHDATA, "consumer", "scanned", CPU, id="on-the-fly-transitive"),
            pytest.param(PYTHON, "no torch", None, None, id="no-torch"),
        ],
    )
    def test_module(
        self, installpath: Path, name: str, role: str, source: str | None, runs_on: str | None
    ) -> None:
        module = scan_installpath(installpath).get(name)
        assert module is not None
        assert (module.role, module.source, module.runs_on) == (role, source, runs_on)

    def test_on_the_fly_fingerprint(self, installpath: Path) -> None:
        module = scan_installpath(installpath).get(TORCHDATA)
        assert module is not None and module.fingerprint is not None
        assert module.fingerprint.link == "python"
        assert module.fingerprint.requires_torch == "<2.14,>=2.12"

    def test_load_of_a_bare_name_takes_lmods_default(self, installpath: Path) -> None:
        write_module(installpath, "torchaudio/2.13.0", "lua", 'depends_on("torchvision")\n')
        write_fingerprint(installpath / "software" / "torchaudio/2.13.0",
                          consumer("torchaudio", "2.13.0", "python", "", None))
        # Two torchvision versions, none marked: Lmod loads the highest, 0.29.1 on CU13.
        module = scan_installpath(installpath).get("torchaudio/2.13.0")
        assert module is not None and module.runs_on == CU13

    @pytest.mark.parametrize(
        ("damage", "fragment"),
        [
            pytest.param("{not json", "is not a fingerprint JSON file", id="json-syntax"),
            pytest.param('{"schema": 2}', "schema 2 is not 1", id="other-schema"),
            pytest.param(b"\xff\xfe", "is not a fingerprint JSON file", id="not-utf8"),
        ],
    )
    def test_damaged_record(self, installpath: Path, damage: str | bytes, fragment: str) -> None:
        # the module is unknown, with the reason; the other modules are read as before
        record = installpath / "software" / VISION_CXX / FINGERPRINT_FILE
        if isinstance(damage, bytes):
            record.write_bytes(damage)
        else:
            record.write_text(damage, encoding="utf-8")
        found = scan_installpath(installpath)
        module = found.get(VISION_CXX)
        assert module is not None and module.role == "unknown" and module.fingerprint is None
        assert module.unreadable is not None and fragment in module.unreadable
        assert str(record) in module.unreadable
        assert [m.name for m in found.unknown()] == [VISION_CXX]


class TestPlanSwap:
    @pytest.mark.parametrize(
        ("source", "target", "breaks", "safe"),
        [
            pytest.param(CPU, CU13, [TORCHDATA, VISION_CXX], [LIGHTNING], id="cpu-to-cu13"),
            pytest.param(CU13, CU13_SOURCE, [], [VISION_STABLE], id="whl-to-source-build"),
            pytest.param(CU13, CPU, [VISION_STABLE], [], id="cu13-back-to-older-cpu"),
            pytest.param(CU13_SOURCE, CPU, [], [], id="no-consumers"),
        ],
    )
    def test_groups(
        self, installpath: Path, source: str, target: str, breaks: list[str], safe: list[str]
    ) -> None:
        report = plan_swap(scan_installpath(installpath), source, target)
        assert [o.module for o in report.would_break] == breaks
        assert [o.module for o in report.stays_safe] == safe
        assert report.safe == (not breaks)

    def test_reasons(self, installpath: Path) -> None:
        report = plan_swap(scan_installpath(installpath), CPU, CU13)
        reasons = {o.module: o.verdict.reasons for o in report.would_break}
        assert reasons[VISION_CXX] == (
            "torchvision 0.28.0+cpu requires torch==2.13.0, not torch 2.14.1+cu130",
            "torchvision 0.28.0+cpu was built against torch 2.13.0, not 2.14.1",
        )  # a CPU build links no CUDA library: the flavour alone would not refuse it
        assert reasons[TORCHDATA] == (
            "torchdata 0.11.0 requires torch<2.14,>=2.12, not torch 2.14.1+cu130",
        )


# -- the command line -------------------------------------------------------------------------


class TestScanCommand:
    def test_table(self, installpath: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, err = run(["scan", str(installpath)], capsys)
        assert (code, err) == (0, "")
        lines = out.splitlines()
        assert lines[0].split() == ["MODULE", "ROLE", "ABI", "TAG", "RUNS", "ON"]
        rows = {line.split()[0]: line.split()[1:] for line in lines[1:-1]}
        assert rows[CPU] == ["provider", "torch-2.13.0-cxx11-cpu", "-"]
        assert rows[VISION_CXX] == ["consumer", "(cxx)", "torch-2.13.0-cxx11-cpu", CPU]
        assert rows[VISION_STABLE] == ["consumer", "(stable)", "torch-2.14.0-stable-cu13", CU13]
        assert rows[TORCHDATA] == ["consumer", "(python)", "torch-python", "*", CPU]
        assert rows[PYTHON] == ["no", "torch", "-", "-"]
        assert lines[-1].startswith("* not recorded")

    def test_json(self, installpath: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run(["scan", str(installpath), "--json"], capsys)
        data = json.loads(out)
        modules = {m["module"]: m for m in data["modules"]}
        assert code == 0
        assert data["installpath"] == str(installpath)
        assert modules[VISION_CXX]["runs_on"] == CPU
        assert modules[VISION_CXX]["fingerprint"] == compat.recorded(RECORDED[VISION_CXX]).to_json()
        assert modules[TORCHDATA]["fingerprint_source"] == "scanned"
        assert modules[PYTHON]["role"] is None and modules[PYTHON]["fingerprint"] is None

    @pytest.mark.parametrize(
        ("swap", "code", "breaks", "safe"),
        [
            pytest.param([CPU, CU13], 1, [TORCHDATA, VISION_CXX], [LIGHTNING],
                         id="breaking-exit-1"),
            pytest.param([CU13, CU13_SOURCE], 0, [], [VISION_STABLE], id="all-safe-exit-0"),
        ],
    )
    def test_swap(
        self, installpath: Path, capsys: pytest.CaptureFixture[str],
        swap: list[str], code: int, breaks: list[str], safe: list[str],
    ) -> None:
        got, out, err = run(["scan", str(installpath), "--swap", *swap], capsys)
        assert (got, err) == (code, "")
        lines = out.splitlines()
        broken, spared = lines.index("would break (rebuild):"), lines.index("stays safe:")
        assert lines[0].startswith(f"swap {swap[0]} (")
        expected_broken = [f"  {m}: incompatible: " for m in breaks] or ["  (none)"]
        expected_spared = [f"  {m}: compatible: " for m in safe] or ["  (none)"]
        assert [line[:len(e)] for line, e in
                zip(lines[broken + 1:spared], expected_broken)] == expected_broken
        assert len(lines[broken + 1:spared]) == len(expected_broken)
        assert [line[:len(e)] for line, e in
                zip(lines[spared + 1:], expected_spared)] == expected_spared
        assert len(lines[spared + 1:]) == len(expected_spared)

    def test_swap_reasons_in_text(
        self, installpath: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, out, _ = run(["scan", str(installpath), "--swap", CPU, CU13], capsys)
        assert "was built against torch 2.13.0, not 2.14.1" in out
        assert "lightning 2.6.0 only imports torch and needs torch>=2.13" in out

    def test_swap_json(self, installpath: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run(["scan", str(installpath), "--swap", CPU, CU13, "--json"], capsys)
        data = json.loads(out)
        assert code == 1
        assert data["from"] == {"module": CPU, "abi_tag": "torch-2.13.0-cxx11-cpu"}
        assert data["to"] == {"module": CU13, "abi_tag": "torch-2.14.1-cxx11-cu13"}
        assert data["safe"] is False
        assert [o["module"] for o in data["would_break"]] == [TORCHDATA, VISION_CXX]
        assert all(o["reasons"] and o["line"].startswith("incompatible: ")
                   for o in data["would_break"])
        assert [o["module"] for o in data["stays_safe"]] == [LIGHTNING]


class TestScanBadInput:
    @pytest.mark.parametrize(
        ("argv", "fragments"),
        [
            pytest.param(["{root}/missing"], ["does not exist"], id="missing-path"),
            pytest.param(["{root}/software"], ["has no modules/all"], id="no-modules-all"),
            pytest.param(["{root}", "--swap", "PyTorch/9.9.9", CU13],
                         ["FROM module 'PyTorch/9.9.9' is not installed", CPU],
                         id="unknown-from"),
            pytest.param(["{root}", "--swap", CPU, "PyTorch/9.9.9"],
                         ["TO module 'PyTorch/9.9.9' is not installed"], id="unknown-to"),
            pytest.param(["{root}", "--swap", CPU, VISION_CXX],
                         [f"TO module {VISION_CXX!r} is a consumer", "not a torch provider"],
                         id="to-a-consumer"),
            pytest.param(["{root}", "--swap", CPU, PYTHON],
                         [f"TO module {PYTHON!r} has no torch fingerprint"], id="to-no-torch"),
            pytest.param(["{root}", "--swap", LIGHTNING, "X/1"],
                         ["FROM module", "is a consumer", "TO module 'X/1' is not installed"],
                         id="both-wrong-reported-at-once"),
            pytest.param(["{root}", "--swap", CPU], ["--swap"], id="swap-needs-two-names"),
        ],
    )
    def test_one_error_line(
        self, installpath: Path, capsys: pytest.CaptureFixture[str],
        argv: list[str], fragments: list[str],
    ) -> None:
        args = [a.replace("{root}", str(installpath)) for a in argv]
        code, out, err = run(["scan", *args], capsys)
        lines = err.splitlines()
        assert (code, out) == (2, "")
        assert len(lines) == 1, err
        assert lines[0].startswith(PREFIX), err
        assert all(f in lines[0] for f in fragments), err

    def test_damaged_record(
        self, installpath: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # listed as unknown with the file and why, exit 1; not an abort of the whole listing
        (installpath / "software" / LIGHTNING / FINGERPRINT_FILE).write_text("[", "utf-8")
        code, out, err = run(["scan", str(installpath)], capsys)
        assert (code, err) == (1, "")
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
        assert rows[LIGHTNING] == ["unknown", "-", CPU]
        assert rows[CPU] == ["provider", "torch-2.13.0-cxx11-cpu", "-"]
        assert f"  {LIGHTNING}: " in out and "torchstack-fingerprint.json" in out


class TestRecord:
    def test_records_what_was_read_on_the_fly(
        self, installpath: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        before = scan_installpath(installpath).get(TORCHDATA)
        assert before is not None and before.source == "scanned"
        assert main(["scan", str(installpath), "--record"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"recorded {TORCHDATA}: torch-python in ")
        assert out.count("recorded ") == 1  # the recorded ones stay as they were
        after = scan_installpath(installpath).get(TORCHDATA)
        assert after is not None and after.source == "recorded"
        assert after.fingerprint == before.fingerprint

    def test_consumer_without_provider_is_not_recorded(
        self, installpath: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        write_module(installpath, TORCHDATA, "tcl", "#%Module\n")  # loads nothing: no torch
        assert main(["scan", str(installpath), "--record"]) == 0
        assert capsys.readouterr().out == ""
        assert not (installpath / "software" / TORCHDATA / FINGERPRINT_FILE).exists()
