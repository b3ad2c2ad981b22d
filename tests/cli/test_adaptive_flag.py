"""--adaptive in flag mode: the plan runs max_trials per cell; a count below 5 is named."""

from __future__ import annotations

from aorta.errors import ExitCode


def test_adaptive_flag_plans_trials_as_max_trials(run_cli):
    code, out, _ = run_cli(
        "sweep",
        "run",
        "--adaptive",
        "--mitigation-axis",
        "none,xnack",
        "--trials",
        "6",
        "--dry-run",
        "--",
        "true",
    )
    assert code == ExitCode.OK
    assert "2 cells, 12 trials" in out


def test_adaptive_flag_names_a_count_below_five(run_cli):
    code, _, err = run_cli(
        "sweep",
        "run",
        "--adaptive",
        "--mitigation-axis",
        "none",
        "--trials",
        "3",
        "--dry-run",
        "--",
        "true",
    )
    assert code == ExitCode.USAGE
    assert "--trials (with --adaptive, the most per cell): must be ≥ 5" in err
