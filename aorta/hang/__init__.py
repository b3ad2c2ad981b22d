"""Hang forensics, pure: a hang's evidence → who the others wait for, and where.

The evidence of one incident — each rank's flight-recorder dump, its Python stacks
(``py-spy dump --json``), the last lines of its logs — goes in as :class:`RankEvidence`;
:func:`analyze` matches it across ranks, per process group by membership and collective
sequence number, into a :class:`HangReport`. :func:`parse_dump` reads a dump's bytes
(JSON, or a pickle through an unpickler that refuses every global) and :func:`load_evidence`
a user's files and folders, classified by content. Nothing here starts a process: the
capture before the kill lives with the run.
"""

from __future__ import annotations

from aorta.errors import HangEvidenceError

from .analyze import analyze
from .dumps import MAX_DUMP_BYTES, parse_dump, paused_gc
from .load import MAX_MEMORY, load_evidence, load_incident
from .model import (
    MAX_RANK,
    CulpritFrame,
    EvidenceItem,
    ForensicsError,
    GroupIncident,
    HangReport,
    NodeEvidence,
    RankEvidence,
    Variant,
)
from .render import json_ready, text

__all__ = [
    "MAX_DUMP_BYTES",
    "MAX_MEMORY",
    "MAX_RANK",
    "CulpritFrame",
    "EvidenceItem",
    "ForensicsError",
    "GroupIncident",
    "HangEvidenceError",
    "HangReport",
    "NodeEvidence",
    "RankEvidence",
    "Variant",
    "analyze",
    "json_ready",
    "load_evidence",
    "load_incident",
    "parse_dump",
    "paused_gc",
    "text",
]
