"""The analysis on real hangs: dumps, py-spy stacks and logs that ``tests/data/hang/record.py``
took from torchrun (gloo, CPU) runs with one injected fault each.

Each test names the rank, op, sequence number and frame the fault put there. The frames'
lines are read from record.py itself, so a record.py edited without re-recording fails here
(rerun ``.venv/bin/python tests/data/hang/record.py``).
"""

from __future__ import annotations

import json
import shutil

import pytest

from aorta.hang import HangReport, analyze, load_evidence, parse_dump
from tests.hang.synth import HANG_DATA

RECORD = (HANG_DATA / "record.py").read_text().splitlines()


def line_of(function: str, text: str) -> int:
    """The line of record.py where ``function``'s body first says ``text``."""
    start = next(i for i, line in enumerate(RECORD) if line.startswith(f"def {function}("))
    return next(i for i in range(start, len(RECORD)) if text in RECORD[i]) + 1


def report_of(fault: str) -> HangReport:
    return analyze(load_evidence([HANG_DATA / fault]))


def frame_of(report: HangReport, rank: int):
    (frame,) = [f for f in report.frames if f.rank == rank]
    return frame


def test_a_rank_that_sleeps_before_its_collective_is_named_with_its_frame():
    report = report_of("sleep")
    assert report.kind == "missing"
    assert (report.culprit_ranks, report.op, report.seq) == ((2,), "all_reduce", 4)
    assert (report.process_group, report.group_ranks) == ("default_pg", (0, 1, 2))
    (group,) = report.groups
    assert (group.waiting, group.missing, group.sizes, group.dtypes) == (
        (0, 1),
        (2,),
        ((4,),),
        ("Float",),
    )
    frame = frame_of(report, 2)
    assert (
        frame.where
        == f"record.py:{line_of('slow_data_loader', 'time.sleep(HOLD_S)')} in slow_data_loader"
    )
    assert (frame.source, frame.thread, frame.in_collective) == ("stacks", "MainThread", None)
    assert report.summary.startswith("rank 2 (node ")
    assert (
        "never reached all_reduce #4 (default_pg, ranks 0-2); ranks 0,1 wait in it"
        in report.summary
    )


def test_a_rank_that_holds_the_gil_answers_no_dump_and_its_stack_says_so():
    report = report_of("gil")
    assert report.kind == "gil"
    assert (report.culprit_ranks, report.op, report.seq) == ((1,), "all_reduce", 4)
    frame = frame_of(report, 1)
    assert frame.owns_gil and frame.where.endswith(" in hold_gil")
    assert frame.where == f"record.py:{line_of('hold_gil', 'ctypes.PyDLL(None)')} in hold_gil"
    evidence = {e.rank: e for e in report.evidence}
    assert evidence[1].kinds == ("stacks", "logs")  # no dump came
    assert "rank 1: no dump within 5 s" in report.notes
    assert "holds the GIL at record.py:" in report.summary


def test_an_extra_collective_blames_the_rank_that_ran_ahead_not_the_idle_others():
    report = report_of("extra")
    assert report.kind == "extra"
    assert (report.culprit_ranks, report.op, report.seq) == ((1,), "all_reduce", 4)
    (group,) = report.groups
    assert (group.waiting, group.missing) == ((1,), (0, 2))
    frame = frame_of(report, 1)
    assert frame.where == f"record.py:{line_of('log_metrics', 'dist.all_reduce(t)')} in log_metrics"
    assert frame.in_collective == "all_reduce"


def test_mismatched_sizes_name_the_odd_rank_and_both_shapes():
    report = report_of("mismatch")
    assert report.kind == "mismatch"
    assert (report.culprit_ranks, report.op, report.seq) == ((1,), "all_reduce", 4)
    (group,) = report.groups
    assert group.diverged_at == 4
    assert [(v.ranks, v.sizes) for v in group.mismatch] == [((0, 2, 3), ((4,),)), ((1,), ((2,),))]
    # gloo let rank 1 finish its smaller all_reduce; the others wait for bytes that never come.
    assert (group.waiting, group.completed) == ((0, 2, 3), (1,))
    assert "rank 1 has [2] Float where ranks 0,2,3 have [4] Float" in report.summary


def test_a_rank_that_exited_is_the_culprit_and_its_peers_failed():
    report = report_of("exit")
    assert report.kind == "exited"
    assert (report.culprit_ranks, report.op, report.seq) == ((2,), "all_reduce", 4)
    (group,) = report.groups
    assert group.exited == ((2, 3),)
    # gloo fails the survivors at once and retires the entry: they "completed" #4 by failing.
    assert group.failed == (0, 1) and "by peer" in (group.failure or "")
    assert report.frames == ()  # an exited process has no stack
    assert (
        "rank 2 (node " in report.summary
        and "exited (code 3) before all_reduce #4" in report.summary
    )


def test_a_divergence_in_a_sub_group_is_found_there_not_in_the_default_group():
    report = report_of("subgroup")
    assert report.kind == "missing"
    assert (report.culprit_ranks, report.op, report.seq) == ((3,), "all_to_all", 3)
    assert (report.process_group, report.group_ranks) == ("expert_parallel", (2, 3))
    by_name = {g.name: g for g in report.groups}
    # The default group's wait is a consequence: rank 2 is missing there because it waits in
    # the expert-parallel group.
    assert (by_name["0"].waiting, by_name["0"].missing) == ((0, 1), (2, 3))
    assert (by_name["2"].waiting, by_name["2"].missing, by_name["2"].membership) == (
        (2,),
        (3,),
        "inferred",
    )
    assert "1" not in by_name  # the other expert group agrees
    assert frame_of(report, 3).where.endswith("in slow_data_loader")
    assert report.summary.endswith(
        "ranks 0,1 wait in all_reduce #4 (default_pg, ranks 0-3) for ranks 2,3"
    )


def test_pickled_dumps_load_safely_and_give_the_json_dumps_answer():
    # _dump_fr_trace's pickles (with stack traces) need no global: the safe unpickler reads them.
    folder = HANG_DATA / "pickle"
    for path in sorted(folder.iterdir()):
        dump = parse_dump(path.read_bytes(), name=path.name)
        assert dump["entries"][0]["process_group"] == ("0", "default_pg")
        assert isinstance(dump["pg_status"]["0"]["last_enqueued_collective"], int)
    report = analyze(load_evidence([folder]))
    assert (report.culprit_ranks, report.op, report.seq) == ((2,), "all_reduce", 4)
    # No py-spy here: the frame is the recorder's own stack trace of the rank's last entry.
    frame = frame_of(report, 2)
    assert (frame.source, frame.where) == (
        "dump",
        f"record.py:{line_of('train_step', 'dist.all_reduce(t, group=group)')} in train_step",
    )
    assert "rank 2 last issued a collective at record.py:" in report.summary


def test_dumps_named_as_pytorch_names_them_give_the_same_answer(tmp_path):
    # TORCH_FR_DUMP_TEMP_FILE prefixes + rank; a host name inside the name is not the rank.
    for rank in range(3):
        src = HANG_DATA / "sleep" / "hang" / f"fr_{rank}.json"
        shutil.copy(src, tmp_path / f"gpu-r{rank + 7}.local_rank_{rank}")
    report = analyze(load_evidence([tmp_path]))
    assert (report.culprit_ranks, report.op, report.seq) == ((2,), "all_reduce", 4)
    assert report.frames == ()  # dumps only: no stacks, JSON dumps hold no stack traces


def test_a_stopped_rank_whose_peer_completed_its_collective_is_a_device_culprit():
    # Rank 1 issued tensor-parallel broadcast #3 and stopped; rank 0 completed it and went
    # on to wait in the default group, rank 3 waits for rank 1 in data-parallel #3.
    report = report_of("device")
    assert (report.kind, report.culprit_ranks, report.op, report.seq) == (
        "device",
        (1,),
        "broadcast",
        3,
    )
    assert (report.process_group, report.group_ranks) == ("tensor_parallel", (0, 1))
    first, *rest = report.groups
    assert (first.culprits, first.completed) == ((1,), (0,))
    assert first.evidence[0].startswith("rank 1: #3 still scheduled")
    assert {g.desc for g in rest} == {"default_pg", "data_parallel"}
    assert all(g.waits_on == (1,) for g in rest)
    assert report.summary.startswith("rank 1 (node ")
    assert report.summary.endswith(
        "never finished broadcast #3 (tensor_parallel, ranks 0,1) while rank 0 completed it; "
        "its other 2 groups wait on it — a device fault?"
    )


def test_two_stopped_ranks_in_different_groups_are_both_named():
    report = report_of("device2")
    assert (report.kind, report.culprit_ranks) == ("device", (1, 2))
    faulted = [(g.label, g.culprits, g.completed) for g in report.groups if g.kind == "device"]
    assert faulted == [
        ("tensor_parallel, ranks 0,1", (1,), (0,)),
        ("tensor_parallel, ranks 2,3", (2,), (3,)),
    ]
    assert report.summary.endswith("— a device fault?; 2 groups wait on ranks 1, 2")


@pytest.mark.parametrize(
    "fault", ["sleep", "gil", "extra", "mismatch", "exit", "subgroup", "device", "device2"]
)
def test_every_golden_report_survives_json(fault):
    report = report_of(fault)
    assert HangReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
