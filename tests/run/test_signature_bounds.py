"""Issue 24: the signature scan and step-time parsing are linear whatever the patterns and
the log; log text echoed to the terminal cannot drive it. Real sweeps, real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text
from aorta.recipe.blocks import CustomPattern
from aorta.run import signatures
from aorta.run.signatures import SignatureLibrary, classify
from aorta.run.sweep import sweep

LIB = SignatureLibrary.load(entry_points=False)
PROBE = "mode: probe\nmitigation_axis: [none]\ntimeout_per_trial: 60\n"


def run(text: str, tmp_path: Path, command: list[str]):
    return sweep(load_recipe_text(text, command=command), output=tmp_path / "out", progress="none")


# --- the scan ------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("prefix", "name", "real"),
    [
        # Before: `ProcessGroupNCCL.*[Tt]imed? ?out` and `NCCL WARN .*(?:failed|Error|error)`
        # retried from every repetition of the prefix: a 1 MB log took 24–34 s. Now one pass.
        ("ProcessGroupNCCL ", "collective_timeout", "[E ProcessGroupNCCL.cpp:616] Timed out"),
        ("NCCL WARN ", "nccl_error", "host:1:2 [0] NCCL WARN Call to connect failed"),
    ],
)
def test_builtin_signatures_are_linear_on_lines_repeating_their_prefix(
    tmp_path, prefix, name, real
):
    log = tmp_path / "stderr.log"
    line = (prefix * (60_000 // len(prefix))).encode() + b"\n"
    with open(log, "wb") as fh:
        for _ in range(4_000_000 // len(line)):  # 4 MB of 60 kB lines
            fh.write(line)
        fh.write(real.encode() + b"\n")
    [m] = [m for m in LIB.scan([log]) if m.name == name]
    assert m.line == real and m.line_number == 4_000_000 // len(line) + 1


@pytest.mark.timeout(120)
def test_a_catastrophic_custom_pattern_scans_at_once(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_bytes((b"a" * 40 + b"b\n") * 1000 + b"a" * 40 + b"\n")
    pattern = CustomPattern.model_validate({"id": "bad", "match": {"regex": "^(a+)+$"}})
    lib = SignatureLibrary.load(custom=[pattern], entry_points=False)
    [m] = lib.scan([log], only=lambda s: s.source == "recipe")
    assert m.line_number == 1001


@pytest.mark.slow
def test_many_candidate_lines_keep_the_first_match_of_each_signature(tmp_path):
    # 20,000 lines that each match some signature: every signature still gets its first line,
    # and a condition that never holds stops being tried after a bounded number of lines.
    log = tmp_path / "stderr.log"
    lines = []
    for i in range(10_000):
        lines += [f"step {i} ms 5", f"NCCL WARN rank {i} failed"]
    lines.append("step 99999 ms 500")
    log.write_text("\n".join(lines) + "\n")
    slow = CustomPattern.model_validate(
        {
            "id": "slow",
            "match": {
                "regex": r"step (?P<n>\d+) ms (?P<ms>\d+)",
                "condition": 'int(capture["ms"]) > 100',
            },
        }
    )
    never = CustomPattern.model_validate(
        {"id": "never", "match": {"regex": r"step \d+", "condition": "exit_code == 42"}}
    )
    lib = SignatureLibrary.load(custom=[slow, never], entry_points=False)
    found = {m.name: m for m in lib.scan([log])}
    assert found["nccl_error"].line_number == 2
    assert found["custom:slow"].line_number == 20_001  # past 10,000 false conditions
    assert found["custom:slow"].captures == {"n": "99999", "ms": "500"}
    assert "custom:never" not in found


def test_conditions_that_cross_a_bound_or_never_hold_are_said_in_the_warnings(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(signatures, "MAX_CONDITION_TRIES", 50)
    log = tmp_path / "stdout.log"
    log.write_text("".join(f"step {i} tag abc\n" for i in range(200)))  # line 50 ends at 789
    patterns = [
        {
            "id": "big",
            "match": {
                "regex": "tag (?P<t>\\w+)",
                "condition": 'len(capture["t"] * 2000000000) > 0',
            },
        },
        {"id": "never", "match": {"regex": "step", "condition": "exit_code == 42"}},
    ]
    lib = SignatureLibrary.load(
        custom=[CustomPattern.model_validate(p) for p in patterns], entry_points=False
    )
    got = classify(lib, failed=False, logs=[log])
    assert got.top is None and not got.fails_passing
    assert got.warnings == [
        "custom:big: the condition was counted as false on a line of stdout.log: the string "
        "'abc' * 2000000000 would be 6,000,000,000 characters (a condition builds at most 100,000)",
        "custom:big: its condition was false on 50 matching lines; not tried past byte 789 of "
        "stdout.log",
        "custom:never: its condition was false on 50 matching lines; not tried past byte 789 of "
        "stdout.log",
    ]


LOG_LINES = sorted(
    {
        line
        for f in (Path(__file__).parents[1] / "data" / "signature_logs").glob("*.log")
        for line in f.read_text().splitlines()
    }
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.one_of(
            st.sampled_from(LOG_LINES),
            st.text(alphabet="abc NCLWARErorx:0\t\x1b", max_size=40),
        ),
        max_size=60,
    ),
    block=st.integers(min_value=16, max_value=400),
)
@pytest.mark.parametrize("automaton", ["one", "none"])
def test_the_scan_finds_what_matching_each_line_alone_finds(
    tmp_path, monkeypatch, automaton, lines, block
):
    # The reference: every signature's own pattern on each line in turn, first line wins.
    # "none": the union is over its memory bound, so each pattern searches on its own.
    if automaton == "none":
        monkeypatch.setattr(signatures, "compile_alternation", lambda patterns: None)
    log = tmp_path / "stderr.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    want: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        for sig in LIB.signatures:
            if sig.name not in want and sig._rx.search(line.encode()):
                want[sig.name] = number
    got = {m.name: m.line_number for m in LIB.scan([log], block_bytes=block)}
    assert got == want


def test_a_log_line_is_kept_with_its_control_characters_escaped(tmp_path):
    log = tmp_path / "stderr.log"
    log.write_bytes(b"\x1b[2J\x1b]0;owned\x07RuntimeError: CUDA error: x\r\x1b[1A\xe2\x80\xaeok\n")
    got = classify(LIB, failed=True, logs=[log])
    line = got.record_fields()["signature_line"]
    assert line == (
        "stderr.log:1: \\x1b[2J\\x1b]0;owned\\x07RuntimeError: CUDA error: x\\x0d\\x1b[1A\\u202eok"
    )


# --- real sweeps ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_catastrophic_custom_pattern_does_not_hang_the_sweep(tmp_path):
    # Before: Python's re on `^(a+)+$` against 40 a's and a b never finished.
    text = PROBE + "custom_patterns:\n  - {id: bad, match: {regex: '^(a+)+$'}, on_match: warn}\n"
    script = (
        "for i in 1 2 3; do printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\\n'; done; echo aaaa"
    )
    [rec] = run(text, tmp_path, ["bash", "-c", script]).records
    assert rec.status.value == "ok", rec.error
    assert "custom:bad: aaaa" in rec.warnings


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_catastrophic_step_time_regex_does_not_turn_a_fast_trial_into_a_timeout(tmp_path):
    # Before: the trial took 50 ms, parsing its step times ran past the 20 s deadline.
    text = (
        "mode: probe\nmitigation_axis: [none]\ntimeout_per_trial: 20\n"
        "step_time_regex: '^(?P<ms>[0-9]+)(a+)+$'\n"
    )
    script = "printf '12aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab\\n13aaaa\\n'"
    [rec] = run(text, tmp_path, ["bash", "-c", script]).records
    assert rec.status.value == "ok", rec.error
    assert rec.step_times_ms == [13.0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_log_text_matched_by_a_warn_pattern_reaches_the_terminal_escaped(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        PROBE + "custom_patterns:\n  - {id: dep, match: {regex: deprecated}, on_match: warn}\n"
    )
    script = r"printf '\033[2J\033]0;owned\007deprecated flag\r\033[1Aall good\n'"
    out = tmp_path / "out"
    argv = ["sweep", "run", "--recipe", str(recipe), "--output", str(out), "--verbose"]
    assert main([*argv, "--", "bash", "-c", script]) == ExitCode.OK
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err, repr(err)
    assert "custom:dep: \\x1b[2J\\x1b]0;owned\\x07deprecated flag\\x0d\\x1b[1Aall good" in err
    [record] = [json.loads(p.read_text()) for p in out.rglob("trial_0000.json")]
    assert record["warnings"] == [
        "custom:dep: \\x1b[2J\\x1b]0;owned\\x07deprecated flag\\x0d\\x1b[1Aall good"
    ]
