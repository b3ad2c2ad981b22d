"""Coverage of the perf model on the real traces without TraceLens goldens: FBGEMM embedding ops
(A100 DLRM-style trace), ``_foreach_*`` ops (their element type from the kernel), and a trace
recorded without shapes (no model possible, and said so)."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from aorta.trace import devices
from aorta.trace.perf.op_model import op_model
from tests.trace_helpers import DATA, shipped

LOOKUP = "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function"
# the 9-table lookup of a100_nccl_sampled_rank-0 (positions: fbgemm's schema)
LOOKUP_DIMS = [[0], [7722480160], [0], [0, 0], [9], [9], [10], [], [], [10], [], [30111429]]
LOOKUP_DIMS += [[2359297], [], [], [], [0], [], [], [], [48265501], [0], [9], [9], [], [], [], []]
LOOKUP_DIMS += [[]]
LOOKUP_TYPES = ["float", "c10::Half", "c10::Half", "c10::Half", "int", "long", "int", "Scalar"]
LOOKUP_TYPES += ["Scalar", "long", "Scalar", "long", "long", "Scalar", "", "", "int", "Scalar"]
LOOKUP_TYPES += ["Scalar", "Scalar", "float", "float", "int", "long"] + ["Scalar"] * 5


@pytest.fixture(scope="module")
def a100():
    return [shipped(f"a100_nccl_sampled_rank-{r}.json.gz") for r in (0, 1)]


def test_embedding_lookup_bytes_from_indices_and_weights():
    m = op_model(LOOKUP, LOOKUP_DIMS, LOOKUP_TYPES, None)
    assert m is not None and m.family == "Memory"
    lookups, bags, d = 30111429, 2359296, 7722480160 / 48265501  # one momentum per row
    assert d == 160
    # indices and offsets (int64) read, L rows of D halves gathered, B·T rows of D fp32 written
    assert m.bytes == lookups * 8 + (bags + 1) * 8 + lookups * d * 2 + bags * d * 4
    assert m.flops == lookups * d
    # an output precision given but not readable (no Concrete Inputs): no model, not a guess
    assert op_model(LOOKUP, [*LOOKUP_DIMS, []], [*LOOKUP_TYPES, "Scalar"], None) is None


def test_sparse_permute_that_repeats_features_has_no_model():
    types = ["int", "int", "int", "", "Scalar"]
    same = op_model("fbgemm::permute_2D_sparse_data", [[3], [3, 4], [50], [], []], types, None)
    assert same is not None and same.bytes == 3 * 4 + 2 * 12 * 4 + 2 * 50 * 4
    # 1390 features out of 1334: the output length is a runtime sum the trace does not hold
    grown = op_model(
        "fbgemm::permute_2D_sparse_data", [[1390], [1334, 8], [9], [], []], types, None
    )
    assert grown is None


def test_fbgemm_ops_are_modelled_and_below_the_a100_bandwidth(a100):
    """Every FBGEMM row's achieved bandwidth is under the A100's HBM peak: a model that moved
    more bytes than the kernels could would show up here."""
    peak_tbps = devices.get_device("A100")["mem_bw_gbps"] / 1e3
    for trace in a100:
        ops = trace.perf_ops(device=False)
        fbgemm = ops[ops["op"].str.contains("fbgemm")]
        assert {LOOKUP, "fbgemm::FloatToFP8RowwiseQuantized"} <= set(fbgemm["op"])
        assert (fbgemm["tbps"] < peak_tbps).all()
        assert fbgemm.loc[fbgemm["op"] == LOOKUP, "tbps"].min() > 0.5 * peak_tbps


NODE = "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>"


def test_lookup_backward_pairs_with_its_forward_call(a100):
    """Each backward node pairs with the forward call that created it: its gradient is the
    forward output's ``[B, total_D]`` (B = bags / tables; total_D = tables x D on rank 0, where
    every table has D = 160), and its ``find_long_segments`` kernel, launched over the ``L``
    lookups 1024 at a time, has exactly ``ceil(L / 1024)`` blocks (the kernel's grid is in the
    raw trace)."""
    for rank, trace in enumerate(a100):
        with gzip.open(DATA / f"a100_nccl_sampled_rank-{rank}.json.gz") as f:
            raw = json.load(f)["traceEvents"]
        grids = {e["args"]["grid"][0] for e in raw if "find_long_segments" in e["name"]}
        ops = trace.perf_ops(device=False)
        rows = ops[ops["op"] == NODE]
        assert len(rows) == (4 if rank == 0 else 2)  # two steps; rank 0 has two lookups each
        for shape in rows["shape"]:
            params = dict(p.split("=", 1) for p in shape.split(" "))
            lookups, bags, d = int(params["L"]), int(params["bags"]), float(params["D"])
            batch, total_d = (int(x) for x in params["grad"].strip("()").split(","))
            tables = bags // batch
            assert bags == batch * tables and batch == 262144
            if rank == 0:
                assert total_d == tables * d  # equal-D tables: the forward output's width
            assert -(-lookups // 1024) in grids


def test_lookup_backward_bytes_from_the_forward_and_gradient():
    """Unweighted 9-table lookup of rank 0: indices and offsets read, one gradient row (D
    floats) read per lookup; weighted: the per-sample weights, the table rows and the weight
    gradients too. The distinct rows' update is not counted (not recorded)."""
    grad, types = [[262144, 1440]], ["float"]
    m = op_model(NODE, grad, types, None, partner=(LOOKUP_DIMS, LOOKUP_TYPES))
    lookups, bags, d = 30111429, 2359296, 160
    assert m is not None and m.family == "Memory"
    assert m.bytes == lookups * 8 + (bags + 1) * 8 + lookups * d * 4
    assert m.flops == lookups * d
    weighted_dims = [list(x) for x in LOOKUP_DIMS]
    weighted_dims[14] = [lookups]
    weighted_types = [*LOOKUP_TYPES]
    weighted_types[14] = "float"
    w = op_model(NODE, grad, types, None, partner=(weighted_dims, weighted_types))
    assert w is not None
    assert w.bytes == m.bytes + lookups * 4 + lookups * d * 2 + lookups * 4
    assert w.flops == 4 * lookups * d
    assert op_model(NODE, grad, types, None) is None  # not paired: no model


def test_cat_inside_a_backward_node_takes_the_node_gradients(a100):
    """A cat whose list Kineto wrote as ``[]``, the only one directly inside a
    SplitBackward0/SplitWithSizesBackward0/All2All_Pooled_WaitBackward node, reads and writes
    the node's gradients (its Input Dims); a cat or stack whose list is ``[]`` but which has
    another tensor argument has no model (that tensor is not what it joins)."""
    trace = a100[0]
    ev = trace.events
    ops = trace.perf_ops(device=False)
    cats = ops[(ops["op"] == "aten::cat") & ops["shape"].str.startswith("pieces=")]
    node_names = ("SplitBackward0", "SplitWithSizesBackward0", "All2All_Pooled_WaitBackward")
    nodes = ev[ev["name"].isin(node_names)]
    expected = set()
    for dims in nodes["input_dims"].astype(str):
        shapes = json.loads(dims)
        n = sum(math.prod(s) for s in shapes)
        expected.add((f"pieces={len(shapes)} elements={n}", 2 * n * 4))
    assert set(zip(cats["shape"], cats["bytes"], strict=True)) <= expected
    assert len(cats) == 5
    # the All2All backward's cat (128 per-rank blocks of [2048, 186588], one kernel of 128
    # inputs: complete in this sampled trace) runs below the A100's bandwidth
    whole = cats[cats["shape"] == "pieces=1 elements=382132224"]
    assert 1.0 < whole["tbps"].iloc[0] < devices.get_device("A100")["mem_bw_gbps"] / 1e3
    assert not ops["shape"].isin(["op_shape=(2048,160,606)", "op_shape=(2048,437,160)"]).any()


def test_foreach_element_type_comes_from_its_kernel():
    trace = shipped("mi250_rocm6_minitoy.json.gz")
    row = trace.perf_ops(device=False).set_index("op").loc["aten::_foreach_add_"]
    # [[128, 128], [128]] twice, fp32 from BinaryOpListAlphaFunctor<float, ...>: 2 read, 1 written
    assert (row["family"], row["dtype"], row["flops"]) == ("Elementwise", "float", 16512)
    assert row["bytes"] == 3 * 16512 * 4 and row["kernel_us"] == pytest.approx(8.481)
    dims, types = [[[128, 128], [128]], [[128, 128], [128]], []], ["TensorList"] * 2 + ["Scalar"]
    assert op_model("aten::_foreach_add_", dims, types, None) is None  # no element type
    assert op_model("aten::_foreach_add_", [[], [], []], types, None, list_dtype="float") is None


SMALL_ELEMENTWISE = {  # op: tensor arguments read (the rest are Scalars), one output written
    "aten::exp_": 1,
    "aten::log_": 1,
    "aten::log2": 1,
    "aten::logit": 1,
    "aten::logit_backward": 2,
}


def test_small_elementwise_bytes_from_the_recorded_args(a100):
    """Each call's bytes from the trace's own ``Input Dims``/``Input type``: its tensors read
    and one tensor of the first one's shape and type written (in place for ``exp_``/``log_``)."""
    size = {"float": 4, "double": 8}
    with gzip.open(DATA / "a100_nccl_sampled_rank-0.json.gz") as f:
        events = json.load(f)["traceEvents"]
    ops = a100[0].perf_ops(device=False)
    seen = set()
    for e in events:
        if e.get("cat") != "cpu_op" or e["name"] not in SMALL_ELEMENTWISE:
            continue
        dims, types = e["args"]["Input Dims"], e["args"]["Input type"]
        tensors = SMALL_ELEMENTWISE[e["name"]]
        assert all(d == [] for d in dims[tensors:])  # eps: a Scalar, no tensor
        n = math.prod(dims[0])
        expected = (tensors + 1) * n * size[types[0]]
        rows = ops[(ops["op"] == e["name"]) & (ops["dtype"] == types[0])]
        assert rows["bytes"].tolist() == [expected] and rows["flops"].tolist() == [n]
        seen.add(e["name"])
    assert seen == set(SMALL_ELEMENTWISE)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mi250_rocm6_minitoy.json.gz", 1.0),
        ("a100_nccl_sampled_rank-0.json.gz", 0.9473),
        ("a100_nccl_sampled_rank-1.json.gz", 0.9617),
    ],
)
def test_coverage_of_the_traces_without_goldens(name, expected):
    """The figures in docs/traces.md; what is left is documented there (forward cats and
    ``_foreach_*`` lists recorded as ``[]``, permutes whose output length is not recorded)."""
    summary = shipped(name).perf_summary(device=False)
    assert summary.attrs["coverage"] == pytest.approx(expected, abs=5e-5)
    assert summary.attrs["shapes_recorded"]


def _innermost_cpu_op(events: list[dict], call: dict) -> dict | None:
    """The innermost ``cpu_op`` on the call's thread whose span contains the call."""
    around = [
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and (e["pid"], e["tid"]) == (call["pid"], call["tid"])
        and e["ts"] <= call["ts"] <= e["ts"] + e["dur"]
    ]
    return max(around, key=lambda e: (e["ts"], -e["dur"]), default=None)


@pytest.mark.parametrize("kernel", ["CatArrayBatchedCopy", "ncclKernel", "multi_tensor_apply"])
def test_unmodelled_kernels_are_counted_under_the_op_that_launched_them(a100, kernel):
    """In this trace no runtime call's External id names a CPU op; the launching op is the
    innermost ``cpu_op`` around the runtime call on its thread (found here from the raw events:
    the kernel's runtime call by correlation id, the op by timestamps). Where no ``cpu_op``
    contains the call (the optimizer's ``_foreach_`` kernels: only user annotations around
    them, their op sampled out) the kernel's own name is the row."""
    with gzip.open(DATA / "a100_nccl_sampled_rank-0.json.gz") as f:
        events = json.load(f)["traceEvents"]
    ext_ids = {e["args"]["External id"] for e in events if e.get("cat") == "cpu_op"}
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    assert not any(c["args"].get("External id") in ext_ids for c in calls.values())
    first = next(e for e in events if e.get("cat") == "kernel" and kernel in e["name"])
    op = _innermost_cpu_op(events, calls[first["args"]["correlation"]])
    summary = a100[0].perf_summary(device=False)
    expected = first["name"] if op is None else op["name"]
    assert (op is None) == (kernel == "multi_tensor_apply")
    family = "communication" if kernel == "ncclKernel" else "other"
    row = summary[(summary["op"] == expected) & ~summary["has_model"]]
    assert row["family"].tolist() == [family] and row["kernel_us"].iloc[0] >= first["dur"]
    if op is not None:  # no row is named after a kernel an op launched
        assert not summary["op"].str.contains(kernel).any()
