"""`torchstack.cli.main` run in-process under pytest's capsys, argparse's exits included.

(support/badinput.py's `run_cli` does the same without capsys, for hypothesis tests.)
"""

from __future__ import annotations

import pytest

from torchstack.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `main(argv)`, argparse's SystemExit included."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else -1
    captured = capsys.readouterr()
    return code, captured.out, captured.err
