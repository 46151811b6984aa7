"""`fade watch -- python SCRIPT ARGS`: the script runs unmodified, its output and exit code pass through, and
the summary names the lines. Scripts run on the stand-in device (see test_guard_dispatch.py)."""

import json
import sys
import textwrap
from pathlib import Path

import pytest

from fade.cli import watch as cli_guard
from fade.errors import FadeUsageError

from .helpers import at, line_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLANTED = EXAMPLES / "guard_planted_problems.py"
CLEAN = EXAMPLES / "guard_clean.py"


def fade_watch(*argv) -> int:
    """`fade watch ARGV` as fade.cli.main runs it: usage errors become one stderr line and exit 2."""
    from fade.cli import _Parser

    parser = _Parser(prog="fade")
    cli_guard.add_verbs(parser.add_subparsers(dest="verb", parser_class=_Parser))
    try:
        args = parser.parse_args(["watch", *argv])
        return args.func(args)
    except FadeUsageError as exc:
        message = str(exc)
        print(message if message.startswith("fade") else f"fade: error: {message}", file=sys.stderr)
        return 2


def _planted(name: str) -> int:
    """The line of the example that carries `# PLANTED: <name>`."""
    return line_of(PLANTED, f"# PLANTED: {name}")


def write_script(tmp_path, body: str) -> Path:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    return script


def test_watch_names_the_three_planted_problems_by_line(device, tmp_path, capsys):
    report_path = tmp_path / "report.json"
    code = fade_watch("--device", device, "--quiet", "--json", str(report_path), "--",
                      "python", str(PLANTED), "--device", device, "--steps", "10")
    out, err = capsys.readouterr()
    assert code == 0
    assert "step 10: loss" in out  # the script's own output passes through
    records = json.loads(report_path.read_text())["records"]
    named = {(r["kind"], r["direction"], r["line"]) for r in records}
    assert named == {
        ("sync", "", _planted("item")),
        ("copy", "h2d", _planted("mask")),
        ("cpu_compute", "", _planted("mask")),
        ("copy", "d2h", _planted("numpy")),
    }
    assert all(r["file"] == str(PLANTED) and r["steps"] == 10 for r in records)
    assert "70 offences at 4 sites" in " ".join(err.split())  # the summary table (layout not asserted)


def test_watch_reports_nothing_for_the_clean_script(device, tmp_path, capsys):
    report_path = tmp_path / "report.json"
    code = fade_watch("--device", device, "--json", str(report_path), "--",
                      "python", str(CLEAN), "--device", device, "--steps", "10")
    out, err = capsys.readouterr()
    assert code == 0 and "trained 10 steps" in out
    report = json.loads(report_path.read_text())
    assert report["records"] == [] and report["steps_seen"] == 10
    assert "no CPU compute" in err


def test_watch_json_holds_the_raw_report(device, tmp_path, capsys):
    script = write_script(tmp_path, """\
        import torch
        values = torch.randn(4, device="standin")
        def log(tensor):
            return tensor.sum().item()  # SITE json
        log(values)
    """)
    report_path = tmp_path / "report.json"
    assert fade_watch("--device", device, "--quiet", "--json", str(report_path), "--", "python", str(script)) == 0
    report = json.loads(report_path.read_text())
    assert report["schema_version"] == 1 and report["exit_code"] == 0 and report["mode"] == "warn"
    assert report["command"] == ["python", str(script)]
    (record,) = report["records"]
    assert (record["file"], record["line"]) == at("json", script)
    assert record["first_stack"][0].endswith("in <module>") and record["first_stack"][-1].endswith("in log")


def test_crashing_script_keeps_its_exit_code_and_still_gets_a_summary(device, tmp_path, capsys):
    script = write_script(tmp_path, """\
        import torch
        torch.randn(4, device="standin").sum().item()  # SITE before-crash
        raise ValueError("boom")  # SITE crash
    """)
    report_path = tmp_path / "report.json"
    assert fade_watch("--device", device, "--quiet", "--json", str(report_path), "--", "python", str(script)) == 1
    err = capsys.readouterr().err
    assert "ValueError: boom" in err and f"line {at('crash', script)[1]}" in err  # Python's own traceback
    assert "Traceback" in err and "fade/hostwork" not in err.split("ValueError")[0]  # without the runner's frames
    assert "fade guard (warn" in err  # the summary
    report = json.loads(report_path.read_text())
    assert report["exit_code"] == 1
    assert [(r["kind"], r["line"]) for r in report["records"]] == [("sync", at("before-crash", script)[1])]


@pytest.mark.parametrize("exit_call, code", [("sys.exit(3)", 3), ("sys.exit()", 0), ("sys.exit('bye')", 1)])
def test_sys_exit_code_passes_through(device, tmp_path, capsys, exit_call, code):
    script = write_script(tmp_path, f"import sys\nprint('ran')\n{exit_call}\n")
    assert fade_watch("--device", device, "--", "python", str(script)) == code
    assert capsys.readouterr().out == "ran\n"


def test_strict_stops_the_script_at_the_first_offence(device, tmp_path, capsys):
    script = write_script(tmp_path, """\
        import torch
        torch.randn(4, device="standin").sum().item()  # SITE strict-item
        print("not reached")
    """)
    assert fade_watch("--device", device, "--strict", "--", "python", str(script)) == 1
    out, err = capsys.readouterr()
    assert "not reached" not in out
    assert "GuardViolation" in err and f"train.py:{at('strict-item', script)[1]}" in " ".join(err.split())


def test_script_sees_its_own_argv_name_and_directory(device, tmp_path, capsys):
    (tmp_path / "helper_module.py").write_text("VALUE = 42\n")
    script = write_script(tmp_path, """\
        import sys
        import helper_module
        if __name__ == "__main__":
            print(sys.argv, helper_module.VALUE)
    """)
    assert fade_watch("--device", device, "--", "python", str(script), "--lr", "0.1") == 0
    assert capsys.readouterr().out == f"{[str(script), '--lr', '0.1']} 42\n"


def test_python_dash_m_runs_a_module(device, tmp_path, capsys, monkeypatch):
    (tmp_path / "trainer_pkg").mkdir()
    (tmp_path / "trainer_pkg" / "__init__.py").write_text("")
    (tmp_path / "trainer_pkg" / "run.py").write_text("import sys\nprint(__name__, sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    assert fade_watch("--device", device, "--", "python", "-m", "trainer_pkg.run", "x") == 0
    assert capsys.readouterr().out == "__main__ ['x']\n"


@pytest.mark.parametrize("argv, message", [
    (["--", "python", "no_such_script.py"], "script not found: no_such_script.py"),
    (["python", "train.py"], "put the command after --"),
    ([], "put the command after --"),
    (["--", "python"], "nothing to run"),
    (["--", "python", "-u", "train.py"], "python option -u is not supported"),
    (["--", "torchrun", "train.py"], "fade watch runs Python scripts"),
    (["--sampled", "0", "--", "python", "train.py"], "--sampled needs a positive"),
    (["--strict", "--sampled", "5", "--", "python", "train.py"], "not allowed with argument"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('should not run')\n")
    assert fade_watch(*argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


def test_fade_cli_registers_watch():
    """fade.cli.main runs `fade watch`: a missing script is a usage error."""
    from fade import cli

    assert cli.main(["watch", "--", "python", "no_such_script.py"]) == 2
