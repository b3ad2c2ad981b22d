"""Issue 24: every regex aorta matches against a trial's output is bounded (RE2), and a
recipe's patterns and conditions that RE2 or the condition sandbox cannot take are one
located ``Error:`` line, never a traceback."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.cli import main
from aorta.errors import ExitCode, RecipeError
from aorta.recipe import load_recipe_text
from aorta.recipe.condition import compile_condition, evaluate
from aorta.regex import RegexError, compile_alternation, compile_regex
from aorta.run.signatures import SignatureLibrary

PROBE = "mode: probe\nmitigation_axis: [none]\n"


def custom(regex: str, condition: str | None = None) -> str:
    match = f"{{regex: {json.dumps(regex)}" + (
        f", condition: {json.dumps(condition)}}}" if condition else "}"
    )
    return f"{PROBE}custom_patterns:\n  - {{id: x, match: {match}}}\n"


# --- regexes RE2 cannot take: named, located, one line --------------------------------------


@pytest.mark.parametrize(
    ("regex", "message"),
    [
        ("a{99999999999}", r"the repetition \{99999999999\} is over RE2's limit of 1000"),
        ("x{2000}", r"the repetition \{2000\} is over"),
        (r"(a)\1", "backreferences"),
        ("(?P<a>x)(?P=a)", "backreferences"),
        ("error(?!: 0)", "lookaround"),
        ("(?<=rank )0", "lookaround"),
        (r"done\Z", r"\\Z is spelled \\z"),
        ("(", "not a valid regular expression"),
    ],
)
def test_a_pattern_re2_cannot_take_is_a_located_recipe_error(regex, message):
    with pytest.raises(RecipeError, match=message) as err:
        load_recipe_text(custom(regex), command=["true"])
    assert "custom_patterns[0].match.regex" in str(err.value)
    with pytest.raises(RecipeError, match=message) as err:
        load_recipe_text(f"{PROBE}step_time_regex: {json.dumps(regex)}\n", command=["true"])
    assert "step_time_regex" in str(err.value)


def test_the_command_line_says_one_error_line_for_a_huge_repetition(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(custom("a{99999999999}"))
    assert main(["recipe", "validate", str(recipe)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("Error: "), err
    assert "custom_patterns[0].match.regex: the repetition {99999999999}" in err


def test_a_repetition_inside_a_class_or_escaped_is_not_a_count():
    compile_regex(r"[{99999}]\{99999\}")  # a class and escaped braces: literal text
    with pytest.raises(RegexError):
        compile_regex(r"[]]{1001}")  # the class ends at the second ], the count is real


@pytest.mark.timeout(60)
def test_a_catastrophic_pattern_matches_in_linear_time():
    # Python's re takes ~2^n steps on ^(a+)+$ against a's and a b; RE2 one pass.
    line = b"a" * 200_000 + b"b"
    assert compile_regex("^(a+)+$").search(line) is None
    assert compile_regex("^(a+)+$").search(line[:-1]) is not None
    assert compile_regex("^(a+)+$", text="str").search("a" * 100_000 + "!") is None


def test_patterns_are_matched_one_line_at_a_time():
    assert compile_regex("a[^x]*b").search(b"a\nb") is None
    assert compile_regex(r"a\s+b").search(b"a\n b") is None
    assert compile_regex("^b$").search(b"a\nb\nc").span() == (2, 3)
    assert compile_alternation(["zzz", "^c"]).search(b"a\nb\nc").start() == 4


# --- the built-in ecc_error without its lookahead: the same lines as before -------------------

OLD_ECC = re.compile(
    rb"(?:[Uu]ncorrectable|[Dd]ouble[- ]bit).*ECC|ECC (?:errors?|Errors?|ERRORS?)\b(?!:? *0\b)"
)
NEW_ECC = SignatureLibrary.builtin()["ecc_error"]


@settings(max_examples=400)
@given(
    head=st.sampled_from(["", "GPU 3: ", "x"]),
    word=st.sampled_from(["error", "errors", "Errors", "ERROR", "ERRORS", "errorsx", "Error"]),
    tail=st.text(alphabet=": 0a1\t.-_", max_size=6),
)
def test_ecc_error_without_lookahead_matches_exactly_the_lines_it_did(head, word, tail):
    line = f"{head}ECC {word}{tail}".encode()
    assert bool(NEW_ECC._rx.search(line)) == bool(OLD_ECC.search(line)), line


# --- conditions: depth and sizes bounded ------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ("-" * 900 + "1 > 0", "nested at most 50 levels"),  # was a RecursionError traceback
        ("not " * 200 + "exit_code", "nested at most 50 levels"),
        ("(" * 300 + "1" + ")" * 300 + " > 0", "nested at most 50 levels"),
        ("len('a' * 2000000000) > 0", "would be 2,000,000,000 characters"),
        ("len(('ab' * 1000) * 1000) > 0", "would be 2,000,000 characters"),
        ("'%999999999d' % 1 == ''", "string formatting"),
    ],
)
def test_a_condition_over_a_bound_is_a_located_recipe_error(condition, message):
    with pytest.raises(RecipeError, match=message) as err:
        load_recipe_text(custom("x", condition), command=["true"])
    assert "custom_patterns[0].match.condition" in str(err.value)


def test_the_command_line_says_one_error_line_for_a_deep_condition(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(custom("x", "-" * 900 + "1 > 0"))
    assert main(["recipe", "validate", str(recipe)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nested at most 50 levels" in err, err


@pytest.mark.timeout(60)
def test_a_condition_growing_a_captured_value_is_false_and_said():
    code = compile_condition('len(capture["x"] * 2000000000) > 0')
    errors: list[str] = []
    assert evaluate(code, capture={"x": "abc"}, errors=errors) is False
    assert errors == [
        "the string 'abc' * 2000000000 would be 6,000,000,000 characters "
        "(a condition builds at most 100,000)"
    ]
    code = compile_condition('len(capture["x"] + capture["x"]) == 6')
    assert evaluate(code, capture={"x": "abc"})
    bits = compile_condition('int(capture["x"]) * int(capture["x"]) > 0')
    errors = []
    assert evaluate(bits, capture={"x": "9" * 4000}, errors=errors)  # 26,576 bits: fine
    assert not errors
