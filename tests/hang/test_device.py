"""Device faults: the ranks whose collective stays incomplete at a sequence number their peers
completed (or that their device never launched) are named first, with their evidence.

The NCCL goldens (``tests/data/hang/nccl_*``, written by ``tests/data/hang/synth_nccl.py``)
are per-rank dumps of 16–64-rank TP × PP × DP × EP jobs whose device faulted on one or two
ranks: pickles with integer fields, pickles with NCCL's string fields, JSON; with and
without watchdog lines; with and without device lines (the rank's own, dmesg's).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.hang import HangReport, RankEvidence, analyze, load_evidence, parse_dump, text
from aorta.hang.device import EntryFacts, suspects
from tests.data.hang.synth_nccl import SHAPES
from tests.hang import synth
from tests.hang.synth import HANG_DATA


def report_of(shape: str) -> HangReport:
    return analyze(load_evidence([HANG_DATA / f"nccl_{shape}"]))


def device_groups(report: HangReport):
    return [g for g in report.groups if g.kind == "device"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_exactly_the_faulted_ranks_are_named_first(shape):
    report = report_of(shape)
    faulted = tuple(sorted(SHAPES[shape]["faults"]))
    assert report.kind == "device"
    assert report.culprit_ranks == faulted
    assert report.summary.startswith(f"rank {faulted[0]} (node gpu-r{faulted[0] // 8}) never ")
    # The device groups come first, one per faulted rank; every other group waits on them.
    first = report.groups[: len(faulted)]
    assert [g.kind for g in first] == ["device"] * len(faulted)
    assert sorted(c for g in first for c in g.culprits) == list(faulted)
    rest = report.groups[len(faulted) :]
    assert rest and all(set(g.waits_on) <= set(faulted) and g.waits_on for g in rest)
    assert report.op == first[0].op and report.process_group == first[0].desc
    assert HangReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_one_fault_names_the_rank_its_peer_and_its_groups():
    report = report_of("one")
    assert report.summary == (
        "rank 5 (node gpu-r0) never finished _all_gather_base #5 (TENSOR_MODEL_PARALLEL_GROUP, "
        "ranks 4,5) while rank 4 completed it; its other 3 groups wait on it (10 groups in all)"
        " — a device fault?"
    )
    (group,) = device_groups(report)
    assert (group.waiting, group.completed, group.sizes, group.dtypes) == (
        (5,),
        (4,),
        ((1024, 8),),
        ("BFloat16",),
    )
    assert group.device_line is None
    assert group.evidence[0].startswith("rank 5: #5 still started (timeout 600 s)")
    assert "rank 4 completed it: last completed #5" in group.evidence[-1]
    # The table shows the device group and one line for the groups that wait on it.
    assert "(10 groups wait on rank 5)" in text(report)


def test_two_independent_faults_with_watchdog_lines_and_string_fields():
    dump = parse_dump((HANG_DATA / "nccl_two" / "nccl_trace_rank_5").read_bytes())
    entry = dump["entries"][1]  # the first step's _all_gather_base
    assert (entry["collective_seq_id"], entry["input_sizes"], entry["is_p2p"]) == (
        "1",
        "[[1024, 8]]",
        "False",
    )
    report = report_of("two")
    assert report.summary == (
        "rank 5 (node gpu-r0) never finished _all_gather_base #5 (TENSOR_MODEL_PARALLEL_GROUP, "
        "ranks 4-7) while ranks 4,6,7 completed it — a device fault?; rank 27 (node gpu-r3) "
        "never finished _all_gather_base #5 (TENSOR_MODEL_PARALLEL_GROUP, ranks 24-27) while "
        "ranks 24-26 completed it — a device fault?; 28 groups wait on ranks 5, 27"
    )
    five, twenty_seven = device_groups(report)
    assert five.sizes == ((1024, 8),)  # read from "[[1024, 8]]"
    assert "rank 5's watchdog: _all_gather_base #5 ran for 600015 ms" in five.evidence
    assert (
        "rank 27's watchdog: last enqueued work 6, last completed work 4" in twenty_seven.evidence
    )


def test_device_lines_turn_the_question_into_the_line():
    report = report_of("xid")
    (group,) = device_groups(report)
    assert group.device_line is not None and group.device_line.startswith("NVRM: Xid (PCI:")
    assert " — a device fault: NVRM: Xid (PCI:0000:9a:00): 31" in report.summary
    assert any("CUDA error: an illegal memory access" in e for e in group.evidence)
    assert any("NCCL WARN Cuda failure" in e for e in group.evidence)


def test_two_faults_one_with_amdgpu_lines_in_json_dumps():
    report = report_of("amd")
    by_rank = {g.culprits: g for g in device_groups(report)}
    assert set(by_rank) == {(21,), (50,)}
    assert "amdgpu: [gfxhub] page fault" in (by_rank[(21,)].device_line or "")
    assert by_rank[(50,)].device_line is None
    assert "— a device fault: amdgpu 0000:c1:00.0" in report.summary
    assert "rank 50 (node gpu-r6) never finished all_to_all #3" in report.summary
    assert report.summary.endswith("— a device fault?; 26 groups wait on ranks 21, 50")


def test_a_device_that_never_launched_the_collective_is_named():
    report = report_of("launch")
    (group,) = device_groups(report)
    assert (group.culprits, group.waiting, group.completed) == ((9,), (8,), ())
    assert report.summary.startswith(
        "rank 9 (node gpu-r1) never launched _all_gather_base #5 (TENSOR_MODEL_PARALLEL_GROUP, "
        "ranks 8,9) while rank 8 waits in it (its device is busy or dead)"
    )
    assert "none of its collectives started" in group.evidence[0]


def test_when_everyone_waits_the_suspects_are_ranked_with_why():
    def rank(r: int, *, started: bool = True, at: int = 0) -> RankEvidence:
        entries = synth.run(5, 4, backend="nccl", started=started)
        entries[-1]["time_discovered_started_ns"] = 10**18 + at * 10**9 if started else 0
        fr = synth.dump(entries, config={"0": ("default_pg", range(4))}, backend="nccl")
        return RankEvidence(r, fr=fr)

    # Every rank started #5 and waits; rank 2 started it 7 s after the others.
    report = analyze([rank(0), rank(1), rank(2, at=7), rank(3)])
    assert (report.kind, report.culprit_ranks) == ("stuck", ())
    (group,) = report.groups
    assert group.suspects == ((2, "started it last, 7.0 s after rank 0"),)
    assert report.summary.endswith(
        "— suspects, most telling first: rank 2: started it last, 7.0 s after rank 0"
    )
    # A device line in a waiter's log makes it the culprit.
    lines = ("[rank3]: RuntimeError: CUDA error: unspecified launch failure",)
    with_line = [rank(0), rank(1), rank(2, at=7), RankEvidence(3, fr=rank(3).fr, log_lines=lines)]
    report = analyze(with_line)
    assert (report.kind, report.culprit_ranks) == ("device", (3,))
    assert report.summary.endswith(
        "— a device fault: RuntimeError: CUDA error: unspecified launch failure"
    )


def test_suspects_order_device_lines_then_never_launched_then_latest():
    facts = {
        0: EntryFacts("started", 10**9, None, None),
        1: EntryFacts("scheduled", None, None, None),
        2: EntryFacts("started", 5 * 10**9, None, None),
        3: EntryFacts("started", 10**9, None, None),
    }
    ranked = suspects([0, 1, 2, 3], facts, {3: ("hipErrorLaunchFailure",)})
    assert [r for r, _ in ranked] == [3, 1, 2]
    assert ranked[0][1] == "its device: hipErrorLaunchFailure"


def test_a_peer_that_completed_and_went_nowhere_is_not_proof():
    # Rank 1 finished #4 and issued nothing after; the others wait in #4 (a gloo mismatch
    # looks like this): no device fault is claimed.
    waiting = synth.dump(synth.run(4, 3), gloo_ranks=range(3))
    done = synth.dump(synth.run(4, 4), gloo_ranks=range(3))
    report = analyze(
        [RankEvidence(0, fr=waiting), RankEvidence(1, fr=done), RankEvidence(2, fr=waiting)]
    )
    assert report.kind != "device"


@st.composite
def jobs(draw):
    tp = draw(st.sampled_from([2, 4]))
    pp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([2, 4, 8]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if e <= dp]))
    groups = synth.layout(tp, pp, dp, ep)
    world = tp * pp * dp
    kind = draw(
        st.sampled_from(["tp", "dp"] + (["pp"] if pp > 1 else []) + (["ep"] if ep > 1 else []))
    )
    first = draw(st.integers(0, world - 1))
    faults = [first]
    if draw(st.booleans()):
        # A second, independent fault: a rank in none of the first one's groups of that kind.
        desc = synth.DESCS[kind]
        near = {r for d, ranks in groups.values() if d == desc and first in ranks for r in ranks}
        others = [r for r in range(world) if r not in near]
        if others:
            faults.append(draw(st.sampled_from(others)))
    step = draw(st.integers(0, 1))
    launch, strings = draw(st.booleans()), draw(st.booleans())
    return groups, kind, sorted(faults), step, launch, strings


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_any_layout_names_exactly_its_faulted_ranks_first(job):
    groups, kind, faults, step, launch, strings = job
    at = {r: synth.fault_index(groups, r, step, kind, steps=3) for r in faults}
    sim = synth.simulate(groups, steps=3, faults=at, launch=launch)
    dumps = synth.job_dumps(groups, sim, strings=strings)
    logs = {r: tuple(synth.watchdog_lines(groups, sim, r)) for r in dumps}
    report = analyze([RankEvidence(r, fr=d, log_lines=logs[r]) for r, d in dumps.items()])
    assert report.kind == "device"
    assert report.culprit_ranks == tuple(sim["faulted"])
