"""`fade doctor`: a thin shell over fade.api.doctor; renders the report, or writes it as JSON."""

from __future__ import annotations

from fade.cli.args import add_json_flag, check_writable, write_json


def add_verbs(verbs) -> None:
    doctor = verbs.add_parser("doctor", help="the truth about this machine's GPUs and stack, with exact fixes")
    doctor.add_argument("--snapshot", metavar="FILE", help="analyze a saved snapshot instead of this machine")
    doctor.add_argument("--no-measure", action="store_true", help="skip the quick GEMM/copy/self-test measurements")
    doctor.add_argument("--fresh", action="store_true", help="re-probe torch even if a cached probe is still valid")
    add_json_flag(doctor, "the report")
    doctor.add_argument("--rules", metavar="FILE", help="use this rules file instead of the bundled one")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    from fade.api import doctor
    from fade.report.console import make_console, render_doctor

    check_writable(args.json, "--json")  # before 8 s of measuring, not after
    result = doctor(measure=not args.no_measure, snapshot=args.snapshot, fresh=args.fresh, rules=args.rules)
    report = result.to_dict()
    if args.json:
        write_json(report, args.json)
    else:
        console = make_console()
        render_doctor(report, console)
        if result.live:
            console.print(f"[fade.dim]doctor took {result.elapsed_s:.1f} s[/]")
    return result.exit_status
