"""A distributed workload with injected faults, for the hang-forensics tests (real gloo
collectives on CPU; importable, so process-isolated workers load it).

Every rank runs ``collectives`` all_reduces of a small tensor; rank ``rank`` injects ``fault``
just before its collective number ``at`` (1-based, as the flight recorder counts):

* ``sleep`` — sleeps in Python (idle: the hang watch fires; its listener still answers);
* ``gil`` — sleeps in a C call that keeps the GIL (``ctypes.PyDLL``): no Python thread runs,
  so its flight-recorder listener cannot answer; py-spy still reads its stack;
* ``extra`` — issues one all_reduce more than the others: they finish their loop and stay up
  (as ranks that go on to other work do), it waits alone;
* ``shape`` — its tensor has half the size at that collective: gloo completes it there (a
  wrong sum) while the others wait for bytes that never come; it then stays up, done (with
  twice the size instead, its peer aborts at once: "Received data size doesn't match");
* ``die`` — exits at once (``os._exit``), as a crashed rank would;
* ``subgroup`` — the collectives run in two groups (``new_group``: ranks 0 and 1, and the
  rest); the culprit's group waits, the other finishes.
"""

from __future__ import annotations

import ctypes
import os
import time

from aorta.run.workload import Workload, WorkloadResult


def _stall_in_python() -> None:
    time.sleep(1000)


def _stall_holding_the_gil() -> None:
    ctypes.PyDLL(None).sleep(1000)


class HangFault(Workload):
    name = "hang_fault"
    launch_mode = "distributed"
    default_isolation = "process"
    config_keys = frozenset({"fault", "rank", "at", "collectives"})

    def setup(self) -> None:
        from aorta.run.ranks import init_process_group

        self.dist = init_process_group(self.context)

    def run(self) -> WorkloadResult:
        import torch

        dist = self.dist
        fault = self.config.get("fault", "none")
        culprit = int(self.config.get("rank", 1))
        at = int(self.config.get("at", 3))
        me = self.context.rank
        group = None
        if fault == "subgroup":  # ranks 0 and 1, and the others (every rank creates both)
            world = self.context.world_size
            halves = [dist.new_group([0, 1]), dist.new_group(list(range(2, world)))]
            group = halves[0 if me < 2 else 1]
        t = torch.ones(8)
        for n in range(1, int(self.config.get("collectives", 5)) + 1):
            if me == culprit and n == at:
                if fault in ("sleep", "subgroup"):
                    _stall_in_python()
                elif fault == "gil":
                    _stall_holding_the_gil()
                elif fault == "die":
                    os._exit(3)
                elif fault == "extra":
                    dist.all_reduce(t)
                elif fault == "shape":
                    dist.all_reduce(torch.ones(4))
                    _stall_in_python()
            dist.all_reduce(t, group=group)
        if fault == "extra" and me != culprit:
            _stall_in_python()  # up, but done: the culprit's extra all_reduce waits for nobody
        return WorkloadResult(passed=True, step_times_ms=[1.0])
