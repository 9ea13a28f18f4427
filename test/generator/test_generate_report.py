"""What `torchstack generate` prints: a short summary first, the detail with -v, the whole report
as one JSON document with --json (both from generator.report), and scripts/demo's lines once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchstack.cli import main
from torchstack.generator import report

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = ["2.9.1", "--offline", "--toolchain", "foss/2025a"]
SHA256 = re.compile(r"[0-9a-f]{64}")


def _run(capsys: pytest.CaptureFixture[str], out: Path, *args: str) -> list[str]:
    capsys.readouterr()
    assert main(["generate", *OFFLINE, "--out", str(out), *args]) == 0
    return capsys.readouterr().out.splitlines()


def _sets(lines: list[str]) -> dict[str, list[str]]:
    """Each set's heading line with the indented lines under it."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith("foss/2025a "):
            current = found.setdefault(line.split(" (")[0], [line])
        elif line.startswith("  ") and current is not None:
            current.append(line)
        else:
            current = None
    return found


class TestSummary:
    def test_comes_first_and_is_short(self, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
        lines = _run(capsys, tmp_path / "out", *())
        assert re.fullmatch(rf"torch 2\.9\.1: 7 easyconfigs and 2 easystacks written to "
                            rf"{re.escape(str(tmp_path / 'out'))}", lines[0])
        sets = _sets(lines)
        assert set(sets) == {"foss/2025a cpu", "foss/2025a cu128"}
        assert sets["foss/2025a cu128"][0] == (
            "foss/2025a cu128 (torch 2.9.1, Python 3.13; x86_64): 4 easyconfigs: "
            "Triton-3.5.1, PyTorch-2.9.1, torchvision-0.24.1, torchaudio-2.9.1")
        for body in sets.values():
            assert len(body) <= 6, body  # heading, one line a thing left out, the build command
            assert [line for line in body[1:] if not line.startswith(("  left out: ",
                                                                       "  build "))] == []
        # the aarch64 cu128 wheel was not recorded: left out, with why, in one line
        assert "  left out: torch 2.9.1: cu128 wheel for Python 3.13 on aarch64 not checked: " \
               "https://download.pytorch.org/whl/cu128/ did not answer" in sets["foss/2025a cu128"]
        text = "\n".join(lines)
        assert "sha256" not in text and "generated " not in text and "cuda_libs=" not in text
        assert "--job" not in text  # the Slurm commands come with --print-build-command
        # only what each set leaves out is said per set (a variant not checked, for both)
        assert {line for line in lines if lines.count(line) > 1} <= \
            {line for line in lines if line.startswith("  left out: ")}

    def test_build_command_runs_in_the_folder(self, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
        lines = _run(capsys, tmp_path / "out", "--variant", "cu128")
        (build,) = [line for line in lines if line.startswith("  build ")]
        assert build == (f"  build x86_64: cd {tmp_path / 'out'} && eb --easystack "
                         "easystack-foss-2025a-cu128-x86_64.yaml --robot=\"$PWD\" "
                         "--include-easyblocks=\"$(torchstack easyblocks-path)/*.py\" "
                         "--hooks=\"$(torchstack hooks-path)\"")

    def test_print_build_command_adds_the_slurm_command(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        lines = _run(capsys, tmp_path / "out", "--variant", "cu128", "--print-build-command")
        (submit,) = [line for line in lines if line.startswith("  submit ")]
        assert submit.startswith(f"  submit x86_64 as Slurm jobs: cd {tmp_path / 'out'} && "
                                 "mkdir -p jobs-foss-2025a-cu128-x86_64 && eb --robot=\"$PWD\" "
                                 "--job --job-backend=Slurm ")
        assert lines[0].startswith("torch 2.9.1: 4 easyconfigs")  # the summary still first


class TestVerbose:
    @pytest.mark.parametrize("flag", [["generate", "-v"], ["generate", "--verbose"],
                                      ["-v", "generate"]])
    def test_shows_each_wheel_and_note(self, tmp_path: Path, flag: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
        capsys.readouterr()
        assert main([*flag, *OFFLINE, "--variant", "cu128", "--out", str(tmp_path / "o")]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("torch 2.9.1: 4 easyconfigs")
        text = "\n".join(lines)
        assert "  generated PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb (x86_64): provides " \
               "torch-2.9.1-cxx11-cu12" in lines
        assert re.search(r"\n    x86_64: torch-2\.9\.1-cp313-cp313-manylinux_2_28_x86_64\.whl "
                         r"sha256 [0-9a-f]{64}\n", text)
        assert "    torchvision 0.24.1 from https://pypi.org/simple/: the newest torchvision" \
               in text
        assert "  foss/2025a cu128: cuda_libs=" in text
        assert "offline: https://download.pytorch.org/whl/cu128/ did not answer when recorded" \
               in text


class TestJson:
    def _data(self, tmp_path: Path, capsys: pytest.CaptureFixture[str],
              *args: str) -> dict[str, Any]:
        capsys.readouterr()
        assert main(["generate", *OFFLINE, "--out", str(tmp_path / "out"), "--json",
                     *args]) == 0
        data: dict[str, Any] = json.loads(capsys.readouterr().out)  # one document, nothing else
        return data

    def test_sets_with_wheels_hashes_and_written_paths(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        data = self._data(tmp_path, capsys)
        assert data["release"] == "2.9.1" and data["folder"] == str(tmp_path / "out")
        by_variant = {s["variant"]: s for s in data["sets"]}
        assert set(by_variant) == {"cpu", "cu128"}
        cu128 = by_variant["cu128"]
        assert (cu128["toolchain"], cu128["python"], cu128["torch"]) == \
            ("foss/2025a", "3.13", "2.9.1")
        assert {p["project"]: p["version"] for p in cu128["projects"]} == {
            "torch": "2.9.1", "torchvision": "0.24.1", "torchaudio": "2.9.1", "triton": "3.5.1"}
        for s in data["sets"]:
            for project in s["projects"]:
                assert Path(project["easyconfig"]).is_file()
                assert project["wheels"], project
                for wheel in [*project["wheels"],
                              *(w for e in project["extensions"] for w in e["wheels"])]:
                    assert SHA256.fullmatch(wheel["sha256"]), wheel
                    assert wheel["url"].endswith("/" + wheel["filename"].replace("+", "%2B")) \
                        or wheel["url"].endswith("/" + wheel["filename"])
            for easyconfig in s["easyconfigs"]:
                assert Path(easyconfig["path"]).is_file()
            for stack in s["easystacks"]:
                assert Path(stack["path"]).is_file()
                assert Path(stack["path"]).name in stack["build_command"]
                assert "--job --job-backend=Slurm" in stack["submit_command"]
        assert any("cu128 wheel for Python 3.13 on aarch64 not checked" in line
                   for line in cu128["left_out"])
        assert [u["index"] for u in data["unreachable"]] == [
            f"https://download.pytorch.org/whl/{v}/" for v in ("cpu", "cu126", "cu128", "cu130")]

    def test_agrees_with_the_text(self, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        data = self._data(tmp_path, capsys)
        lines = _run(capsys, tmp_path / "out", "--force")
        sets = _sets(lines)
        for s in data["sets"]:
            body = sets[f"{s['toolchain']} {s['variant']}"]
            assert body[0].endswith(", ".join(e["module"] for e in s["easyconfigs"]))
            assert [line[len("  left out: "):] for line in body
                    if line.startswith("  left out: ")] == s["left_out"]
            assert [line.split(": ", 1)[1] for line in body if line.startswith("  build ")] == \
                [stack["build_command"] for stack in s["easystacks"]]

    def test_error_stays_one_line(self, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
        capsys.readouterr()
        assert main(["generate", *OFFLINE, "--glibc", "two", "--json",
                     "--out", str(tmp_path / "out")]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == "torchstack: error: --glibc 'two' is not of the form X.Y\n"


@pytest.mark.parametrize(("note", "left"), [
    ("torch 2.9.1: cu126 not checked: https://download.pytorch.org/whl/cu126/ did not answer",
     True),
    ("torchaudio: no release on https://x/ requires torch 2.9.1 with wheels for x86_64 "
     "(untagged builds only); not generated", True),
    ("xformers: not built: no release runs on torch 2.9.1", True),
    ("torchao: not built for aarch64: 0.14.1 has no wheel for Python 3.13 there", True),
    ("torch 2.9.1: no cu128 wheel for Python 3.13 on aarch64", True),
    ("skipped foss/2025a cu128: cuda_libs='modules' cannot be served", True),
    ("cuda_libs='wheels' (auto), CUDA 12.8.0", False),
    ("torchao: 0.14.1 taken; newer releases passed over: 0.15.0 (requires torch>=2.10)", False),
    ("downloaded torch-2.9.1+cpu-cp313-cp313-manylinux_2_28_x86_64.whl to hash it", False),
])
def test_left_out_or_detail(note: str, left: bool) -> None:
    assert report.left_out(note) is left


def test_demo_prints_each_line_once(tmp_path: Path) -> None:
    """scripts/demo: one generate run, the summary and the commands, no line twice."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "torchstack").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m torchstack "$@"\n')
    (shim / "torchstack").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "demo"), str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    assert [line for line in set(lines) if lines.count(line) > 1] == []
    assert sum(line.startswith("not recorded: ") for line in lines) >= 1
    assert lines[0].startswith("torch ") and "--job --job-backend=Slurm" in run.stdout
    assert list((tmp_path / "out").glob("PyTorch-*-whl.eb"))
