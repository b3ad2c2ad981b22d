"""The recipe's ``redaction:`` block, applied to everything a run writes about itself.

One :class:`Redactor` per run: built from the recipe's ``redaction`` settings and the
environment the trials see, it scrubs

* **variables** — secret names (TOKEN, SECRET, KEY, PASSWORD, …, the rule of
  :func:`aorta.store.hostenv.redact_env`) and the recipe's ``scrub_env_keys`` globs become
  ``<redacted>``, in ``host_env.json`` and in each cell's ``cell.json`` overlay;
* **text** — the *values* of those variables wherever they appear in a trial record's error,
  hint, warnings, info and failure details, and any credential recognised by its shape
  (:func:`~aorta.store.hostenv.redact_secret_shapes`); with ``scrub_paths`` the home folder
  becomes ``~``, with ``scrub_ip_addresses`` IPv4 addresses become ``<ip>``.

The recipe itself (``recipe.resolved.yaml``) is left as written: a resumed run needs it.

Examples
--------
>>> r = Redactor.for_run(env={"HF_TOKEN": "hf_abc123", "NCCL_DEBUG": "INFO"}, scrub_ips=True)
>>> r.env({"HF_TOKEN": "hf_abc123", "NCCL_DEBUG": "INFO"})
{'HF_TOKEN': '<redacted>', 'NCCL_DEBUG': 'INFO'}
>>> r.text("login hf_abc123 failed on 10.1.2.3")
'login <redacted> failed on <ip>'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aorta.store.hostenv import REDACTED, redact_env, redact_secret_shapes_counted
from aorta.store.record import TrialRecord

__all__ = ["Redactor"]

_IP = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
#: Shorter values are not masked in text: "1" or "on" would mask half of every message.
_MIN_SECRET_LEN = 4
#: Text fields of a trial record (and of each rank's outcome) that can quote the environment.
_TEXT_FIELDS = ("error", "hint")


@dataclass(frozen=True)
class Redactor:
    """What to scrub, and the secret values to look for in text. Cheap; pure."""

    scrub_keys: tuple[str, ...] = ()
    scrub_paths: bool = False
    scrub_ips: bool = False
    #: Values of secret variables, longest first (so a value that contains another goes first).
    secrets: tuple[str, ...] = ()

    @classmethod
    def for_run(
        cls,
        *,
        env: Mapping[str, str] = {},
        scrub_keys: Iterable[str] = (),
        scrub_paths: bool = False,
        scrub_ips: bool = False,
    ) -> Redactor:
        """A redactor for trials that see ``env`` (the process environment plus overlays)."""
        keys = tuple(scrub_keys)
        env = env or {}
        hidden = redact_env(env, scrub_keys=keys)
        values = {v for k, v in env.items() if hidden[k] == REDACTED and len(v) >= _MIN_SECRET_LEN}
        return cls(keys, scrub_paths, scrub_ips, tuple(sorted(values, key=len, reverse=True)))

    @classmethod
    def for_recipe(cls, redaction: Any, *, env: Mapping[str, str] | None = None) -> Redactor:
        """From a recipe's :class:`~aorta.recipe.schema.Redaction` block (``None``: names only)."""
        if redaction is None:
            return cls.for_run(env=env)
        return cls.for_run(
            env=env,
            scrub_keys=redaction.scrub_env_keys,
            scrub_paths=redaction.scrub_paths,
            scrub_ips=redaction.scrub_ip_addresses,
        )

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with secret and scrubbed variables redacted (values scrubbed as text)."""
        out = redact_env(env, scrub_keys=self.scrub_keys)
        return {k: v if v == REDACTED else self.text(v) for k, v in out.items()}

    def text(self, text: str) -> str:
        """``text`` with secret values and credential shapes (URLs with a password, bearer
        tokens, ``--password=…``), and (when asked) home paths and IPs, masked."""
        return self.text_counted(text)[0]

    def text_counted(self, text: str) -> tuple[str, int]:
        """:meth:`text` and how many things it masked (secret values, credential shapes, home
        paths, IP addresses), for the per-file counts of a bundle's manifest.

        >>> Redactor.for_run(env={"HF_TOKEN": "hf_abc123"}).text_counted("a hf_abc123 b hf_abc123")
        ('a <redacted> b <redacted>', 2)
        """
        n = 0
        for value in self.secrets:
            hits = text.count(value)
            if hits:
                n += hits
                text = text.replace(value, REDACTED)
        text, shapes = redact_secret_shapes_counted(text)
        n += shapes
        if self.scrub_paths:
            home = str(Path.home())
            if home and home != "/" and home in text:
                n += text.count(home)
                text = text.replace(home, "~")
        if self.scrub_ips:
            text, ips = _IP.subn("<ip>", text)
            n += ips
        return text, n

    def is_secret_name(self, name: str) -> bool:
        """Whether a variable (or JSON key) called ``name`` holds a secret: the policy's
        names or the recipe's ``scrub_env_keys``.

        >>> r = Redactor(scrub_keys=("MY_*",))
        >>> r.is_secret_name("HF_TOKEN"), r.is_secret_name("MY_VAR"), r.is_secret_name("PATH")
        (True, True, False)
        """
        return redact_env({name: "x"}, scrub_keys=self.scrub_keys)[name] == REDACTED

    def data_counted(self, value: Any) -> tuple[Any, int]:
        """Parsed JSON/YAML data with every string scrubbed as :meth:`text` and every string
        under a secret-named key (``{"HF_TOKEN": "…"}``) replaced whole; and the count.

        >>> Redactor().data_counted({"env": {"HF_TOKEN": "x1", "N": "postgres://u:pw@h/d"}})
        ({'env': {'HF_TOKEN': '<redacted>', 'N': 'postgres://u:<redacted>@h/d'}}, 2)
        """
        if isinstance(value, str):
            return self.text_counted(value)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            n = 0
            for k, v in value.items():
                if isinstance(k, str) and isinstance(v, str) and self.is_secret_name(k):
                    out[k] = REDACTED
                    n += v != REDACTED
                    continue
                out[k], m = self.data_counted(v)
                n += m
            return out, n
        if isinstance(value, list):
            items = [self.data_counted(v) for v in value]
            return [v for v, _ in items], sum(m for _, m in items)
        return value, 0

    def _deep(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self._deep(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._deep(v) for v in value]
        return value

    def record(self, record: TrialRecord) -> TrialRecord:
        """A copy of ``record`` whose free text (errors, hints, warnings, info, failure details,
        each rank's too) is scrubbed; numbers and statuses are untouched."""

        def scrub(part: Any) -> dict[str, Any]:
            update: dict[str, Any] = {
                f: self.text(getattr(part, f)) for f in _TEXT_FIELDS if getattr(part, f)
            }
            update["warnings"] = [self.text(w) for w in part.warnings]
            update["info"] = {k: self.text(v) for k, v in part.info.items()}
            update["failure_details"] = self._deep(part.failure_details)
            return update

        ranks = [r.model_copy(update=scrub(r)) for r in record.ranks]
        return record.model_copy(update={**scrub(record), "ranks": ranks})
