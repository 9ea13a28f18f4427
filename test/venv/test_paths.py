"""Venv paths: which are refused, and the pip.conf value and `#!` lines written for the rest.

pip and the kernel are the readers: the pip.conf values go through a real `pip install`
of this machine's pip, the scripts are run for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.wheelbuild import build_wheel

from torchstack.doctor.venvrecord import names_file, pip_conf_value
from torchstack.venv import VenvError
from torchstack.venv.paths import check, shebang
from torchstack.venv.pins import pip_conf_text
from torchstack.venv.scripts import ConsoleScript

# Folder names that a shell, pip.conf or a `#!` line could mangle, and that work.
AWKWARD = [
    pytest.param("my envs/torch venv", id="space"),
    pytest.param("hash#semi;colon", id="hash-semicolon"),
    pytest.param("100%done %(x)s", id="percent"),
    pytest.param("it's", id="single-quote"),
    pytest.param("a'''b c", id="three-single-quotes"),
    pytest.param("ümlaut é 環境", id="non-ascii"),
    pytest.param("&|<>*?[]{}()~ x", id="shell-metacharacters"),
]


class TestCheck:
    @pytest.mark.parametrize(("name", "what"), [
        pytest.param("a$HOME", "a dollar sign", id="dollar"),
        pytest.param("a`id`", "a backquote", id="backquote"),
        pytest.param('a"b', "a double quote", id="double-quote"),
        pytest.param("a\\b", "a backslash", id="backslash"),
        pytest.param("a!b", "an exclamation mark", id="exclamation-csh-history"),
        pytest.param("a:b", "a colon", id="colon-splits-PATH"),
        pytest.param("a\nb", r"a control character \('\\n'\)", id="newline"),
        pytest.param("a\tb", r"a control character \('\\t'\)", id="tab"),
        pytest.param("a\x7fb", r"a control character \('\\x7f'\)", id="delete"),
    ])
    def test_refused(self, tmp_path: Path, name: str, what: str) -> None:
        with pytest.raises(VenvError, match=f"cannot hold a venv: it has {what}, which "):
            check(tmp_path / name)

    def test_every_refused_character_named_once(self, tmp_path: Path) -> None:
        with pytest.raises(VenvError, match="it has a colon and a dollar sign, which"):
            check(tmp_path / "$a:b$")

    def test_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / os.fsdecode(b"caf\xe9")
        with pytest.raises(VenvError, match="cannot hold a venv: it is not valid UTF-8"):
            check(path)

    @pytest.mark.parametrize("name", AWKWARD)
    def test_accepted(self, tmp_path: Path, name: str) -> None:
        check(tmp_path / name)


class TestPipConfValue:
    def test_plain_path_as_it_is(self) -> None:
        assert pip_conf_value(Path("/v/c.txt")) == "/v/c.txt"

    def test_space_as_file_url(self) -> None:
        assert pip_conf_value(Path("/my envs/c.txt")) == "file:///my%20envs/c.txt"

    @pytest.mark.parametrize("name", AWKWARD)
    def test_pip_reads_the_one_file(self, tmp_path: Path, name: str) -> None:
        """A real `pip install` with the venv's pip.conf naming constraints there: the pin
        (demo==1.0) refuses the only wheel there is (demo 2.0), so pip read the file."""
        folder = tmp_path / name
        folder.mkdir(parents=True)
        constraints = folder / "constraints.txt"
        constraints.write_text("demo==1.0\n")
        conf = tmp_path / "pip.conf"
        conf.write_text(pip_conf_text(constraints), encoding="utf-8")
        wheels = tmp_path / "wheels"
        wheels.mkdir()
        build_wheel(wheels, "demo", "2.0", {"demo/__init__.py": b""})
        run = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
             "--find-links", str(wheels), "--disable-pip-version-check", "demo"],
            capture_output=True, text=True, check=False, timeout=120,
            env={**os.environ, "PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path),
                 "XDG_CONFIG_DIRS": str(tmp_path)})  # no site or user configuration
        assert run.returncode == 1, run.stdout + run.stderr
        assert "The user requested (constraint) demo==1.0" in run.stdout

    @pytest.mark.parametrize("name", AWKWARD)
    def test_doctor_reads_it_back(self, tmp_path: Path, name: str) -> None:
        path = tmp_path / name / "constraints.txt"
        path.parent.mkdir(parents=True)
        path.write_text("")
        assert names_file(pip_conf_value(path).split(), path)


class TestShebang:
    def test_plain_path_as_pip_writes_it(self) -> None:
        assert shebang(Path("/v/bin/python")) == "#!/v/bin/python\n"

    def test_space_in_pips_sh_form(self) -> None:
        assert shebang(Path("/my v/bin/python")) == (
            "#!/bin/sh\n'''exec' \"/my v/bin/python\" \"$0\" \"$@\"\n' '''\n")

    @pytest.mark.parametrize("name", [
        *AWKWARD,
        pytest.param("x" * 130, id="longer-than-a-kernel-reads"),
    ])
    def test_script_runs(self, tmp_path: Path, name: str) -> None:
        """A console script whose Python lies in that folder (a link to this Python)."""
        python = tmp_path / name / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.symlink_to(sys.executable)
        package = tmp_path / "site" / "demo"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            "import sys\ndef main():\n    print('ran', sys.executable, sys.argv[1:])\n")
        script = tmp_path / name / "bin" / "demo"
        script.write_text(ConsoleScript("demo", "demo", "main", "demo").text(python),
                          encoding="utf-8")
        script.chmod(0o755)
        run = subprocess.run([str(script), "a b"], capture_output=True, text=True, check=False,
                             env={"PYTHONPATH": str(tmp_path / "site")}, timeout=60)
        assert (run.returncode, run.stdout) == (0, f"ran {python} ['a b']\n"), run.stderr
