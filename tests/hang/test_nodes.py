"""A node's GPU evidence (``gpu_<host>.txt``: its dmesg and GPU tools' lines at the capture) is
its host's, never a rank's (#44/#48): from the capture, through ``aorta hang analyze`` and
the record, to the page. And the ranks the analysis must not hide: a rank past the world it
was told, a rank that left no evidence at all.

``tests/data/hang/node/`` is a capture's trial folder of four NCCL ranks on two nodes
(``gpu-r1``: ranks 0,1; ``gpu-r3``: ranks 2,3): rank 2 never finished ``all_reduce`` #5 that
its peers completed, and its own log says nothing of its device; its node's kernel log has
an Xid 79. Node ``gpu-r1``'s file has no device line.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

from aorta.errors import ExitCode
from aorta.hang import (
    HangReport,
    NodeEvidence,
    RankEvidence,
    analyze,
    json_ready,
    load_evidence,
    load_incident,
    text,
)
from aorta.hang.render import cited_nodes, node_host
from aorta.recipe.blocks import Forensics
from aorta.run.forensics import Capture, incident
from aorta.store.record import RankOutcome, TrialStatus
from tests.conftest import DATA
from tests.hang import synth
from tests.hang.test_analyze import IN_ALL_REDUCE, nccl
from tests.processes import capture_a_sleeper

NODE = DATA / "hang" / "node"
XID = (
    "[Sat Dec 6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4002, name=python, GPU has "
    "fallen off the bus."
)
LATEST = "[Sat Dec 6 19:01:51 2026] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."


def test_a_nodes_xid_is_its_hosts_through_hang_analyze_text(run_cli):
    code, out, err = run_cli("hang", "analyze", NODE)
    assert code == ExitCode.OK, err
    first = out.splitlines()[0]
    # The culprit is rank 2 by its dump; its node's line is cited as the node's, not its own.
    assert first.startswith("hang: rank 2 (node gpu-r3) never finished all_reduce #5")
    assert first.endswith(f"— a device fault on its node: {LATEST}")
    assert f"node gpu-r3: {XID}" in out.splitlines()
    assert f"node gpu-r3: {LATEST}" in out.splitlines()
    assert "node gpu-r1" not in out  # a node without device lines says nothing
    # After the incident table, before the device evidence.
    lines = out.splitlines()
    assert lines.index(f"node gpu-r3: {XID}") < lines.index(
        "device evidence, default_pg, ranks 0-3 #5"
    )
    assert lines[lines.index(f"node gpu-r3: {XID}") - 2].startswith("default_pg, ranks 0-3")


def test_a_nodes_xid_is_its_hosts_through_hang_analyze_json(run_cli):
    code, out, err = run_cli("hang", "analyze", NODE, "--json")
    assert code == ExitCode.OK, err
    data = json.loads(out)
    assert data["culprit_ranks"] == [2] and data["kind"] == "device"
    assert data["nodes"] == [
        {"host": "gpu-r1", "file": "hang/rank0/gpu_gpu-r1.txt", "device_lines": []},
        {"host": "gpu-r3", "file": "hang/rank2/gpu_gpu-r3.txt", "device_lines": [XID, LATEST]},
    ]
    # No rank owns a node's file: not rank 2, whose folder holds it, nor rank 3 (gpu-r3).
    for item in data["evidence"]:
        assert not any("gpu_" in f for f in item["files"]), item
    # The group's own device line stays the ranks' (none here): the node's is no rank's.
    assert data["groups"][0]["device_line"] is None
    assert HangReport.from_dict(data).nodes[1].device_lines == (XID, LATEST)


def test_frames_of_loaded_stacks_link_their_file():
    # Relative to the folder given, as the capture names it; a file named alone, absolutely.
    evidence, _ = load_incident([NODE])
    assert evidence[2].stacks_file == "hang/rank2/stacks_2.json"
    report = analyze(evidence)
    assert report.frames[0].stack_file == "hang/rank2/stacks_2.json"
    alone = NODE / "hang" / "rank2" / "stacks_2.json"
    (named,) = load_evidence([os.path.relpath(alone)])
    assert named.stacks_file == str(alone.resolve())


def _device_stall(host: str, lines: tuple[str, ...] = ()) -> list[RankEvidence]:
    """Rank 2 (on ``host``) stalled at #5 its peers completed; ``lines``: its own log."""
    return [
        RankEvidence(r, host="gpu-r1" if r < 2 else host, fr=nccl(5, 4) if r == 2 else nccl(6, 5))
        for r in range(4)
    ] + [RankEvidence(2, log_lines=lines)]


def test_a_node_line_is_cited_only_for_a_culprit_on_that_node():
    node = NodeEvidence("gpu-r3", "gpu_gpu-r3.txt", (XID,))
    cited = analyze(_device_stall("gpu-r3"), nodes=[node])
    assert cited.summary.endswith(f"— a device fault on its node: {XID}")
    assert cited_nodes(cited) == {"gpu-r3": XID}
    # The same host written otherwise (case, a trailing dot, its full name): cited, with the
    # node's own name, so the reader sees whose line it is.
    for host in ("GPU-R3", "gpu-r3.", "gpu-r3.cluster.local"):
        report = analyze(_device_stall(host), nodes=[node])
        assert report.summary.endswith(f"— a device fault on its node (gpu-r3): {XID}"), host
        assert cited_nodes(report) == {"gpu-r3": XID}
    # Another host that merely looks alike: its Xid accuses no device here.
    for host in ("gpu-r31", "gpu-r", "r3", "10.0.0.3"):
        report = analyze(_device_stall(host), nodes=[node])
        assert report.summary.endswith("— a device fault?"), (host, report.summary)
        assert report.nodes == (node,) and report.culprit_ranks == (2,)
        assert cited_nodes(report) == {}
    # The culprit's own device line comes first: it is its device's, the node's is the bus's.
    own = "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered"
    report = analyze(_device_stall("gpu-r3", (own,)), nodes=[node])
    assert report.summary.endswith(
        "— a device fault: RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert cited_nodes(report) == {}


def test_a_short_name_never_guesses_between_two_nodes():
    # Two nodes of one short name in two domains: the rank's short name is either; no cite.
    a = NodeEvidence("gpu-r3.a.local", "gpu_gpu-r3.a.local.txt", (XID,))
    b = NodeEvidence("gpu-r3.b.local", "gpu_gpu-r3.b.local.txt", (LATEST,))
    report = analyze(_device_stall("gpu-r3"), nodes=[a, b])
    assert report.summary.endswith("— a device fault?") and cited_nodes(report) == {}
    # Its full name is one of them exactly: that one, never the other.
    report = analyze(_device_stall("gpu-r3.b.local"), nodes=[a, b])
    assert report.summary.endswith(f"— a device fault on its node: {LATEST}")
    # Two full names are two hosts, even of one short name.
    report = analyze(_device_stall("gpu-r3.c.local"), nodes=[a, b])
    assert cited_nodes(report) == {}
    # A node without device lines still counts as a candidate: no guess past it either.
    quiet = NodeEvidence("gpu-r3.a.local", "gpu_gpu-r3.a.local.txt")
    assert cited_nodes(analyze(_device_stall("gpu-r3"), nodes=[quiet, b])) == {}


def test_an_ip_address_matches_only_itself():
    # Which name an address had at the capture would take a DNS lookup: never here.
    by_name = NodeEvidence("gpu-r3", "gpu_gpu-r3.txt", (XID,))
    by_ip = NodeEvidence("10.0.0.3", "gpu_10.0.0.3.txt", (LATEST,))
    assert cited_nodes(analyze(_device_stall("10.0.0.3"), nodes=[by_name])) == {}
    assert cited_nodes(analyze(_device_stall("gpu-r3"), nodes=[by_ip])) == {}
    assert cited_nodes(analyze(_device_stall("10.0.0.3"), nodes=[by_ip])) == {"10.0.0.3": LATEST}
    # "10" is no short name of 10.0.0.3.
    assert node_host("10", ["10.0.0.3"]) is None and node_host("10.0.0.3", ["10"]) is None
    assert node_host("::1", ["::1"]) == "::1" and node_host("::1", ["localhost"]) is None


def test_node_evidence_makes_no_culprit_and_is_carried_once():
    # Everyone waits in #4 and nobody stands out: a node's Xid does not pick a rank.
    node = NodeEvidence("gpu-r3", "hang/rank2/gpu_gpu-r3.txt", (XID,))
    plain = [RankEvidence(r, host="gpu-r3", fr=nccl(4, 3)) for r in range(4)]
    carried = [RankEvidence(r, host="gpu-r3", fr=nccl(4, 3), node=node) for r in range(4)]
    without, given, via = analyze(plain), analyze(plain, nodes=[node]), analyze(carried)
    assert given.culprit_ranks == via.culprit_ranks == without.culprit_ranks
    assert given.groups == via.groups == without.groups
    assert given.nodes == via.nodes == (node,)
    # Old records (no ``nodes``) still load.
    old = without.to_dict()
    del old["nodes"]
    assert HangReport.from_dict(old).nodes == ()
    assert (
        "node gpu-r3: " + XID in text(given) and json_ready(given)["nodes"][0]["host"] == "gpu-r3"
    )


def test_a_rank_past_the_world_given_is_not_hidden():
    # One aorta rank (world 2) ran torchrun with six ranks: rank 5 never reached #4.
    evidence = [RankEvidence(r, fr=synth.dump(synth.run(4, 3))) for r in range(5)]
    evidence.append(RankEvidence(5, fr=synth.dump(synth.run(3, 3))))
    report = analyze(evidence, world_size=2)
    assert report.culprit_ranks == (5,) and report.kind == "missing"
    assert report.world_size == 6
    # The capture's path: the record's incident of that one aorta rank's outcome.
    outcome = RankOutcome(rank=0, status=TrialStatus.TIMEOUT, passed=False, evidence=evidence)
    recorded = incident([outcome], world_size=2)
    assert recorded is not None and recorded.culprit_ranks == (5,)


def test_a_rank_without_any_evidence_is_the_suspect_when_the_others_wait_by_their_stacks():
    # Ranks 0-2 wait in all_reduce by their stacks alone; rank 3 of the four left nothing.
    evidence = [RankEvidence(r, pid=100 + r, stacks=[IN_ALL_REDUCE]) for r in range(3)]
    report = analyze(evidence, world_size=4)
    assert report.culprit_ranks == (3,) and report.kind == "no_dump"
    assert report.groups[0].ranks == (0, 1, 2, 3) and report.groups[0].waiting == (0, 1, 2)
    # Told of no fourth rank, nobody is missing: the analysis names no one.
    assert analyze(evidence).culprit_ranks == ()
    # With dumps the same rank was already the suspect.
    dumps = [RankEvidence(r, fr=nccl(4, 3)) for r in range(3)]
    assert analyze(dumps, world_size=4).culprit_ranks == (3,)


_TOOL = """#!{python}
import sys
print({text!r})
"""


def test_the_capture_takes_its_nodes_lines_into_the_record(tmp_path, monkeypatch):
    # Stand-ins for nvidia-smi and dmesg, on PATH: what they print is what a faulted node's
    # would (no GPU here). The capture runs them without py-spy too.
    tools = tmp_path / "bin"
    tools.mkdir()
    dmesg = "[Sat Dec  6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    for name, out in (("nvidia-smi", "| NVIDIA-SMI 550.54.15 |"), ("dmesg", dmesg)):
        (tools / name).write_text(textwrap.dedent(_TOOL.format(python=sys.executable, text=out)))
        (tools / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    trial = tmp_path / "trial"
    capture = Capture(
        Forensics(),
        folder=trial,
        token="tok-nodes",
        rank=0,
        local_rank=0,
        host="gpu-r3",
        logs=[],
        py_spy="",
        dump_timeout_s=1.0,
    )
    capture_a_sleeper(capture)
    written = "hang/rank0/gpu_gpu-r3.txt"
    assert dmesg in (trial / written).read_text()
    line = " ".join(dmesg.split())
    assert capture.node == NodeEvidence("gpu-r3", written, (line,))
    # Through the outcome's way to rank 0 (JSON) and into the record's forensics.
    outcome = RankOutcome.model_validate_json(
        RankOutcome(
            rank=0,
            host="gpu-r3",
            status=TrialStatus.TIMEOUT,
            passed=False,
            evidence=capture.evidence,
        ).model_dump_json()
    )
    report = incident([outcome], world_size=1)
    assert report is not None and report.nodes == (capture.node,)
    # The capture file holds no copy: the node's own file does.
    assert "node" not in json.loads((trial / "hang/rank0/capture_0.json").read_text())


def test_a_rank_without_any_evidence_is_the_first_suspect_of_an_inferred_group():
    # Ranks 0-2 wait in #4 of a group no dump lists the members of (gloo): rank 3 of the
    # four left nothing, so it may be the member they wait for.
    evidence = [
        RankEvidence(r, fr=synth.dump(synth.run(4, 3, name="1", desc="dp", pg_id=1)))
        for r in range(3)
    ]
    (group,) = analyze(evidence, world_size=4).groups
    assert group.kind == "stuck" and group.membership == "inferred"
    assert group.suspects[0][0] == 3 and "left no evidence at all" in group.suspects[0][1]
    # ... and the summary does not say "none is missing" about a rank nobody heard from.
    summary = analyze(evidence, world_size=4).summary
    assert "none is missing" not in summary and "rank 3 left no evidence" in summary, summary
    assert analyze(evidence).groups[0].suspects == ()
    assert "none is missing" in analyze(evidence).summary
