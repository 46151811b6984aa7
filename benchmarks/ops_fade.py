"""`fade ...` with the `ops` verb registered even where fade.cli does not register fade.cli.ops yet.
Usage: python3 benchmarks/ops_fade.py ops --device cuda ...   (same flags and exit codes as `fade`)."""

import sys

from fade import cli
from fade.cli import ops as cli_ops

original_build_parser = cli.build_parser


def build_parser():
    parser = original_build_parser()
    subparsers = next(action for action in parser._actions if action.__class__.__name__ == "_SubParsersAction")
    if "ops" not in subparsers.choices:
        cli_ops.add_verbs(subparsers)
    return parser


cli.build_parser = build_parser
sys.exit(cli.main(sys.argv[1:]))
