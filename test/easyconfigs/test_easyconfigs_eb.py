"""The shipped easyconfigs/ tree under the real EasyBuild: every file passes
`eb --check-contrib`, and `eb --dry-run --robot=TREE` of its easystacks on the installed
easybuild-easyconfigs takes every PyTorch, Triton, torchvision and torchaudio easyconfig from
the tree, never an upstream namesake (EasyBuild takes the first match on the robot path and
tries the parent toolchain before a subtoolchain: an upstream Triton on foss beats the tree's
on gfbf). One eb process a check: the dry run plans the easystacks' entries together.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.ebenv import EasyBuildEnv

from torchstack.generator import jobs

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "easyconfigs"
OURS = ("PyTorch", "Triton", "torchvision", "torchaudio")
# ` * [ ] /path/to/Name-version.eb (module: Name/version)` in eb --dry-run's plan
_PLANNED = re.compile(r"^ \* \[.\] (\S+\.eb) \(module: ([^/)]+)/", re.MULTILINE)


def _easyconfigs() -> list[Path]:
    return sorted(TREE.rglob("*.eb"))


def _one_easystack(stacks: list[Path], folder: Path) -> Path:
    """An easystack of every entry of `stacks`, each read with EasyBuild's own parser, so
    that one eb process plans them all (the entries resolve alike in any easystack)."""
    entries = dict.fromkeys(e for stack in stacks for e in jobs.easystack_entries(stack))
    path = folder / "all-easystacks.yaml"
    path.write_text("easyconfigs:\n" + "".join(f"  - {e}\n" for e in entries))
    return path


def _dry_run(eb_env: EasyBuildEnv, easystack: Path, robot: str, cwd: Path) -> dict[str, str]:
    """Planned easyconfig path -> its software name, for the easystack on `robot`."""
    result = eb_env.run_eb("--dry-run", f"--robot={robot}", "--easystack", str(easystack),
                           cwd=cwd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return {path: name for path, name in _PLANNED.findall(result.stdout)}


def _from_outside(planned: dict[str, str], tree: Path) -> list[str]:
    """Planned easyconfigs of our projects that do not come from `tree`."""
    return sorted(path for path, name in planned.items()
                  if name in OURS and not Path(path).is_relative_to(tree))


def test_every_file_passes_check_contrib(eb_env: EasyBuildEnv) -> None:
    files = [str(p) for p in _easyconfigs()]
    assert len(files) >= 16  # 2 releases x 2 toolchains x 4 projects
    result = eb_env.run_eb("--check-contrib", *files, cwd=TREE)
    failed = [line for line in result.stdout.splitlines() if line.startswith("[FAIL]")]
    assert "All contribution checks PASSed!" in result.stdout, \
        "\n".join(failed) + result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0 and result.stdout.count("[PASS]") >= len(files)


def test_easystacks_resolve_inside_the_tree(eb_env: EasyBuildEnv, tmp_path: Path) -> None:
    stacks = sorted(TREE.glob("easystack-*.yaml"))
    assert len(stacks) >= 8  # 2 releases x 2 toolchains x 2 architectures
    planned = _dry_run(eb_env, _one_easystack(stacks, tmp_path), str(TREE), tmp_path)
    assert _from_outside(planned, TREE) == []
    assert {str(p) for p in _easyconfigs()} <= set(planned)  # each file planned, by path
    # the rest comes from the installed easybuild-easyconfigs: Python, CUDA, the toolchains
    assert any(name == "CUDA" and not Path(p).is_relative_to(TREE) for p, name in planned.items())


def test_an_upstream_namesake_that_wins_is_caught(eb_env: EasyBuildEnv, tmp_path: Path) -> None:
    """The check against what it is for: a Triton of the same version on foss/2025b (the
    parent toolchain) later on the robot path wins over the tree's on gfbf/2025b."""
    ours = next(TREE.glob("t/Triton/Triton-*-gfbf-2025b-*-whl.eb"))
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    text = ours.read_text().replace("{'name': 'gfbf', 'version': '2025b'}",
                                    "{'name': 'foss', 'version': '2025b'}")
    namesake = upstream / ours.name.replace("-gfbf-", "-foss-")
    namesake.write_text(text)
    release = ours.name.split("-")[1]
    stacks = [s for s in TREE.glob("easystack-torch-*-foss-2025b-*-x86_64.yaml")
              if ours.name in s.read_text()]
    assert stacks, f"no easystack of foss/2025b lists {ours.name} (Triton {release})"
    planned = _dry_run(eb_env, _one_easystack(stacks, tmp_path), f"{TREE}:{upstream}", tmp_path)
    assert _from_outside(planned, TREE) == [str(namesake)]
