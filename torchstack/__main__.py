"""`python -m torchstack`: the same as the `torchstack` command."""

from torchstack.cli import run

run()
