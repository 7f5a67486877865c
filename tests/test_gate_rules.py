"""Rules for `smlens gate`: the TOML file, its mistakes, and reading it on Python 3.10."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reports.gate import DEFAULT_RULES, GROUP_BY, Rule, RulesError, load_rules, parse_rules

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_example_gate_toml_reads_and_matches_the_defaults_it_documents():
    rules = load_rules(EXAMPLES / "gate.toml")
    by_label = {r.label: r for r in rules}
    # the example spells out the built-in rules (and leaves waves and top_stall commented out)
    assert {r.label for r in DEFAULT_RULES} == set(by_label)
    for default in DEFAULT_RULES:
        written = by_label[default.label]
        fields = ("figure", "direction", "relative_pct", "min_effect", "by", "min_time_share_pct",
                  "statistic", "alpha", "on_validation_fail")
        assert [getattr(written, f) for f in fields] == [getattr(default, f) for f in fields]
        assert written.required  # a rule someone wrote must find its figure


def test_a_rule_file_sets_defaults_and_per_rule_values():
    rules = parse_rules({
        "defaults": {"alpha": 0.01, "min_time_share_pct": 2, "include_default_rules": False},
        "rule": [{"figure": "time_ns", "worse": "higher", "relative_pct": 5, "min_effect": 1000},
                 {"figure": "waves", "worse": "either", "by": ["phase"], "statistic": "threshold"},
                 {"figure": "top_stall", "worse": "changed"}],
    })
    assert [r.figure for r in rules] == ["time_ns", "waves", "top_stall"]
    assert all(r.alpha == 0.01 and r.min_time_share_pct == 2 for r in rules)
    assert rules[0].by == GROUP_BY and rules[1].by == ("phase",)
    assert rules[1].statistic == "threshold" and rules[1].label == "waves by phase"
    assert rules[0].how == "sum" and rules[1].how == "mean" and rules[2].how == "mode"


def test_defaults_alone_keep_the_built_in_rules():
    rules = parse_rules({"defaults": {"alpha": 0.1}})
    assert len(rules) == len(DEFAULT_RULES) and all(r.alpha == 0.1 for r in rules)
    assert not any(r.required for r in rules)  # n/a on both sides is a note for built-in rules


@pytest.mark.parametrize("document, words", [
    ({"rule": [{"worse": "higher"}]}, "every rule needs `figure`"),
    ({"rule": [{"figure": "waves"}]}, "the catalog gives waves no better direction: say `worse`"),
    ({"rule": [{"figure": "time_ns", "worse": "slower"}]}, "`worse` must be one of"),
    ({"rule": [{"figure": "time_ns", "worse": "higher", "relative": 5}]}, "unknown key(s) relative"),
    ({"rule": [{"figure": "time_ns", "worse": "higher", "alpha": 5}]}, "`alpha` must lie between 0 and 1"),
    ({"rule": [{"figure": "time_ns", "worse": "higher", "min_effect": -1}]}, "`min_effect` must be a number >= 0"),
    ({"rule": [{"figure": "time_ns", "worse": "changed"}]}, "is a number"),
    ({"rule": [{"figure": "mma_path", "worse": "lower"}]}, "is a text figure"),
    ({"rule": [{"figure": "fill", "worse": "lower", "statistic": "t-test"}]}, "`statistic` must be one of"),
    ({"rules": []}, "unknown top-level key(s) rules"),
    ({"defaults": {"threshold": 3}}, "[defaults]: unknown key(s) threshold"),
    ({"defaults": {"include_default_rules": False}}, "no rules"),
])
def test_mistakes_in_a_rule_file_say_what_to_change(document, words):
    with pytest.raises(RulesError) as err:
        parse_rules(document)
    assert words in str(err.value)


def test_a_file_that_is_not_toml_names_itself(tmp_path):
    path = tmp_path / "gate.toml"
    path.write_text("[[rule]\nfigure = time_ns\n")
    with pytest.raises(RulesError) as err:
        load_rules(path)
    assert str(path) in str(err.value) and "not valid TOML" in str(err.value)
    with pytest.raises(RulesError, match="cannot read rules file"):
        load_rules(tmp_path / "missing.toml")


def test_python_310_reads_rules_with_tomli_or_says_what_to_install(monkeypatch, tmp_path):
    try:
        import tomllib as toml_module
    except ModuleNotFoundError:  # Python 3.10
        toml_module = pytest.importorskip("tomli")

    path = tmp_path / "gate.toml"
    path.write_text('[[rule]]\nfigure = "fill"\nworse = "lower"\n')
    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10
    monkeypatch.setitem(sys.modules, "tomli", toml_module)  # tomli has the same API
    assert [r.figure for r in load_rules(path)] == ["fill"]
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(RulesError, match="needs the tomli package: pip install tomli"):
        load_rules(path)


def test_rule_label_and_unit():
    assert Rule("time_ns", "higher").unit == "ns"
    assert Rule("dram_bytes", "higher", by=("phase", "role")).label == "dram_bytes by phase/role"
    assert Rule("custom_metric", "higher").how == "mean" and Rule("custom_metric", "higher").unit == ""


def test_a_rule_takes_its_direction_and_aggregation_from_the_catalog():
    """The catalog says fill is better higher (a ratio of sums), time and DRAM bytes better lower
    (sums), the top stall a text figure: a rule that names only the figure gates each that way."""
    rules = parse_rules({"defaults": {"include_default_rules": False},
                         "rule": [{"figure": "fill"}, {"figure": "time_ns"}, {"figure": "dram_bytes"},
                                  {"figure": "top_stall"}, {"figure": "waves", "worse": "either"},
                                  {"figure": "fill", "worse": "either", "name": "fill moved"}]})
    assert [(r.direction, r.how) for r in rules] == [
        ("lower", "ratio"), ("higher", "sum"), ("higher", "sum"), ("changed", "mode"), ("either", "mean"),
        ("either", "ratio")]
    assert all(r.worse is None and r.direction for r in DEFAULT_RULES)  # none restates the catalog
