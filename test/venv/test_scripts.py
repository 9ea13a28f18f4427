"""Console scripts of module distributions, rewritten for the venv's Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from torchstack.venv.scripts import ConsoleScript, console_scripts


def _dist(site: Path, name: str, entry_points: str) -> None:
    meta = site / f"{name}-1.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text(entry_points)


class TestConsoleScripts:
    def test_only_named_distributions_in_their_folder(self, tmp_path: Path) -> None:
        _dist(tmp_path / "a", "torch", "[console_scripts]\ntorchrun = torch.distributed.run:main\n"
              "[torchrun.logs_specs]\ndefault = torch.x:Y\n")
        _dist(tmp_path / "a", "other", "[console_scripts]\nother = other:main\n")
        _dist(tmp_path / "b", "torch", "[console_scripts]\nhidden = torch.hidden:main\n")
        found = console_scripts([(str(tmp_path / "a"), "torch")])
        assert found == [ConsoleScript("torchrun", "torch.distributed.run", "main", "torch")]

    def test_bad_entries_skipped(self, tmp_path: Path) -> None:
        _dist(tmp_path, "pkg", "[console_scripts]\n../evil = pkg:main\nnoattr = pkg\n"
              "good = pkg.cli:app.run [extra]\n")
        found = console_scripts([(str(tmp_path), "pkg")])
        assert [s.name for s in found] == ["good"]


class TestText:
    def test_runs_the_entry_point_with_the_given_python(self, tmp_path: Path) -> None:
        package = tmp_path / "site" / "demo"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            "import sys\nclass app:\n    @staticmethod\n    def run():\n"
            "        print('ran', sys.argv[1:]); return 3\n")
        script = tmp_path / "demo-run"
        script.write_text(ConsoleScript("demo-run", "demo", "app.run", "demo").text(
            Path(sys.executable)))
        script.chmod(0o755)
        run = subprocess.run([str(script), "x"], capture_output=True, text=True, check=False,
                             env={"PYTHONPATH": str(tmp_path / "site")})
        assert (run.returncode, run.stdout) == (3, "ran ['x']\n")
        assert script.read_text().startswith(f"#!{sys.executable}\n")
