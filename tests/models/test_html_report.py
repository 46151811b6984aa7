"""`fade report`: one self-contained HTML file, every string from the system or the results escaped, and
plots that a real browser draws (headless Chromium, where installed)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fade.report.html import render_report, write_report

from .records import model_record, record, write_jsonl

HOSTILE = '<script>alert("x")</script>&<img src=x onerror=alert(1)>'
CHROMIUM = Path("/usr/bin/chromium")
BAR_RGB = (0x4C, 0x78, 0xA8)  # the model plot's bar colour in html._models_plot


def gemm_record(size, value, **fields):
    params = {"m": size, "n": size, "k": size, "dtype": "bf16", "shape": f"square{size}"}
    return record(f"gemm/bf16/{size}x{size}x{size}", value, unit="TFLOP/s", suite="micro", params=params,
                  work={"flops": 2 * size**3}, **fields)  # fmt: skip


@pytest.fixture
def results(tmp_path):
    """A micro run, a model run with two variants, and a second model run to compare with."""
    device = {"name": f"GPU {HOSTILE}", "arch": "sm_90", "peaks": {"tflops": {"bf16": 989.4}}}
    stack = {"python": "3.11", "torch": {"version": "2.13.0"}, "backends": {"cudnn_benchmark": False},
             "env": {"FADE_NOTE": HOSTILE}, "errors": {"flag": HOSTILE}}  # fmt: skip
    micro = write_jsonl(tmp_path / "micro.jsonl", [
        gemm_record(1024, 300, device=device, stack=stack), gemm_record(4096, 700, device=device, stack=stack),
    ])  # fmt: skip
    runs = []
    for name, scale in (("run-a.jsonl", 1.0), ("run-b.jsonl", 1.1)):
        runs.append(write_jsonl(tmp_path / name, [
            model_record("resnet50", "train", "fp32", 880 * scale, device=device, stack=stack),
            model_record("resnet50", "train", "amp-bf16+channels-last", 2600 * scale, device=device, stack=stack),
            model_record("resnet50", "infer", "fp32", 2900 * scale, device=device, stack=stack),
            model_record("resnet50", "infer", "amp-bf16+channels-last", 9000 * scale, device=device, stack=stack),
            model_record("vgg16", "train", "fp32", None, status="oom", device=device, stack=stack, error=HOSTILE),
        ]))  # fmt: skip
    return [micro] + runs


def test_report_has_every_section_and_inline_plots(results):
    text, count, problems = render_report(results)
    assert count == 12 and problems == []
    for heading in ("Device truth", "Stack fingerprint", "Micro benchmarks", "Model benchmarks", "Comparisons"):
        assert f"<h2>{heading}</h2>" in text
    assert text.count('src="data:image/png;base64,') >= 3  # GEMM, two model runs
    assert "no input copy is included" in text


def test_every_string_from_the_system_or_results_is_escaped(results):
    text, _, _ = render_report(results)
    assert "<script" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&lt;img src=x onerror=alert(1)&gt;" in text


def test_report_is_self_contained(results):
    text, _, _ = render_report(results)
    for needle in ('src="http', "src='http", "<link", "@import", "url("):
        assert needle not in text


def test_write_report_creates_the_output_directory(results, tmp_path):
    report = write_report(results, tmp_path / "new" / "report.html")
    assert Path(report.path).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
def test_headless_chromium_opens_the_report_and_draws_the_plots(results, tmp_path):
    from PIL import Image

    report = write_report(results, tmp_path / "report.html")
    screenshot = tmp_path / "report.png"
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--window-size=1280,4000", f"--screenshot={screenshot}", Path(report.path).as_uri()]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    image = Image.open(screenshot).convert("RGB")
    assert image.size == (1280, 4000)
    data = image.resize((320, 1000)).tobytes()
    pixels = (data[index : index + 3] for index in range(0, len(data), 3))
    bar_pixels = sum(1 for pixel in pixels if all(abs(a - b) < 12 for a, b in zip(pixel, BAR_RGB)))
    assert bar_pixels > 500, "the model plot's bars are not on the page: the inline PNG did not render"
    if os.environ.get("FADE_REPORT_SCREENSHOT"):  # keep it to look at: FADE_REPORT_SCREENSHOT=/tmp/report.png
        shutil.copy(screenshot, os.environ["FADE_REPORT_SCREENSHOT"])


def section(text: str, heading: str) -> str:
    return text.split(f"<h2>{heading}</h2>", 1)[1].split("<h2>", 1)[0]


@pytest.mark.parametrize("order", [("new", "old"), ("old", "new")])
def test_the_newest_run_gives_a_cases_result_whatever_the_files_order(tmp_path, order):
    """Issue 30: `fade report` took the last file on the command line as the latest result; the newest run (by its
    run id's start time) wins instead."""
    files = {
        "old": write_jsonl(tmp_path / "old.jsonl", [gemm_record(1024, 123, run_id="20261101T000000Z-aaaaaa")]),
        "new": write_jsonl(tmp_path / "new.jsonl", [gemm_record(1024, 456, run_id="20261201T000000Z-bbbbbb")]),
    }
    micro = section(render_report([files[name] for name in order])[0], "Micro benchmarks")
    assert "456" in micro and "123" not in micro


def test_the_stack_labels_torchs_git_commit_and_fades_version(tmp_path):
    stack = {"python": "3.11", "torch": {"version": "2.13.0", "git_version": "0123abcd"}}
    path = write_jsonl(tmp_path / "micro.jsonl", [gemm_record(1024, 300, stack=stack, fade_version="9.8.7")])
    stacks = section(render_report([path])[0], "Stack fingerprint")
    assert "<th>torch git commit</th><td>0123abcd" in stacks and "<th>FADE version</th><td>9.8.7" in stacks
