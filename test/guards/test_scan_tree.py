"""`torchstack scan` on module trees as sites have them: symlinked folders and files, loops,
leftovers of killed writes and editors, loads through aliases and defaults, and loads that
cannot be resolved. What Lmod itself does in each case is checked in test_moduletree.py;
here, that scan's verdicts follow it, and that a consumer whose PyTorch cannot be told makes
a swap "not checked", never safe.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.scantree import (
    CPU,
    CU13,
    CU13_SOURCE,
    TORCHDATA,
    VISION_CXX,
    VISION_STABLE,
    consumer,
    installpath_fixture,  # noqa: F401  (the fixture `installpath`)
    write_module,
)

from torchstack.guards.record import write_fingerprint
from torchstack.guards.scan import plan_swap, scan_installpath

AUDIO = "torchaudio/2.14.1-CUDA-13.0-whl"  # a consumer of CU13's release, C++ linked
AUDIO_FINGERPRINT = consumer("torchaudio", "2.14.1+cu130", "cxx", "==2.14.1", "2.14.1",
                             cuda="13.0", cxx11_abi=True)


def scan(*argv: str) -> tuple[int, str, str]:
    """`torchstack scan ARGV` in a process of its own, under a timeout (no hang, no loop)."""
    done = subprocess.run([sys.executable, "-m", "torchstack", "scan", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def audio(root: Path, text: str, syntax: str = "lua") -> None:
    """The consumer AUDIO, whose module file is `text`."""
    write_module(root, AUDIO, syntax, text)
    write_fingerprint(root / "software" / AUDIO, AUDIO_FINGERPRINT)


def breaks(root: Path, source: str, target: str) -> list[str]:
    return [o.module for o in plan_swap(scan_installpath(root), source, target).would_break]


class TestSymlinks:
    def test_symlinked_consumer_folder(self, installpath: Path, tmp_path: Path) -> None:
        # modules/all/torchvision -> a shared folder: Lmod follows it, so must scan
        folder = installpath / "modules" / "all" / "torchvision"
        shutil.move(folder, tmp_path / "shared-torchvision")
        folder.symlink_to(tmp_path / "shared-torchvision")
        assert breaks(installpath, CPU, CU13) == [TORCHDATA, VISION_CXX]
        code, out, _ = scan(str(installpath), "--swap", CU13, CPU)
        assert code == 1 and f"  {VISION_STABLE}: incompatible" in out

    def test_symlinked_provider_folder(self, installpath: Path, tmp_path: Path) -> None:
        folder = installpath / "modules" / "all" / "PyTorch"
        shutil.move(folder, tmp_path / "shared-PyTorch")
        folder.symlink_to(tmp_path / "shared-PyTorch")
        assert breaks(installpath, CPU, CU13) == [TORCHDATA, VISION_CXX]

    def test_symlinked_module_file(self, installpath: Path, tmp_path: Path) -> None:
        path = installpath / "modules" / "all" / f"{VISION_CXX}.lua"
        shutil.move(path, tmp_path / "vision.lua")
        path.symlink_to(tmp_path / "vision.lua")
        assert breaks(installpath, CPU, CU13) == [TORCHDATA, VISION_CXX]

    def test_symlink_loops_end(self, installpath: Path) -> None:
        modules = installpath / "modules" / "all"
        (modules / "PyTorch" / "again").symlink_to("../PyTorch")
        (modules / "Loop").symlink_to(modules)
        (modules / "torchvision" / "self").symlink_to("self")
        code, out, err = scan(str(installpath), "--swap", CPU, CU13)
        assert code == 1
        assert f"  {VISION_CXX}: incompatible" in out and "Loop/" not in out
        assert [line.split(": ")[-1] for line in err.splitlines()] == [
            "walked once", "walked once"]  # a warning for each loop, naming it
        assert f"{modules / 'Loop'} is a symlink loop" in err


class TestLeftovers:
    @pytest.mark.parametrize(
        "name",
        [
            pytest.param(".modulerc.tmp-1a2b3c4d", id="staging-modulerc"),
            pytest.param(".2.14.1-CUDA-13.0.tmp-0badcafe", id="staging-module-file"),
            pytest.param(".2.14.1-CUDA-13.0.bak_20250101120000", id="easybuild-backup"),
            pytest.param("2.14.1-CUDA-13.0~", id="editor-backup"),
            pytest.param("#2.14.1-CUDA-13.0#", id="emacs-autosave"),
        ],
    )
    def test_not_a_module(self, installpath: Path, name: str) -> None:
        # kill -9 during an atomic write, or an editor, left a #%Module file in a Tcl folder
        folder = installpath / "modules" / "all" / "PyTorch"
        (folder / name).write_text("#%Module\nmodule-version PyTorch/2.14.1-CUDA-13.0 default\n",
                                   encoding="utf-8")
        code, out, err = scan(str(installpath))
        assert (code, err) == (0, ""), out
        assert name not in out


class TestLoadsThroughLmodNames:
    @pytest.mark.parametrize(
        ("rc", "load"),
        [
            pytest.param(None, "PyTorch", id="bare-name-marked-default"),
            pytest.param('module_alias("torch/stable", "PyTorch/2.13.0-whl")\n', "torch/stable",
                         id="module_alias"),
            pytest.param('module_version("PyTorch/2.13.0-whl", "2.13")\n', "PyTorch/2.13",
                         id="module_version-symbol"),
            pytest.param(None, "PyTorch/2.13.0", id="extended-default"),
        ],
    )
    def test_consumer_on_cpu_through(self, installpath: Path, rc: str | None,
                                     load: str) -> None:
        if rc is not None:
            with open(installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua", "a",
                      encoding="utf-8") as handle:
                handle.write(rc)
        audio(installpath, f'depends_on("{load}")\n')
        module = scan_installpath(installpath).get(AUDIO)
        assert module is not None and module.runs_on == CPU
        report = plan_swap(scan_installpath(installpath), CPU, CU13)
        assert AUDIO in [o.module for o in (*report.would_break, *report.stays_safe)]

    def test_tcl_alias_module(self, installpath: Path) -> None:
        (installpath / "modules" / "all" / "PyTorch" / ".modulerc").write_text(
            "#%Module\nmodule-alias torch/cuda PyTorch/2.14.1-CUDA-13.0-whl\n", encoding="utf-8")
        audio(installpath, "#%Module\ndepends-on torch/cuda\n", "tcl")
        module = scan_installpath(installpath).get(AUDIO)
        assert module is not None and module.runs_on == CU13


class TestCannotBeTold:
    """A consumer whose PyTorch cannot be told is not checked: the swap is not safe."""

    def _assert_not_checked(self, root: Path, fragment: str) -> None:
        report = plan_swap(scan_installpath(root), CU13, CU13_SOURCE)  # otherwise safe
        assert not report.safe
        reasons = {n.module: n.reason for n in report.not_checked}
        assert fragment in reasons[AUDIO], reasons
        code, out, err = scan(str(root), "--swap", CU13, CU13_SOURCE)
        assert (code, err) == (1, "")
        assert "not checked (not safe):" in out and f"  {AUDIO}: " in out

    def test_load_that_names_no_module(self, installpath: Path) -> None:
        audio(installpath, 'depends_on("PyTorch/9.9")\n')
        self._assert_not_checked(installpath, "'PyTorch/9.9', which names no module")

    def test_loads_no_pytorch(self, installpath: Path) -> None:
        audio(installpath, 'depends_on("Python/3.11.5")\n')
        self._assert_not_checked(installpath, "loads no PyTorch module")

    def test_default_that_cannot_be_read(self, installpath: Path) -> None:
        rc = installpath / "modules" / "all" / "PyTorch" / ".modulerc.lua"
        rc.unlink()
        os.mkfifo(rc)  # must not block the scan either
        audio(installpath, 'depends_on("PyTorch")\n')
        self._assert_not_checked(installpath, "whose default cannot be told")

    def test_through_an_unreadable_module_file(self, installpath: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
        # AUDIO loads a module whose file cannot be read: it may load any PyTorch
        write_module(installpath, "Bridge/1", "lua", 'depends_on("' + CU13 + '")\n' + "-" * 2000)
        audio(installpath, 'depends_on("Bridge/1")\n')
        monkeypatch.setattr("torchstack.guards.moduleloads.MAX_MODULE_FILE", 1000)
        report = plan_swap(scan_installpath(installpath), CU13, CU13_SOURCE)
        reasons = {n.module: n.reason for n in report.not_checked}
        assert "Bridge/1: cannot read its module file" in reasons[AUDIO]

    def test_listing_names_the_consumer(self, installpath: Path) -> None:
        audio(installpath, 'depends_on("PyTorch/9.9")\n')
        code, out, _ = scan(str(installpath))
        assert code == 0  # every installation was read
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
        assert rows[AUDIO][-1] == "unknown"
        assert "runs on unknown: the PyTorch it runs on cannot be told" in out
        assert f"  {AUDIO}: {AUDIO} loads 'PyTorch/9.9', which names no module" in out
