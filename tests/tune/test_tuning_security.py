"""A shared tuning file is code (issue 30): what a tuning file may set, what `--env` prints for eval, and what
reaches the terminal. Each test here failed before the fix: load_tuning set BASH_ENV, `--env` printed values
unquoted, `--show` raised AttributeError on a wrong-typed optional field, and escape sequences reached the terminal."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fade.act.tune.tuning_file import (TUNING, TuningFileError, env_lines, export_line, load_tuning,
                                       read_tuning)  # fmt: skip
from fade.errors import FadeUsageError
from fade.report.text import printable
from fade.report.tune import render_tuning
from tests.tune.test_cli_tune import fade_main  # noqa: F401 - the fixture
from tests.reliability.mutations import paths_of, replaced
from tests.tune.test_tuning_file import H100, make_profile

REPO = Path(__file__).resolve().parents[2]
RECORDED = sorted([*REPO.glob("results/tune-h200-s10/call*/*.tuning.json"), *REPO.glob("results/tune-h100/*.profile.json")])
WRONG_JSON = [None, True, 0, 1.5, "text", [], [1, "a"], {}, {"a": [None]}]  # one of each JSON type, and nested ones


def write(tmp_path, document, name="shared.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def shared_profile(tmp_path, **changes) -> Path:
    """A tuning file `fade tune` wrote (make_profile: H100, tunableop=on), then edited by someone else."""
    profile, _ = make_profile(tmp_path)
    return write(tmp_path, {**json.loads(json.dumps(profile)), **changes})


@pytest.fixture
def on_h100(monkeypatch):
    monkeypatch.setattr("fade.act.tune.device.static_fingerprint", lambda *args, **kwargs: dict(H100))


def show(fade_main, capsys, path, *flags):  # noqa: F811 - the fixture, passed in
    code = fade_main(["tune", "--show", str(path), *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- what a tuning file may set ------------------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["BASH_ENV", "LD_PRELOAD", "PYTHONPATH"])
def test_a_variable_outside_the_knob_table_is_refused_and_nothing_is_set(tmp_path, variable, monkeypatch):
    """A profile from someone else set BASH_ENV, and a later `bash -c true` ran its script: now load_tuning refuses
    the file with one line naming the variable, and os.environ is left exactly as it was (the file's legitimate
    variables are not applied either), so the next shell runs nothing of it."""
    for name in (variable, "PYTORCH_TUNABLEOP_ENABLED", "PYTORCH_TUNABLEOP_FILENAME", "FADE_APPLIED"):
        monkeypatch.delenv(name, raising=False)
    marker = tmp_path / "payload-ran"
    payload = tmp_path / "payload.sh"
    payload.write_text(f"touch {marker}\n", encoding="utf-8")
    profile, _ = make_profile(tmp_path)
    path = write(tmp_path, {**profile, "env": {**profile["env"], variable: str(payload)}})
    before = dict(os.environ)
    with pytest.raises(TuningFileError) as refused:
        load_tuning(path, fingerprint=H100, set_torch_flags=False, verbose=False)
    assert dict(os.environ) == before
    message = str(refused.value)
    assert variable in message and "\n" not in message
    if shutil.which("bash"):  # the reported symptom: a later shell ran the file's script
        subprocess.run(["bash", "-c", "true"], env=os.environ.copy(), cwd=tmp_path, check=True)
        assert not marker.exists()


@pytest.mark.parametrize("variable", ["BASH_ENV", "LD_PRELOAD", "PYTHONPATH"])
def test_show_refuses_such_a_file_in_one_line(fade_main, capsys, tmp_path, on_h100, variable):  # noqa: F811
    profile, _ = make_profile(tmp_path)
    path = write(tmp_path, {**profile, "env": {**profile["env"], variable: "/tmp/x"}})
    for flags in ((), ("--env",), ("--json",)):
        code, out, err = show(fade_main, capsys, path, *flags)
        assert code == 2 and out == ""
        assert variable in err and err.count("\n") == 1


def test_a_table_variable_with_a_value_the_table_does_not_give_is_refused(tmp_path):
    """PYTORCH_TUNABLEOP_ENABLED is the knob table's, but tunableop=on sets it to "1", nothing else."""
    profile, _ = make_profile(tmp_path)
    path = write(tmp_path, {**profile, "env": {**profile["env"], "PYTORCH_TUNABLEOP_ENABLED": "1; touch pwned"}})
    environ: dict = {}
    with pytest.raises(TuningFileError, match="PYTORCH_TUNABLEOP_ENABLED.*is not what data/knobs.toml sets"):
        load_tuning(path, environ=environ, fingerprint=H100, set_torch_flags=False, verbose=False)
    assert environ == {}


def test_a_table_variable_whose_knob_is_at_its_baseline_is_refused(tmp_path):
    """tunableop=off sets nothing, so a file that says tunableop=off and PYTORCH_TUNABLEOP_ENABLED=1 is not FADE's."""
    profile, _ = make_profile(tmp_path)
    path = write(tmp_path, {**profile, "knobs": {**profile["knobs"], "tunableop": "off"}})
    with pytest.raises(TuningFileError, match="tunableop=off"):
        read_tuning(path)


@pytest.mark.parametrize("knobs, says", [
    ({"precision": "fp64"}, "'fp64' is not one of its values"),
    ({"precison": "tf32"}, "did you mean 'precision'"),
    ({"precision": 1}, "knobs.precision must be a string"),
])  # fmt: skip
def test_knobs_must_be_rows_and_values_of_the_table(tmp_path, knobs, says):
    profile, _ = make_profile(tmp_path)
    with pytest.raises(TuningFileError, match=says):
        read_tuning(write(tmp_path, {**profile, "knobs": {**profile["knobs"], **knobs}}))


@pytest.mark.parametrize("value", ["relative/inductor", "/tmp/../etc/inductor", "/tmp/a\x1b[2Jb", "/tmp/a\nb", 7])
def test_a_cache_path_must_be_an_absolute_path_without_control_characters(tmp_path, value):
    profile, _ = make_profile(tmp_path)
    with pytest.raises(TuningFileError, match="PYTORCH_TUNABLEOP_FILENAME"):
        read_tuning(write(tmp_path, {**profile, "env": {**profile["env"], "PYTORCH_TUNABLEOP_FILENAME": value}}))


@pytest.mark.parametrize("name", ["B=C", "1ABC", "A-B", "A B", "", "A;touch x", "$(touch x)"])
def test_a_name_that_is_not_an_identifier_is_refused(tmp_path, name):
    profile, _ = make_profile(tmp_path)
    with pytest.raises(TuningFileError, match="not a valid environment variable name"):
        read_tuning(write(tmp_path, {**profile, "env": {**profile["env"], name: "1"}}))
    with pytest.raises(TuningFileError, match="not a valid environment variable name"):
        export_line(name, "1")


# -- what `--env` prints for eval ------------------------------------------------------------------------------
HOSTILE_PATH_TAIL = "cache $(touch pwned1) `touch pwned2`; touch pwned3 'it''s' \"q\" /inductor"


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_env_output_evaluated_by_bash_runs_nothing_and_sets_the_literal_value(fade_main, capsys, tmp_path, on_h100,
                                                                              monkeypatch):  # noqa: F811 # fmt: skip
    """A cache path may be any absolute path; `eval "$(fade tune --show P --env)"` ran three injected commands when
    the value was printed unquoted. Quoted with shlex.quote, the shell assigns the text and runs nothing."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("PYTORCH_TUNABLEOP_ENABLED", raising=False)
    monkeypatch.delenv("PYTORCH_TUNABLEOP_FILENAME", raising=False)
    from fade.act.tune.cache import default_base

    hostile = f"{default_base()}/{HOSTILE_PATH_TAIL}"
    profile, _ = make_profile(tmp_path)
    path = write(tmp_path, {**profile, "knobs": {**profile["knobs"], "compile": "default"},
                            "env": {**profile["env"], "TORCHINDUCTOR_CACHE_DIR": hostile}})  # fmt: skip
    code, out, err = show(fade_main, capsys, path, "--env")
    assert code == 0, err
    lines = tmp_path / "lines.sh"
    lines.write_text(out, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    shell = subprocess.run(["bash", "-c", f'eval "$(cat {lines})"; printf %s "$TORCHINDUCTOR_CACHE_DIR"'], cwd=work,
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})  # fmt: skip
    assert shell.returncode == 0, shell.stderr
    assert list(work.iterdir()) == []  # no pwned1, pwned2, pwned3
    assert shell.stdout == hostile


def test_env_lines_quote_each_value_with_shlex(tmp_path):
    profile = {"env": {"TRITON_CACHE_DIR": "/cache dir/it's/triton", "PYTORCH_TUNABLEOP_ENABLED": "1"}}
    assert env_lines(profile, environ={}) == ["export PYTORCH_TUNABLEOP_ENABLED=1",
                                              "export TRITON_CACHE_DIR='/cache dir/it'\"'\"'s/triton'"]  # fmt: skip


def test_the_files_own_env_lines_are_never_printed(fade_main, capsys, tmp_path, on_h100, monkeypatch):  # noqa: F811
    """env_lines in the file is regenerated from the checked env: injected text there reaches neither --env,
    nor --show, nor --json."""
    monkeypatch.delenv("PYTORCH_TUNABLEOP_ENABLED", raising=False)
    injected = "export PYTORCH_TUNABLEOP_ENABLED=1; touch pwned"
    path = shared_profile(tmp_path, env_lines=[injected], python_snippet="import os; os.system('touch pwned')")
    for flags in (("--env",), (), ("--json",)):
        code, out, _ = show(fade_main, capsys, path, *flags)
        assert code == 0 and "touch pwned" not in out
    assert read_tuning(path)["python_snippet"].startswith("import torch")


# -- wrong-typed optional fields ------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["changed", "candidates", "left_out", "env_lines", "host_load"])
@pytest.mark.parametrize("value", WRONG_JSON, ids=repr)
def test_a_wrong_typed_optional_field_is_refused_or_rendered_and_load_tuning_agrees(
    fade_main, capsys, tmp_path, on_h100, field, value  # noqa: F811
):
    path = shared_profile(tmp_path, **{field: value})
    code, out, err = show(fade_main, capsys, path)
    assert code in (0, 2), err
    if code == 2:
        assert err.count("\n") == 1 and field in err
        with pytest.raises(TuningFileError):
            load_tuning(path, environ={}, fingerprint=H100, set_torch_flags=False, verbose=False)
    else:
        assert out.strip()
        assert load_tuning(path, environ={}, fingerprint=H100, set_torch_flags=False, verbose=False).applied


def test_null_optional_fields_render_as_absent(fade_main, capsys, tmp_path, on_h100):  # noqa: F811
    path = shared_profile(tmp_path, changed=None, candidates=None, left_out=None, env_lines=None, host_load=None)
    code, out, _ = show(fade_main, capsys, path)
    assert code == 0
    assert "chosen: PyTorch defaults" in out and "export PYTORCH_TUNABLEOP_ENABLED=1" in out


@pytest.mark.parametrize("field", sorted(TUNING))
@pytest.mark.parametrize("value", WRONG_JSON, ids=repr)
def test_every_field_of_every_wrong_type_is_one_line_or_accepted(tmp_path, field, value):
    """Each field replaced by each JSON type: read_tuning accepts it (and the result renders) or raises
    TuningFileError with one line, nothing else."""
    try:
        profile = read_tuning(shared_profile(tmp_path, **{field: value}))
    except TuningFileError as error:
        assert "\n" not in str(error)
    else:
        render_tuning(profile)
        env_lines(profile, environ={})


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)


BASE = json.loads(RECORDED[0].read_text(encoding="utf-8")) if RECORDED else None
BASE_PATHS = [path for path in paths_of(BASE) if path] if BASE else []  # the root itself left out


@pytest.mark.skipif(not RECORDED, reason="needs the recorded tuning files")
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(where=st.sampled_from(BASE_PATHS or [("model",)]), value=JSON_VALUES)
def test_any_field_replaced_by_any_json_is_read_or_refused_in_one_line(tmp_path_factory, where, value):
    """A recorded tuning file with one field, at any depth, replaced by any JSON value: read_tuning returns the
    checked profile (which renders and gives env lines) or raises a one-line TuningFileError/FadeUsageError."""
    path = write(tmp_path_factory.mktemp("property"), replaced(BASE, where, value))
    try:
        profile = read_tuning(path)
    except FadeUsageError as error:  # TuningFileError is one
        assert "\n" not in str(error)
    else:
        render_tuning(profile)
        env_lines(profile, environ={})


@pytest.mark.parametrize("path", RECORDED, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_tuning_files_of_earlier_runs_still_load_and_render(path, tmp_path):
    profile = read_tuning(path)
    recorded = json.loads(path.read_text(encoding="utf-8"))
    assert {name: profile[name] for name in recorded} == recorded  # env_lines and the snippet regenerate the same
    assert render_tuning(profile).count("\n") > 5
    from fade.act.tune.cache import ENV_PATHS

    environ = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}  # this user's cache home, not the device machine's
    if set(profile["env"]) & set(ENV_PATHS):  # made on the device machine: its compiler caches are not this user's
        with pytest.raises(TuningFileError, match="outside this user's FADE tune cache"):
            load_tuning(path, environ=environ, fingerprint=profile["device"], set_torch_flags=False, verbose=False)
    else:
        load_tuning(path, environ=environ, fingerprint=profile["device"], set_torch_flags=False, verbose=False)


# -- what reaches the terminal --------------------------------------------------------------------------------
ESCAPES = {"title": "\x1b]0;owned\x07", "clear": "\x1b[2J", "hidden": "\x1b[8m", "csi": "\x9b31m", "bidi": "\u202e"}


def test_escape_sequences_from_the_file_are_printed_escaped(fade_main, capsys, tmp_path, on_h100):  # noqa: F811
    """A window-title escape in the model name, clear-screen in a reason, hidden text in a candidate's reason and
    a rule name of the plan: --show prints each as visible escapes, and no control character reaches stdout."""
    profile, _ = make_profile(tmp_path)
    document = json.loads(json.dumps(profile))
    document["model"] = f"{ESCAPES['title']}resnet50"
    document["verdict_reason"] = f"{ESCAPES['clear']}all good"
    document["candidates"][1]["reason"] = f"{ESCAPES['hidden']}secret{ESCAPES['csi']}"
    document["left_out"] = {"tunableop": f"line one\nexport LD_PRELOAD=/tmp/x{ESCAPES['bidi']}"}
    document["plan"] = {"note": "n", "diagnosis": [{"rule": f"launch_bound{ESCAPES['title']}", "share": 0.5,
                                                    "title": ESCAPES["clear"]}], "visits": [], "unanswered": []}  # fmt: skip
    code, out, err = show(fade_main, capsys, write(tmp_path, document))
    assert code == 0, err
    printed = out.replace("\n", "")
    assert printed == printable(printed)  # nothing left to escape
    assert "\\x1b]0;owned\\x07resnet50" in out and "\\x1b[2Jall good" in out and "\\x1b[8msecret\\x9b31m" in out
    assert "launch_bound\\x1b]0;owned\\x07" in out and "\\u202e" in out
    assert not any(line.startswith("export LD_PRELOAD") for line in out.splitlines())  # a newline cannot fake a line


def test_printable_escapes_controls_and_keeps_text():
    assert printable("résumé ✓ 模型 😀 tab\there") == "résumé ✓ 模型 😀 tab\\x09here"
    assert printable("\x00\x1b\x7f\x85\x9b\u2066") == "\\x00\\x1b\\x7f\\x85\\x9b\\u2066"
    assert printable("a\nb") == "a\\x0ab"
    assert printable("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"


def test_a_compiler_cache_outside_this_users_tune_cache_is_not_applied(tmp_path, fade_main, capsys, on_h100):  # noqa: F811
    """Inductor and Triton load compiled kernels from their cache directories: a file from elsewhere pointing
    TORCHINDUCTOR_CACHE_DIR at a directory of its choosing could plant code. Showing it is harmless; load_tuning
    and `--show --env` refuse it in one line and set nothing."""
    from fade.act.tune.tuning_file import load_tuning

    profile, _ = make_profile(tmp_path)
    planted = str(tmp_path / "planted" / "inductor")
    path = write(tmp_path, {**profile, "knobs": {**profile["knobs"], "compile": "default"},
                            "env": {**profile["env"], "TORCHINDUCTOR_CACHE_DIR": planted}})  # fmt: skip
    environ = {}
    with pytest.raises(TuningFileError, match="outside this user's FADE tune cache"):
        load_tuning(path, environ=environ, fingerprint=dict(H100), set_torch_flags=False, verbose=False)
    assert environ == {}
    code, out, err = show(fade_main, capsys, path, "--env")
    assert code == 2 and "outside this user's FADE tune cache" in err and "TORCHINDUCTOR" not in out
    code, out, err = show(fade_main, capsys, path)
    assert code == 0, err  # showing it is harmless


def test_a_relative_cache_home_is_a_directory_like_any_other_not_a_traceback(tmp_path, monkeypatch):
    """XDG_CACHE_HOME=relative-cache: check_cache_paths compares absolute paths (os.path.commonpath raised on a
    relative base and an absolute value)."""
    from fade.act.tune.tuning_file import check_cache_paths

    profile, _ = make_profile(tmp_path)
    monkeypatch.chdir(tmp_path)
    relative = {"XDG_CACHE_HOME": "relative-cache"}
    assert "outside" in check_cache_paths(profile["env"], relative)
    inside = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "relative-cache" / "fade" / "tune" / "dev" / "inductor")}
    assert check_cache_paths(inside, relative) is None
