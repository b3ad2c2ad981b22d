"""aorta.matrix.dataset and .load: records → Dataset, run directories, results.nc, the accessor."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aorta
from aorta.errors import UsageError
from aorta.hang import (
    CulpritFrame,
    GroupIncident,
    HangReport,
    NodeEvidence,
    analyze,
    load_incident,
)
from aorta.hang.render import cited_nodes, device_fault, node_fault, node_host, node_line
from aorta.matrix.dataset import build_dataset
from aorta.matrix.hangs import hang_incidents, pattern_text
from aorta.matrix.load import load_run, load_runs, load_trials, stack_runs
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.netcdf import read_netcdf, write_netcdf
from aorta.store.record import TrialRecord, TrialStatus
from aorta.store.rundir import RESULTS
from tests.conftest import DATA

# A probe whose step times depend on the cell (HSA_XNACK doubles them) and the trial.
STEPS = (
    "import os; t = int(os.environ['AORTA_TRIAL']); f = 2 if os.environ.get('HSA_XNACK') else 1\n"
    "for s in range(5): print(f'step {f * (10 + t * 0.1 + s * 0.01 + (s == 0) * 50):.3f} ms')"
)
PROBE = """
mode: probe
ticket: DS-1
trials: 3
mitigation_axis: [none, xnack]
step_time_regex: 'step ([0-9.]+) ms'
"""


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    result = sweep(
        load_recipe_text(PROBE, command=["python3", "-c", STEPS]), output=out, progress="none"
    )
    return result.run_dir


def rec(cell, trial, status="ok", **kw):
    return TrialRecord(
        cell=cell, cell_id="id", trial=trial, status=status, passed=status == "ok", **kw
    )


def test_layout_dtypes_and_padding():
    cells = [
        {
            "name": "base",
            "cell_id": "b1",
            "mitigations": ["none"],
            "environment": {"name": "local"},
            "env": {},
            "workload_config": {"m": 64, "dtype": "float32"},
            "trials": 3,
        },
        {
            "name": "x",
            "cell_id": "x1",
            "mitigations": ["xnack", "tf32_off"],
            "environment": {"name": "local"},
            "env": {"HSA_XNACK": "1", "EMPTY": ""},
            "workload_config": {"m": 128, "dtype": "float32"},
            "trials": 2,
        },
    ]
    records = [
        rec("base", 0, step_times_ms=[9.0, 1.0, 2.0], warmup_steps=1, metrics={"tflops": 1.5}),
        rec("base", 2, "workload_failed", error="bad\x00value", info={"device": "cpu"}),
        rec("x", 0, "timeout", wall_clock_s=3.0, metrics={"tflops": None}),
    ]
    ds = build_dataset(cells, records, attrs={"baseline": "base", "nested": {"a": [1]}})
    assert dict(ds.sizes) == {
        "cell": 2,
        "trial": 3,
        "step": 3,
        "culprit": 0,
        "node": 0,
        "metric": 1,
        "info_key": 1,
        "env_var": 2,
    }
    assert ds.status.values.tolist() == [
        ["ok", "missing", "workload_failed"],
        ["timeout", "missing", "missing"],
    ]
    for name in ("status", "error", "info", "cell", "mitigations", "env_value", "metric"):
        assert ds[name].dtype == object, name
    assert ds.mitigations.values.tolist() == ["none", "xnack+tf32_off"]
    assert ds.error.sel(cell="base", trial=2).item() == "bad\u2400value"
    assert np.isnan(ds.step_time_ms.sel(cell="x", trial=0)).all()
    assert ds.n_steps.values.tolist() == [[3, 0, 0], [0, 0, 0]]
    assert ds.seed.sel(cell="x", trial=1).item() == -1
    assert np.isnan(ds.metrics.sel(cell="x", trial=0, metric="tflops")).item()
    # The overlay: "" set explicitly is told apart from unset by env_set.
    assert ds.env_value.sel(cell="x", env_var="EMPTY").item() == ""
    assert ds.env_set.sel(env_var="EMPTY").values.tolist() == [False, True]
    # Config: only the key that varies is a coordinate; the shared one is in attrs.
    assert ds.config_m.values.tolist() == [64, 128] and ds.config_m.dtype == np.int64
    assert json.loads(ds.attrs["workload_config"]) == {"dtype": "float32"}
    assert json.loads(ds.attrs["nested"]) == {"a": [1]}
    assert ds.step_time_ms.attrs["units"] == "ms" and ds.wall_clock_s.attrs["units"] == "s"


def _hung(trial: int, report: HangReport | None) -> TrialRecord:
    return TrialRecord(cell="a", cell_id="", trial=trial, status="timeout", passed=False,
                       main_work_started=True, forensics=report)  # fmt: skip


REPORT = HangReport(
    summary="ranks 2,5 never reached all_to_all #41",
    kind="missing",
    culprit_ranks=(2, 5),
    culprit_hosts=("gpu-r3", None),
    op="all_to_all",
    seq=41,
    process_group="ep_group, ranks 0-7",
    frames=(CulpritFrame(5, "moe.py:9 in f", "dump"), CulpritFrame(2, "moe.py:212 in g", "stacks")),
)


def test_hang_variables_are_the_reports_fields(tmp_path):
    one = HangReport(summary="rank 1 had exited", kind="exited", culprit_ranks=(1,))
    ds = build_dataset([{"name": "a", "trials": 3}],
                       [_hung(0, REPORT), _hung(1, one), _hung(2, None)])  # fmt: skip
    assert ds.sizes["culprit"] == 2  # the most culprits of any trial
    a = ds.sel(cell="a")
    assert a.hang_culprit_ranks.values.tolist() == [[2, 5], [1, -1], [-1, -1]]
    assert a.hang_culprit_hosts.values.tolist() == [["gpu-r3", ""], ["", ""], ["", ""]]
    assert a.hang_kind.values.tolist() == ["missing", "exited", ""]
    assert a.hang_op.values.tolist() == ["all_to_all", "", ""]
    assert a.hang_seq.values.tolist() == [41, -1, -1] and a.hang_seq.dtype == np.int64
    assert a.hang_group.values.tolist()[0] == "ep_group, ranks 0-7"
    # the first culprit's frame, whatever the order of the frames
    assert a.hang_frame.values.tolist() == ["moe.py:212 in g", "", ""]
    assert a.hang_summary.values.tolist()[:2] == [REPORT.summary, one.summary]
    # Reads as ranks: which trials blamed rank 5.
    assert (ds.hang_culprit_ranks == 5).any("culprit").sel(cell="a").values.tolist() == [
        True, False, False
    ]  # fmt: skip
    back = read_netcdf(write_netcdf(ds, tmp_path / RESULTS))
    xr.testing.assert_identical(back, ds)
    assert back.hang_culprit_ranks.dtype == np.int64 and back.hang_seq.dtype == np.int64


def test_a_version_1_results_nc_reads_as_the_typed_variables(tmp_path):
    """A ``results.nc`` written before the typed variables kept the incident as JSON text
    (``forensics``) and the culprits joined (``hang_culprit``): it loads as the new layout."""
    new = build_dataset([{"name": "a", "trials": 2}], [_hung(0, REPORT), _hung(1, None)])
    old_json = {
        "summary": REPORT.summary, "kind": "missing", "culprit_ranks": [2, 5],
        "culprit_hosts": ["gpu-r3", None], "op": "all_to_all", "seq": 41,
        "process_group": "ep_group, ranks 0-7",
        "where": {"5": "moe.py:9 in f", "2": "moe.py:212 in g"},
    }  # fmt: skip
    text = np.array([[json.dumps(old_json), ""]], dtype=object)
    old = new.drop_vars([v for v in new.data_vars if str(v).startswith("hang_")]).assign(
        forensics=(("cell", "trial"), text),
        hang_culprit=(("cell", "trial"), np.array([["2,5", ""]], dtype=object)),
    )
    path = write_netcdf(old, tmp_path / RESULTS)
    got = load_run(path)
    assert "forensics" not in got and "hang_culprit" not in got
    for name in [v for v in new.data_vars if str(v).startswith("hang_")]:
        xr.testing.assert_equal(got[name], new[name])


XID = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."


def _device_report(culprit_host: str, nodes: tuple[NodeEvidence, ...]) -> HangReport:
    """Rank 1 (on ``culprit_host``) never finished #5 that rank 0 completed; the summary
    as :func:`aorta.hang.analyze` would word it."""
    group = GroupIncident("0", "default_pg", (0, 1), "world", "device", 5, "all_reduce",
                          culprits=(1,), completed=(0,))  # fmt: skip
    report = HangReport(summary="", kind="device", culprit_ranks=(1,),
                        culprit_hosts=(culprit_host,), op="all_reduce", seq=5,
                        process_group="default_pg", groups=(group,), nodes=nodes)  # fmt: skip
    host = node_host(culprit_host, [n.host for n in nodes])
    line = node_line(nodes, host) if host else None
    tail = node_fault([culprit_host], host, line) if host and line else "a device fault?"
    report = dataclasses.replace(report, summary=f"rank 1 never finished — {tail}")
    assert cited_nodes(report) == ({host: line} if host and line else {})
    return report


def test_node_variables_are_the_nodes_evidence(tmp_path):
    # Two files of one node (two trials' folders): one entry, its latest line; a node
    # without device lines is there, with no line.
    nodes = (
        NodeEvidence("gpu-r1", "a/gpu_gpu-r1.txt"),
        NodeEvidence("gpu-r3.cluster.local", "a/gpu_gpu-r3.cluster.local.txt", ("old",)),
        NodeEvidence("gpu-r3.cluster.local", "b/gpu_gpu-r3.cluster.local.txt", (XID,)),
    )
    cited = _device_report("gpu-r3", nodes)
    other = _device_report("gpu-r9", nodes[:1])
    ds = build_dataset([{"name": "a", "trials": 3}],
                       [_hung(0, cited), _hung(1, other), _hung(2, None)])  # fmt: skip
    assert ds.sizes["node"] == 2
    a = ds.sel(cell="a")
    assert a.hang_node_hosts.values.tolist() == [
        ["gpu-r1", "gpu-r3.cluster.local"], ["gpu-r1", ""], ["", ""]
    ]  # fmt: skip
    assert a.hang_node_line.values.tolist() == [["", XID], ["", ""], ["", ""]]
    assert a.hang_node_cited.values.tolist() == [[False, True], [False, False], [False, False]]
    back = read_netcdf(write_netcdf(ds, tmp_path / RESULTS))
    xr.testing.assert_identical(back, ds)
    assert back.hang_node_cited.dtype == bool
    # The cell's line cites the node as the summary does: the node named, as it was written.
    hung = [
        TrialRecord(cell="a", cell_id="", trial=t, status="timeout", passed=False,
                    main_work_started=True, forensics=cited)
        for t in range(2)
    ]  # fmt: skip
    (pattern,) = hang_incidents(build_dataset([{"name": "a", "trials": 2}], hung))["a"].patterns
    sentence = f"a device fault on its node (gpu-r3.cluster.local): {XID}"
    assert pattern.nodes[0].text() == sentence and cited.summary.endswith(sentence)
    assert pattern_text(pattern).endswith(f"its peers completed — {sentence}")


def test_a_summary_that_cites_no_node_is_not_cited_beside_it():
    # A record an older aorta wrote, before its rule matched the short name: its summary
    # (what the page shows) cites no node, so neither do the Dataset and the cell's line.
    nodes = (NodeEvidence("gpu-r3.cluster.local", "f", (XID,)),)
    old = dataclasses.replace(
        _device_report("gpu-r3", nodes), summary="rank 1 never finished — a device fault?"
    )
    ds = build_dataset([{"name": "a", "trials": 1}], [_hung(0, old)])
    assert ds.hang_node_line.sel(cell="a", trial=0).values.tolist() == [XID]
    assert ds.hang_node_cited.sel(cell="a", trial=0).values.tolist() == [False]
    line = hang_incidents(ds)["a"].line()
    assert XID not in line and line.endswith("its peers completed (a device fault?)")


def test_runs_with_and_without_culprits_and_nodes_stack():
    # ``culprit`` and ``node`` are positions: a run with a hung trial (one culprit, two
    # nodes) and one without any stack, the shorter padded as a trial without them.
    nodes = (NodeEvidence("gpu-r1", "gpu_gpu-r1.txt"), NodeEvidence("gpu-r3", "f", (XID,)))
    a = build_dataset([{"name": "a", "trials": 1}], [_hung(0, _device_report("gpu-r3", nodes))])
    b = build_dataset([{"name": "a", "trials": 1}], [_hung(0, None)])
    both = stack_runs([a, b], labels=["a", "b"])
    assert dict(both.sizes)["culprit"] == 1 and dict(both.sizes)["node"] == 2
    assert "node" not in both.coords and "culprit" not in both.coords
    assert both.hang_culprit_ranks.sel(cell="a", trial=0).values.tolist() == [[1], [-1]]
    assert both.hang_node_line.sel(cell="a", trial=0).values.tolist() == [["", XID], ["", ""]]
    assert both.hang_node_cited.sel(cell="a", trial=0).values.tolist() == [
        [False, True], [False, False]
    ]  # fmt: skip
    assert both.hang_node_cited.dtype == bool


def test_a_version_2_results_nc_reads_with_no_nodes(tmp_path):
    """A ``results.nc`` of version 2 had the typed hang variables but no nodes' evidence: it
    loads with the node variables over an empty ``node``, as a run without any."""
    new = build_dataset([{"name": "a", "trials": 2}], [_hung(0, REPORT), _hung(1, None)])
    old = new.drop_vars(["hang_node_hosts", "hang_node_line", "hang_node_cited"])
    old.attrs["aorta_dataset_version"] = 2
    got = load_run(write_netcdf(old, tmp_path / RESULTS))
    assert got.sizes["node"] == 0
    for name in ("hang_node_hosts", "hang_node_line", "hang_node_cited"):
        xr.testing.assert_identical(got[name], new[name])
    assert hang_incidents(got)["a"].line() == hang_incidents(new)["a"].line()
    assert hang_incidents(old)["a"].line() == hang_incidents(new)["a"].line()


def test_plot_labels_itself():
    ds = build_dataset([{"name": "a"}], [rec("a", 0, step_times_ms=[1.0, 2.0])])
    ax = ds.step_time_ms.sel(cell="a", trial=0).plot()[0].axes
    assert ax.get_ylabel() == "step time [ms]"


def test_config_coords_of_mixed_types():
    cells = [
        {"name": "a", "workload_config": {"f": 1.5, "s": "x", "j": [1], "b": True}},
        {"name": "b", "workload_config": {"s": "y", "j": {"k": 2}, "b": False}},
    ]
    ds = build_dataset(cells, [])
    assert ds.config_f.values.tolist()[0] == 1.5 and np.isnan(ds.config_f.values[1])
    assert ds.config_s.values.tolist() == ["x", "y"]
    assert ds.config_j.values.tolist() == ["[1]", '{"k": 2}']
    assert ds.config_b.values.tolist() == [True, False]


@pytest.mark.slow
def test_load_run_of_a_real_sweep_and_results_nc(probe_run):
    assert (probe_run / RESULTS).is_file()
    ds = load_run(probe_run)
    fresh = load_run(probe_run, source="records")
    xr.testing.assert_identical(ds, fresh)
    assert ds.cell.values.tolist() == ["none-none", "xnack-none"]
    assert ds.attrs["baseline"] == "none-none" and ds.attrs["status"] == "complete"
    assert ds.attrs["threshold"] == 1.15
    assert ds.env_value.sel(cell="xnack-none", env_var="HSA_XNACK").item() == "1"
    steps = ds.step_time_ms.sel(cell="xnack-none", trial=1).values.tolist()
    assert steps == [120.2, 20.22, 20.24, 20.26, 20.28]


@pytest.mark.slow
def test_netcdf_round_trip_is_exact(tmp_path, probe_run):
    ds = load_run(probe_run, source="records")
    path = ds.aorta.to_netcdf(tmp_path / "r.nc")
    back = read_netcdf(path)
    xr.testing.assert_identical(ds, back)
    assert back.status.dtype == object and back.cell.dtype == object
    xr.testing.assert_identical(load_run(path), ds)


@pytest.mark.slow
def test_load_trials_is_tidy(probe_run):
    df = load_trials(probe_run)
    assert len(df) == 6
    assert {"cell", "trial", "status", "step_time_ms", "wall_clock_s", "mitigations"} <= set(
        df.columns
    )
    # The trial value is the median of the steps after the warm-up; a probe declares none,
    # so its slow first step counts (and the median shrugs it off).
    row = df[(df.cell == "xnack-none") & (df.trial == 1)].iloc[0]
    assert row.step_time_ms == pytest.approx(20.26)


@pytest.mark.slow
def test_load_runs_stacks_with_an_outer_join(probe_run):
    a = build_dataset([{"name": "x", "trials": 1}], [rec("x", 0, step_times_ms=[1.0])])
    stacked = load_runs([probe_run, probe_run], labels=["first", "second"])
    assert stacked.sizes["run"] == 2 and stacked.run.values.tolist() == ["first", "second"]
    assert stacked.attrs["baseline"] == "none-none"
    mixed = stack_runs([load_run(probe_run), a], dim="run", labels=["p", "a"])
    assert mixed.status.sel(run="a", cell="none-none").values.tolist() == ["missing"] * 3
    assert mixed.status.sel(run="p", cell="x").values.tolist() == ["missing"] * 3
    assert mixed.passed.dtype == bool and mixed.status.dtype == object
    with pytest.raises(ValueError, match="distinct labels"):
        load_runs([probe_run, probe_run], labels=["a", "a"])


@pytest.mark.slow
def test_load_run_errors(tmp_path, probe_run):
    with pytest.raises(UsageError, match="not an aorta run directory"):
        load_run(tmp_path)
    (tmp_path / "junk.nc").write_text("nope")
    with pytest.raises(UsageError, match="not a readable netCDF"):
        load_run(tmp_path / "junk.nc")


@pytest.mark.slow
def test_netcdf_source_needs_results(tmp_path, probe_run):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(probe_run, copy)
    (copy / RESULTS).unlink()
    with pytest.raises(UsageError, match=r"results\.nc"):
        load_run(copy, source="netcdf")
    assert load_run(copy).sizes["cell"] == 2  # auto falls back to the records


def test_accessor_validates_dims():
    with pytest.raises(ValueError, match="'trial'"):
        _ = xr.Dataset(coords={"cell": ["a"]}).aorta
    with pytest.raises(ValueError, match="'cell'"):
        _ = xr.Dataset().aorta


@pytest.mark.slow
def test_top_level_api(probe_run):
    ds = aorta.load_run(probe_run)
    df = aorta.compare(ds)
    assert isinstance(df, pd.DataFrame) and df.loc["none-none", "difference"] == "baseline"
    assert isinstance(aorta.load_trials(probe_run), pd.DataFrame)
    assert {"load_run", "load_runs", "load_trials", "compare", "compare_runs"} <= set(aorta.__all__)


# --- the round trip on random datasets --------------------------------------------------------

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def runs(draw):
    names = draw(
        st.lists(
            st.from_regex(r"[a-z][a-z0-9_.-]{0,6}", fullmatch=True),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    env_names = draw(
        st.lists(st.from_regex(r"[A-Z_][A-Z0-9_]{0,5}", fullmatch=True), max_size=3, unique=True)
    )
    config_values = st.one_of(
        st.integers(-5, 5),
        st.floats(allow_nan=False),
        text,
        st.booleans(),
        st.none(),
        st.lists(st.integers(), max_size=2),
    )
    cells = []
    for name in names:
        cells.append(
            {
                "name": name,
                "mitigations": draw(
                    st.lists(st.sampled_from(["none", "xnack", "tf32_off"]), max_size=2)
                ),
                "environment": {"name": draw(st.sampled_from(["local", "img"]))},
                "env": draw(
                    st.dictionaries(st.sampled_from(env_names), text) if env_names else st.just({})
                ),
                "workload_config": draw(
                    st.dictionaries(st.sampled_from(["m", "k", "a/b"]), config_values, max_size=3)
                ),
                "trials": draw(st.integers(0, 3)),
            }
        )
    records = []
    for name in names:
        for trial in draw(st.sets(st.integers(0, 3), max_size=3)):
            records.append(
                TrialRecord(
                    cell=name,
                    cell_id="",
                    trial=trial,
                    status=draw(st.sampled_from(list(TrialStatus))),
                    passed=draw(st.booleans()),
                    step_times_ms=draw(st.lists(floats, max_size=4)),
                    warmup_steps=draw(st.integers(0, 2)),
                    wall_clock_s=draw(st.none() | floats),
                    metrics=draw(
                        st.dictionaries(st.sampled_from(["tflops", "loss"]), st.none() | floats)
                    ),
                    info=draw(st.dictionaries(text, text, max_size=2)),
                    error=draw(st.none() | text),
                    seed=draw(st.integers(0, 2**31 - 1)),
                )
            )
    attrs = draw(
        st.dictionaries(
            st.from_regex(r"[a-z]{1,5}", fullmatch=True),
            st.one_of(
                text,
                st.integers(-(2**31), 2**31),
                floats,
                st.booleans(),
                st.none(),
                st.lists(text, max_size=2),
            ),
        )
    )
    return cells, records, attrs


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(runs())
def test_netcdf_round_trip_on_random_runs(tmp_path, run):
    cells, records, attrs = run
    ds = build_dataset(cells, records, attrs=attrs)
    path = write_netcdf(ds, tmp_path / "random.nc")
    xr.testing.assert_identical(read_netcdf(path), ds)


def test_each_culprits_own_device_line_stays_beside_it(tmp_path):
    # Two device groups in one trial (tests/data/hang/device2: ranks 1 and 2 each stall in
    # their own broadcast), each culprit's log its own CUDA error: the summary cites both,
    # so a line per trial could not hold them; over ``culprit`` each stays with its rank.
    evidence = shutil.copytree(DATA / "hang" / "device2", tmp_path / "ev")
    lines = {1: "CUDA error: an illegal memory access was encountered",
             2: "CUDA error: unspecified launch failure"}  # fmt: skip
    for rank, line in lines.items():
        with (evidence / f"rank{rank}.stderr.log").open("a") as log:
            log.write(f"{line}\n")
    ranks, nodes = load_incident([evidence])
    report = analyze(ranks, nodes=nodes)
    assert report.culprit_ranks == (1, 2)
    assert all(device_fault(1, line) in report.summary for line in lines.values())
    ds = build_dataset([{"name": "a", "trials": 2}], [_hung(0, report), _hung(1, report)])
    assert ds.hang_device_line.sel(cell="a").values.tolist() == [[lines[1], lines[2]]] * 2
    back = read_netcdf(write_netcdf(ds, tmp_path / RESULTS))
    xr.testing.assert_identical(back, ds)
    (pattern,) = hang_incidents(ds)["a"].patterns
    said = "; ".join(device_fault(1, line) for line in lines.values())
    assert pattern_text(pattern).endswith(f"its peers completed — {said}")
