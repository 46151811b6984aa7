"""The corrupt-input battery of issue 15: 132 runs of `fade` verbs on damaged results files, snapshots,
tuning profiles and rules files. FADE's promise: exit 0, 1 or 2 with one stderr line per problem; never
exit 4 (an internal error) and never a traceback. With --fuzz N it also runs N seeded mutations per file
kind through the reader and what consumes it (tests/reliability/mutations.py), and counts the outcomes.

    python benchmarks/corrupt_inputs.py OUT [--subprocess] [--fuzz 2000]

OUT gets battery.json (one row per run: verb, input, exit code, stderr lines) and summary.json. Runs go
in-process through fade.cli.main by default (stderr captured); --subprocess runs `python -m fade` per case
(slower; a traceback printed by the interpreter itself is seen there). Exit status: 1 if any run exited 4
or printed a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from reliability.mutations import SNAPSHOT_FIXTURE, feed, mutated_text, profile_seed, results_seed  # noqa: E402


def results_inputs() -> dict:
    """22 damaged results files (name -> bytes), each with good records around the damage."""
    good = results_seed()
    line = lambda record: json.dumps(record) + "\n"  # noqa: E731
    fields = {"stats": "x", "extra": "s", "value": "fast", "torch_device": ["x"], "telemetry": 3, "params": [1],
              "status": "weird", "schema_version": 99, "case_id": None, "warnings": "w", "peak": 5}  # fmt: skip
    inputs = {f"field-{name}": "".join([line(good[0]), line({**good[1], name: value}), line(good[0])])
              for name, value in fields.items()}  # fmt: skip
    inputs.update({
        "deep-nesting": "[" * 200000 + "\n" + line(good[0]),
        "nan-value": line(good[0]) + line(good[1]).replace('"value": 12.5', '"value": NaN'),
        "torn-last-line": line(good[0]) + line(good[1])[:57],
        "binary": "\x89PNG\r\n\x1a\n\x00\x00",
        "empty": "",
        "a-snapshot": SNAPSHOT_FIXTURE.read_text(encoding="utf-8"),
        "a-profile": json.dumps(profile_seed(), indent=2),
        "one-json-array": json.dumps(good),
        "nested-stats": line({**good[0], "stats": {"median_s": "1", "iqr_s": []}}),
        "models-params-list": line({**good[1], "params": {"model": ["x"], "mode": "train"}}),
        "nul-bytes": line(good[0]).replace("micro", "mi\\u0000cro") + "\x00\x00\n",
    })  # fmt: skip
    return {name: text.encode("utf-8") for name, text in inputs.items()}


def snapshot_inputs() -> dict:
    snapshot = json.loads(SNAPSHOT_FIXTURE.read_text(encoding="utf-8"))
    variants = {}
    for name, change in {
        "kfd-text": lambda s: s["kfd_nodes"][1]["properties"].update(simd_count="0"),
        "kfd-huge": lambda s: s["kfd_nodes"][1]["properties"].update(simd_count=2**70),
        "no-node": lambda s: [node.pop("node") for node in s["kfd_nodes"]],
        "no-index": lambda s: [device.pop("index") for device in (s["torch"] or {}).get("devices", [])],
        "torch-list": lambda s: s.update(torch=[1]),
        "env-int": lambda s: s["env"].update(HSA_OVERRIDE_GFX_VERSION=10),
        "pci-null": lambda s: s.update(pci=None),
    }.items():
        copy = json.loads(json.dumps(snapshot))
        change(copy)
        variants[name] = json.dumps(copy, indent=1).encode("utf-8")
    text = json.dumps(snapshot, indent=1)
    variants.update({"truncated": text[: len(text) // 2].encode(), "binary": b"\xff\xfe\x00\x01",
                     "deep": b"[" * 100000, "utf8-in-c-locale": text.replace('"Linux"', '"Lïnux"').encode("utf-8")})  # fmt: skip
    return variants


def profile_inputs() -> dict:
    seed = profile_seed()
    variants = {
        "binary": b"\x89PNG\r\n\x1a\n\xff", "deep": b"[" * 100000, "truncated": json.dumps(seed)[:40].encode(),
        "empty": b"", "not-a-profile": b'{"a": 1}',
    }  # fmt: skip
    for name, change in {
        "precision-list": {"knobs": {"precision": ["amp"]}}, "env-equals": {"env": {"A": "1", "B=C": "2"}},
        "env-nul": {"env": {"A": "1", "B": "x\u0000y"}}, "env-list": {"env": ["A"]},
        "batch-text": {"batch": "2"}, "device-list": {"device": {"name": ["x"]}},
    }.items():  # fmt: skip
        variants[name] = json.dumps({**seed, **change}).encode("utf-8")
    return variants


def rules_inputs() -> dict:
    rule = ('[[rule]]\nid = "FUZZ001"\nseverity = "warn"\nscope = "system"\ntitle = "t"\nexplain = "e"\nfix = "f"\n'
            'source = "s"\n')  # fmt: skip
    return {name: text.encode("utf-8") if isinstance(text, str) else text for name, text in {
        "binary": b"\xff\xfe\x00rule", "not-toml": "[[rule\nid=", "rule-table": 'rule = "x"\n',
        "rule-string-row": 'rule = ["x"]\n', "id-int": rule.replace('"FUZZ001"', "12"),
        "gt-text": rule + 'when = { "compute_units" = { gt = "ten" } }\n',
        "version-int": rule + 'when = { "torch_version" = { version = 2 } }\n',
        "fix-env-list": rule + 'fix_env = ["A"]\n', "unknown-fact": rule + 'when = { "torch.verison" = "2" }\n',
        "deep": "a = " + "[" * 5000 + "]" * 5000 + "\n", "empty": "",
    }.items()}  # fmt: skip


def battery(work: Path) -> list:
    """(argv, input label) for the 132 runs."""
    fixture = str(SNAPSHOT_FIXTURE)
    runs = []
    good_results = work / "good.jsonl"
    good_results.write_text("".join(json.dumps(record) + "\n" for record in results_seed()), encoding="utf-8")
    for name, data in results_inputs().items():  # 22 × 3
        path = work / f"results-{name}.jsonl"
        path.write_bytes(data)
        runs += [(["compare", str(path), str(good_results)], f"results/{name}"),
                 (["report", str(path), "-o", str(work / f"report-{name}.html")], f"results/{name}"),
                 (["ops", "compare", str(path), str(good_results)], f"results/{name}")]  # fmt: skip
    for name, data in snapshot_inputs().items():  # 11 × 2
        path = work / f"snapshot-{name}.json"
        path.write_bytes(data)
        runs += [(["doctor", "--snapshot", str(path)], f"snapshot/{name}"),
                 (["doctor", "--snapshot", str(path), "--json", str(work / f"doctor-{name}.json")], f"snapshot/{name}")]
    for name, data in profile_inputs().items():  # 11 × 2
        path = work / f"profile-{name}.json"
        path.write_bytes(data)
        runs += [(["tune", "--show", str(path)], f"profile/{name}"), (["tune", "--show", str(path), "--env"], f"profile/{name}")]
    for name, data in rules_inputs().items():  # 11 × 2
        path = work / f"rules-{name}.toml"
        path.write_bytes(data)
        runs += [(["doctor", "--snapshot", fixture, "--rules", str(path)], f"rules/{name}"),
                 (["doctor", "--snapshot", fixture, "--rules", str(path), "--json"], f"rules/{name}")]
    return runs


def run_in_process(argv: list) -> tuple:
    from fade.cli import main

    stderr, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 2
        except BaseException as error:  # noqa: BLE001 - escaping main is itself the finding
            import traceback

            traceback.print_exception(error, file=stderr)
            code = "raised"
    return code, stderr.getvalue()


def run_subprocess(argv: list) -> tuple:
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), LC_ALL="C")
    done = subprocess.run([sys.executable, "-m", "fade", *argv], capture_output=True, text=True, env=environment,
                          encoding="utf-8", errors="replace", timeout=300)  # fmt: skip
    return done.returncode, done.stderr


def fuzz(count: int, work: Path) -> dict:
    figures = {}
    for kind in ("results", "snapshot", "profile", "rules"):
        counts = Counter()
        for seed in range(count):
            path = work / f"fuzz.{kind}"
            path.write_text(mutated_text(kind, random.Random(seed)), encoding="utf-8", errors="surrogatepass")
            try:
                outcome = feed(kind, path)
                counts["accepted" if outcome == "accepted" else "rejected"] += 1
                counts["multi-line rejections"] += "\n" in outcome
            except Exception:  # noqa: BLE001 - the thing counted
                counts["tracebacks"] += 1
        figures[kind] = {"mutations": count, **{key: counts[key] for key in ("accepted", "rejected", "tracebacks", "multi-line rejections")}}
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory for battery.json and summary.json")
    parser.add_argument("--subprocess", action="store_true", help="run `python -m fade` per case (LC_ALL=C)")
    parser.add_argument("--fuzz", type=int, default=0, metavar="N", help="also N mutations per file kind")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for argv, label in battery(work):
            code, stderr = (run_subprocess if args.subprocess else run_in_process)(argv)
            lines = [line for line in stderr.splitlines() if line.strip()]
            rows.append({"verb": " ".join(argv[:2]) if argv[0] == "ops" else argv[0], "input": label, "exit": code,
                         "traceback": "Traceback" in stderr, "stderr_lines": len(lines), "first_line": lines[0][:200] if lines else "",
                         "argv": [arg.replace(directory, "$WORK") for arg in argv]})  # fmt: skip
        figures = fuzz(args.fuzz, work) if args.fuzz else None
    summary = {
        "runs": len(rows), "exit_codes": dict(Counter(str(row["exit"]) for row in rows)),
        "exit_4": sum(row["exit"] == 4 for row in rows), "tracebacks": sum(row["traceback"] for row in rows),
        "raised": sum(row["exit"] == "raised" for row in rows), "mode": "subprocess" if args.subprocess else "in-process",
        "fuzz": figures,
    }  # fmt: skip
    (out / "battery.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    failed = summary["exit_4"] or summary["tracebacks"] or summary["raised"]
    failed = failed or (figures and any(row["tracebacks"] or row["multi-line rejections"] for row in figures.values()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
