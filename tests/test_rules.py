"""The rule language: what each condition form means, and that bad rule files are rejected by name."""

import pytest

from fade.analyze.rules import RuleError, condition_holds, load_rules, render


@pytest.mark.parametrize("cond, facts, expected", [
    ({"arch": "gfx942"}, {"arch": "gfx942"}, True),
    ({"arch": "gfx942"}, {"arch": "gfx90a"}, False),
    ({"arch": ["gfx940", "gfx942"]}, {"arch": "gfx942"}, True),
    ({"rocm": {"version": ">=6.3.0,<6.3.1"}}, {"rocm": "6.3.0"}, True),
    ({"rocm": {"version": ">=6.3.0,<6.3.1"}}, {"rocm": "6.3.1"}, False),
    ({"rocm": {"version": ">=6.3.0,<6.3.1"}}, {"rocm": "not-a-version"}, False),
    ({"env.X": {"present": True}}, {"env.X": "1"}, True),
    ({"env.X": {"present": False}}, {}, True),
    ({"n": {"lt": 25}}, {"n": 12.5}, True),
    ({"n": {"gt": 79}}, {"n": 80}, True),
    ({"n": {"lt": 25}}, {"n": True}, False),
    ({"flag": {"ne": True}}, {"flag": False}, True),
    ({"name": {"contains": "mi250"}}, {"name": "AMD Instinct MI250X"}, True),
    ({"any": [{"a": 1}, {"b": 2}]}, {"b": 2}, True),
    ({"any": [{"a": 1}, {"b": 2}]}, {"a": 2}, False),
])
def test_condition_forms(cond, facts, expected):
    assert condition_holds(cond, facts) is expected


@pytest.mark.parametrize("cond", [{"flag": False}, {"flag": {"ne": True}}, {"flag": ["x"]}, {"n": {"lt": 1}}])
def test_an_unknown_fact_never_fires_a_rule(cond):
    assert condition_holds(cond, {"flag": None, "n": None}) is False


def test_render_fills_dotted_fact_names_and_marks_gaps():
    assert render("export X={env.A} for {arch} on {nothing}", {"env.A": "1", "arch": "gfx1031"}) == \
        "export X=1 for gfx1031 on ?"


def test_bundled_rules_load_with_unique_ids_and_a_source_each():
    rules = load_rules()
    assert len(rules) >= 30
    assert len({r.id for r in rules}) == len(rules)
    assert all(r.source and r.fix and r.explain for r in rules)


def test_suppressing_rules_exist():
    ids = {r.id for r in load_rules()}
    for rule in load_rules():
        assert set(rule.suppressed_by) <= ids, rule.id


@pytest.mark.parametrize("row, message", [
    ('id = "bad"', "must look like ROCM012"),
    ('id = "XY001"\nseverity = "fatal"\nscope = "system"', "severity must be one of"),
    ('id = "ABC001"\nseverity = "warn"\nscope = "system"\nwhen = { rocm = { version = "~~6" } }', "bad version specifier"),
    ('id = "ABC001"\nseverity = "warn"\nscope = "system"\nwhen = { rocm = { between = 1 } }', "must be one of"),
])
def test_a_bad_rule_is_rejected_naming_the_file_and_rule(tmp_path, row, message):
    base = 'title = "t"\nexplain = "e"\nfix = "f"\nsource = "s"\n'
    if "severity" not in row:
        base += 'severity = "warn"\nscope = "system"\n'
    path = tmp_path / "mine.toml"
    path.write_text(f"[[rule]]\n{row}\n{base}")
    with pytest.raises(RuleError, match=message) as info:
        load_rules(path)
    assert "mine.toml rule #1" in str(info.value)


def test_duplicate_ids_are_rejected(tmp_path):
    row = '[[rule]]\nid = "ABC001"\nseverity = "warn"\nscope = "system"\ntitle = "t"\nexplain = "e"\nfix = "f"\nsource = "s"\n'
    path = tmp_path / "dup.toml"
    path.write_text(row + row)
    with pytest.raises(RuleError, match="duplicate rule id ABC001"):
        load_rules(path)


def _rule_file(tmp_path, when: str, title: str = "t") -> str:
    path = tmp_path / "mine.toml"
    path.write_text(f'[[rule]]\nid = "ABC001"\nseverity = "warn"\nscope = "system"\ntitle = "{title}"\n'
                    f'explain = "e"\nfix = "f"\nsource = "s"\nwhen = {when}\n')
    return str(path)


@pytest.mark.parametrize("when, bad, suggestion", [
    ("{ amd_gpu_presnt = true }", "amd_gpu_presnt", "amd_gpu_present"),
    ('{ any = [{ kfd_rw = false }, { torch_bulid = "cpu" }] }', "torch_bulid", "torch_build"),
    ('{ "measured.selftest_okay" = false }', "measured.selftest_okay", "measured.selftest_ok"),
])
def test_a_when_key_that_names_no_fact_is_rejected_with_a_suggestion(tmp_path, when, bad, suggestion):
    with pytest.raises(RuleError) as info:
        load_rules(_rule_file(tmp_path, when))
    message = str(info.value)
    assert "ABC001" in message and f"'{bad}' names no fact" in message and f"did you mean '{suggestion}'" in message


def test_env_facts_and_declared_facts_load(tmp_path):
    rule, = load_rules(_rule_file(tmp_path, '{ "env.ANY_VARIABLE" = { present = true }, kfd_rw = false }'))
    assert rule.when == {"env.ANY_VARIABLE": {"present": True}, "kfd_rw": False}


def test_a_placeholder_that_names_no_fact_is_rejected(tmp_path):
    with pytest.raises(RuleError, match="title placeholder 'devce_name' names no fact; did you mean 'device_name'"):
        load_rules(_rule_file(tmp_path, "{ kfd_rw = false }", title="{devce_name} is odd"))


def test_cli_rejects_a_rules_file_with_a_typo_in_one_line_exit_2(tmp_path, capsys):
    from conftest import FIXTURES

    from fade.cli import main

    rules = _rule_file(tmp_path, "{ kfd_rww = false }")
    code = main(["doctor", "--snapshot", str(FIXTURES / "rdna2_rx6800xt_rocm62_healthy.json"), "--rules", rules])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "ABC001" in err and "'kfd_rww' names no fact; did you mean 'kfd_rw'?" in err


def test_facts_produce_exactly_the_declared_names_on_every_fixture():
    """rules.py validates against FACT_NAMES: facts.py must produce each of them, and no other."""
    from conftest import FIXTURES, load_fixture

    from fade.analyze import facts
    from fade.analyze.devices import device_truths

    for path in sorted(FIXTURES.glob("*.json")):
        snapshot = load_fixture(path.name)
        truths = device_truths(snapshot)
        system = facts.system_facts(snapshot, truths)
        assert {k for k in system if not k.startswith("env.")} == set(facts.SYSTEM_FACTS), path.name
        for truth in truths:
            device = facts.device_facts(truth, snapshot)
            assert set(device) == set(facts.DEVICE_FACTS + facts.MEASURED_FACTS), path.name
