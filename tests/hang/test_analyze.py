"""The analysis on what a CPU run cannot record: NCCL dumps (states, ``pg_config`` by name),
wrapped ring buffers, point-to-point ops, watchdog-only and stacks-only evidence, many
ranks. The dumps are built in torch's shape (``tests/hang/synth.py``)."""

from __future__ import annotations

from aorta.hang import RankEvidence, analyze
from tests.hang import synth

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def thread(*frames: tuple[str, str, int], name: str = "MainThread", gil: bool = False) -> dict:
    """One thread as ``py-spy dump --json`` writes it (frames innermost first)."""
    return {
        "thread_name": name,
        "owns_gil": gil,
        "active": gil,
        "frames": [{"name": n, "filename": f, "line": line} for n, f, line in frames],
    }


IN_ALL_REDUCE = thread(("all_reduce", TORCH, 3252), ("step", "/job/train.py", 41))


def nccl(enqueued: int, completed: int, *, ranks=(0, 1, 2, 3), started=True, **kw) -> dict:
    entries = synth.run(enqueued, completed, backend="nccl", started=started, **kw)
    return synth.dump(entries, config={"0": ("default_pg", ranks)}, backend="nccl")


def test_an_nccl_rank_one_collective_short_is_missing():
    ev = [RankEvidence(r, fr=nccl(5, 4)) for r in (0, 1, 3)]
    ev.append(
        RankEvidence(2, host="gpu-r3", fr=nccl(4, 4), stacks=[thread(("load", "/job/data.py", 7))])
    )
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.culprit_hosts) == (
        "missing",
        (2,),
        ("gpu-r3",),
    )
    assert (report.op, report.seq, report.process_group) == ("all_reduce", 5, "default_pg")
    (group,) = report.groups
    assert (group.waiting, group.missing, group.membership) == ((0, 1, 3), (2,), "world")
    assert report.summary == (
        "rank 2 (node gpu-r3) never reached all_reduce #5 (default_pg, ranks 0-3); "
        "ranks 0,1,3 wait in it — rank 2 at data.py:7 in load"
    )


def test_a_group_s_members_come_from_nccl_s_pg_config():
    def ep(enq, done):
        entries = synth.run(
            enq,
            done,
            name="5",
            desc="EXPERT_MODEL_PARALLEL_GROUP",
            pg_id=2,
            op="all_to_all",
            backend="nccl",
        )
        return synth.dump(
            entries, config={"5": ("EXPERT_MODEL_PARALLEL_GROUP", (4, 5, 6, 7))}, backend="nccl"
        )

    ev = [RankEvidence(r, fr=ep(4027, 4026)) for r in (4, 6, 7)] + [
        RankEvidence(5, fr=ep(4026, 4026))
    ]
    report = analyze(ev, world_size=8)
    assert (report.culprit_ranks, report.op, report.seq) == ((5,), "all_to_all", 4027)
    assert report.process_group == "EXPERT_MODEL_PARALLEL_GROUP" and report.group_ranks == (
        4,
        5,
        6,
        7,
    )
    assert report.groups[0].membership == "dump"
    # Ranks 0-3 left no evidence but are no members of this group: no suspects there.
    assert [e.rank for e in report.evidence if e.kinds == ("none",)] == [0, 1, 2, 3]


def test_wrapped_buffers_use_pg_status_and_compare_only_the_overlap():
    # TORCH_FR_BUFFER_SIZE=2000: each rank holds its last 2000 entries, from different starts.
    ev = []
    for rank in range(4):
        enq = 3000 if rank != 2 else 2999  # rank 2 never enqueued #3000; all completed #2999
        entries = synth.run(enq, 2999, first=enq - 1999)
        ev.append(RankEvidence(rank, fr=synth.dump(entries, gloo_ranks=range(4))))
    report = analyze(ev)
    assert (report.culprit_ranks, report.seq) == ((2,), 3000)
    assert any("wrapped" in n and "#1000..#1001" in n for n in report.notes)
    assert report.groups[0].mismatch == ()


def test_a_dump_without_pg_status_takes_positions_from_its_entries():
    ev = []
    for rank, (enq, done) in enumerate([(6, 5), (6, 5), (5, 5)]):
        fr = synth.dump(synth.run(enq, done), gloo_ranks=range(3))
        del fr["pg_status"]
        ev.append(RankEvidence(rank, fr=fr))
    assert analyze(ev).culprit_ranks == (2,)


def test_mismatched_dtypes_at_the_same_sequence_name_the_minority():
    ev = [RankEvidence(r, fr=nccl(9, 8)) for r in (0, 1, 3)]
    odd = [
        *synth.run(8, 8, backend="nccl"),
        synth.entry(9, dtypes=("BFloat16",), backend="nccl", state="started"),
    ]
    ev.append(
        RankEvidence(
            2, fr=synth.dump(odd, config={"0": ("default_pg", (0, 1, 2, 3))}, backend="nccl")
        )
    )
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.seq) == ("mismatch", (2,), 9)
    assert "rank 2 has [4] BFloat16 where ranks 0,1,3 have [4] Float" in report.summary


def test_an_earlier_silent_mismatch_is_the_cause_of_a_later_hang():
    # At #7 rank 1 broadcast where the others all_reduce (gloo let it pass); the hang is at #9.
    def ranks_run(rank, enq, done):
        entries = [
            synth.entry(
                s,
                op="broadcast" if (rank == 1 and s == 7) else "all_reduce",
                state="completed" if s <= done else "scheduled",
            )
            for s in range(1, enq + 1)
        ]
        return RankEvidence(rank, fr=synth.dump(entries, gloo_ranks=range(3)))

    report = analyze([ranks_run(0, 9, 8), ranks_run(1, 8, 8), ranks_run(2, 9, 8)])
    assert (report.kind, report.culprit_ranks) == ("mismatch", (1,))
    (group,) = report.groups
    assert (group.diverged_at, group.seq, group.missing) == (7, 9, (1,))
    assert report.summary.startswith(
        "ranks disagree at all_reduce #7 (default_pg, ranks 0-2): rank 1 has broadcast"
    )


def test_a_recv_whose_sender_never_posted_blames_the_sender():
    pp = {"name": "3", "desc": "PIPELINE_MODEL_PARALLEL_GROUP", "pg_id": 1, "backend": "nccl"}
    config = {"3": ("PIPELINE_MODEL_PARALLEL_GROUP", (0, 1))}
    recv = synth.entry(0, p2p=("recv", 0, 1), p2p_seq=12, state="started", **pp)
    waiting = synth.dump([recv], config=config, backend="nccl")
    idle = synth.dump(
        [synth.entry(0, p2p=("send", 0, 1), p2p_seq=11, **pp)], config=config, backend="nccl"
    )
    report = analyze(
        [
            RankEvidence(0, fr=idle, stacks=[thread(("fwd", "/job/pp.py", 88))]),
            RankEvidence(1, fr=waiting),
        ]
    )
    assert (report.kind, report.culprit_ranks, report.op, report.seq) == ("p2p", (0,), "recv", 12)
    assert report.groups[0].p2p
    assert report.summary == (
        "rank 1 waits in recv #12 (p2p, PIPELINE_MODEL_PARALLEL_GROUP, ranks 0,1) for rank 0, "
        "which never posted the matching send — rank 0 at pp.py:88 in fwd"
    )
    # Both sides posted: no p2p incident (the transport's problem, not a missing rank).
    sending = synth.dump(
        [synth.entry(0, p2p=("send", 0, 1), p2p_seq=12, state="started", **pp)],
        config=config,
        backend="nccl",
    )
    assert analyze([RankEvidence(0, fr=sending), RankEvidence(1, fr=waiting)]).kind == "none"


WATCHDOG = (
    "[rank{r}]:[E1203 06:01:27.142 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) "
    "Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=18421, "
    "OpType=ALLREDUCE, NumelIn=524288, NumelOut=524288, Timeout(ms)=600000) ran for 600183 "
    "milliseconds before timing out."
)
DUMP_SIGNAL = (
    "[rank{r}]:[E1203 06:01:27.178 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) "
    "Rank {r}] Received a dump signal due to a collective timeout from  rank 0 and we will try "
    "our best to dump the debug info. Last enqueued NCCL work: 18420, last completed NCCL "
    "work: 18420.This is most likely caused by incorrect usages of collectives"
)


def test_watchdog_lines_alone_name_the_rank_that_never_enqueued():
    ev = [
        RankEvidence(r, log_lines=("step 18420 loss 2.1", WATCHDOG.format(r=r))) for r in (0, 1, 3)
    ]
    ev.append(RankEvidence(2, log_lines=(DUMP_SIGNAL.format(r=2),)))
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.op, report.seq) == (
        "missing",
        (2,),
        "all_reduce",
        18421,
    )
    assert {p.source for p in report.groups[0].positions} == {"log"}


def test_the_old_watchdog_format_and_exception_lines_are_read_too():
    old = "[Rank 5] Exception detected by watchdog at work: 7, last enqueued NCCL work: 7, last completed NCCL work: 6."
    ev = [RankEvidence(r, log_lines=(old.replace("Rank 5", f"Rank {r}"),)) for r in range(5)]
    ev.append(
        RankEvidence(
            5,
            log_lines=(
                "[Rank 5] NCCL Work update periodically: last enqueued NCCL work: 6, last completed NCCL work: 6.",
            ),
        )
    )
    assert analyze(ev).culprit_ranks == (5,)


def test_stacks_alone_find_the_rank_outside_the_collective():
    holding = thread(("spin", "/job/ext.py", 12), ("step", "/job/train.py", 40), gil=True)
    ev = [RankEvidence(r, stacks=[IN_ALL_REDUCE]) for r in (0, 2)]
    ev.append(
        RankEvidence(1, stacks=[thread(("poll", "/job/capture.py", 3), name="fr-dump"), holding])
    )
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.op) == ("gil", (1,), "all_reduce")
    assert report.frames[0].where == "ext.py:12 in spin" and report.frames[0].owns_gil


def test_a_rank_that_left_no_dump_is_the_suspect():
    ev = [RankEvidence(r, fr=synth.dump(synth.run(5, 4), gloo_ranks=range(4))) for r in (0, 1, 3)]
    report = analyze(ev, world_size=4)
    assert (report.kind, report.culprit_ranks, report.seq) == ("no_dump", (2,), 5)
    assert report.groups[0].unknown == (2,)
    assert report.summary == (
        "rank 2 left no dump while ranks 0,1,3 wait in all_reduce #5 (default_pg, ranks 0-3): "
        "it is the suspect"
    )
    assert [e.kinds for e in report.evidence if e.rank == 2] == [("none",)]


def test_an_extra_collective_in_four_ranks():
    ev = [RankEvidence(r, fr=synth.dump(synth.run(7, 7), gloo_ranks=range(4))) for r in (0, 1, 2)]
    ev.append(RankEvidence(3, fr=synth.dump(synth.run(8, 7), gloo_ranks=range(4))))
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.seq) == ("extra", (3,), 8)


def test_waits_across_groups_in_opposite_orders_are_a_cycle():
    a = {"name": "1", "desc": "A", "pg_id": 1}
    b = {"name": "2", "desc": "B", "pg_id": 2}
    rank0 = synth.run(3, 2, **a) + synth.run(2, 2, **b)
    rank1 = synth.run(2, 2, **a) + synth.run(3, 2, **b)
    report = analyze([RankEvidence(0, fr=synth.dump(rank0)), RankEvidence(1, fr=synth.dump(rank1))])
    assert (report.kind, report.culprit_ranks) == ("cycle", (0, 1))
    assert "wait for each other across groups" in report.summary


def test_a_rank_further_behind_is_behind():
    ev = [RankEvidence(r, fr=synth.dump(synth.run(4, 3), gloo_ranks=range(3))) for r in (0, 1)]
    ev.append(RankEvidence(2, fr=synth.dump(synth.run(2, 2), gloo_ranks=range(3))))
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.seq) == ("behind", (2,), 4)
    assert report.groups[0].behind == ((2, 2),)


def test_nccl_ranks_all_in_the_collective_one_never_started():
    ev = [RankEvidence(r, fr=nccl(5, 4, started=True)) for r in (0, 1, 2)]
    ev.append(RankEvidence(3, fr=nccl(5, 4, started=False)))
    report = analyze(ev)
    # Its device never launched the collective the others started: a device culprit.
    assert (report.kind, report.culprit_ranks) == ("device", (3,))
    assert report.summary == (
        "rank 3 never launched all_reduce #5 (default_pg, ranks 0-3) while ranks 0-2 wait in it "
        "(its device is busy or dead) — a device fault?"
    )


def test_agreeing_ranks_show_no_divergence():
    ev = [RankEvidence(r, fr=synth.dump(synth.run(9, 9), gloo_ranks=range(3))) for r in range(3)]
    report = analyze(ev)
    assert (report.kind, report.culprit_ranks, report.groups) == ("none", (), ())
    assert report.summary == "no divergence found in the evidence of 3 ranks"


def test_evidence_of_one_rank_in_several_items_is_combined_in_any_order():
    fr = synth.dump(synth.run(4, 4), gloo_ranks=range(3))
    items = [
        RankEvidence(0, fr=synth.dump(synth.run(5, 4), gloo_ranks=range(3))),
        RankEvidence(1, fr=synth.dump(synth.run(5, 4), gloo_ranks=range(3))),
        RankEvidence(2, fr=fr, files=("hang/fr_2.json",)),
        RankEvidence(
            2,
            host="n2",
            pid=7,
            stacks=[thread(("load", "/job/data.py", 7))],
            files=("hang/stacks_2.json",),
        ),
    ]
    first = analyze(items)
    assert first == analyze(items[::-1])
    assert first.frames[0].where == "data.py:7 in load" and first.culprit_hosts == ("n2",)
    assert first.evidence[2].files == ("hang/fr_2.json", "hang/stacks_2.json")
