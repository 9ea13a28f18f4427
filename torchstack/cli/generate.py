"""`torchstack generate RELEASE`: matched easyconfigs of a torch release, per toolchain.

Writes PyTorch/torchvision/torchaudio/Triton `-whl` easyconfigs (and, with --stage source,
the stage-2 easyconfig), one easystack a toolchain, variant and architecture, and prints the
report (generator.report): a short summary, the detail with -v, all of it as JSON with
--json. Checksums come from the index; no wheel is downloaded (unless --allow-download-hash is
given and an index lacks a hash).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from torchstack.cli._args import positive_int

if TYPE_CHECKING:
    from torchstack.index.protocol import Index

NAME = "generate"
NEWEST = "newest"
HELP = "write matched easyconfigs and easystack files for a torch release"
DEFAULT_TOOLCHAINS = ("foss/2025a",)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("release", metavar="RELEASE",
                        help="torch release, e.g. 2.9.1, or 'newest' (of the catalog with "
                             "--offline, else of the first index that lists torch)")
    parser.add_argument("--toolchain", action="append", dest="toolchains", metavar="TC",
                        help="EasyBuild toolchain, e.g. foss/2025a (repeat for several; "
                             f"default {', '.join(DEFAULT_TOOLCHAINS)}), or 'newest': the "
                             "newest foss of the robot path that the release fits")
    parser.add_argument("--variant", action="append", dest="variants", metavar="V",
                        help="cpu, cu126, cu128, cu130, rocm6.4, ... (default: all offered)")
    parser.add_argument("--arch", action="append", dest="architectures",
                        choices=("x86_64", "aarch64"), help="default: both")
    parser.add_argument("--stage", action="append", dest="stages", choices=("whl", "source"),
                        help="whl (stage 1, default) and/or source (stage 2)")
    parser.add_argument("--index", action="append", dest="indexes", metavar="URL",
                        help="PEP 503/691 simple index URL or local folder, in order of "
                             "preference (default: PyPI, then the PyTorch variant indexes)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output folder (default: ./torchstack-RELEASE); written as one "
                             "set by swapping in a new folder with the old one's content, "
                             "mode and group (a symlink is followed and stays), so not the "
                             "current folder, an ancestor of it, the home folder or /; "
                             "concurrent runs into one folder take turns")
    parser.add_argument("--force", action="store_true", help="replace existing files in --out")
    parser.add_argument("--offline", action="store_true",
                        help="answer from the embedded catalog instead of the indexes")
    parser.add_argument("--catalog", default=None, metavar="DIR",
                        help="with --offline: a catalog folder written by `torchstack catalog "
                             "refresh --dir` (default: the one shipped with torchstack)")
    parser.add_argument("--robot-paths", default=None, metavar="PATHS",
                        help="colon-separated easyconfig folders for toolchain data "
                             "(default: the installed easybuild-easyconfigs)")
    parser.add_argument("--cuda-libs", default="auto", choices=("auto", "wheels", "modules"),
                        help="CUDA libraries from the site's modules or as nvidia wheels; auto "
                             "(default): modules where the robot path has every library in a "
                             "version that satisfies torch's pins, else wheels")
    parser.add_argument("--glibc", default="2.28", metavar="X.Y",
                        help="oldest glibc of the cluster, for wheel tags (default 2.28)")
    parser.add_argument("--allow-download-hash", action="store_true",
                        help="download and hash a wheel whose index gives no sha256")
    parser.add_argument("--with", dest="projects", action="append", default=[],
                        metavar="PROJECT[SPEC]",
                        help="a torch consumer the site carries, e.g. xformers or 'torchao<0.19' "
                             "(repeatable): resolved, classified and written after torch")
    parser.add_argument("--with-file", dest="project_files", action="append", default=[],
                        type=Path, metavar="FILE",
                        help="a file of such projects, one requirement a line, # comments")
    parser.add_argument("--walk-back", type=positive_int, default=None, metavar="N",
                        help="releases of each --with project to try, newest first, until one "
                             "runs on the set's torch (default 12)")
    parser.add_argument("--print-build-command", action="store_true",
                        help="print, for each easystack, the command that submits it as Slurm "
                             "jobs too, after the one that builds it on this host")
    parser.add_argument("-v", "--verbose", action="store_true", dest="detail",
                        help="after each set's summary, its detail: each easyconfig's wheels "
                             "with index, file and sha256, why that release, the releases "
                             "passed over, and every note (`torchstack -v generate` shows it "
                             "too, and logs each decision on stderr)")
    parser.add_argument("--json", action="store_true",
                        help="print the whole report as one JSON document on stdout instead "
                             "of the text: the sets, each with variant, Python, toolchain, "
                             "torch, the projects with their wheels (file, URL, sha256), the "
                             "written easyconfigs and easystacks with their build and submit "
                             "commands, what was left out and why, and the notes")


def execute(args: argparse.Namespace) -> int:
    """0: the set is complete; 1: written, but an index did not answer (what only it offers
    was not checked); errors exit 2 through the CLI."""
    from pathlib import Path

    from torchstack import output
    from torchstack.errors import TorchstackError
    from torchstack.generator import plan, report

    release = _catalog_release(args) if args.offline else str(args.release)
    indexes, provenance = _indexes(args, release)
    if release == NEWEST:
        from torchstack.generator.release import newest_release

        release = newest_release(indexes)
    from torchstack.index.consumers import parse_projects

    site = parse_projects(args.projects, args.project_files)
    specs = tuple(args.toolchains or DEFAULT_TOOLCHAINS)
    settings = plan.Settings(
        release=release, toolchains=tuple(s for s in specs if s != NEWEST),
        variants=tuple(args.variants or ()),
        architectures=tuple(args.architectures or ("x86_64", "aarch64")),
        stages=tuple(args.stages or ("whl",)), cuda_libs=args.cuda_libs,
        glibc=_glibc(args.glibc),
        robot_paths=tuple(args.robot_paths.split(":")) if args.robot_paths else None,
        allow_download_hash=args.allow_download_hash,
        consumers=tuple(str(r) for r in site),
        **({"walk_back": args.walk_back} if args.walk_back else {}))
    if NEWEST in specs:
        if len(specs) > 1:
            raise TorchstackError("--toolchain newest stands alone")
        from torchstack.generator import toolchains

        newest_first = toolchains.versions_of("foss", settings.robot_paths)
        result = plan.newest_toolchain(settings, indexes,
                                           [f"foss/{version}" for version in newest_first])
    else:
        result = plan.generate(settings, indexes)
    folder = Path(args.out or f"torchstack-{release}")
    replaced = output.write_set(folder, result.files(), force=args.force)
    submit = None
    if args.print_build_command or args.json:
        from torchstack.generator import jobs

        def submit(name: str) -> str:
            return jobs.submit_command(name, jobs.easystack_entries(folder / name))

    found = report.build(result, release, folder, offline=args.offline, sources=provenance,
                         replaced=replaced, submit=submit)
    if args.json:
        print(report.as_json(found))
    else:
        for line in report.text(found, verbose=args.detail or args.verbose):
            print(line)
        if args.offline:  # the catalog is what it is: its gaps are reported, not failed
            for line in found.incomplete:
                print(f"not recorded: {line}")
    if args.offline:
        return 0
    for line in found.incomplete:
        print(f"torchstack: {line}", file=sys.stderr)
    return 1 if found.incomplete else 0


def _catalog_release(args: argparse.Namespace) -> str:
    """RELEASE as given, or the newest the catalog holds."""
    if args.release != NEWEST:
        return str(args.release)
    from pathlib import Path

    from torchstack.index import catalog

    found = catalog.releases(Path(args.catalog) if args.catalog else None)
    if not found:
        raise catalog.CatalogError("the catalog holds no release")
    return found[0]


def _indexes(args: argparse.Namespace, release: str) -> tuple[list[Index], list[str]]:
    from torchstack.index import defaults

    if not args.offline:
        return defaults.online(args.indexes), []
    if args.indexes:
        from torchstack.errors import TorchstackError

        raise TorchstackError("--offline answers from the catalog; it takes no --index")
    from pathlib import Path

    return defaults.offline(release, Path(args.catalog) if args.catalog else None)


def _glibc(text: str) -> tuple[int, int]:
    from torchstack.errors import TorchstackError

    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise TorchstackError(f"--glibc {text!r} is not of the form X.Y")
    return int(major), int(minor)

