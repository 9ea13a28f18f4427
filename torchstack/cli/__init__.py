"""The `torchstack` command: one small module a subcommand, `main(argv)` callable from tests.

Each subcommand module imports what it runs on (fingerprint, compat, pyelftools, packaging)
inside `execute`, and a command line that names its subcommand builds the parser of that
subcommand alone and imports its module alone. `torchstack --help` (or an unknown
subcommand) configures every one. So each subcommand pays only for its own imports
(`torchstack fingerprint`, bench/fingerprint.py); this module, loaded by every command,
imports what an error or a closed pipe needs only when one happens.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from torchstack import __version__
from torchstack.errors import TorchstackError

if TYPE_CHECKING:
    from typing import TextIO

PROG = "torchstack"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as the shell reports an interrupted command
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
EXIT_TERMINATED = 143  # 128 + SIGTERM


class _Terminated(BaseException):
    """SIGTERM (a batch system ending a job, `timeout`, `kill`), raised where the command is,
    so that what it was writing is cleaned up as for Ctrl-C."""


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one `torchstack: error: ...` line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{PROG}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


# The subcommands in the order --help lists them; each is the module torchstack.cli.<name with
# '_' for '-'>, whose NAME it is.
COMMANDS = ("fingerprint", "check", "classify", "generate", "catalog", "easyconfigs",
            "easyblocks-path", "hooks-path", "easyconfigs-path", "scan", "rollout",
            "lmod-sitepackage", "envmodules-siteconfig", "doctor", "jobs", "venv")


def subcommand(name: str) -> ModuleType:
    """The module of the subcommand `name` (one of COMMANDS)."""
    return importlib.import_module(f"torchstack.cli.{name.replace('-', '_')}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; with `only` (a command line that names it, see
    `named_command`), that one alone: no other module is imported and no other subparser
    built (each costs argparse's gettext look-ups). Usage lines and errors read the same,
    since the top-level usage names COMMAND, not the choices."""
    parser = _Parser(prog=PROG, description="PyTorch software stacks for EasyBuild and Lmod.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each decision")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name in COMMANDS if only is None else (only,):
        module = subcommand(name)
        sub = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure_parser(sub)
        sub.set_defaults(execute=module.execute)
    return parser


def named_command(argv: Sequence[str]) -> str | None:
    """The subcommand a command line names before anything but -v, else None (then every
    subcommand is configured, as --help and argparse's errors need)."""
    for arg in argv:
        if arg not in ("-v", "--verbose"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; bad input is one line on stderr and exit code 2.

    Ctrl-C is one line, `torchstack: interrupted`, and exit 130 (what an interrupted file
    write leaves is cleaned up where it happens); SIGTERM likewise, `torchstack: terminated`
    and exit 143, where Python would otherwise end without cleaning up. A reader that closed
    stdout (`| head -1`) ends the command quietly with exit 141, what the shell reports for a
    command killed by SIGPIPE: the rest of the output goes to /dev/null, and what was already
    written to files stays.
    """
    try:
        try:
            with _terminate_raises():
                code = _main(argv)
        except SystemExit:  # --help and usage errors: their output is flushed here too
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return EXIT_INTERRUPTED
    except _Terminated:
        sys.stderr.write(f"{PROG}: terminated\n")
        return EXIT_TERMINATED
    except BrokenPipeError:
        _discard_closed_output()
        return EXIT_BROKEN_PIPE


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM raises _Terminated within the block. Only the main thread can set a signal
    handler: called from another thread, SIGTERM is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser(named_command(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format=f"{PROG}: %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(_redacted)
    try:
        return int(args.execute(args))
    except TorchstackError as exc:
        from torchstack.index._userinfo import redact  # here: only errors and logs need it

        sys.stderr.write(f"{PROG}: error: {redact(str(exc))}\n")
        return EXIT_USAGE
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) and _closed(sys.stdout):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"{PROG}: error: {where}{exc.strerror or exc}\n")
        return EXIT_USAGE


def _redacted(record: logging.LogRecord) -> bool:
    """A log record's message with the credentials of its URLs taken out (any logger's, e.g.
    urllib3's)."""
    from torchstack.index._userinfo import redact  # here: most commands log nothing

    record.msg, record.args = redact(record.getMessage()), None
    return True


def _closed(stream: TextIO) -> bool:
    """Whether the reader of `stream` is gone (a pipe whose other end was closed)."""
    import select  # here: only an OSError or a closed pipe asks

    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by tests, or closed
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_closed_output() -> None:
    """Point closed stdout/stderr at /dev/null: Python's flush at exit then has nowhere to
    fail (the recipe of the Python documentation for SIGPIPE)."""
    for stream in (sys.stdout, sys.stderr):
        if _closed(stream):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
