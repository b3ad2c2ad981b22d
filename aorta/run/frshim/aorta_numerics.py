"""aorta's numerics locator: the first module whose forward output is not finite, per rank.

Loaded by this folder's ``sitecustomize`` into every Python process of a trial run with
``check_numerics`` (``AORTA_NUMERICS_DIR`` set), or installed in-process by
``aorta/run/numerics.py``. Standard library only at import: when ``torch.nn.modules.module``
is imported, a global forward pre-hook and forward hook are registered
(``register_module_forward_pre_hook`` / ``register_module_forward_hook``), which cost nothing
until a module runs.

Per module call the output's floating tensors are checked by one reduction each (their sum,
in float32 at least: a NaN or an Inf anywhere makes it non-finite; a finite sum that
overflows is ruled out by the exact ``isfinite(...).all()``, run only then). On the
CPU each check is answered at once; on a device the checks of one root forward (a forward
entered with no other module running) are kept as device flags and read back together when
it ends: one device sync per step, not one per module. The first module, in the order the
forwards finished (a child before its parent), whose output holds a NaN or an Inf is the
finding; whether its inputs were finite says whether it produced the value or was fed it.
The step is the forward count of the root module (the first module called at depth 0; a loss
module called after it shares its step). One JSON file per process is written to
``$AORTA_NUMERICS_DIR/nonfinite.<rank>.<pid>.json`` the moment a finding is made (a NaN
often crashes the run soon after), and the hooks are removed: after the finding a rank runs
at full speed.

Not seen: values produced in backward (gradients), inside ``torch.compile``'d regions (their
inner modules run no hooks) and in tensors a module returns inside objects other than
tuples, lists and dicts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

ENV_DIR = "AORTA_NUMERICS_DIR"
#: Floating tensors checked per module output (and input), at most.
MAX_TENSORS = 16


def _tensors(obj, out, depth=0):
    """The floating-point tensors in ``obj`` (tensors, tuples, lists, dict values)."""
    import torch

    if len(out) >= MAX_TENSORS or depth > 4:
        return out
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.numel() and not obj.is_meta:
            out.append(obj.detach())
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors(item, out, depth + 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            _tensors(item, out, depth + 1)
    return out


def _kind(tensors):
    import torch

    return "nan" if any(bool(torch.isnan(t).any()) for t in tensors) else "inf"


def _finite(tensors):
    import torch

    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _sum(t):
    """One reduction, no allocation: non-finite when ``t`` holds a NaN or Inf (or when a
    finite sum overflows, which :func:`_finite` then rules out), summed in float32 at least."""
    import torch

    return t.sum(dtype=torch.float32) if t.dtype in (torch.float16, torch.bfloat16) else t.sum()


def _quick_finite(tensors):
    import math

    return all(math.isfinite(float(_sum(t))) for t in tensors)


class Locator:
    """The hooks' state on one process; :meth:`remove` takes the hooks out."""

    def __init__(self, folder, rank=None):
        self.folder = folder
        self.rank = rank
        self.depth = 0
        self.root = None
        self.calls = 0
        self.step = 0
        #: A device's checks of the current root forward: (module, flag, outputs, inputs).
        self.pending = []
        self.found = None
        self.handles = []
        #: The output last checked: a container returning its last child's output (a
        #: Sequential, a block ending in its activation) is not checked twice.
        self.last = None

    # -- hooks --------------------------------------------------------------------------------

    def pre(self, module, args):
        if self.depth == 0:
            if self.root is None:
                self.root = module
            if module is self.root:
                self.step = self.calls
                self.calls += 1
        self.depth += 1

    def post(self, module, args, output):
        self.depth = max(0, self.depth - 1)
        seen = (output, getattr(output, "_version", None))  # an in-place change is new
        if self.last is not None and output is self.last[0] and seen[1] == self.last[1]:
            pass
        elif self.found is None:
            self.last = seen
            with contextlib.suppress(Exception):  # never break the user's forward
                self._check(module, args, output)
        if self.depth == 0:
            self.last = None  # nothing kept alive past the root forward
        if self.depth == 0 and self.pending:
            pending, self.pending = self.pending, []
            if self.found is None:
                self._resolve(pending)

    def _check(self, module, args, output):
        import torch

        outs = _tensors(output, [])
        if not outs:
            return
        if all(t.device.type == "cpu" for t in outs):
            if not _quick_finite(outs) and not _finite(outs):
                self._found(module, _kind(outs), _finite(_tensors(args, [])))
            return
        flag = torch.isfinite(torch.stack([_sum(t).float() for t in outs])).all()
        self.pending.append((module, flag, outs, _tensors(args, [])))

    def _resolve(self, pending):
        import torch

        flags = torch.stack([p[1] for p in pending]).cpu().tolist()  # one sync per root forward
        for ok, (module, _flag, outs, ins) in zip(flags, pending):  # noqa: B905 - any Python 3 (a trial's own interpreter)
            if not ok and not _finite(outs):  # a finite sum that overflowed is no finding
                self._found(module, _kind(outs), _finite(ins))
                return

    # -- the finding ----------------------------------------------------------------------------

    def _name(self, module):
        root = self.root
        if root is not None:
            if module is root:
                return ""
            for name, sub in root.named_modules():
                if sub is module:
                    return name
        return f"<{type(module).__name__}>"

    def _found(self, module, kind, inputs_finite):
        rank = self.rank
        if rank is None:
            rank = int(os.environ.get("RANK", "0") or 0)
        self.found = {
            "rank": rank,
            "step": self.step,
            "module": self._name(module),
            "cls": type(module).__name__,
            "kind": kind,
            "inputs_finite": bool(inputs_finite),
            "pid": os.getpid(),
        }
        self.remove()
        self.pending = []
        try:
            os.makedirs(self.folder, exist_ok=True)
            path = os.path.join(self.folder, f"nonfinite.{rank}.{os.getpid()}.json")
            with open(path + ".tmp", "w") as fh:
                json.dump(self.found, fh)
            os.replace(path + ".tmp", path)
        except OSError:
            pass

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []


def install(mod, folder, rank=None):
    """Register the global hooks through ``torch.nn.modules.module`` (``mod``); the
    :class:`Locator` they report to."""
    loc = Locator(folder, rank)
    loc.handles.append(mod.register_module_forward_pre_hook(loc.pre))
    try:
        loc.handles.append(mod.register_module_forward_hook(loc.post, always_call=True))
    except TypeError:  # a torch before 2.1
        loc.handles.append(mod.register_module_forward_hook(loc.post))
    return loc


class _WhenModulesLoad:
    """A meta-path finder that finds ``torch.nn.modules.module`` as usual and installs the
    hooks once it has run; then it leaves ``sys.meta_path``."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "torch.nn.modules.module":
            return None
        if cls in sys.meta_path:
            sys.meta_path.remove(cls)
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            with contextlib.suppress(Exception):  # the user's import must not fail for it
                install(module, os.environ[ENV_DIR])

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get(ENV_DIR) and __name__ == "aorta_numerics":  # loaded by sitecustomize
    if "torch.nn.modules.module" in sys.modules:
        install(sys.modules["torch.nn.modules.module"], os.environ[ENV_DIR])
    else:
        sys.meta_path.insert(0, _WhenModulesLoad)
