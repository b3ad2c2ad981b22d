"""Properties of the hang analysis on generated dumps: who is blamed, independence of the
evidence's order, the report's JSON round trip, and no crash on mangled input."""

from __future__ import annotations

import json
import pickle
import random
import typing

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.errors import HangEvidenceError
from aorta.hang import (
    CulpritFrame,
    EvidenceItem,
    GroupIncident,
    HangReport,
    RankEvidence,
    Variant,
    analyze,
    parse_dump,
)
from aorta.hang.model import Kind, Position
from aorta.store.record import TrialRecord
from tests.hang import synth

SLOW = settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def one_group(draw):
    """A group of n ranks at collective ``top``: the ``short`` ranks stopped before it (each
    some steps back), the others entered it and wait."""
    n = draw(st.integers(2, 9))
    top = draw(st.integers(2, 40))
    short = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1))
    last = {r: (top - draw(st.integers(1, top - 1)) if r in short else top) for r in range(n)}
    return n, top, short, last


def _evidence(n: int, top: int, last: dict[int, int]) -> list[RankEvidence]:
    return [
        RankEvidence(
            r, fr=synth.dump(synth.run(last[r], min(last[r], top - 1)), gloo_ranks=range(n))
        )
        for r in range(n)
    ]


@SLOW
@given(one_group())
def test_the_culprits_are_the_smaller_side_ties_blame_the_ranks_short_of_the_max(case):
    n, top, short, last = case
    report = analyze(_evidence(n, top, last))
    waiting = set(range(n)) - short
    assert report.seq == top  # where the waiters are
    if len(waiting) >= len(short):
        # The usual hang: the ranks whose last enqueued collective is below the max.
        assert set(report.culprit_ranks) == {r for r in range(n) if last[r] < top}
        assert report.kind in {"missing", "behind"}
    else:
        # A minority ran ahead into a collective the idle rest never issues.
        assert set(report.culprit_ranks) == waiting
        assert report.kind == "extra"


@SLOW
@given(one_group(), st.randoms(use_true_random=False))
def test_the_report_does_not_depend_on_the_order_or_split_of_the_evidence(case, rnd):
    n, top, _, last = case
    evidence = _evidence(n, top, last)
    stacks = [
        {"thread_name": "MainThread", "frames": [{"name": "f", "filename": "/j/t.py", "line": r}]}
        for r in range(n)
    ]
    split = [
        item
        for r, e in enumerate(evidence)
        for item in (
            [e, RankEvidence(r, stacks=[stacks[r]], files=(f"s{r}",))]
            if r % 2
            else [RankEvidence(r, fr=e.fr, stacks=[stacks[r]])]
        )
    ]
    shuffled = split[:]
    rnd.shuffle(shuffled)
    assert analyze(shuffled) == analyze(split)


RANK = st.integers(0, 4095)
RANKS = st.lists(RANK, max_size=4).map(tuple)
TEXT = st.text(max_size=10)
SEQ = st.none() | st.integers(0, 10**9)
SIZES = st.lists(st.lists(st.integers(0, 2**40), max_size=3).map(tuple), max_size=2).map(tuple)
WORDS = st.lists(TEXT, max_size=2).map(tuple)
VARIANT = st.builds(Variant, ranks=RANKS, op=TEXT, sizes=SIZES, dtypes=WORDS)
INCIDENT = st.builds(
    GroupIncident,
    name=TEXT,
    desc=TEXT,
    ranks=RANKS,
    membership=st.sampled_from(["dump", "world", "inferred"]),
    kind=st.sampled_from(typing.get_args(Kind)),
    seq=SEQ,
    op=st.none() | TEXT,
    p2p=st.booleans(),
    sizes=SIZES,
    dtypes=WORDS,
    waiting=RANKS,
    completed=RANKS,
    failed=RANKS,
    failure=st.none() | TEXT,
    missing=RANKS,
    behind=st.lists(st.tuples(RANK, st.integers(0, 99)), max_size=2).map(tuple),
    exited=st.lists(st.tuples(RANK, st.integers(-64, 255)), max_size=2).map(tuple),
    unknown=RANKS,
    culprits=RANKS,
    mismatch=st.lists(VARIANT, max_size=2).map(tuple),
    diverged_at=SEQ,
    positions=st.lists(
        st.builds(
            Position,
            rank=RANK,
            enqueued=st.integers(0, 99),
            completed=st.integers(0, 99),
            source=st.sampled_from(["dump", "log"]),
        ),
        max_size=3,
    ).map(tuple),
    notes=WORDS,
)
FRAME = st.builds(
    CulpritFrame,
    rank=RANK,
    where=TEXT,
    source=st.sampled_from(["stacks", "dump"]),
    thread=TEXT,
    owns_gil=st.booleans(),
    in_collective=st.none() | TEXT,
    stack=st.lists(TEXT, max_size=3).map(tuple),
    stack_file=st.none() | TEXT,
)
ITEM = st.builds(
    EvidenceItem,
    rank=RANK,
    kinds=WORDS,
    host=st.none() | TEXT,
    pid=st.none() | st.integers(1, 2**22),
    exited=st.none() | st.integers(-64, 255),
    files=WORDS,
    notes=WORDS,
)
REPORT = st.builds(
    HangReport,
    summary=TEXT,
    kind=st.sampled_from(typing.get_args(Kind)),
    culprit_ranks=RANKS,
    culprit_hosts=st.lists(st.none() | TEXT, max_size=3).map(tuple),
    op=st.none() | TEXT,
    seq=SEQ,
    process_group=st.none() | TEXT,
    group_name=st.none() | TEXT,
    group_ranks=RANKS,
    frames=st.lists(FRAME, max_size=2).map(tuple),
    groups=st.lists(INCIDENT, max_size=2).map(tuple),
    evidence=st.lists(ITEM, max_size=2).map(tuple),
    world_size=st.none() | st.integers(1, 4096),
    notes=WORDS,
)


@settings(max_examples=60)
@given(REPORT)
def test_a_report_survives_json(report):
    data = json.loads(json.dumps(report.to_dict()))
    assert HangReport.from_dict(data) == report


@settings(max_examples=60)
@given(REPORT)
def test_a_report_survives_a_trial_record(report):
    # The one shape from the analysis to the record on disk and back: validated on write,
    # validated on load, equal by value.
    record = TrialRecord(cell="c", cell_id="c", trial=0, status="timeout", passed=False,
                         forensics=report)  # fmt: skip
    loaded = TrialRecord.model_validate_json(record.to_json())
    assert loaded.forensics == report and isinstance(loaded.forensics, HangReport)
    assert loaded == record


@SLOW
@given(one_group())
def test_real_reports_survive_json(case):
    n, top, _, last = case
    report = analyze(_evidence(n, top, last))
    assert HangReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**12),
    st.text(max_size=8),
    st.lists(st.integers(-2, 5), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@SLOW
@given(st.data())
def test_mangled_fields_never_crash_the_analysis(data):
    dumps = []
    for r in range(3):
        fr = synth.dump(synth.run(5, 4 if r else 5), gloo_ranks=range(3))
        for _ in range(data.draw(st.integers(0, 6))):
            target = data.draw(st.sampled_from(["entry", "status", "config"]))
            value = data.draw(JUNK)
            if target == "entry":
                e = fr["entries"][data.draw(st.integers(0, len(fr["entries"]) - 1))]
                e[data.draw(st.sampled_from(sorted(e)))] = value
            elif target == "status":
                fr["pg_status"]["0"][data.draw(st.sampled_from(sorted(fr["pg_status"]["0"])))] = (
                    value
                )
            else:
                fr["pg_config"][""]["ranks"] = value
        if data.draw(st.booleans()):
            fr[data.draw(st.sampled_from(["pg_status", "pg_config", "version"]))] = data.draw(JUNK)
        dumps.append(RankEvidence(r, fr=fr))
    report = analyze(dumps)
    assert isinstance(report, HangReport) and report.summary


GOLDEN = (synth.HANG_DATA / "pickle" / "fr_trace_rank_0").read_bytes()
GOLDEN_JSON = (synth.HANG_DATA / "sleep" / "hang" / "fr_0.json").read_bytes()


@settings(max_examples=150)
@given(
    st.sampled_from([GOLDEN, GOLDEN_JSON]),
    st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=8),
    st.integers(0, 4000),
)
def test_a_corrupted_dump_parses_or_is_one_located_error(blob, flips, cut):
    data = bytearray(blob[: max(cut, 2)])
    for at, byte in flips:
        if at < len(data):
            data[at] = byte
    try:
        dump = parse_dump(bytes(data), name="fr_0")
    except HangEvidenceError as exc:
        assert str(exc).startswith("fr_0: ") and "\n" not in str(exc)
    else:
        assert isinstance(dump, dict)
        analyze([RankEvidence(0, fr=dump)])


@settings(max_examples=50)
@given(st.integers(0, 2**31))
def test_a_dump_reads_the_same_from_json_and_from_a_pickle(seed):
    rnd = random.Random(seed)
    fr = synth.dump(
        synth.run(rnd.randint(1, 30), rnd.randint(0, 1) and 1), gloo_ranks=range(rnd.randint(1, 8))
    )
    from_json = parse_dump(json.dumps(fr).encode(), name="j")
    from_pickle = parse_dump(pickle.dumps(fr, protocol=2), name="p")
    assert from_json == from_pickle == fr
    assert analyze([RankEvidence(0, fr=from_json)]) == analyze([RankEvidence(0, fr=from_pickle)])
