"""Stage-2 easyconfigs: upstream's source easyconfig of a release, for torchstack's easyblock.

A source build carries 50 to 65 patches and a test configuration that upstream EasyBuild
maintains; torchstack does not redo that work. It takes upstream's easyconfig of the same
version, toolchain and CUDA from the robot path and only names the stage-2 easyblock, which
extends upstream's EB_PyTorch with fingerprints and guards. Its patches are found where eb
finds upstream's: in the robot path.
"""

from __future__ import annotations

from pathlib import Path

from torchstack._files import MAX_EASYCONFIG, read_text
from torchstack.errors import TorchstackError
from torchstack.generator import suffixes, toolchains
from torchstack.generator.release import VariantSet

EASYBLOCK = "PyTorchSource"


class Stage2Error(TorchstackError):
    """A release for which the robot path has no source easyconfig to build on."""


def source_easyconfig(variant_set: VariantSet, toolchain: toolchains.Toolchain) -> tuple[str, str]:
    """File name and text of the stage-2 easyconfig; Stage2Error when upstream has none."""
    suffix = _cuda_suffix(variant_set, toolchain)
    version = variant_set.torch.public_version
    path = toolchains.source_easyconfig("PyTorch", version, toolchain, suffix)
    if path is None:
        wanted = f"PyTorch-{version}-{toolchain.name}-{toolchain.version}{suffix}.eb"
        raise Stage2Error(f"the robot path has no {wanted} to derive a source build from "
                          f"(upstream EasyBuild has not released one yet)")
    return path.name, derive(path)


def derive(path: Path) -> str:
    """Upstream's easyconfig text with torchstack's stage-2 easyblock named first."""
    try:
        text = read_text(path, MAX_EASYCONFIG, Stage2Error)
    except OSError as exc:
        raise Stage2Error(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    declared = toolchains.easyblock_of(path)
    if declared not in (None, "EB_PyTorch"):
        raise Stage2Error(f"{str(path)!r} uses easyblock {declared!r}, not EB_PyTorch")
    header = (f"# Derived by torchstack generate from upstream {path.name}: the same build,\n"
              f"# with torchstack's fingerprint and swap guards.\n"
              f"easyblock = {EASYBLOCK!r}\n\n")
    return header + text


def _cuda_suffix(variant_set: VariantSet, toolchain: toolchains.Toolchain) -> str:
    if variant_set.cuda is None:
        return ""
    cuda = toolchain.find("CUDA", version_prefix=f"{variant_set.cuda}.")
    if cuda is None:
        raise Stage2Error(f"no CUDA {variant_set.cuda}.x module for "
                          f"{toolchain.name}/{toolchain.version} in the robot path")
    return suffixes.cuda(cuda.version)
