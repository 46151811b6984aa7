"""dist records in `fade report` (busbw and scaling plots, the formula beside each figure), `fade compare`
and `fade bench dist --plot`, from one small gloo run."""

import pytest

from fade import cli
from fade.errors import ExitCode
from fade.report.console import dist_rows
from fade.report.html import render_report
from fade.results import read_records

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def dist_run(tmp_path_factory):
    """One 2-rank run: all_reduce at two sizes and DDP scaling of the tiny model, with --plot."""
    out = tmp_path_factory.mktemp("dist") / "dist.jsonl"
    code = cli.main(["bench", "dist", "--device", "cpu", "--nproc", "2", "--quick", "--sizes", "8,64K",
                     "--collectives", "all_reduce", "--scaling", "tests.dist.tiny_model:make", "-o", str(out), "--plot"])  # fmt: skip
    assert code == ExitCode.OK
    return out


def test_plot_writes_busbw_and_scaling_pngs(dist_run):
    plots = dist_run.parent / "dist-plots"
    assert sorted(path.name for path in plots.iterdir()) == ["dist_busbw.png", "dist_scaling.png"]


def test_report_shows_dist_records_with_their_formula(dist_run):
    html, count, problems = render_report([dist_run])
    assert count == 3 and not problems
    assert "Distributed: collectives and scaling" in html and "busbw = algbw x 2(n-1)/n (n=2)" in html
    assert html.count("<img") == 2


def test_terminal_rows_give_latency_for_small_sizes_and_efficiency_per_process_count(dist_run):
    rows = {row["case_id"]: row for row in dist_rows(read_records(dist_run).records)}
    assert rows["dist/all_reduce/fp32/8B/x2"]["note"].startswith("latency ")
    assert "x1: " in rows["dist/scaling/tests.dist.tiny_model:make/ddp/x2/b2"]["note"]


def test_compare_lays_dist_runs_side_by_side(dist_run, capsys):
    assert cli.main(["compare", str(dist_run), str(dist_run)]) == ExitCode.OK
    assert "dist/all_reduce/fp32/64KiB/x2" in capsys.readouterr().out
