"""`torchstack easyconfigs list|regenerate`: the shipped easyconfigs tree.

`list` prints, for each easystack of the tree, the command that builds its set. `regenerate`
writes the whole tree from the catalog (no network), as `scripts/regenerate-easyconfigs` does
for this repository's easyconfigs/; with --refresh it first records in the catalog the
releases the indexes offer now.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

NAME = "easyconfigs"
HELP = "list the shipped easyconfigs' build commands, or regenerate the tree"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "regenerate"))
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help="the tree: with list, the one to read (default: the shipped one, "
                             "`torchstack easyconfigs-path`); with regenerate, the one to "
                             "write, replaced as a whole (required)")
    parser.add_argument("--refresh", action="store_true",
                        help="with regenerate: first record in the catalog the newest torch "
                             "releases of the indexes (network), then write the tree from it")
    parser.add_argument("--catalog", default=None, metavar="DIR",
                        help="the catalog folder to read and refresh (default: the one "
                             "shipped with torchstack)")
    parser.add_argument("--index", action="append", dest="indexes", metavar="URL",
                        help="with --refresh: the indexes to record (default: those of "
                             "generate)")
    parser.add_argument("--robot-paths", default=None, metavar="PATHS",
                        help="colon-separated easyconfig folders for toolchain data "
                             "(default: the installed easybuild-easyconfigs)")


def execute(args: argparse.Namespace) -> int:
    from pathlib import Path

    from torchstack.errors import TorchstackError

    if args.action == "list":
        from torchstack.paths import easyconfigs_path

        _list(Path(args.dir) if args.dir else easyconfigs_path())
        return 0
    if args.dir is None:
        raise TorchstackError("easyconfigs regenerate needs --dir DIR, the tree to write")
    if args.indexes and not args.refresh:
        raise TorchstackError("--index is for --refresh; the tree is written from the catalog")
    _regenerate(args, Path(args.dir))
    return 0


def _list(folder: Path) -> None:
    import shlex

    from torchstack.errors import TorchstackError
    from torchstack.generator import plan

    stacks = sorted(folder.glob("easystack-*.yaml"))
    if not stacks:
        raise TorchstackError(f"{str(folder)!r} holds no easystack")
    for stack in stacks:
        print(f"{stack.name}: cd {shlex.quote(str(folder))} && {plan.build_command(stack.name)}")


def _regenerate(args: argparse.Namespace, folder: Path) -> None:
    from pathlib import Path

    from torchstack.cli.catalog import DEFAULT_TOOLCHAINS
    from torchstack.generator import tree
    from torchstack.index import catalog

    robot_paths = args.robot_paths.split(":") if args.robot_paths else None
    catalog_folder = Path(args.catalog) if args.catalog else None
    if args.refresh:
        recorded = tree.refresh(catalog_folder or catalog.catalog_dir(), args.indexes,
                                DEFAULT_TOOLCHAINS, robot_paths)
        print(f"recorded in the catalog: torch {', '.join(recorded)}")
    planned = tree.build(catalog_folder, robot_paths)
    tree.write(folder, planned.files)
    for found in planned.releases:
        print(f"torch {found.release}: {', '.join(found.toolchains)}: "
              f"{len(found.easystacks)} easystacks")
    print(f"{len(planned.files)} files written to {folder}")
