"""Bounds on a hang's evidence: no number read from a file sizes an allocation (a rank of a
billion, a 5,000-digit sequence number), and the memory of the whole analysis is bounded by
an upper bound charged before each file is read — a folder that needs more is refused with
one line naming the folder, the file and the limit (exit ``USAGE``)."""

from __future__ import annotations

import json
import pickle
import tracemalloc

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.errors import ExitCode, HangEvidenceError
from aorta.hang import RankEvidence, analyze, load_evidence, text
from aorta.hang.dumps import MAX_PICKLE_BYTES, decode_json, memo_bound, read_cost
from aorta.hang.model import MAX_RANK
from aorta.hang.watchdog import read_log
from tests.hang import synth

HUGE = 10**5000  # str() of it raises (Python's 4,300-digit limit)


def _dumps(n: int = 2, *, stuck: int = 1) -> list[dict]:
    """Rank ``stuck`` never reaches all_reduce #3; the others wait in it."""
    return [synth.dump(synth.run(2 if r == stuck else 3, 2), gloo_ranks=range(n)) for r in range(n)]


# --- a) a rank number sizes nothing ------------------------------------------------------


def test_a_log_named_with_a_billion_is_no_rank(tmp_path, run_cli):
    for r, d in enumerate(_dumps()):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(msgspec.json.encode(d))
    (tmp_path / "rank1000000000.log").write_text("[rank1]: step 3\n")
    (tmp_path / "train-1733500000.log").write_text("loss 0.1\n")
    evidence = load_evidence([tmp_path])
    assert [e.rank for e in evidence] == [0, 1]  # the log's lines went by their [rank1]: prefix
    assert "rank1000000000.log" in evidence[1].files
    report = analyze(evidence)
    assert report.world_size == 2 and report.culprit_ranks == (1,)
    code, out, err = run_cli("hang", "analyze", tmp_path)
    assert (code, err) == (ExitCode.OK, "")
    assert out.startswith("hang: rank 1")


def test_a_dump_named_with_a_billion_cannot_say_whose_it_is(tmp_path, run_cli):
    path = tmp_path / "nccl_trace_rank_1000000000"
    path.write_bytes(msgspec.json.encode(_dumps()[0]))
    code, out, err = run_cli("hang", "analyze", path)
    assert code == ExitCode.USAGE and out == ""
    assert err.startswith(f"Error: {path}: cannot tell whose dump this is") and err.count("\n") == 1


@pytest.mark.parametrize(
    "ranks", ["[0, 1000000000]", [0, 10**9], [0, HUGE], "[0, " + "9" * 5000 + "]", [0, -1]]
)
def test_a_group_listing_an_absurd_rank_lists_none(ranks):
    dumps = _dumps()
    for d in dumps:
        d["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}}
    report = analyze([RankEvidence(r, fr=d) for r, d in enumerate(dumps)])
    assert report.world_size == 2 and report.culprit_ranks == (1,)


def test_a_capture_or_a_log_prefix_with_an_absurd_rank_is_no_rank(tmp_path):
    (tmp_path / "capture.json").write_text(json.dumps({"rank": 10**9, "pid": 4, "notes": []}))
    (tmp_path / "out.log").write_text("[rank9999999]: Traceback\n[rank1]: step\n")
    assert [e.rank for e in load_evidence([tmp_path])] == [1]


def test_a_world_size_no_job_has_is_refused(tmp_path, run_cli):
    (tmp_path / "rank0.log").write_text("step\n")
    code, _, err = run_cli("hang", "analyze", tmp_path, "--world-size", 10**9)
    assert code == ExitCode.USAGE and "Traceback" not in err
    with pytest.raises(ValueError, match="world_size 1000000000: must be from 1 to 131072"):
        analyze([RankEvidence(0)], world_size=10**9)
    with pytest.raises(ValueError, match=f"must be a whole number from 0 to {MAX_RANK}"):
        RankEvidence(rank=MAX_RANK + 1)


@given(digits=st.text("0123456789", min_size=1, max_size=200))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_trailing_number_gives_a_bounded_report(tmp_path_factory, digits):
    folder = tmp_path_factory.mktemp("n")
    (folder / f"rank{digits}.log").write_text("step 1\n")
    report = analyze(load_evidence([folder]))
    assert report.world_size is not None and report.world_size <= MAX_RANK + 1
    assert len(report.evidence) <= MAX_RANK + 1


# --- b) every number read from a dump or a log is bounded --------------------------------


def _huge_dump() -> dict:
    d = _dumps()[0]
    for e in d["entries"]:
        e.update(collective_seq_id=HUGE, pg_id=HUGE, input_sizes=[[HUGE, 4]], p2p_seq_id=HUGE,
                 time_created_ns=HUGE, timeout_ms=HUGE)  # fmt: skip
    d["entries"].append({**d["entries"][0], "is_p2p": True, "collective_seq_id": 1,
                         "profiling_name": "nccl:send " + "9" * 5000 + "->1", "state": "started"})  # fmt: skip
    d["pg_status"] = {HUGE: {"last_enqueued_collective": HUGE, "last_completed_collective": HUGE}}
    return d


def test_a_pickle_of_5000_digit_numbers_is_no_traceback(tmp_path, run_cli):
    dumps = [_huge_dump(), _dumps()[1]]
    for r, d in enumerate(dumps):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(d))
    code, out, err = run_cli("hang", "analyze", tmp_path)
    assert code == ExitCode.OK and "Traceback" not in err
    assert "99999999999999999999" not in out
    code, out, _ = run_cli("hang", "analyze", tmp_path, "--json")
    assert code == ExitCode.OK and json.loads(out)["world_size"] == 2


@pytest.mark.parametrize("digits", [19, 1500, 5000])
def test_a_watchdog_line_with_an_absurd_number_is_no_evidence(digits):
    n = "9" * digits
    lines = [
        f"[rank0]: [PG ID 0 PG GUID 0(default_pg) Rank {n}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
        f"[rank1]: last enqueued work: {n}, last completed work: {n}",
        f"[rank{n}]: last enqueued work: 3, last completed work: 2",
    ]
    signals = read_log(lines)
    assert all(s.seq is None or s.seq < 2**63 for s in signals)
    assert all(s.group_rank is None for s in signals)
    # Only the third line (under MAX_LINE) is a signal, and its rank is no rank.
    assert [(s.kind, s.rank) for s in signals] == ([] if digits > 1900 else [("position", None)])


_NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=10**4300, max_value=10**4400),
    st.integers(min_value=-(10**4400), max_value=-(10**4300)),
    st.text("0123456789²-", min_size=1, max_size=30),
)


@given(numbers=st.lists(_NUMBERS, min_size=8, max_size=8))
@settings(max_examples=80, deadline=None)
def test_any_number_anywhere_is_a_report(numbers):
    d = _dumps()[0]
    e = d["entries"][-1]
    e.update(collective_seq_id=numbers[0], pg_id=numbers[1], input_sizes=[[numbers[2]]],
             time_discovered_started_ns=numbers[3], timeout_ms=numbers[4])  # fmt: skip
    d["pg_status"] = {numbers[5]: {"last_enqueued_collective": numbers[6],
                                   "last_completed_collective": numbers[7]}}  # fmt: skip
    report = analyze([RankEvidence(0, fr=d), RankEvidence(1, fr=_dumps()[1])])
    assert text(report) and json.dumps(report.to_dict())


# --- c) the whole analysis' memory is bounded --------------------------------------------


def _measure(fn, data):
    """The peak while ``fn(data)`` runs, and what its result holds after."""
    tracemalloc.start()
    try:
        result = fn(data)
        held, peak = tracemalloc.get_traced_memory()
        del result
        return peak, held
    finally:
        tracemalloc.stop()


# Each: a file of one-byte (or two-byte) opcodes or tokens that each make an object, the
# worst a hostile dump can do.
_HOSTILE = {
    "pickle: empty dicts": b"\x80\x04}\x8c\x07entries(" + b"}" * 50_000 + b"ls.",
    "pickle: empty lists": b"\x80\x04}\x8c\x07entries(" + b"]" * 50_000 + b"ls.",
    "pickle: MARK lists": b"\x80\x04}\x8c\x07entries(" + b"(l" * 50_000 + b"ls.",
    "pickle: 1-tuples": b"\x80\x04}\x8c\x07entries(" + b"N\x85" * 50_000 + b"ls.",
    "pickle: short strings": b"\x80\x04}\x8c\x07entries(" + b"\x8c\x02ab" * 50_000 + b"ls.",
    "pickle: ints": b"\x80\x04}\x8c\x07entries(" + b"J\x00\x01\x00\x00" * 50_000 + b"ls.",
    "pickle: Nones": b"\x80\x04}\x8c\x07entries(" + b"N" * 50_000 + b"ls.",
    "pickle: memoized": b"\x80\x04}\x8c\x07entries(" + b"N\x94" * 50_000 + b"ls.",
    # The largest memo index aorta lets through (past it, refused unread): the unpickler's
    # table, twice the index, is within the charge of the cheapest opcodes.
    "pickle: a memo index at the bound": b"\x80\x04}\x8c\x07entries("
    + b"N" * 50_000
    + b"r"
    + memo_bound(50_021).to_bytes(4, "little")
    + b"ls.",
    "pickle: old strings": b"\x80\x02}U\x07entries(" + b"U\x02ab" * 50_000 + b"ls.",
    "pickle: bytes": b"\x80\x04}\x8c\x07entries(" + b"C\x02ab" * 50_000 + b"ls.",
    "json: empty dicts": b'{"entries": [' + b"{}," * 50_000 + b"{}]}",
    "json: empty lists": b'{"entries": [' + b"[]," * 50_000 + b"[]]}",
    "json: short strings": b'{"entries": [' + b'"ab",' * 50_000 + b'""]}',
    "json: ints": b'{"entries": [' + b"1000," * 50_000 + b"1]}",
    "json: astral strings": b'{"x": ["' + b"a" * 200_000 + "😀".encode() + b'"]}',
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_no_file_takes_more_than_its_cost(name):
    data = _HOSTILE[name]
    kind = name.split(":")[0]
    peak, held = _measure(pickle.loads if kind == "pickle" else decode_json, data)
    cost = read_cost(data, kind)
    assert peak <= cost.peak + 4096 and held <= cost.held + 4096, (peak, held, cost)


_JSONABLE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=6),
    max_leaves=60,
)  # fmt: skip


@given(value=_JSONABLE, protocol=st.integers(2, 5))
@settings(max_examples=150, deadline=None)
def test_the_cost_bounds_any_parse(value, protocol):
    for kind, data in (
        ("json", msgspec.json.encode(value)),
        ("pickle", pickle.dumps(value, protocol)),
    ):
        peak, held = _measure(pickle.loads if kind == "pickle" else decode_json, data)
        cost = read_cost(data, kind)
        assert peak <= cost.peak + 4096 and held <= cost.held + 4096


def test_a_pickle_over_its_limit_is_refused_unread(tmp_path, run_cli):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"\x80\x04}" + b"\x00" * MAX_PICKLE_BYTES)
    code, out, err = run_cli("hang", "analyze", path)
    assert code == ExitCode.USAGE and out == ""
    assert (
        err
        == f"Error: {path}: 32 MiB is above the 32 MiB limit of this kind of evidence; not read\n"
    )


def test_a_folder_that_needs_more_than_the_limit_is_refused_naming_the_file(tmp_path, run_cli):
    # 2**20 empty dicts beside an empty entries list: ~100 MiB of cost each, 1 MiB on disk.
    blob = b"\x80\x04}(\x8c\x07entries]\x8c\x04junk(" + b"}" * 2**20 + b"lu."
    for r in range(4):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(blob)
    with pytest.raises(HangEvidenceError) as info:
        load_evidence([tmp_path], max_memory=250 * 2**20)
    message = str(info.value)
    assert message.startswith(f"{tmp_path}: nccl_trace_rank_2: a 1 MiB pickle dump may take up to ")
    assert message.endswith(
        "above its limit of 250 MiB; not read (analyze fewer ranks at once, or raise --max-memory)"
    )
    assert len(load_evidence([tmp_path], max_memory=2**30)) == 4
    code, out, err = run_cli("hang", "analyze", tmp_path, "--max-memory", "0.1")
    assert code == ExitCode.USAGE and out == "" and err.count("\n") == 1
    assert err.startswith(f"Error: {tmp_path}: nccl_trace_rank_0: a 1 MiB pickle dump")


def test_the_entries_of_the_analysis_are_charged_too(tmp_path, monkeypatch):
    dumps = [synth.dump(synth.run(2000, 2000), gloo_ranks=range(2)) for _ in range(2)]
    for r, d in enumerate(dumps):
        (tmp_path / f"fr_{r}.json").write_bytes(msgspec.json.encode(d))
    assert len(load_evidence([tmp_path])) == 2
    monkeypatch.setattr("aorta.hang.load.ENTRY_COST", 2**23)  # 8 MiB an entry: 16 GiB a dump
    with pytest.raises(HangEvidenceError, match=r"fr_0\.json: the analysis of 2,000 entries"):
        load_evidence([tmp_path], max_memory=8 * 2**30)  # the default follows the machine
