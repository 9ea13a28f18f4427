"""`torchstack catalog list|refresh`: the index answers embedded for offline generation.

`refresh` resolves each release against the real indexes, as `generate` would, and records
every answer (files, hashes, sizes, Requires-Dist) with its source URL and the date.
"""

from __future__ import annotations

import argparse

NAME = "catalog"
HELP = "list or refresh the embedded catalog of index answers used by generate --offline"
# The toolchains whose Pythons a release is recorded for: the catalog answers generation
# offline for these (a toolchain of another Python finds no wheel in it).
DEFAULT_TOOLCHAINS = ("foss/2026.1", "foss/2025b", "foss/2025a", "foss/2024a")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "refresh"))
    parser.add_argument("--release", action="append", dest="releases", metavar="R",
                        help="torch release to record (default: those the catalog holds)")
    parser.add_argument("--toolchain", action="append", dest="toolchains", metavar="TC",
                        help=f"toolchains whose Pythons to record for "
                             f"(default: {', '.join(DEFAULT_TOOLCHAINS)})")
    parser.add_argument("--index", action="append", dest="indexes", metavar="URL",
                        help="indexes to record (default: those of generate)")
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help="catalog folder (default: the one shipped with torchstack)")
    parser.add_argument("--robot-paths", default=None, metavar="PATHS",
                        help="colon-separated easyconfig folders for toolchain data")


def execute(args: argparse.Namespace) -> int:
    from pathlib import Path

    from torchstack.index import catalog

    folder = Path(args.dir) if args.dir else catalog.catalog_dir()
    if args.action == "list":
        found = catalog.releases(folder)  # CatalogError (exit 2) when there is no such folder
        if not found:
            print(f"the catalog folder {folder} holds no release")
        for release in found:
            for line in catalog.describe(catalog.load(release, folder)):
                print(f"torch {release}: {line[len('offline: '):]}")
        return 0
    releases = args.releases or (catalog.releases(folder) if folder.exists() else [])
    if not releases:
        raise catalog.CatalogError(f"the catalog folder {folder} holds no release to refresh; "
                                   "name releases with --release")
    from torchstack.generator import recording

    for release in releases:
        written = recording.record(
            release, folder, args.indexes, args.toolchains or DEFAULT_TOOLCHAINS,
            args.robot_paths.split(":") if args.robot_paths else None)
        print(f"torch {release}: recorded in {written}")
    return 0
