"""`fade snapshot`: a thin shell over fade.api.collect_snapshot; writes the snapshot's JSON to a file or stdout."""

from __future__ import annotations

import json
import sys

from fade.cli.args import check_writable
from fade.errors import ExitCode


def add_verbs(verbs) -> None:
    snapshot = verbs.add_parser("snapshot", help="write a JSON description of this machine (docs/snapshot.md)")
    snapshot.add_argument("-o", "--output", metavar="FILE", help="output file (stdout if omitted)")
    snapshot.set_defaults(func=cmd_snapshot)


def cmd_snapshot(args) -> int:
    from fade.api import collect_snapshot
    from fade.collect.snapshot import save_snapshot

    if args.output and args.output != "-":
        check_writable(args.output)
    snap = collect_snapshot(torch="subprocess")
    if args.output in (None, "-"):
        print(json.dumps(snap, indent=2))
    else:
        save_snapshot(snap, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return ExitCode.OK
