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
