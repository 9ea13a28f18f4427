"""bench/install.py reads an eb log: steps, commands, torchstack's timing lines, and the commands
that run in a thread beside the others (byte-compile, import check, C++ extension build)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "install.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_install", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_install"] = module  # dataclasses look their module up
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # it puts bench/ first: its doctor.py would shadow test/doctor
    return module


def line(second: float, message: str) -> str:
    whole, fraction = divmod(round(second * 1000), 1000)
    return f"== 2026-12-03 10:00:{whole:02d},{fraction:03d} run.py:1 INFO {message}"


LOG = "\n".join([
    line(0.0, "Starting extensions step"),
    line(0.1, "Running command in /b:"),
    "\t/u/uv pip install --python /p/python --prefix /i /w/torch.whl",
    line(3.1, "Command completed successfully"),
    line(3.2, "Running command in /b:"),  # the byte-compile, in a thread
    "\t/p/python /t/torchstack/install/bytecode.py -j 2 /i/lib/python3.11/site-packages"
    " (via thread with ID 4242)",
    line(3.3, "Starting sanitycheck step"),
    line(3.4, "Running command in /b:"),  # an Lmod call, in the foreground
    "\t/usr/share/lmod/lmod/libexec/lmod python load PyTorch/2.13.0-whl",
    line(3.5, "Command completed successfully"),
    line(3.6, "Running shell command in /b:"),
    "\t/p/python -c 'import torch'",
    line(5.0, "Running command in /b:"),  # the C++ extension build, in a thread
    "\t/p/python /b/torchstack_jit_check.py (via thread with ID 4243)",
    line(6.0, "Command completed successfully"),  # the byte-compile ends meanwhile
    line(6.6, "Shell command completed successfully"),
    line(7.0, "torchstack: byte-compile took 2.800 s, waited for 0.000 s"),
    line(11.0, "Command FAILED (exit code 1)"),  # the C++ build
    line(11.1, "torchstack: C++ extension build took 6.100 s, waited for 4.400 s"),
    line(11.2, "Starting cleanup step"),
])


def test_background_commands_do_not_steal_foreground_ends(bench: ModuleType) -> None:
    parsed = bench._parse_log(LOG)
    seconds = {c.text.split()[-1]: round(c.seconds, 3) for c in parsed.commands}
    assert seconds == {
        "/w/torch.whl": 3.0,
        "4242)": 2.8,  # the byte-compile, closed by the first plain end after it
        "PyTorch/2.13.0-whl": 0.1,
        "torch'": 3.0,
        "4243)": 6.0,  # the C++ build; FAILED ends count too
    }
    assert [name for name, _ in parsed.steps] == ["extensions", "sanitycheck", "cleanup"]
    assert parsed.timings == {"compile": 2.8, "compile.wait": 0.0,
                              "sanity.cxx": 6.1, "sanity.cxx.wait": 4.4}


def test_breakdown_keeps_background_commands_out_of_the_serial_rows(
    bench: ModuleType, tmp_path: Path
) -> None:
    log = tmp_path / "eb.log"
    log.write_text(LOG)
    stdout = f"Results of the build can be found in the log file(s) {log}\n"
    phases, installer = bench.breakdown(stdout, 12.0)
    assert installer == "uv"
    assert phases["ext.install"] == pytest.approx(3.0)
    assert phases["ext.commands"] == pytest.approx(0.0)  # not the byte-compile
    assert phases["install_compile"] == pytest.approx(5.8)
    assert phases["sanity.import"] == pytest.approx(3.0)
    assert phases["sanity.commands"] == pytest.approx(0.1)  # the Lmod call, not the C++ build
    assert phases["fixed"] == pytest.approx(12.0 - 3.0 - 3.0 - 4.4)


# PyTorchWheels' import check runs in a thread too, logged as a joined command list (no quotes)
THREADED_IMPORT_LOG = "\n".join([
    line(0.0, "Starting extensions step"),
    line(0.1, "Running command in /b:"),
    "\t/u/uv pip install --python /p/python --prefix /i /w/torch.whl",
    line(3.1, "Command completed successfully"),
    line(3.2, "Running command in /b:"),
    "\t/p/python /t/torchstack/install/bytecode.py -j 2 /i/lib/python3.11/site-packages"
    " (via thread with ID 4242)",
    line(3.3, "Starting sanitycheck step"),
    line(3.4, "Running command in /tmp/torchstack-import-check-x:"),
    "\t/p/python -c import torch, functorch, torchgen (via thread with ID 4244)",
    line(3.5, "Running command in /b:"),
    "\t/usr/share/lmod/lmod/libexec/lmod python load PyTorch/2.13.0-whl",
    line(3.6, "Command completed successfully"),  # the Lmod call's, not the import's
    line(4.0, "Running shell command in /b:"),
    "\t/p/python -m pip check",
    line(4.5, "Shell command completed successfully"),
    line(5.9, "Running command in /b:"),  # a foreground Lmod call while both threads end
    "\t/usr/share/lmod/lmod/libexec/lmod python list",
    line(6.0, "Command completed successfully"),  # the byte-compile's: 3.2 s + 2.8 s
    line(6.5, "Command completed successfully"),  # the import's: 3.4 s + 3.1 s
    line(6.55, "Command completed successfully"),  # the Lmod call's
    line(6.6, "torchstack: byte-compile took 2.800 s, waited for 0.000 s"),
    line(6.7, "torchstack: import check took 3.100 s, waited for 2.000 s"),
    line(6.8, "Starting cleanup step"),
])


def test_threaded_import_check_is_a_background_command(bench: ModuleType, tmp_path: Path) -> None:
    parsed = bench._parse_log(THREADED_IMPORT_LOG)
    seconds = {c.text.split()[-1]: round(c.seconds, 3) for c in parsed.commands}
    assert seconds == {"/w/torch.whl": 3.0, "PyTorch/2.13.0-whl": 0.1, "check": 0.5,
                       "4242)": 2.8, "4244)": 3.1, "list": 0.65}
    log = tmp_path / "eb.log"
    log.write_text(THREADED_IMPORT_LOG)
    stdout = f"Results of the build can be found in the log file(s) {log}\n"
    phases, _ = bench.breakdown(stdout, 10.0)
    assert phases["sanity.import"] == pytest.approx(3.1)
    assert phases["sanity.import.wait"] == pytest.approx(2.0)
    assert phases["sanity.pip"] == pytest.approx(0.5)
    assert phases["sanity.commands"] == pytest.approx(0.75)  # the two Lmod calls alone
    # the run waited 2.0 s of the import, 3.0 s of uv and 0.5 s of pip check
    assert phases["fixed"] == pytest.approx(10.0 - 2.0 - 3.0 - 0.5)
