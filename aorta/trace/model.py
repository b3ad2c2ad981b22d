"""The :class:`Trace` object: columnar events of one or more ranks, and what they link to.

A ``Trace`` holds no file handles and does no I/O (see :func:`aorta.trace.load`); each analysis
is a pure function in its own module (``timeline``, ``gemm``, ``collectives``, ...) and the
methods here are one-line calls to them, so notebook, CLI and tests share one path.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

import numpy as np
import pandas as pd

from . import collectives, gemm, host, links, perf, steps, tables, timeline
from .classify import GPU_CATS, GPU_CLASSES, HOST_CLASSES, RUNTIME_CATS, Rules, default_rules
from .collectives import Alignment, Device
from .devices import Device as PerfDevice

__all__ = ["GpuOps", "RankInfo", "Trace"]

_CATEGORICALS = ("cat", "name", "input_dims", "input_type", "concrete", "input_strides")
RUNTIME_KINDS: tuple[str, ...] = ("launch", "memcpy", "memset", "sync", "other")
_OP_CATS = ("cpu_op", "user_annotation")


@dataclass(frozen=True)
class RankInfo:
    """What one trace file says about its rank besides its events.

    ``versions`` holds the runtime versions found at the top level (``cuda_runtime_version``,
    ``hip_runtime_version``, ``cupti_version``, ``roctracer_version``, ...); ``header`` every
    top-level key except ``traceEvents``; ``stats`` the loader's counters (bytes, events seen and
    kept, sanitised bytes, ...); ``cache`` what the parse cache did (``hit``, ``written``,
    ``off``, or ``not written: <why>``); ``offset_ns`` the clock shift applied to the rank's
    timestamps by alignment.
    """

    rank: int
    path: str | None = None
    world_size: int | None = None
    backend: str | None = None
    pg_config: tuple[dict[str, Any], ...] = ()
    device_properties: tuple[dict[str, Any], ...] = ()
    versions: Mapping[str, Any] = field(default_factory=dict)
    stack: Literal["cuda", "rocm", "cpu", "unknown"] = "unknown"
    base_time_ns: int | None = None
    processes: Mapping[int, str] = field(default_factory=dict)
    threads: Mapping[tuple[int, int], str] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    header: Mapping[str, Any] = field(default_factory=dict, repr=False)
    stats: Mapping[str, Any] = field(default_factory=dict, repr=False)
    cache: str = "off"
    offset_ns: int = 0


@dataclass(frozen=True)
class GpuOps:
    """GPU ops (kernels, copies, fills) as parallel arrays; times in ns.

    ``cls`` indexes :data:`~aorta.trace.classify.GPU_CLASSES`; ``launch`` is the event row of the
    runtime call that launched the op (``-1`` when unlinked), ``launch_rt`` its index in
    :attr:`Trace.runtime_rows` (``-1``) and ``launch_ts`` its start.
    """

    row: np.ndarray
    rank: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    cls: np.ndarray
    name: np.ndarray
    launch: np.ndarray
    launch_ts: np.ndarray
    launch_rt: np.ndarray

    @property
    def linked(self) -> np.ndarray:
        return self.launch >= 0

    def take(self, mask: np.ndarray) -> GpuOps:
        """The ops selected by a boolean mask or index array."""
        return GpuOps(**{name: getattr(self, name)[mask] for name in self.__dataclass_fields__})

    def __len__(self) -> int:
        return int(self.row.size)


class Trace:
    """Columnar events of one or more ranks of a torch.profiler (Kineto) trace.

    Build one with :func:`aorta.trace.load`. ``events`` is a DataFrame with one row per complete
    (``ph == "X"``) event: ``rank``, ``cat`` and ``name`` (categoricals), ``ts`` and ``dur``
    (int64 ns), ``pid``, ``tid``, ``correlation``, ``external_id``, ``stream``, ``device``
    (``-1`` when absent), ``input_dims``/``input_type``/``concrete``/``input_strides`` (the JSON
    text of ``Input Dims``, ``Input type``, ``Concrete Inputs`` and ``Input Strides``,
    categorical) and ``seq`` (the autograd ``Sequence number``, ``-1`` when absent).

    Links are computed once, on first use: a GPU op to the runtime call that launched it
    (``correlation``), a runtime call to the CPU op it ran under (``External id``).

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> trace = synthetic_trace([("kernel", "gemm_kernel", 0, 10), ("kernel", "ncclDevKernel_Generic", 5, 20)])
    >>> trace.ranks
    [0]
    >>> len(trace.events)
    4
    """

    def __init__(
        self,
        events: pd.DataFrame,
        ranks: Mapping[int, RankInfo],
        comms: pd.DataFrame,
        *,
        rules: Rules | None = None,
    ) -> None:
        self._events = events
        self._ranks = dict(sorted(ranks.items()))
        self._comms = comms
        self._rules = rules if rules is not None else default_rules()
        self._codes: dict[str, np.ndarray] = {}  # categorical codes, read-only, by column
        self._categories: dict[str, list[str]] = {}

    # -- data -----------------------------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame:
        """All complete events, one row each (see the class docstring for the columns)."""
        return self._events

    @property
    def comm_args(self) -> pd.DataFrame:
        """Collective arguments (``Collective name``, ``In msg nelems``, ...) by event ``row``."""
        return self._comms

    @property
    def ranks(self) -> list[int]:
        """The ranks in this trace, sorted."""
        return list(self._ranks)

    @property
    def rules(self) -> Rules:
        """The classification rules in use."""
        return self._rules

    def info(self, rank: int | None = None) -> RankInfo:
        """Metadata of ``rank`` (default: the only rank; a ``ValueError`` if there are several)."""
        if rank is None:
            if len(self._ranks) != 1:
                raise ValueError(f"this trace has ranks {self.ranks}: say which one")
            return next(iter(self._ranks.values()))
        try:
            return self._ranks[rank]
        except KeyError:
            raise ValueError(f"no rank {rank} in this trace (ranks {self.ranks})") from None

    @property
    def diagnostics(self) -> list[str]:
        """Data problems worth knowing (no GPU events, unlinked kernels, repaired bytes, ...)."""
        notes: list[str] = []
        gpu = self.gpu_ops
        for rank, info in self._ranks.items():
            n_gpu = int((gpu.rank == rank).sum())
            where = f"rank {rank}" + (f" ({info.path})" if info.path else "")
            if n_gpu == 0:
                notes.append(
                    f"{where}: no GPU events (kernel/gpu_memcpy/gpu_memset); "
                    "host_timeline() breaks down its host-side work instead"
                )
            else:
                unlinked = int(((gpu.rank == rank) & ~gpu.linked).sum())
                if unlinked:
                    notes.append(
                        f"{where}: {unlinked} of {n_gpu} GPU ops have no launching runtime call in the trace"
                    )
            stats = info.stats
            if stats.get("sanitized_bytes"):
                notes.append(
                    f"{where}: {stats['sanitized_bytes']} control characters inside strings replaced by spaces"
                )
            notes.extend(f"{where}: {note}" for note in problem_notes(stats.get("problems", {})))
            if info.cache.startswith("not written"):
                notes.append(f"{where}: parse cache {info.cache}")
        return notes

    def __repr__(self) -> str:
        stacks = sorted({info.stack for info in self._ranks.values()})
        return f"<Trace ranks={self.ranks} events={len(self._events)} gpu_ops={len(self.gpu_ops)} stack={'/'.join(stacks)}>"

    # -- derived copies -------------------------------------------------------------------------
    @staticmethod
    def concat(traces: Iterable[Trace]) -> Trace:
        """One trace holding the ranks of several (which must not share a rank).

        :func:`aorta.trace.load` with a list of files is the efficient way to get a multi-rank
        trace; this joins traces already in memory.

        Examples
        --------
        >>> from aorta.trace.testing import synthetic_trace
        >>> a = synthetic_trace([("kernel", "k", 0, 1)], header={"distributedInfo": {"rank": 0}})
        >>> b = synthetic_trace([("kernel", "k", 0, 1)], header={"distributedInfo": {"rank": 1}})
        >>> Trace.concat([a, b]).ranks
        [0, 1]
        """
        traces = list(traces)
        if not traces:
            raise ValueError("no traces to concatenate")
        infos: dict[int, RankInfo] = {}
        events, comms, offset = [], [], 0
        for t in traces:
            clash = set(infos).intersection(t.ranks)
            if clash:
                raise ValueError(f"rank(s) {sorted(clash)} appear in more than one trace")
            infos.update(t._ranks)
            events.append(t.events.astype(dict.fromkeys(_CATEGORICALS, object)))
            comms.append(t.comm_args.assign(row=t.comm_args["row"] + offset))
            offset += len(t.events)
        merged = pd.concat(events, ignore_index=True).astype(
            dict.fromkeys(_CATEGORICALS, "category")
        )
        return Trace(merged, infos, pd.concat(comms, ignore_index=True), rules=traces[0].rules)

    def with_rules(self, rules: Rules) -> Trace:
        """The same events classified by other rules (the events are shared, not copied)."""
        return Trace(self._events, self._ranks, self._comms, rules=rules)

    def select(self, *, ranks: Iterable[int]) -> Trace:
        """A trace holding only ``ranks``."""
        keep = set(ranks)
        missing = keep.difference(self._ranks)
        if missing:
            raise ValueError(f"no rank(s) {sorted(missing)} in this trace (ranks {self.ranks})")
        mask = self._events["rank"].isin(keep).to_numpy()
        return self._subset(mask, {r: i for r, i in self._ranks.items() if r in keep})

    def _subset(self, mask: np.ndarray, ranks: Mapping[int, RankInfo]) -> Trace:
        new_row = np.cumsum(mask) - 1
        comms = (
            self._comms[mask[self._comms["row"].to_numpy()]].copy()
            if len(self._comms)
            else self._comms
        )
        if len(comms):
            comms["row"] = new_row[comms["row"].to_numpy()]
        events = self._events[mask].reset_index(drop=True)
        return Trace(events, ranks, comms.reset_index(drop=True), rules=self._rules)

    def shifted(self, offsets_ns: Mapping[int, int]) -> Trace:
        """A copy with each rank's timestamps moved by ``offsets_ns[rank]`` (added to ``ts``)."""
        shift = np.zeros(len(self._events), dtype=np.int64)
        rank = self.column("rank")
        infos = dict(self._ranks)
        for r, off in offsets_ns.items():
            shift[rank == r] = int(off)
            infos[r] = replace(infos[r], offset_ns=infos[r].offset_ns + int(off))
        events = self._events.assign(ts=self.column("ts") + shift)  # the other columns are shared
        return Trace(events, infos, self._comms, rules=self._rules)

    # -- columns as numpy -----------------------------------------------------------------------
    def column(self, name: str) -> np.ndarray:
        """A column as a numpy array (codes for the categoricals ``cat``/``name``/``input_*``)."""
        if name in self._codes:
            return self._codes[name]
        col = self._events[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes: np.ndarray = col.cat.codes.to_numpy()
            codes.flags.writeable = False  # shared by every caller
            self._codes[name] = codes
            return codes
        values: np.ndarray = col.to_numpy()
        return values

    def categories(self, name: str) -> list[str]:
        """The unique values of a categorical column, indexed by :meth:`column` codes (one list
        per trace and column, shared: do not modify it)."""
        if name not in self._categories:
            self._categories[name] = list(self._events[name].cat.categories)
        return self._categories[name]

    def find(
        self,
        *,
        cats: Iterable[str] | None = None,
        names: Collection[str] | Callable[[str], object] | None = None,
    ) -> np.ndarray:
        """Event rows whose ``cat`` is one of ``cats`` and whose name is in ``names`` (or
        satisfies it, when it is a predicate — called once per unique name).

        Examples
        --------
        >>> from aorta.trace.testing import synthetic_trace
        >>> t = synthetic_trace([("cpu_op", "aten::mm", 0, 5), ("kernel", "k", 10, 1)])
        >>> t.find(cats=["cpu_op"]).tolist(), t.find(names=lambda n: n.startswith("cuda")).tolist()
        ([0], [1])
        """
        mask = np.ones(len(self._events), dtype=bool)
        if cats is not None:
            wanted = set(cats)
            mask &= np.isin(
                self.column("cat"), [i for i, c in enumerate(self.categories("cat")) if c in wanted]
            )
        if names is not None:
            test = names if callable(names) else set(names).__contains__
            mask &= np.isin(
                self.column("name"), [i for i, n in enumerate(self.categories("name")) if test(n)]
            )
        return np.flatnonzero(mask)

    def _pair_codes(
        self,
        rows: np.ndarray,
        table: Literal["gpu", "gemm", "runtime", "host"],
        labels: tuple[str, ...],
    ) -> np.ndarray:
        """Classify ``rows`` by (name, cat) with one rules lookup per unique pair."""
        names = self.column("name")[rows].astype(np.int64)
        cats = self.column("cat")[rows].astype(np.int64)
        pair = names * (len(self.categories("cat")) + 1) + cats
        codes, uniques = pd.factorize(pair)
        name_list, cat_list = self.categories("name"), self.categories("cat")
        u_names = [name_list[u // (len(cat_list) + 1)] for u in uniques]
        u_cats = [cat_list[u % (len(cat_list) + 1)] for u in uniques]
        return (
            self._rules.codes(table, u_names, u_cats, labels)[codes]
            if len(uniques)
            else np.empty(0, dtype=np.int16)
        )

    # -- links ----------------------------------------------------------------------------------
    @cached_property
    def runtime_rows(self) -> np.ndarray:
        """Event rows of host runtime/driver calls (``cuda_runtime``/``cuda_driver``, HIP too)."""
        return self.find(cats=RUNTIME_CATS)

    @cached_property
    def runtime_kind(self) -> np.ndarray:
        """For :attr:`runtime_rows`: index into ``RUNTIME_KINDS`` (launch, memcpy, ...)."""
        return self._pair_codes(self.runtime_rows, "runtime", RUNTIME_KINDS)

    @cached_property
    def gpu_ops(self) -> GpuOps:
        """The GPU ops, classified and linked to their launching runtime calls."""
        rows = self.find(cats=GPU_CATS)
        rank = self.column("rank")
        rt = self.runtime_rows
        launch_pos = links.lookup(
            rank[rows], self.column("correlation")[rows], rank[rt], self.column("correlation")[rt]
        )
        launch = (
            np.where(launch_pos >= 0, rt[np.maximum(launch_pos, 0)], -1)
            if rt.size
            else np.full(rows.size, -1)
        )
        ts = self.column("ts")
        device, stream = self.column("device")[rows], self.column("stream")[rows]
        return GpuOps(
            row=rows,
            rank=rank[rows],
            device=np.where(device >= 0, device, self.column("pid")[rows]),
            stream=np.where(stream >= 0, stream, self.column("tid")[rows]),
            ts=ts[rows],
            end=ts[rows] + np.maximum(self.column("dur")[rows], 0),
            cls=self._pair_codes(rows, "gpu", GPU_CLASSES).astype(np.int8),
            name=self.column("name")[rows],
            launch=launch,
            launch_ts=np.where(launch >= 0, ts[np.maximum(launch, 0)], -1),
            launch_rt=launch_pos,
        )

    @cached_property
    def op_rows(self) -> np.ndarray:
        """Event rows of CPU ops and user annotations (``cpu_op``/``user_annotation``)."""
        return self.find(cats=_OP_CATS)

    @cached_property
    def host_cls(self) -> np.ndarray:
        """For :attr:`op_rows`: index into ``HOST_CLASSES`` (compute, communication, other)."""
        return self._pair_codes(self.op_rows, "host", HOST_CLASSES)

    @cached_property
    def runtime_op(self) -> np.ndarray:
        """For :attr:`runtime_rows`: the event row of the CPU op with the same External id, or -1."""
        rank = self.column("rank")
        ext = self.column("external_id")
        ops = self.op_rows
        rt = self.runtime_rows
        pos = links.lookup(rank[rt], ext[rt], rank[ops], ext[ops])
        return np.where(pos >= 0, ops[np.maximum(pos, 0)], -1) if ops.size else np.full(rt.size, -1)

    # -- analyses (each a pure function in its own module) --------------------------------------
    def gpu_timeline(
        self,
        *,
        by: Literal["rank", "device"] = "rank",
        include_unlinked: bool = False,
        memset: Literal["ignore", "memcpy", "compute"] = "ignore",
    ) -> pd.DataFrame:
        """TraceLens-compatible GPU time breakdown; see :func:`aorta.trace.timeline.gpu_timeline`."""
        return timeline.gpu_timeline(self, by=by, include_unlinked=include_unlinked, memset=memset)

    def host_timeline(self) -> pd.DataFrame:
        """The host-side breakdown (CPU-only traces); see :func:`aorta.trace.host.host_timeline`."""
        return host.host_timeline(self)

    def timeline(
        self,
        *,
        device: Literal["auto", "gpu", "host"] = "auto",
        include_unlinked: bool = False,
        memset: Literal["ignore", "memcpy", "compute"] = "ignore",
    ) -> pd.DataFrame:
        """GPU breakdown per rank, or the host's for ranks without GPU ops; see
        :func:`aorta.trace.timeline.timeline`."""
        return timeline.timeline(
            self, device=device, include_unlinked=include_unlinked, memset=memset
        )

    def idle_causes(self, *, kernel_wait_us: float = 10.0) -> pd.DataFrame:
        """Idle time per stream by cause; see :func:`aorta.trace.timeline.idle_causes`."""
        return timeline.idle_causes(self, kernel_wait_us=kernel_wait_us)

    def steps(
        self,
        *,
        include_unlinked: bool = False,
        memset: Literal["ignore", "memcpy", "compute"] = "ignore",
    ) -> pd.DataFrame:
        """One row per ProfilerStep; see :func:`aorta.trace.steps.steps`."""
        return steps.steps(self, include_unlinked=include_unlinked, memset=memset)

    def kernels(self, *, by_rank: bool = False) -> pd.DataFrame:
        """GPU time per kernel name; see :func:`aorta.trace.tables.kernels`."""
        return tables.kernels(self, by_rank=by_rank)

    def ops(self, *, by_rank: bool = False) -> pd.DataFrame:
        """CPU and GPU time per CPU op; see :func:`aorta.trace.tables.ops`."""
        return tables.ops(self, by_rank=by_rank)

    def gemms(self, *, by: Literal["shape", "call"] = "shape") -> pd.DataFrame:
        """GEMM FLOPs and TFLOP/s; see :func:`aorta.trace.gemm.gemms`."""
        return gemm.gemms(self, by=by)

    def perf_ops(
        self, device: PerfDevice = None, *, by: Literal["args", "shape"] = "args"
    ) -> pd.DataFrame:
        """FLOPs, bytes, TFLOP/s, TB/s and roofline per op and arguments (``by="shape"``: per
        op and shape); see :func:`aorta.trace.perf.perf_ops`."""
        return perf.perf_ops(self, device=device, by=by)

    def perf_summary(
        self, device: PerfDevice = None, *, by: Literal["args", "shape"] = "args"
    ) -> pd.DataFrame:
        """Every GPU op once, under the outermost op with a model (coverage in
        ``attrs["coverage"]``); see :func:`aorta.trace.perf.perf_summary`."""
        return perf.perf_summary(self, device=device, by=by)

    def collectives(self, *, device: Device = "auto") -> pd.DataFrame:
        """Collective calls with bytes and bandwidths; see :func:`aorta.trace.collectives.collectives`."""
        return collectives.collectives(self, device=device)

    def collective_skew(self, *, device: Device = "auto") -> pd.DataFrame:
        """Collectives matched across ranks; see :func:`aorta.trace.collectives.collective_skew`."""
        return collectives.collective_skew(self, device=device)

    def stragglers(self, *, device: Device = "auto") -> pd.DataFrame:
        """Ranks ranked by lateness; see :func:`aorta.trace.collectives.stragglers`."""
        return collectives.stragglers(self, device=device)

    def align(self, *, method: Alignment = "collective_end") -> Trace:
        """Clock-align the ranks; see :func:`aorta.trace.collectives.clock_offsets`."""
        return self.shifted(collectives.clock_offsets(self, method=method))


#: How each kind of value read as absent or replaced is described in ``Trace.diagnostics``.
_PROBLEMS = {
    "utf8": "event(s) with invalid UTF-8 in a value read, replaced by U+FFFD",
    "out_of_range": "numbers out of range (beyond 64-bit integers) read as absent",
    "ts": "timestamps out of range (beyond 2^63 ns) read as 0",
    "dur": "durations negative or out of range (beyond 2^63 ns) set to 0",
    "rank": "distributedInfo.rank out of range (not a 32-bit integer): the file's position is used",
    "base_time": "baseTimeNanoseconds out of range (not an integer under 2^62): ignored",
}


def problem_notes(problems: Mapping[str, Any]) -> list[str]:
    """One line per kind of value the loader read as absent or replaced (count, first example).

    Examples
    --------
    >>> problem_notes({"dur": {"count": 2, "first": "event 'k' (ts 1.0 us, dur -5.0 us)"}})
    ["2 durations negative or out of range (beyond 2^63 ns) set to 0; first: event 'k' (ts 1.0 us, dur -5.0 us)"]
    """
    order = {kind: i for i, kind in enumerate(_PROBLEMS)}  # not the order found: parts differ
    return [
        f"{entry['count']} {_PROBLEMS.get(kind, kind)}; first: {entry['first']}"
        for kind, entry in sorted(problems.items(), key=lambda item: order.get(item[0], 99))
        if isinstance(entry, Mapping)
    ]
