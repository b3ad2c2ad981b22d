"""Hostile dumps: one clear error naming the file (and byte offset), never a traceback, never
code run — in the library (:class:`HangEvidenceError`) and on the command line (``Error:``)."""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.errors import ExitCode, HangEvidenceError
from aorta.hang import MAX_DUMP_BYTES, RankEvidence, analyze, load_evidence, parse_dump
from aorta.hang.dumps import memo_bound
from tests.hang.synth import HANG_DATA

GOOD_PICKLE = (HANG_DATA / "pickle" / "fr_trace_rank_0").read_bytes()
GOOD_JSON = (HANG_DATA / "sleep" / "hang" / "fr_0.json").read_bytes()


class _Runs:
    """Unpickling it would call os.system (what a malicious dump does)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _evil(tmp_path, protocol: int) -> bytes:
    marker = tmp_path / "ran"
    return pickle.dumps({"entries": [], "x": _Runs(f"touch {marker}")}, protocol=protocol)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_pickle_naming_a_global_is_refused_and_runs_nothing(tmp_path, protocol):
    blob = _evil(tmp_path, protocol)
    with pytest.raises(HangEvidenceError) as err:
        parse_dump(blob, name="fr_0.pkl")
    assert not (tmp_path / "ran").exists()
    name = "posix.system" if os.name == "posix" else "nt.system"
    offset = next(p for op, _, p in pickletools.genops(blob) if "GLOBAL" in op.name)
    assert str(err.value).startswith(f"fr_0.pkl: byte {offset}: the pickle names the global {name}")


def test_every_kind_of_global_is_refused():
    # GLOBAL, STACK_GLOBAL, INST, and the copyreg extension registry (EXT1), each after a
    # PROTO header as torch's pickles have.
    for blob in (
        b"\x80\x02cbuiltins\neval\n(S'1'\ntR.",
        b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93.",
        b"\x80\x02(ibuiltins\nlist\n.",
    ):
        with pytest.raises(
            HangEvidenceError, match=r"byte \d+: the pickle names the global builtins"
        ):
            parse_dump(blob, name="x")
    import copyreg

    copyreg.add_extension("builtins", "eval", 0x7E)
    try:
        with pytest.raises(HangEvidenceError, match=r"names the global builtins\.eval"):
            parse_dump(b"\x80\x02\x82\x7e.", name="x")
    finally:
        copyreg.remove_extension("builtins", "eval", 0x7E)
    # Protocols 0 and 1 (no PROTO header; torch never writes them) are not taken for a pickle.
    with pytest.raises(HangEvidenceError, match="neither a JSON nor a pickled"):
        parse_dump(b"cbuiltins\neval\n(S'1'\ntR.", name="x")


def test_torch_pickles_need_no_global():
    ops = {op.name for op, _, _ in pickletools.genops(GOOD_PICKLE)}
    assert not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ"}
    assert parse_dump(GOOD_PICKLE, name="p") == pickle.loads(GOOD_PICKLE)


def test_a_truncated_pickle_names_the_byte_where_it_ends():
    cut = GOOD_PICKLE[:700]
    with pytest.raises(HangEvidenceError) as err:
        parse_dump(cut, name="nccl_trace_rank_0")
    message = str(err.value)
    assert message.startswith("nccl_trace_rank_0: byte ") and "truncated pickle" in message
    offset = int(message.split("byte ")[1].split(":")[0])
    assert 600 < offset <= 700


def test_a_truncated_json_dump_names_the_byte_where_it_ends():
    with pytest.raises(HangEvidenceError, match=r"^fr_0\.json: byte 900: truncated JSON"):
        parse_dump(GOOD_JSON[:900], name="fr_0.json")


def test_random_bytes_and_wrong_shapes_are_refused():
    for data, expect in [
        (os.urandom(64).replace(b"{", b"x").replace(b"\x80", b"y"), "neither a JSON nor a pickled"),
        (b'{"a": 1}', "not a flight-recorder dump"),
        (pickle.dumps([1, 2]), "not a flight-recorder dump"),
        (b'{"entries": [1, 2]}', "entries: must be a list of mappings"),
        (pickle.dumps({"entries": 3}), "entries: must be a list of mappings"),
    ]:
        with pytest.raises(HangEvidenceError, match=expect):
            parse_dump(data, name="d")


def test_a_json_bomb_is_refused():
    deep_json = b'{"entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(HangEvidenceError, match="depth limit"):
        parse_dump(deep_json, name="bomb.json")


def test_a_pickle_of_shared_references_is_never_expanded():
    # 60 levels of [x, x]: 2**60 objects as a tree, a few hundred bytes as a pickle. Put where
    # the analysis looks (sizes, dtypes, names, groups, frames, pg_config); every field it
    # reads is type-checked first, so nothing walks or prints the tree.
    x: list = []
    for _ in range(60):
        x = [x, x]
    bomb = {
        "entries": [
            {"collective_seq_id": 1, "profiling_name": x, "input_sizes": x, "input_dtypes": x,
             "process_group": [x, x], "pg_id": x, "state": x, "frames": [{"name": x}]},
        ],
        "pg_config": {"": {"ranks": x}, "0": {"ranks": x, "desc": x}, 7: x},
        "pg_status": {"0": x, "1": {"last_enqueued_collective": x}},
    }  # fmt: skip
    blob = pickle.dumps(bomb, protocol=4)
    assert len(blob) < 2000
    dump = parse_dump(blob, name="bomb.pkl")
    other = parse_dump(blob, name="bomb.pkl")
    report = analyze([RankEvidence(0, fr=dump), RankEvidence(1, fr=other)])
    assert report.kind in {"none", "mismatch", "missing", "stuck"}
    assert len(json.dumps(report.to_dict())) < 20_000


def _key(text: str) -> bytes:
    return b"X" + len(text).to_bytes(4, "little") + text.encode()  # BINUNICODE


def test_a_pickle_nested_a_hundred_thousand_deep_costs_nothing():
    # pickle.dumps cannot write it (recursion); a hand-made one can: EMPTY_LIST × n, APPEND × n-1.
    n = 100_000
    deep = b"]" * n + b"a" * (n - 1)
    entry = b"}" + _key("collective_seq_id") + b"K\x01s" + _key("input_sizes") + deep + b"s"
    entry += _key("process_group") + deep + b"s" + _key("frames") + deep + b"s"
    blob = b"\x80\x02}" + _key("entries") + b"]" + entry + b"as" + _key("pg_config") + b"}"
    blob += _key("0") + b"}" + _key("ranks") + deep + b"sss."
    dump = parse_dump(blob, name="deep.pkl")
    report = analyze([RankEvidence(0, fr=dump), RankEvidence(1, fr=parse_dump(blob))])
    assert (report.kind, report.seq) == ("stuck", 1)  # both hold #1, neither completed it


def test_a_persistent_id_is_refused():
    buf = io.BytesIO()

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "tensor-7" if obj == "t" else None

    P(buf, protocol=2).dump({"entries": ["t"]})
    with pytest.raises(HangEvidenceError, match="persistent") as err:
        parse_dump(buf.getvalue(), name="pid.pkl")
    assert "\n" not in str(err.value)  # one line, though pickle's own message has two


def _bytes_read() -> int:
    """What this process has read so far (the kernel's count, /proc/self/io ``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def test_a_dump_over_the_limit_is_refused_without_reading_it(tmp_path, monkeypatch):
    big = tmp_path / "nccl_trace_rank_0"
    with open(big, "wb") as f:
        f.write(b'{"entries": [')
        f.truncate(2 * 2**30)  # 2 GiB, sparse: nothing is written
    before = _bytes_read()
    with pytest.raises(HangEvidenceError, match=r"2,048 MiB is above the 256 MiB limit"):
        load_evidence([big])
    assert _bytes_read() - before < 2**20  # the head, to tell what it is; not the 2 GiB
    assert MAX_DUMP_BYTES == 256 * 2**20
    monkeypatch.setattr("aorta.hang.dumps.MAX_DUMP_BYTES", 8)
    with pytest.raises(HangEvidenceError, match="above the dump limit"):
        parse_dump(b'{"entries": []}', name="x")


@pytest.mark.parametrize(
    ("name", "data", "expect"),
    [
        ("evil.pkl", None, "names the global"),
        ("trunc_rank_0", GOOD_PICKLE[:700], "truncated pickle"),
        ("fr_1.json", GOOD_JSON[:900], "byte 900: truncated JSON"),
        ("noise_2.bin", bytes(range(256)) * 4, "neither a flight-recorder dump"),
        ("bomb_3.json", b"[" * 50_000 + b"]" * 50_000, "depth limit"),
    ],
)
def test_the_command_prints_one_error_line_and_no_traceback(tmp_path, run_cli, name, data, expect):
    path = tmp_path / name
    path.write_bytes(_evil(tmp_path, 4) if data is None else data)
    code, out, err = run_cli("hang", "analyze", path)
    assert code == ExitCode.USAGE  # bad input, as docs/hangs.md says
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}: ") and expect in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "ran").exists()


def test_a_broken_dump_inside_a_folder_is_an_error_too(tmp_path, run_cli):
    (tmp_path / "fr_0.json").write_bytes(GOOD_JSON)
    (tmp_path / "fr_1.json").write_bytes(GOOD_JSON[:900])
    code, _, err = run_cli("hang", "analyze", tmp_path)
    assert code == ExitCode.USAGE
    assert err.strip() == "Error: fr_1.json: byte 900: truncated JSON (unexpected end of data)"


@pytest.mark.parametrize("field", ["²", "1²", "9" * 5000, "[0, ²]"])
def test_a_number_int_refuses_is_no_number_to_the_analysis(field):
    # hypothesis found '²': str.isdigit passes it, int() raises (a traceback from aorta hang
    # analyze); 5,000 digits trip int()'s digit limit the same way.
    from aorta.hang import RankEvidence, analyze

    dump = {
        "entries": [{"collective_seq_id": field, "pg_id": field, "process_group": [field, "x"],
                     "profiling_name": "gloo:all_reduce", "input_sizes": [[4]],
                     "input_dtypes": ["Float"], "state": "scheduled", "retired": False}],
        "pg_config": {"": {"name": field, "desc": "", "ranks": field}},
        "pg_status": {field: {"last_enqueued_collective": field, "last_completed_collective": field}},
    }  # fmt: skip
    report = analyze([RankEvidence(rank=0, fr=dump), RankEvidence(rank=1, fr=dump)])
    assert report.summary


# --- a pickle's memo: the unpickler sizes its table by the largest index named ---------------


def _sparse(index: int, op: str = "LONG_BINPUT") -> bytes:
    """A pickle of an empty dict stored at memo ``index`` (9 to 20 bytes)."""
    put = b"r" + index.to_bytes(4, "little") if op == "LONG_BINPUT" else b"p%d\n" % index
    return b"\x80\x02}" + put + b"."


_RSS_PROBE = """
import resource, sys
from aorta.errors import HangEvidenceError
from aorta.hang import parse_dump
data = bytes.fromhex(sys.argv[1])
# A regression must fail here, not take the machine: 512 MiB more address space at most.
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (vm + 512 * 2**20, hard))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    parse_dump(data, name="evil_rank_0")
    print("parsed")
except HangEvidenceError as exc:
    print(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize(
    ("index", "op"), [(2**26, "LONG_BINPUT"), (2**31, "LONG_BINPUT"), (10**8, "PUT")]
)
def test_a_sparse_memo_index_is_refused_before_the_unpickler_sizes_its_table(index, op):
    # Unpickled, 9 bytes naming memo index 2**26 take 1 GiB (measured 64 MiB for 2**22, 32 GiB
    # for 2**31): the table is twice the index, 8 bytes a slot, zeroed.
    import subprocess
    import sys

    data = _sparse(index, op)
    run = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, data.hex()], capture_output=True, text=True, check=True
    )
    message, grew = run.stdout.splitlines()
    assert message.startswith(f"evil_rank_0: byte 3: {op} names memo index {index:,}, past the ")
    assert "refused before unpickling" in message
    assert int(grew) < 8 * 2**20  # nothing the size of the table (the 9 bytes' own charge: 1 kB)


def test_the_command_names_the_sparse_memo_in_one_line(tmp_path, run_cli):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(_sparse(2**31))
    code, out, err = run_cli("hang", "analyze", path)
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        f"Error: {path}: byte 3: LONG_BINPUT names memo index 2,147,483,648, past the 256 a pickle "
        "of 9 bytes can number (a dump numbers its memo from 0); refused before unpickling (its "
        "memo table alone would take 32.0 GiB)\n"
    )


def _first_sparse(data: bytes) -> int | None:
    """The reference: pickletools' reading of the first memo index past the bound."""
    try:
        for op, arg, pos in pickletools.genops(data):
            if op.name in ("PUT", "LONG_BINPUT") and arg > memo_bound(len(data)):
                return pos
    except ValueError:
        pass
    return None


def test_every_real_pickle_numbers_its_memo_within_the_bound():
    from aorta.hang.dumps import _memo_walk

    blobs = [p.read_bytes() for p in sorted((HANG_DATA / "pickle").iterdir())]
    dump = parse_dump(GOOD_JSON, name="fr_0.json")
    blobs += [pickle.dumps(dump, protocol=p) for p in range(6)]
    assert blobs[0][:2] == b"\x80\x02"  # torch's own: protocol 2, BINPUT then LONG_BINPUT
    for blob in blobs:
        assert _memo_walk(blob) is None and _first_sparse(blob) is None
        if blob[:1] == b"\x80":  # protocols 0 and 1 have no header: no dump is written so
            assert parse_dump(blob, name="x")["entries"]


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=8)
        | st.dictionaries(st.text(max_size=20), inner, max_size=8)
        | st.tuples(inner, inner)
    ),
    max_leaves=60,
)


@given(value=_VALUES, protocol=st.integers(0, 5))
@settings(max_examples=300, deadline=None)
def test_no_honest_pickle_is_refused_for_its_memo(value, protocol):
    from aorta.hang.dumps import _memo_walk

    shared = [value, value, {"again": value}]  # memo references (GETs) as well as PUTs
    assert _memo_walk(pickle.dumps(shared, protocol=protocol)) is None


def _reference(data: bytes) -> tuple[int | None, int]:
    """pickletools' reading: the first memo index past the bound, and where it stops."""
    pos = 0
    try:
        for op, arg, pos in pickletools.genops(data):
            if op.name in ("PUT", "LONG_BINPUT") and arg > memo_bound(len(data)):
                return pos, pos
    except (ValueError, OverflowError):  # OverflowError: a length of 2**63 bytes or more
        pass
    return None, pos


_SEEDS = [GOOD_PICKLE, pickle.dumps(parse_dump(GOOD_JSON, name="x"), protocol=4)[:3000]]


# pickletools (the reference) decodes a mutated STRING opcode with codecs.escape_decode, which
# warns of a bad escape such as '\u'; the memo walk under test reads no string's contents.
@pytest.mark.filterwarnings("ignore::DeprecationWarning:pickletools")
@given(
    seed=st.sampled_from(_SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 3100), st.binary(min_size=1, max_size=6)), max_size=4),
    put=st.none() | st.tuples(st.integers(0, 3100), st.integers(0, 2**32 - 1), st.booleans()),
)
@settings(max_examples=400, deadline=None)
def test_the_memo_walk_reads_opcodes_as_pickletools_does(seed, edits, put):
    # Real dumps with bytes overwritten and a LONG_BINPUT or PUT spliced in anywhere (inside a
    # string too, where it is no opcode): what pickletools finds, the walk finds, at the same
    # byte; what the walk finds beyond where pickletools stops reading is past a broken opcode,
    # where the unpickler fails too.
    from aorta.hang.dumps import _memo_walk

    data = bytearray(seed)
    for at, new in edits:
        data[at : at + len(new)] = new
    if put is not None:
        at, index, text = put
        data[at:at] = b"p%d\n" % index if text else b"r" + index.to_bytes(4, "little")
    blob = bytes(data)
    found, stopped = _reference(blob)
    walked = _memo_walk(blob)
    if found is not None:
        assert walked is not None and walked[0] == found
    elif walked is not None:
        at, index, _ = walked
        # A PUT in other than plain digits (" 1", "01"), which no pickler writes, is refused
        # as -1 wherever it is; anything else only past a broken opcode.
        assert (index == -1 and blob[at] == ord("p")) or (
            at >= stopped and index > memo_bound(len(blob))
        )


def test_a_real_pickle_cut_anywhere_is_one_located_error():
    for cut in range(len(GOOD_PICKLE)):
        with pytest.raises(HangEvidenceError, match=r"^cut_rank_0: (byte \d+: )?"):
            parse_dump(GOOD_PICKLE[:cut], name="cut_rank_0")


@pytest.mark.parametrize("op", [b"\x8d", b"\x8e", b"\x96"])  # BINUNICODE8, BINBYTES8, BYTEARRAY8
@pytest.mark.parametrize("length", [2**31, 2**63 + 5, 2**64 - 1])
def test_a_length_past_any_file_is_one_located_error(op, length):
    # 2**63 and up once overflowed the memo walk (OverflowError, a traceback).
    blob = b"\x80\x05}" + op + length.to_bytes(8, "little") + b"abc"
    with pytest.raises(
        HangEvidenceError, match=r"^len_rank_0: byte 3: (truncated|malformed) pickle"
    ):
        parse_dump(blob, name="len_rank_0")


@pytest.mark.parametrize("index", [b" 1", b"+1", b"01", b"1_0", b"\xd9\xa1"])
def test_a_put_index_no_pickler_writes_is_refused(index):
    # The unpickler takes int()'s forms; the walk would read each one at a time (32 MiB of
    # them, seconds), so they are refused: no pickler writes them.
    with pytest.raises(HangEvidenceError, match=r"^p_rank_0: byte 3: PUT names its memo index in"):
        parse_dump(b"\x80\x02}p" + index + b"\n.", name="p_rank_0")
