"""A guard over a whole process: `fade.api.enable_process_guard` (what `apply_fade_patches(guard=True)` turns
on) prints its summary at exit, after the script's own exit code is set; and `import fade.hostwork` stays cheap."""

import json
import subprocess
import sys
import textwrap

from .helpers import at


def run_python(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=120)


def test_process_guard_summarizes_at_exit_and_keeps_the_exit_code(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import sys
        import torch
        from fade.api import enable_process_guard  # the facade's: it prints the summary table at exit
        from fade.hostwork import standin
        standin.register()
        enable_process_guard(device="standin", json_path=sys.argv[1])
        torch.randn(4, device="standin").sum().item()  # SITE process-item
        print("script done")
        sys.exit(5)
    """))
    report_path = tmp_path / "report.json"
    result = subprocess.run([sys.executable, str(script), str(report_path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 5 and result.stdout == "script done\n"
    assert "fade guard (warn, device standin)" in result.stderr
    (record,) = json.loads(report_path.read_text())["records"]
    assert (record["kind"], record["file"], record["line"]) == ("sync", *at("process-item", script))


def test_importing_fade_guard_does_not_import_torch_and_no_accelerator_means_nothing_to_watch():
    result = run_python("""
        import json, sys
        from fade.hostwork import guard
        torch_loaded_by_import = "torch" in sys.modules
        import torch
        with guard() as watched:
            torch.ones(3).sum().item()
        accelerator = torch.accelerator.current_accelerator()
        print(json.dumps([torch_loaded_by_import, accelerator is None, watched.report.notes,
                          len(watched.report.records)]))
    """)
    assert result.returncode == 0, result.stderr
    torch_loaded, no_accelerator, notes, records = json.loads(result.stdout)
    assert not torch_loaded and records == 0
    if no_accelerator:
        assert notes == ["no accelerator found: the guard had nothing to watch (pass device=...)"]
