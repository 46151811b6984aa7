"""`fade snapshot`: a thin shell over fade.api.collect_snapshot; writes the snapshot's JSON to a file or stdout."""

from __future__ import annotations

import sys

from fade.cli.args import check_writable, write_text
from fade.errors import ExitCode


def add_verbs(verbs) -> None:
    snapshot = verbs.add_parser("snapshot", help="write a JSON description of this machine (docs/snapshot.md)")
    snapshot.add_argument("-o", "--output", metavar="FILE", help="output file (stdout if omitted)")
    snapshot.set_defaults(func=cmd_snapshot)


def cmd_snapshot(args) -> int:
    from fade.api import collect_snapshot
    from fade.collect.snapshot import snapshot_text

    check_writable(args.output, "-o")
    snap = collect_snapshot(torch="subprocess")
    if args.output in (None, "-"):
        print(snapshot_text(snap), end="")
    else:
        write_text(args.output, snapshot_text(snap))
        print(f"wrote {args.output}", file=sys.stderr)
    return ExitCode.OK
