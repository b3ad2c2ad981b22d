"""The only code that names files: the run directory (manifest, lock, atomic writes, trial
and trace paths), trial records and their status vocabulary, host/environment snapshots.

The names the CLI and notebooks use load on first use (the package stays cheap to import):
:class:`RunDir` and the run directory's file names, the bundle's plan and writer, this host's
:func:`snapshot`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aorta.lazy import lazy_names

__all__ = [
    "BUNDLE_MANIFEST",
    "HANG_DIR",
    "Redactor",
    "RunDir",
    "bless",
    "plan_bundle",
    "snapshot",
    "write_bundle",
]

_LAZY = {
    "BUNDLE_MANIFEST": "aorta.store.rundir",
    "HANG_DIR": "aorta.store.rundir",
    "RunDir": "aorta.store.rundir",
    "plan_bundle": "aorta.store.bundle",
    "write_bundle": "aorta.store.bundle",
    "snapshot": "aorta.store.hostenv",
    "Redactor": "aorta.store.redact",
    "bless": "aorta.store.history",
}

if TYPE_CHECKING:  # the same names for type checkers; loaded on first access at run time
    from aorta.store.bundle import plan_bundle, write_bundle
    from aorta.store.history import bless
    from aorta.store.hostenv import snapshot
    from aorta.store.redact import Redactor
    from aorta.store.rundir import BUNDLE_MANIFEST, HANG_DIR, RunDir


__getattr__, __dir__ = lazy_names(globals(), _LAZY)
