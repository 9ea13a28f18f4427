"""Wheels installed as modules by the real eb: the PyTorch modules and consumers on them."""

from __future__ import annotations

from pathlib import Path

from support.cudastack import wheel_version
from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.wheelbuild import sha256

PYTORCH_CPU = ("PyTorch", "2.13.0", "-whl")
PYTORCH_CUDA = ("PyTorch", "2.14.1", "-CUDA-13.0-whl")


def stage_wheels(eb_env: EasyBuildEnv, software: str,
                 wheels: list[Path]) -> list[tuple[str, str, Path, str]]:
    """Stage wheels as sources of `software`; exts_list entries (name, version, wheel, sha)."""
    for wheel in wheels:
        eb_env.stage_source(software, wheel)
    return [(w.name.split("-")[0].replace("_", "-"), wheel_version(w), w, sha256(w))
            for w in wheels]


def consumer_module(
    eb_env: EasyBuildEnv, wheel: Path, name: str, version: str,
    dependencies: list[tuple[str, ...]] | None = None, suffix: str = "-whl",
    easyblock: str = "PyTorchWheels", options: tuple[str, ...] = (),
) -> str:
    """Install one wheel as a module (on PyTorch 2.13.0 by default); fails the test if eb fails."""
    easyconfig = wheel_easyconfig(
        eb_env.root / f"{name}-{version}{suffix}.eb", name, version,
        stage_wheels(eb_env, name, [wheel]),
        dependencies=[PYTORCH_CPU] if dependencies is None else dependencies,
        versionsuffix=suffix, easyblock=easyblock,
    )
    result = eb_env.eb(easyconfig, *options)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return f"{name}/{version}{suffix}"


# key -> (REAL_WHEELS key, module name, version, what the sanity check imports): the
# fbgemm wheel also ships a top-level `list_versions` package that needs click, so its
# easyconfig names the module to import, as upstream easyconfigs do with `modulename`
WHEELS = {"fbgemm": ("fbgemm_gpu_cpu-1.9.0", "fbgemm-gpu-cpu", "1.9.0", "fbgemm_gpu"),
          "audio": ("torchaudio-2.11.1", "torchaudio", "2.11.1", None)}


def beyond_module(eb_env: EasyBuildEnv, wheel: Path, name: str, version: str,
                  modulename: str | None) -> str:
    """One real consumer wheel as a module on PyTorch 2.14.1 (CUDA 13)."""
    easyconfig = wheel_easyconfig(eb_env.root / f"{name}-{version}-whl.eb", name, version,
                                  stage_wheels(eb_env, name, [wheel]), [PYTORCH_CUDA])
    if modulename:
        text = easyconfig.read_text().replace("'sources':", f"'modulename': {modulename!r}, "
                                                           "'sources':", 1)
        easyconfig.write_text(text)
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return f"{name}/{version}-whl"
