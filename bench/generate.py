#!/usr/bin/env python3
"""Benchmark `torchstack generate`: bytes read from the index and wall time, against the bytes
the upstream way costs (downloading every wheel the set names to checksum it, as
`eb --inject-checksums` does).

The local index (test/support/indexserver.py on 127.0.0.1) is built from the embedded catalog's
record of PyPI for torch 2.9.1: the real file names, sizes and Requires-Dist of torch,
torchvision, torchaudio, triton and the nvidia wheels, each file a sparse wheel of its real
size (its METADATA real, its zip directory as long as a real one, the rest a hole). Like
PyPI, the index offers no .metadata files for torch, so its metadata comes by range
requests. One Python (3.13: the cp313 and pure wheels), both architectures, every variant
the index offers, two toolchains with that Python (foss/2025a, gfbf/2025a).

The figures printed: generate's wall time (median of --rounds runs, each on a fresh server),
its bytes (the server's bytes sent), the set's wheel bytes, and their ratio. Targets: at least
1000x fewer bytes, under 10 s; printed with whether they are met, never enforced.

The online case with dead variant indexes runs beside it, round by round: the same index plus
the four PyTorch variant indexes as sites meet them when download.pytorch.org cannot be
reached (two host names that do not resolve, two loopback ports that refuse). Anchor: the run
without them; target: at most 1.5x its wall time.

Consumers: the real consumer wheels of this machine's pip configuration (torchvision 0.28.0
and fbgemm-gpu-cpu, cxx; torchvision 0.29.1, torchaudio, torchcodec, xformers and torchao,
stable) served on 127.0.0.1, each classified before install from range reads
(torchstack.index.wheelelf): the bytes the server sent for the wheel against its size, and
the predicted class.

With --pypi (network: PyPI itself), the site's consumers that name no torch release:
`generate 2.9.1 --with torchcodec --with torchao --with xformers` against https://pypi.org/simple/
for one toolchain. Printed: the wall time (target under 60 s), every byte received over TLS
(target under 64 MB, against the GBs of the wheels), the bytes read per consumer wheel
predicted and per torch wheel whose symbol tables were read, and what was written or left out.

Usage: python3 bench/generate.py [--rounds N] [--json] [--pypi]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
from _common import log, positive
from support.indexserver import IndexServer
from support.wheelbuild import build_sparse_wheel
from support.wheelcache import REAL_WHEELS, download_wheel

from torchstack.cli import main
from torchstack.index import catalog, wheelelf
from torchstack.index.simple import SimpleIndex

RELEASE = "2.9.1"
TOOLCHAINS = ("foss/2025a", "gfbf/2025a")
PYTHON_TAGS = ("cp313-cp313", "py3-none", "py2.py3-none")
TARGET_RATIO, TARGET_SECONDS, TARGET_DEAD = 1000.0, 10.0, 1.5
# A real torch wheel's zip directory lists about 10,000 files: reading it by range requests
# costs about a megabyte (measured on torch 2.14.1: 1.24 MB), which the sparse wheels repeat.
TORCH_MEMBERS = 10_000
CONSUMERS = ("torchvision-0.28.0", "torchvision-0.29.1", "torchaudio-2.11.1",
             "torchcodec-0.17.0", "xformers-0.0.35", "torchao-0.18.0", "fbgemm_gpu_cpu-1.9.0")


def build_index(folder: Path) -> tuple[list[Path], dict[str, int]]:
    """Sparse wheels of the catalog's files for one Python; their sizes by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    wheels, sizes = [], {}
    for recorded in (i for i in catalog.load(RELEASE) if not i.unreachable):
        for project in ("torch", "torchvision", "torchaudio", "triton",
                        *(p for p in recorded.projects if p.startswith("nvidia-"))):
            for file in recorded.files(project):
                if not any(f"-{tag}-" in file.filename for tag in PYTHON_TAGS) \
                        or file.size is None or file.filename in sizes:
                    continue
                requires = recorded.recorded_requires(file)
                metadata = _metadata(file.filename, requires)
                members = TORCH_MEMBERS if project == "torch" else 0
                wheels.append(build_sparse_wheel(folder, file.filename, file.size, metadata,
                                                 members))
                sizes[file.filename] = file.size
    return wheels, sizes


def _metadata(filename: str, requires: list[str]) -> str:
    name, version = filename.split("-")[:2]
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {r}" for r in requires)]
    return "\n".join(lines) + "\n"


def dead_indexes() -> list[str]:
    """Variant indexes that do not answer: names that do not resolve, ports that refuse."""
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    return ["https://download.pytorch.invalid/whl/cpu/",
            "https://download.pytorch.invalid/whl/cu126/",
            f"http://127.0.0.1:{ports[0]}/whl/cu128/", f"http://127.0.0.1:{ports[1]}/whl/cu130/"]


def run_once(wheels: list[Path], out: Path,
             dead: tuple[str, ...] = ()) -> tuple[float, int]:
    """One generate on a fresh server: wall time and bytes the server sent."""
    with IndexServer() as server:
        for wheel in wheels:
            torch = wheel.name.startswith("torch-")
            server.add_wheel(wheel, metadata="none" if torch else "announced")
        args = ["generate", RELEASE, "--index", server.index_url, "--out", str(out), "--force",
                *(a for tc in TOOLCHAINS for a in ("--toolchain", tc)),
                *(a for url in dead for a in ("--index", url))]
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(args)
        elapsed = time.perf_counter() - started
        if code != (1 if dead else 0):  # dead indexes make the run incomplete: exit 1
            raise SystemExit(f"generate exited {code} (dead indexes: {len(dead)})")
        return elapsed, server.bytes_sent


def set_bytes(out: Path, sizes: dict[str, int]) -> tuple[int, int]:
    """Bytes and count of the distinct wheels the generated easyconfigs name."""
    named = set()
    for easyconfig in out.glob("*.eb"):
        named.update(re.findall(r"'filename': '([^']+\.whl)'", easyconfig.read_text()))
    missing = named - sizes.keys()
    if missing:
        raise SystemExit(f"the set names wheels the index does not have: {sorted(missing)}")
    return sum(sizes[name] for name in named), len(named)


def consumer_figures() -> list[dict[str, Any]]:
    """Each real consumer wheel classified from range reads: bytes sent against its size."""
    wheels = [download_wheel(REAL_WHEELS[key]) for key in CONSUMERS]
    rows = []
    with IndexServer(wheels) as server:
        index = SimpleIndex(server.index_url)
        for wheel in wheels:
            (file,) = [f for f in index.files(wheel.name.split("-")[0])
                       if f.filename == wheel.name]
            path = server.file_path(wheel.name)
            read, size, tail = index.ranges(file.url)
            prediction = wheelelf.predict(read, size, tail, file.url)
            sent = sum(hit.sent for hit in server.hits_of(path))
            rows.append({"wheel": wheel.name, "wheel_bytes": size, "bytes_read": sent,
                         "percent": round(100 * sent / size, 2),
                         "objects": len(prediction.objects),
                         "class": prediction.summary(wheel.name)})
    return rows


PYPI_CONSUMERS = ("torchcodec", "torchao", "xformers")
TARGET_PYPI_BYTES = 64 << 20
TARGET_PYPI_SECONDS = 60.0


def pypi_figures() -> dict[str, Any]:
    """generate 2.9.1 --with the three consumers against PyPI, every received byte counted."""
    import ssl

    from torchstack.index import consumers as consumer_reads
    from torchstack.index.torchsymbols import TorchSymbols

    received = [0]
    original = ssl.SSLSocket.recv_into

    def counting(self: ssl.SSLSocket, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        got = original(self, buffer, nbytes, flags)
        received[0] += got
        return got

    per_consumer: dict[str, int] = {}
    predict = consumer_reads.predict

    def predicting(index: Any, file: Any) -> Any:
        found = predict(index, file)
        per_consumer[file.filename] = found.bytes_read
        return found

    readers: list[TorchSymbols] = []
    init = TorchSymbols.__init__

    def registering(self: TorchSymbols) -> None:
        init(self)
        readers.append(self)

    ssl.SSLSocket.recv_into = counting  # type: ignore[method-assign]
    consumer_reads.predict = predicting  # type: ignore[assignment]
    TorchSymbols.__init__ = registering  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-pypi-") as tmp:
            argv = ["generate", RELEASE, "--toolchain", "foss/2025a", "--index",
                    "https://pypi.org/simple/", "--out", str(Path(tmp) / "out")]
            for project in PYPI_CONSUMERS:
                argv += ["--with", project]
            report = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stdout(report):
                code = main(argv)
            seconds = time.perf_counter() - start
            written = sorted(p.name for p in (Path(tmp) / "out").glob("*.eb")
                             if p.name.split("-")[0] in PYPI_CONSUMERS)
    finally:
        ssl.SSLSocket.recv_into = original  # type: ignore[method-assign]
        consumer_reads.predict = predict  # type: ignore[assignment]
        TorchSymbols.__init__ = init  # type: ignore[method-assign]
    providers = {name: n for reader in readers for name, n in reader.fetched.items()}
    left_out = [line for line in report.getvalue().splitlines()
                if any(line.split(": ", 1)[-1].startswith(f"{p}: not built")
                       for p in PYPI_CONSUMERS)]
    return {"exit": code, "seconds": round(seconds, 1), "bytes_received": received[0],
            "target_bytes_met": received[0] < TARGET_PYPI_BYTES,
            "target_seconds_met": seconds < TARGET_PYPI_SECONDS,
            "bytes_per_consumer_wheel": per_consumer, "bytes_per_torch_wheel": providers,
            "written": written, "left_out": left_out}


def _pypi_table(f: dict[str, Any]) -> str:
    return "\n".join([
        f"torchstack generate {RELEASE} --with {' --with '.join(PYPI_CONSUMERS)} against PyPI "
        f"(exit {f['exit']})",
        f"  wall time              {f['seconds']:8.1f} s   target < {TARGET_PYPI_SECONDS:.0f} s: "
        f"{'met' if f['target_seconds_met'] else 'NOT met'}",
        f"  bytes received         {f['bytes_received']:>14,}   target < 64 MB: "
        f"{'met' if f['target_bytes_met'] else 'NOT met'}",
        f"  consumer wheels predicted: {len(f['bytes_per_consumer_wheel'])}, "
        f"{sum(f['bytes_per_consumer_wheel'].values()):,} bytes",
        *(f"    {n:>12,}  {name}" for name, n in sorted(f["bytes_per_consumer_wheel"].items())),
        f"  torch wheels whose symbol tables were read: {len(f['bytes_per_torch_wheel'])}",
        *(f"    {n:>12,}  {name}" for name, n in sorted(f["bytes_per_torch_wheel"].items())),
        f"  written: {', '.join(f['written']) or 'none'}",
        *(f"  left out: {line[:300]}" for line in f["left_out"]),
    ])


def main_bench(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pypi", action="store_true",
                        help="the consumers against PyPI itself (network) instead")
    args = parser.parse_args(argv)
    if args.pypi:
        figures = pypi_figures()
        print(json.dumps(figures) if args.json else _pypi_table(figures))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp:
        log("building the local index (sparse wheels of the real sizes)...")
        wheels, sizes = build_index(Path(tmp) / "wheels")
        out = Path(tmp) / "out"
        runs, dead_runs = [], []
        for _ in range(args.rounds):  # side by side, so both see the same machine
            dead_runs.append(run_once(wheels, Path(tmp) / "dead", tuple(dead_indexes())))
            runs.append(run_once(wheels, out))
        upstream, count = set_bytes(out, sizes)
        easyconfigs = len(list(out.glob("*.eb")))
    log("classifying the real consumer wheels by range reads...")
    consumers = consumer_figures()
    seconds = statistics.median(r[0] for r in runs)
    dead_seconds = statistics.median(r[0] for r in dead_runs)
    transferred = statistics.median(r[1] for r in runs)
    figures: dict[str, Any] = {
        "release": RELEASE, "toolchains": list(TOOLCHAINS), "easyconfigs": easyconfigs,
        "index_files": len(wheels), "wheels_named": count, "seconds_median": round(seconds, 3),
        "bytes_generate": transferred, "bytes_upstream": upstream,
        "ratio": round(upstream / transferred, 1),
        "target_ratio_met": upstream / transferred >= TARGET_RATIO,
        "target_seconds_met": seconds < TARGET_SECONDS,
        "seconds_dead_indexes_median": round(dead_seconds, 3),
        "dead_ratio": round(dead_seconds / seconds, 2),
        "target_dead_met": dead_seconds / seconds <= TARGET_DEAD,
        "consumers": consumers,
    }
    print(json.dumps(figures) if args.json else _table(figures))
    return 0


def _table(f: dict[str, Any]) -> str:
    return "\n".join([
        f"torchstack generate {f['release']} for {', '.join(f['toolchains'])}: "
        f"{f['easyconfigs']} easyconfigs naming {f['wheels_named']} wheels "
        f"(index of {f['index_files']} files)",
        f"  wall time (median)     {f['seconds_median']:8.2f} s   target < {TARGET_SECONDS:.0f} s: "
        f"{'met' if f['target_seconds_met'] else 'NOT met'}",
        f"  bytes from the index   {f['bytes_generate']:>14,}",
        f"  bytes upstream's way   {f['bytes_upstream']:>14,}   (every named wheel downloaded)",
        f"  ratio                  {f['ratio']:>10.0f}x     target >= {TARGET_RATIO:.0f}x: "
        f"{'met' if f['target_ratio_met'] else 'NOT met'}",
        f"  with 4 dead variant indexes {f['seconds_dead_indexes_median']:6.2f} s   "
        f"{f['dead_ratio']:.2f}x the run without   target <= {TARGET_DEAD}x: "
        f"{'met' if f['target_dead_met'] else 'NOT met'}",
        "  consumers classified before install (bytes sent / wheel size):",
        *(f"    {c['bytes_read']:>10,} / {c['wheel_bytes']:>11,} = {c['percent']:5.2f}%  "
          f"{c['class']}" for c in f["consumers"]),
    ])


if __name__ == "__main__":
    sys.exit(main_bench())
