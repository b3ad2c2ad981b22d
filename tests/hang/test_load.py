"""Files and folders → evidence per rank, by content; and ``aorta hang analyze``."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from aorta.errors import AortaWarning, ExitCode, HangEvidenceError
from aorta.hang import HangReport, load_evidence
from aorta.hang.load import LOG_TAIL_BYTES, trailing_rank
from tests.hang.synth import HANG_DATA

SLEEP = HANG_DATA / "sleep"


def test_a_trial_folder_gives_each_rank_its_dump_stacks_capture_and_logs():
    evidence = load_evidence([SLEEP])
    assert [e.rank for e in evidence] == [0, 1, 2]
    e0 = evidence[0]
    assert e0.files == (
        "hang/capture_0.json",
        "hang/fr_0.json",
        "hang/stacks_0.json",
        "rank0.stderr.log",
        "rank0.stdout.log",
    )
    assert e0.fr is not None and e0.stacks and e0.pid and e0.host
    assert any("Timed out waiting" in line for line in e0.log_lines)


def test_files_are_told_apart_by_content_not_by_name(tmp_path):
    # Every file renamed to something that says nothing; ranks are trailing numbers.
    for rank in range(3):
        shutil.copy(SLEEP / "hang" / f"fr_{rank}.json", tmp_path / f"a_{rank}")
        shutil.copy(SLEEP / "hang" / f"stacks_{rank}.json", tmp_path / f"b_{rank}")
        shutil.copy(SLEEP / f"rank{rank}.stderr.log", tmp_path / f"c_{rank}")
    evidence = load_evidence([tmp_path])
    assert [(e.fr is not None, bool(e.stacks), bool(e.log_lines)) for e in evidence] == [
        (True, True, True),
        (True, True, True),
        (True, True, False),  # rank 2 was killed by the teardown: its stderr is empty
    ]


def test_stacks_without_a_rank_in_their_name_find_it_through_the_capture_s_pid(tmp_path):
    shutil.copy(SLEEP / "hang" / "capture_2.json", tmp_path / "capture.json")
    shutil.copy(SLEEP / "hang" / "stacks_2.json", tmp_path / "pyspy.json")
    (evidence,) = load_evidence([tmp_path])
    assert evidence.rank == 2 and evidence.stacks


def test_only_the_trailing_number_is_the_rank():
    assert trailing_rank("gpu-r3.local_rank_5") == 5
    assert trailing_rank("node7_fr_dump_12.json") == 12
    assert trailing_rank("stacks_3.json") == 3
    assert trailing_rank("rank11.stdout.log") == 11
    assert trailing_rank("nccl_trace_rank_") is None


def test_one_combined_log_splits_by_torch_s_rank_prefix(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "[rank0]: step 4\n"
        "[rank1]:[E1203 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
        "NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600015 milliseconds\n"
        "a line of nobody's\n"
    )
    evidence = load_evidence([log])
    assert [(e.rank, len(e.log_lines)) for e in evidence] == [(0, 1), (1, 1)]


def test_a_one_rank_trial_s_unnumbered_logs_are_rank_0_s(tmp_path):
    (tmp_path / "stdout.log").write_text("hello\n")
    (tmp_path / "stderr.log").write_text("RuntimeError: Connection reset by peer\n")
    (evidence,) = load_evidence([tmp_path])
    assert (evidence.rank, evidence.log_lines) == (
        0,
        ("RuntimeError: Connection reset by peer", "hello"),
    )


def test_only_the_end_of_a_long_log_is_read(tmp_path):
    log = tmp_path / "rank4.stderr.log"
    with open(log, "w") as f:
        f.write("step line that says nothing\n" * ((LOG_TAIL_BYTES // 28) + 1000))
        f.write("last enqueued NCCL work: 9, last completed NCCL work: 8.\n")
    (evidence,) = load_evidence([log])
    assert evidence.rank == 4
    assert evidence.log_lines[-1].startswith("last enqueued NCCL work: 9")
    assert sum(len(line) + 1 for line in evidence.log_lines) <= LOG_TAIL_BYTES


def test_a_folder_passes_over_what_is_not_evidence(tmp_path):
    shutil.copy(SLEEP / "hang" / "fr_0.json", tmp_path / "fr_0.json")
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "recipe.json").write_text(json.dumps({"cells": []}))
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    shutil.copy(SLEEP / "hang" / "fr_1.json", deep / "fr_1.json")  # two levels down: not looked at
    (evidence,) = load_evidence([tmp_path])
    assert (evidence.rank, evidence.files) == (0, ("fr_0.json",))


def test_a_dump_without_a_rank_in_its_name_is_an_error(tmp_path):
    shutil.copy(SLEEP / "hang" / "fr_0.json", tmp_path / "dump.json")
    with pytest.raises(HangEvidenceError, match=r"^dump\.json: cannot tell whose dump this is"):
        load_evidence([tmp_path])


def test_nothing_to_go_on_is_an_error(tmp_path):
    with pytest.raises(
        HangEvidenceError, match="no flight-recorder dump, stacks or log lines found"
    ):
        load_evidence([tmp_path])
    with pytest.raises(HangEvidenceError, match="no such file or folder"):
        load_evidence([tmp_path / "missing"])
    (tmp_path / "x.json").write_text('{"cells": []}')
    with pytest.raises(HangEvidenceError, match="neither a flight-recorder dump"):
        load_evidence([tmp_path / "x.json"])


def test_the_command_prints_the_incident_table(run_cli):
    code, out, err = run_cli("hang", "analyze", HANG_DATA / "subgroup")
    assert (code, err) == (ExitCode.OK, "")
    lines = out.splitlines()
    assert lines[0].startswith("hang: rank 3 (node ") and "never reached all_to_all #3" in lines[0]
    table = lines[lines.index("") + 1 : lines.index("culprit frames") - 1]
    assert table[0].split() == [
        "group", "seq", "op", "sizes/dtypes", "waiting", "missing", "behind", "exited",
        "no", "position", "kind", "culprits",
    ]  # fmt: skip
    assert table[1].split()[:3] == ["default_pg,", "ranks", "0-3"]
    assert table[2].split() == [
        "expert_parallel,", "ranks", "2,3", "3", "all_to_all", "[4]", "Float", "2", "3", "-",
        "-", "-", "missing", "3",
    ]  # fmt: skip
    assert any(line.strip().startswith("rank 3  record.py:") for line in lines)


def test_the_command_prints_the_report_as_json(run_cli):
    code, out, _ = run_cli("hang", "analyze", HANG_DATA / "gil", "--json")
    data = json.loads(out)
    assert code == ExitCode.OK
    assert (data["culprit_ranks"], data["op"], data["seq"], data["kind"]) == (
        [1],
        "all_reduce",
        4,
        "gil",
    )
    assert HangReport.from_dict(data).culprit_ranks == (1,)


def test_the_world_size_counts_ranks_without_evidence(run_cli, tmp_path):
    for rank in (0, 1):
        shutil.copy(SLEEP / "hang" / f"fr_{rank}.json", tmp_path / f"fr_{rank}.json")
    code, out, _ = run_cli("hang", "analyze", tmp_path, "--json", "--world-size", "3")
    data = json.loads(out)
    assert (data["kind"], data["culprit_ranks"], data["world_size"]) == ("no_dump", [2], 3)
    code, _, err = run_cli("hang", "analyze", tmp_path, "--world-size", "0")
    assert code == ExitCode.USAGE and err.startswith("Error: ")


def test_hidden_files_are_never_evidence(tmp_path):
    # A capture's temporaries (.fr.<token>.<pid>.json, written late by a rank the kill freed)
    # would read as the evidence of a rank numbered like the pid.
    import json

    from aorta.hang import load_evidence

    (tmp_path / "fr_0.json").write_text(
        json.dumps({"entries": [], "pg_config": {}, "pg_status": {}})
    )
    (tmp_path / ".fr.tok.1670.json").write_text(json.dumps({"entries": [], "pg_config": {}}))
    assert [e.rank for e in load_evidence([tmp_path])] == [0]


def test_a_node_s_gpu_file_is_no_rank_s_even_from_a_host_named_with_a_number(tmp_path):
    # The capture writes the node's GPU evidence as hang/rank<N>/gpu_<host>.txt; a host named
    # gpu-r2 once made it rank 2's log, and its Xid line made rank 2's device the culprit.
    from aorta.hang import analyze

    trial = tmp_path / "trial"
    shutil.copytree(SLEEP, trial)
    before = analyze(load_evidence([trial]))
    xid = "[Sat Dec  6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    node = trial / "hang" / "rank0" / "gpu_gpu-r2.txt"
    node.parent.mkdir()
    node.write_text(f"== nvidia-smi ==\nGPU 0: NVIDIA H100\n== dmesg ==\n{xid}\n")
    evidence = load_evidence([trial])
    assert [e.rank for e in evidence] == [0, 1, 2]
    assert not any("gpu_gpu-r2.txt" in f for e in evidence for f in e.files)
    assert not any(xid in line for e in evidence for line in e.log_lines)
    after = analyze(evidence)
    assert (after.culprit_ranks, after.summary) == (before.culprit_ranks, before.summary)
    # The same line in a file named for the rank is that rank's evidence, as before.
    (trial / "dmesg_rank2.log").write_text(xid + "\n")
    (two,) = [e for e in load_evidence([trial]) if e.rank == 2]
    assert "dmesg_rank2.log" in two.files and xid in two.log_lines


# --- what holds nothing is said so -------------------------------------------------------------


@pytest.mark.parametrize("name", ["nccl_trace_rank_0", "train.log", "fr_3.json"])
def test_an_empty_file_is_an_error_not_a_clean_bill(tmp_path, run_cli, name):
    # Before: an empty nccl_trace_rank_0 read as rank 0's (empty) log, "no divergence", exit 0.
    path = tmp_path / name
    path.write_bytes(b"" if name != "fr_3.json" else b"\n  \n")
    code, out, err = run_cli("hang", "analyze", path)
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"Error: {path}: no flight-recorder dump, stacks or log lines found\n"


def test_a_folder_of_empty_logs_is_an_error(tmp_path, run_cli):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.stderr.log").write_text("")
    (tmp_path / "hang").mkdir()
    code, out, err = run_cli("hang", "analyze", tmp_path)
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"Error: {tmp_path}: no flight-recorder dump, stacks or log lines found\n"


def test_an_empty_path_beside_evidence_is_named_in_a_warning(tmp_path, run_cli):
    empty, nothing = tmp_path / "nccl_trace_rank_5", tmp_path / "empty"
    empty.write_bytes(b"")
    nothing.mkdir()
    good = HANG_DATA / "pickle"
    code, out, err = run_cli("hang", "analyze", empty, good, nothing)
    assert code == ExitCode.OK and out.startswith("hang: rank 2 never reached all_reduce #4")
    assert err.splitlines() == [
        f"warning: {path}: no flight-recorder dump, stacks or log lines found; left out"
        for path in (empty, nothing)
    ]
    with pytest.warns(AortaWarning, match="nccl_trace_rank_5: no flight-recorder dump"):
        evidence = load_evidence([good, empty])
    # The empty file is its rank's, for the record; the rank has nothing else.
    assert [(e.rank, e.files) for e in evidence][-1] == (5, (str(empty),))


def test_an_empty_log_inside_a_folder_with_evidence_is_no_warning(tmp_path):
    shutil.copy(SLEEP / "hang" / "fr_0.json", tmp_path / "fr_0.json")
    (tmp_path / "rank0.stderr.log").write_text("")  # a healthy rank's stderr
    (evidence,) = load_evidence([tmp_path])  # AortaWarning is an error in the tests
    assert evidence.files == ("fr_0.json", "rank0.stderr.log")


# --- ranks with nothing are ranges -------------------------------------------------------------


def test_ranks_without_evidence_are_one_line_and_one_json_field(tmp_path, run_cli):
    shutil.copy(SLEEP / "hang" / "fr_0.json", tmp_path / "fr_0.json")
    shutil.copy(SLEEP / "hang" / "fr_1.json", tmp_path / "fr_1000.json")
    code, out, _ = run_cli("hang", "analyze", tmp_path)
    assert code == ExitCode.OK
    evidence = out.split("\nevidence\n")[1].splitlines()
    assert evidence == ["  rank 0  dump", "  ranks 1-999  none", "  rank 1000  dump"]
    code, out, _ = run_cli("hang", "analyze", tmp_path, "--json", "--world-size", "1003")
    data = json.loads(out)
    assert [e["rank"] for e in data["evidence"]] == [0, 1000]
    assert data["no_evidence"] == "1-999,1001,1002"
    assert HangReport.from_dict(data).world_size == 1003


# --- odd inputs: each a clear answer, never a traceback or a wrong verdict ---------------------


def test_a_world_size_below_the_evidence_is_refused(run_cli):
    # --world-size 1 once hid ranks 1 and 2: "every rank ... entered all_reduce #4", no culprit.
    code, out, err = run_cli("hang", "analyze", SLEEP, "--world-size", "2")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "Error: --world-size 2: the evidence names rank 2, past it\n"
    code, out, _ = run_cli("hang", "analyze", SLEEP, "--world-size", "3")
    assert code == ExitCode.OK and out.startswith("hang: rank 2 (node vm) never reached")


def test_a_file_reached_twice_is_read_once(tmp_path, run_cli):
    dump = SLEEP / "hang" / "fr_0.json"
    evidence = load_evidence([SLEEP, SLEEP, dump])
    assert [len(e.files) for e in evidence] == [len(e.files) for e in load_evidence([SLEEP])]
    assert not any("2 dumps" in n for e in evidence for n in e.notes)
    code, _, err = run_cli("hang", "analyze", dump, dump)
    assert (code, err) == (ExitCode.OK, "")


def test_a_second_capture_of_a_rank_is_named_in_a_note(tmp_path):
    shutil.copy(SLEEP / "hang" / "fr_0.json", tmp_path / "fr_0.json")
    (tmp_path / "capture_0.json").write_text(json.dumps({"rank": 0, "pid": 5, "host": "a"}))
    (tmp_path / "capture_0b.json").write_text(json.dumps({"rank": 0, "pid": 6, "host": "b"}))
    (evidence,) = load_evidence([tmp_path])
    assert (evidence.host, evidence.pid) == ("a", 5)
    assert "another capture file, capture_0b.json, left out" in evidence.notes


def test_links_that_loop_are_passed_over_or_named(tmp_path, run_cli):
    shutil.copy(SLEEP / "hang" / "fr_0.json", tmp_path / "fr_0.json")
    (tmp_path / "self").symlink_to(tmp_path)
    (tmp_path / "rank1").symlink_to(tmp_path)  # as a rank's own folder would be named
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (evidence,) = load_evidence([tmp_path])
    assert evidence.files == ("fr_0.json",)
    code, out, err = run_cli("hang", "analyze", tmp_path / "a")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"Error: {tmp_path / 'a'}: a link to nothing (a loop, or its target is gone)\n"
