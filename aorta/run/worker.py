"""``python -m aorta.run.worker REQUEST.json`` — one trial in a fresh interpreter.

The engine starts the worker with the cell's overlay already in its environment, so variables
read when torch, HIP or RCCL load take effect. The worker runs the trial through
:func:`aorta.run.trial.execute` and writes the :class:`~aorta.run.trial.Outcome` as JSON to the path
the request names (atomically). It exits 0 whenever it could write an outcome; anything else
(a crash, a signal) is classified by the engine.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from aorta.run.trial import Outcome, context_from_dict, execute
from aorta.store.record import TrialStatus
from aorta.store.rundir import atomic_write


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m aorta.run.worker REQUEST.json", file=sys.stderr)
        return 2
    # SIGTERM from the engine's deadline: unwind like Ctrl-C so cleanup() still runs.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    request = json.loads(Path(argv[0]).read_text())

    ctx = context_from_dict(request["context"])
    result_path = Path(request["result_path"])
    try:
        cls = _load(request["workload"])
    except Exception as exc:
        outcome = Outcome(
            TrialStatus.INFRASTRUCTURE_FAILED,
            error=f"cannot load workload {request['workload'].get('ref')}: {exc}",
        )
    else:
        phase_file = Path(request["phase_path"])
        current = ["start"]

        def mark(phase: str) -> None:
            # A crash after this point is blamed on `phase` (setup → setup_failed, run → workload_failed).
            current[0] = phase
            phase_file.write_text(phase)

        try:
            outcome = execute(cls, request["config"], ctx, on_phase=mark)
        except KeyboardInterrupt:
            # The engine's deadline (SIGTERM); cleanup() already ran as the stack unwound.
            outcome = Outcome(
                TrialStatus.TIMEOUT,
                error=f"deadline passed during {current[0]}(); the worker was stopped",
                main_work_started=current[0] == "run",
            )
    atomic_write(result_path, json.dumps(outcome.to_dict(), default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def _load(ref: dict[str, str]) -> type:
    import importlib

    if ref.get("sys_path") and ref["sys_path"] not in sys.path:
        sys.path.insert(0, ref["sys_path"])
    module_name, _, qualname = ref["ref"].partition(":")
    obj: object = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{ref['ref']} is not a class")
    if not getattr(obj, "name", ""):
        obj.name = ref.get("name", "")  # type: ignore[attr-defined]
    return obj


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
