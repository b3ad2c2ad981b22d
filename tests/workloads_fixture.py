"""Small real workloads for engine tests (importable, so process-isolated workers load them)."""

from __future__ import annotations

import os
import signal
import time

from aorta.plugins import FailureDetail, Workload, WorkloadResult


class EnvProbe(Workload):
    """Reports the environment it sees; sets a variable of its own to prove it is undone."""

    name = "env_probe"
    config_keys = frozenset({"var", "fail_if_set"})

    def run(self) -> WorkloadResult:
        var = self.config.get("var", "PROBE_VAR")
        os.environ["SET_BY_WORKLOAD"] = "leak"
        value = os.environ.get(var, "")
        failed = bool(self.config.get("fail_if_set")) and bool(value)
        return WorkloadResult(
            passed=not failed,
            failure_details=[FailureDetail(f"{var} was set", hint="expected")] if failed else [],
            step_times_ms=[1.0 + self.context.trial] * self.steps,
            info={
                "value": value,
                "trial_env": os.environ.get("AORTA_TRIAL", ""),
                "cell_env": os.environ.get("AORTA_CELL", ""),
            },
        )


class Sleeper(Workload):
    """Sleeps in Python (interruptible by the in-process deadline)."""

    name = "sleeper"
    config_keys = frozenset({"seconds", "phase"})

    def setup(self) -> None:
        if self.config.get("phase") == "setup":
            time.sleep(float(self.config.get("seconds", 1000)))

    def run(self) -> WorkloadResult:
        if self.config.get("phase", "run") == "run":
            time.sleep(float(self.config.get("seconds", 1000)))
        return WorkloadResult(passed=True)


class Crasher(Workload):
    """Dies by a signal in the phase the config names (process isolation only)."""

    name = "crasher"
    supported_isolation = frozenset({"process"})
    default_isolation = "process"
    required_isolation = "process"
    config_keys = frozenset({"phase"})

    def setup(self) -> None:
        if self.config.get("phase") == "setup":
            os.kill(os.getpid(), signal.SIGSEGV)

    def run(self) -> WorkloadResult:
        if self.config.get("phase", "run") == "run":
            os.kill(os.getpid(), signal.SIGSEGV)
        return WorkloadResult(passed=True)


class Raiser(Workload):
    """Raises in the phase the config names."""

    name = "raiser"
    config_keys = frozenset({"phase"})

    def __init__(self, config, context):
        super().__init__(config, context)
        if config.get("phase") == "init":
            raise ValueError("bad config")
        self.cleaned = False

    def setup(self) -> None:
        if self.config.get("phase") == "setup":
            raise RuntimeError("setup went wrong")

    def run(self) -> WorkloadResult:
        if self.config.get("phase") == "run":
            raise RuntimeError("run went wrong")
        return WorkloadResult(passed=True)

    def cleanup(self) -> None:
        if self.config.get("phase") == "cleanup":
            raise OSError("cleanup went wrong")


class Noop(Workload):
    """Does nothing: measures the harness."""

    name = "noop"

    def run(self) -> WorkloadResult:
        return WorkloadResult(passed=True, step_times_ms=[0.0])


TEST_WORKLOADS = {cls.name: cls for cls in (EnvProbe, Sleeper, Crasher, Raiser, Noop)}


class DistHang(Workload):
    """Joins the trial's process group; then ``crash_rank`` dies and the others hang (as a
    stuck NCCL collective would) — only an abort from the crashed rank frees them early."""

    name = "dist_hang"
    launch_mode = "distributed"
    default_isolation = "process"
    config_keys = frozenset({"crash_rank", "phase"})

    def setup(self) -> None:
        from aorta.run.ranks import init_process_group

        self.dist = init_process_group(self.context)
        if self.config.get("phase") == "setup" and self.context.rank == int(
            self.config.get("crash_rank", 1)
        ):
            os.kill(os.getpid(), signal.SIGKILL)

    def run(self) -> WorkloadResult:
        self.dist.barrier()
        crash_rank = int(self.config.get("crash_rank", 1))
        if crash_rank < 0:
            return WorkloadResult(passed=True)
        if self.context.rank == crash_rank:
            os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(1000)
        return WorkloadResult(passed=True)
