"""Load the known-issue rules (data/rules.toml or a user's file) and test them against facts.

A rule is data: id, severity, scope, a `when` condition over facts, explanation, fix and source.
Conditions are AND over keys; `any = [{...}, {...}]` is an OR of sub-conditions. A key's value is
  scalar       → the fact equals it
  list         → the fact is one of them
  {version=S}  → the fact is a version inside the specifier set S (">=6.3.0,<6.3.1")
  {present=B}  → the fact is (not) None;  {ne=V}, {lt=N}, {gt=N}, {not_in=[...]}, {contains=S}
A fact that is None satisfies only {present=false}: unknown never fires a rule.
Every key must name a fact that fade.analyze.facts produces (FACT_NAMES, or env.NAME): a typo is a load
error with a "did you mean", never a rule that silently stops firing.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from fade.analyze.facts import FACT_NAMES, is_fact_name
from fade.reading import MAX_DEPTH, UnreadableFile, finite_float, nesting_depth, read_text

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

RULES_FILE = Path(__file__).resolve().parent.parent / "data" / "rules.toml"
RULES_MAX_BYTES = 4 * 2**20  # the bundled rules.toml is well under 100 KB
SEVERITIES = ("fail", "warn", "info")  # in report order
SCOPES = ("system", "device")
RULE_ID = re.compile(r"^[A-Z]{2,8}\d{3}$")
OPERATORS = {"version", "present", "ne", "lt", "gt", "not_in", "contains"}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")


class RuleError(ValueError):
    """A malformed rules file; the message names the file and the rule."""


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    scope: str
    title: str
    when: dict
    explain: str
    fix: str
    source: str
    fix_env: dict = field(default_factory=dict)  # env lines apply_fade_patches may set
    fix_safety: str = "review"  # "safe": apply_fade_patches sets fix_env by default
    suppressed_by: tuple = ()  # ids of more specific rules that make this one redundant


def _check_fact_name(name: str, where: str, context: str) -> None:
    if is_fact_name(name):
        return
    close = difflib.get_close_matches(name, sorted(FACT_NAMES), n=1)
    hint = f"did you mean '{close[0]}'?" if close else "see FACT_NAMES in fade/analyze/facts.py"
    raise RuleError(f"{where}: {context} '{name}' names no fact; {hint}")


def _check_condition(cond, where: str):
    if not isinstance(cond, dict):
        raise RuleError(f"{where}: condition must be a table")
    for key, value in cond.items():
        if key != "any":
            _check_fact_name(key, where, "when key")
        if key == "any":
            if not isinstance(value, list) or not value:
                raise RuleError(f"{where}: 'any' must be a non-empty list of tables")
            for sub in value:
                _check_condition(sub, where)
        elif isinstance(value, dict):
            unknown = set(value) - OPERATORS
            if unknown or len(value) != 1:
                raise RuleError(f"{where}: condition on '{key}' must be one of {sorted(OPERATORS)}")
            (operator, argument), = value.items()
            if operator == "version":
                try:
                    SpecifierSet(argument if isinstance(argument, str) else None)
                except (InvalidSpecifier, TypeError):
                    raise RuleError(f"{where}: bad version specifier {argument!r}") from None
            elif operator in ("lt", "gt") and (not isinstance(argument, (int, float)) or isinstance(argument, bool)):
                raise RuleError(f"{where}: '{operator}' on '{key}' needs a number, got {argument!r}")
            elif operator == "not_in" and not isinstance(argument, list):
                raise RuleError(f"{where}: 'not_in' on '{key}' needs a list")
            elif operator == "contains" and not isinstance(argument, (str, int, float)):
                raise RuleError(f"{where}: 'contains' on '{key}' needs a string")
        elif not isinstance(value, (str, int, float, bool, list)):
            raise RuleError(f"{where}: condition on '{key}' must be a value, a list or an operator table")
        elif isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
            raise RuleError(f"{where}: the list for '{key}' must hold plain values")


def _rule_from_row(row: dict, where: str) -> Rule:
    if not isinstance(row, dict):
        raise RuleError(f"{where}: a rule must be a table ([[rule]])")
    for key in ("id", "severity", "scope", "title", "when", "explain", "fix", "source"):
        if not row.get(key) and key != "when":
            raise RuleError(f"{where}: missing '{key}'")
        if key != "when" and not isinstance(row[key], str):
            raise RuleError(f"{where}: '{key}' must be a string")
    if not isinstance(row.get("fix_env", {}), dict):
        raise RuleError(f"{where}: fix_env must be a table of NAME = value")
    suppressed = row.get("suppressed_by", [])
    if not isinstance(suppressed, list) or not all(isinstance(item, str) for item in suppressed):
        raise RuleError(f"{where}: suppressed_by must be a list of rule ids")
    if not RULE_ID.match(row["id"]):
        raise RuleError(f"{where}: id {row['id']!r} must look like ROCM012")
    if row["severity"] not in SEVERITIES:
        raise RuleError(f"{where}: severity must be one of {SEVERITIES}")
    if row["scope"] not in SCOPES:
        raise RuleError(f"{where}: scope must be one of {SCOPES}")
    if row.get("fix_safety", "review") not in ("safe", "review"):
        raise RuleError(f"{where}: fix_safety must be 'safe' or 'review'")
    _check_condition(row.get("when", {}), where)
    for key in ("title", "explain", "fix"):
        for name in _PLACEHOLDER.findall(row[key]):
            _check_fact_name(name, where, f"{key} placeholder")
    for value in row.get("fix_env", {}).values():
        for name in _PLACEHOLDER.findall(str(value)):
            _check_fact_name(name, where, "fix_env placeholder")
    known = {"id", "severity", "scope", "title", "when", "explain", "fix", "source", "fix_env",
             "fix_safety", "suppressed_by"}
    if set(row) - known:
        raise RuleError(f"{where}: unknown keys {sorted(set(row) - known)}")
    return Rule(id=row["id"], severity=row["severity"], scope=row["scope"], title=row["title"],
                when=row.get("when", {}), explain=row["explain"], fix=row["fix"], source=row["source"],
                fix_env={k: str(v) for k, v in row.get("fix_env", {}).items()},
                fix_safety=row.get("fix_safety", "review"),
                suppressed_by=tuple(row.get("suppressed_by", ())))


@lru_cache(maxsize=8)
def load_rules(path: str | Path = RULES_FILE) -> tuple[Rule, ...]:
    """Bundled rules and a user's rules file load through this same function."""
    path = Path(path)
    try:
        text = read_text(path, what="rules file", max_bytes=RULES_MAX_BYTES)  # a regular file: never a FIFO's hang
    except UnreadableFile as exc:  # "rules file P: ..."; a RuleError names the file alone, like the others below
        raise RuleError(str(exc).removeprefix("rules file ")) from None
    if nesting_depth(text, MAX_DEPTH) > MAX_DEPTH:  # TOML arrays and inline tables nest with [ and { too
        raise RuleError(f"{path}: nested too deeply (deeper than the {MAX_DEPTH} levels FADE reads)")
    try:
        data = tomllib.loads(text, parse_float=finite_float)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML ({str(exc).splitlines()[0]})") from None
    except UnreadableFile as exc:  # inf or nan
        raise RuleError(f"{path}: {exc}") from None
    except ValueError as exc:  # an integer past Python's 4300-digit limit
        raise RuleError(f"{path}: not valid TOML ({str(exc).splitlines()[0][:80]})") from None
    except RecursionError:
        raise RuleError(f"{path}: nested too deeply") from None
    if not isinstance(data.get("rule", []), list):
        raise RuleError(f"{path}: 'rule' must be an array of tables ([[rule]])")
    rules, seen = [], set()
    for i, row in enumerate(data.get("rule", [])):
        label = row.get("id", "?") if isinstance(row, dict) else "?"
        rule = _rule_from_row(row, f"{path.name} rule #{i + 1} ({str(label)[:40]})")
        if rule.id in seen:
            raise RuleError(f"{path.name}: duplicate rule id {rule.id}")
        seen.add(rule.id)
        rules.append(rule)
    return tuple(rules)


def _as_version(value) -> Version | None:
    try:
        return Version(str(value))
    except InvalidVersion:
        return None


def _matches(fact, expected) -> bool:
    if isinstance(expected, dict):
        (op, arg), = expected.items()
        if op == "present":
            return (fact is not None) == bool(arg)
        if fact is None:
            return False
        if op == "version":
            version = _as_version(fact)
            return version is not None and SpecifierSet(arg).contains(version, prereleases=True)
        if op == "ne":
            return fact != arg
        if op == "not_in":
            return fact not in arg
        if op == "contains":
            return str(arg).lower() in str(fact).lower()
        if not isinstance(fact, (int, float)) or isinstance(fact, bool):
            return False
        return fact < arg if op == "lt" else fact > arg
    if fact is None:
        return False
    if isinstance(expected, list):
        return fact in expected
    return fact == expected


def condition_holds(cond: dict, facts: dict) -> bool:
    for key, expected in cond.items():
        if key == "any":
            if not any(condition_holds(sub, facts) for sub in expected):
                return False
        elif not _matches(facts.get(key), expected):
            return False
    return True


def render(template: str, facts: dict) -> str:
    """Fill {fact} placeholders; an unknown fact renders as '?' so a gap is visible, never a crash."""
    def fill(match):
        value = facts.get(match.group(1))
        return "?" if value is None else str(value)

    return _PLACEHOLDER.sub(fill, template)
