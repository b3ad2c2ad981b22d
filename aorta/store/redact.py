"""Redaction as a property of the run: what is secret, and scrubbing everything that leaves it.

A run knows which values are secret — by name (:func:`~aorta.store.secrets.is_secret_name`,
the recipe's ``redaction.scrub_env_keys``), from the recipe (``extra_env``, argv flags such as
``--password X``), and from the environment its trials got (which holds a cluster file's
``env_vars`` on a launch). It keeps that knowledge in ``secret_hashes.json`` as **keyed hashes**
(BLAKE2b-128 keyed with a random per-run salt) of each secret value and of its encoded forms
(URL-quoted, JSON-escaped) and long pieces — never the values. Redaction later, from any shell
on any machine, hashes the candidate tokens of a text and masks those whose hash is known.

Why hashes: the values must not be kept in clear (a run directory is copied, shared, tarred),
yet a secret without a recognisable shape (a random password echoed by a job) can only be
found by knowing it. A keyed hash answers "is this token a secret of the run?" and nothing
else; the salt makes hashes useless across runs and defeats precomputed tables. The limit:
whoever holds the file can test guesses offline, so a short or guessable secret is exposed to
them — which is why the file is 0600 and never bundled.

What is masked, by :meth:`Redactor.text` (and its markup-aware twins :meth:`Redactor.html`,
:meth:`Redactor.markdown`, :meth:`Redactor.data` for parsed JSON/YAML):

* **known values** — a token (a run of text without whitespace, quotes, brackets, ``,;|``) or
  a piece of one between separators (``=:@/.,!?&#+%~*^$``) whose hash the run knows;
  values shorter than :data:`MIN_SECRET_LEN` or all digits are not looked for (``1024``, ``on``);
* **shapes** — credentials recognised by their form, whatever they belong to
  (:func:`~aorta.store.secrets.redact_secret_shapes`: URL passwords, bearer tokens, argv flags,
  ``key: value`` to secret keys, ``curl -u``, PEM private keys, well-known token formats);
* **assignments** — ``NAME=value`` / ``"NAME": "value"`` where ``NAME`` is a secret name;
* with ``scrub_paths`` every user's home folder (``~``), with ``scrub_ip_addresses`` IPv4
  addresses (``<ip>``).

Every rule is line-bounded (only a PEM block spans lines, and it keeps its line structure),
inserts the marker as the format needs it (``&lt;redacted&gt;`` in HTML, ``\\<redacted\\>`` in
Markdown prose), and never breaks the YAML, JSON or HTML it cleans.

Examples
--------
>>> r = Redactor.for_run(env={"HF_TOKEN": "hf_abc123", "NCCL_DEBUG": "INFO"}, scrub_ips=True)
>>> r.env({"HF_TOKEN": "hf_abc123", "NCCL_DEBUG": "INFO"})
{'HF_TOKEN': '<redacted>', 'NCCL_DEBUG': 'INFO'}
>>> r.text("login hf_abc123 failed on 10.1.2.3; processed 1024 tokens")
'login <redacted> failed on <ip>; processed 1024 tokens'
>>> r.html("<td title='hf_abc123'>token hf_abc123</td>")
'<td title="&lt;redacted&gt;">token &lt;redacted&gt;</td>'
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import html as _html
import json
import os
import re
import secrets as _secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
import yaml

from aorta.store.record import TrialRecord
from aorta.store.rundir import RunDir, atomic_write
from aorta.store.secrets import (
    REDACTED,
    is_secret_flag,
    is_secret_name,
    mask_assignments,
    numbers_are_secret,
    redact_env,
    redact_secret_shapes_counted,
    scrub_homes,
    scrub_ip_addresses,
    secret_shape_values,
)

__all__ = [
    "DELIMITERS",
    "MIN_SECRET_LEN",
    "OWN_NAMES",
    "OWN_PROSE",
    "Redactor",
    "SecretHashes",
    "harvest_secrets",
    "record_secrets",
    "redact_page",
    "yaml_counted",
]

#: Shorter values are not looked for in text: "on" or "1234" would mask half of every log.
MIN_SECRET_LEN = 6
#: A secret value's pieces (split at whitespace, quotes, brackets) looked for on their own.
_MIN_PIECE_LEN = 8
_SCHEME = "blake2b-128, keyed with the salt, over the UTF-8 bytes"
#: What never belongs to a token: a secret is looked for inside one (a regex character set).
DELIMITERS = _DELIMS = r"\s'\"`<>()\[\]{},;|"
_PIECES = re.compile(rf"[^{_DELIMS}]+")
_DELIM_CHARS = re.compile(rf"[{_DELIMS}]")
#: Where a secret can start or end inside a token: at any character that is not a letter or a
#: digit (``KEY=secret``, ``user:secret@host``, ``secret.``, ``ckpt-secret.txt``, ``run_secret``).
_BOUNDARY = re.compile(r"[\W_]")
#: A terminal escape (a colour ``ESC[31m``, an OSC title's ``ESC]``): a secret may follow one.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")
_DIGITS = re.compile(r"[0-9]+")
_MD_MARKER = r"\<redacted\>"
_MD_RAW = re.compile(r"(?<!\\)<redacted>")
_HTML_MARKER = "&lt;redacted&gt;"
#: HTML: comments, script/style elements (aorta's own code, kept as is), tags, and text.
_HTML_PARTS = re.compile(
    r"(?P<keep><!--.*?-->|<(?P<raw>script|style)\b[^>]*>.*?</(?P=raw)\s*>)|(?P<tag><[^>]*>)",
    re.S | re.I,
)
_ATTR = re.compile(r"""(?P<name>\s[\w:.-]+\s*=\s*)(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')""")

Markup = Literal["text", "html", "markdown"]


@functools.lru_cache(maxsize=8)
def _tokens_of_at_least(n: int) -> re.Pattern[str]:
    return re.compile(rf"[^{_DELIMS}]{{{n},}}")


def _union(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(start, end)`` spans in order, those that overlap joined (masked as one)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


#: A recipe's own fields that the name rule would take for secrets (``PASS``: a password's
#: abbreviation) but whose values are aorta's vocabulary — ``required_for_pass: false``,
#: ``retain.on_pass: summary``. Masked, ``recipe show --resolved`` printed ``<redacted>`` for
#: them, a bundled ``recipe.resolved.yaml`` no longer loaded, and ``summary`` became a known
#: secret. A user's ``scrub_env_keys`` glob still names them.
OWN_NAMES = frozenset({"on_pass", "required_for_pass"})
#: A recipe's own prose and patterns (``description``, a signature's ``regex``, ``condition``,
#: ``hint``, the ``step_time_regex``) describe log lines: a shape in them is masked where shown
#: but is no secret of the run (``regex: 'token: expired'`` made ``expired`` one:
#: ``token_expired`` → ``token_<redacted>``). Nor is a shape the text of such a recipe shows
#: inside them (the sweep harvests the recipe's text too: see :func:`harvest_secrets`).
OWN_PROSE = frozenset({"description", "regex", "condition", "hint", "step_time_regex"})


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str, keys: tuple[str, ...]) -> bool:
    if name in OWN_NAMES:
        return any(fnmatch.fnmatchcase(name, glob) for glob in keys)
    return is_secret_name(name, keys)


def _worth_looking_for(value: str) -> bool:
    return (
        len(value) >= MIN_SECRET_LEN
        and not _DIGITS.fullmatch(value)
        and REDACTED not in value
        and value != _MD_MARKER
    )


def secret_forms(value: str) -> set[str]:
    """The strings a secret can appear as in text: itself, URL-quoted, JSON-escaped, and its
    pieces of at least 8 characters that mix character kinds (``w0rd/with``, a line of a PEM
    key; not a plain word) when it holds whitespace, quotes or brackets. Forms too short or all
    digits are dropped.

    >>> sorted(secret_forms("p@ss w0rd/with spaces"))
    ['p%40ss%20w0rd%2Fwith%20spaces', 'p@ss w0rd/with spaces', 'w0rd/with']
    """
    forms = {value, quote(value, safe=""), json.dumps(value, ensure_ascii=False)[1:-1]}
    if _PIECES.fullmatch(value) is None:
        forms.update(p for p in _PIECES.findall(value) if len(p) >= _MIN_PIECE_LEN and _mixed(p))
    return {f for f in forms if _worth_looking_for(f)}


def _mixed(piece: str) -> bool:
    """A piece that looks like part of a key, not a word: two of lower, upper, digit, other."""
    kinds = (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    return sum(any(k(c) for c in piece) for k in kinds) >= 2


@dataclass(frozen=True)
class SecretHashes:
    """Keyed hashes of secret values (and their forms): what a run looks for, not in clear.

    A secret is found where it stands between characters that are not letters or digits
    (``ckpt-<it>.txt``, ``run_<it>``, after a colour escape), or as the whole of a longer
    stretch when it holds blanks (a passphrase); never inside a run of letters and digits.

    >>> known = SecretHashes.new(["s3cret-value", "correct horse battery staple"])
    >>> known.spans("user s3cret-value, again:s3cret-value.")
    [(5, 17), (25, 37)]
    >>> known.spans("pw: correct horse battery staple. correct, not s3cret-valued")
    [(4, 32)]
    >>> SecretHashes.from_json(known.to_json()) == known, "s3cret" in json.dumps(known.to_json())
    (True, False)
    """

    salt: bytes
    digests: frozenset[str] = frozenset()
    #: The lengths of the forms hashed, longest first (a token is cut only at these lengths).
    lengths: tuple[int, ...] = ()
    #: ``(length, delimiters)`` of each form holding blanks, quotes or brackets (a passphrase:
    #: looked for across tokens, in stretches of that length holding that many delimiters).
    spanning: tuple[tuple[int, int], ...] = ()

    @classmethod
    def new(cls, values: Iterable[str] = (), *, salt: bytes | None = None) -> SecretHashes:
        """Hashes of ``values`` under ``salt`` (default: a fresh random one)."""
        return cls(salt or _secrets.token_bytes(16)).add(values)

    @functools.cached_property
    def _keyed(self) -> tuple[Any, frozenset[bytes]]:
        keyed = hashlib.blake2b(key=self.salt, digest_size=16)
        return keyed, frozenset(bytes.fromhex(d) for d in self.digests)

    def digest(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        return hashlib.blake2b(data, key=self.salt, digest_size=16).hexdigest()

    def add(self, values: Iterable[str]) -> SecretHashes:
        """These hashes plus those of ``values`` (and their forms), under the same salt."""
        forms = {f for v in values for f in secret_forms(v)}
        if not forms:
            return self
        digests = self.digests | {self.digest(f) for f in forms}
        lengths = tuple(sorted(set(self.lengths) | {len(f) for f in forms}, reverse=True))
        wide = {(len(f), len(_DELIM_CHARS.findall(f))) for f in forms}
        spanning = tuple(sorted(set(self.spanning) | {w for w in wide if w[1]}, reverse=True))
        return SecretHashes(self.salt, frozenset(digests), lengths, spanning)

    def __len__(self) -> int:
        return len(self.digests)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "scheme": _SCHEME,
            "salt": self.salt.hex(),
            "lengths": list(self.lengths),
            "spanning": [list(w) for w in self.spanning],
            "digests": sorted(self.digests),
        }

    @classmethod
    def from_json(cls, data: Any) -> SecretHashes:
        """Read :meth:`to_json`'s form; :class:`ValueError` when it is not that."""
        try:
            salt = bytes.fromhex(data["salt"])
            digests = frozenset(str(d) for d in data["digests"])
            lengths = tuple(sorted({int(n) for n in data["lengths"]}, reverse=True))
            pairs = {(int(n), int(k)) for n, k in data.get("spanning", [])}
            wide = tuple(sorted(pairs, reverse=True))
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a secret-hashes file ({exc!r})") from None
        if not 1 <= len(salt) <= 64:
            raise ValueError("not a secret-hashes file (salt length)")
        return cls(salt, digests, lengths, wide)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where in ``text`` a known secret stands: ``(start, end)`` pairs, in order, apart."""
        if not self.digests:
            return []
        if "\x1b" in text:  # escapes as blanks of their length: the positions stay
            text = _ANSI.sub(lambda m: " " * len(m.group()), text)
        seen: dict[str, bool] = {}
        keyed, raw = self._keyed

        def known(piece: str) -> bool:
            hit = seen.get(piece)
            if hit is None:
                h = keyed.copy()  # the keyed state, made once: a third faster than digest()
                h.update(piece.encode("utf-8", "surrogatepass"))
                hit = seen[piece] = h.digest() in raw
            return hit

        found = self._in_tokens(text, known)
        if self.spanning:
            found += self._across_tokens(text, known)
        return _union(found)

    def _in_tokens(self, text: str, known: Any) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for m in _tokens_of_at_least(self.lengths[-1]).finditer(text):
            tok = m.group()
            cuts = [b.start() for b in _BOUNDARY.finditer(tok)]
            ends = {len(tok), *cuts}
            pos = 0  # a hit ends where the next may start: no overlaps
            for start in (0, *(c + 1 for c in cuts)):
                if start < pos:
                    continue
                for n in self.lengths:
                    end = start + n
                    if end in ends and known(tok[start:end]):
                        found.append((m.start() + start, m.start() + end))
                        pos = end
                        break
        return found

    def _across_tokens(self, text: str, known: Any) -> list[tuple[int, int]]:
        """Secrets holding blanks (a passphrase): every stretch from a start to an end of a token
        (or of a piece of one) of a spanning form's length and delimiter count, on one line."""
        starts, ends, blank, breaks = _stretches(text)
        found = []
        for n, k in self.spanning:
            if n > len(text):
                continue
            at = np.flatnonzero(starts[: len(text) - n + 1] & ends[n:])
            at = at[(blank[at + n] - blank[at] == k) & (breaks[at + n] == breaks[at])]
            found += [(s, s + n) for s in at.tolist() if known(text[s : s + n])]
        return found


#: Per ASCII character (and one more for the rest): a letter or digit; a token's delimiter.
_ALNUM = np.array([chr(i).isalnum() for i in range(128)] + [False])
_DELIM = np.array([bool(re.fullmatch(rf"[{_DELIMS}]", chr(i))) for i in range(128)] + [False])


def _stretches(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where a secret may start (``starts[i]``) and end (``ends[j]``) in ``text``, and the
    running counts of delimiters and line breaks before each position (vectorised: a passphrase
    is looked for at every such start, the one pass over a text's characters)."""
    code = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    alnum, delim = _ALNUM[np.minimum(code, 128)], _DELIM[np.minimum(code, 128)]
    wide = code >= 128
    if wide.any():
        chars, where = np.unique(code[wide], return_inverse=True)
        alnum[wide] = np.array([chr(c).isalnum() for c in chars.tolist()])[where]
        delim[wide] = np.array([chr(c).isspace() for c in chars.tolist()])[where]
    starts = ~delim
    starts[1:] &= ~alnum[:-1]  # not inside a run of letters and digits
    ends = np.zeros(len(code) + 1, dtype=bool)
    ends[1:] = ~delim
    ends[1:-1] &= ~alnum[1:]
    blank = np.zeros(len(code) + 1, dtype=np.int32)
    np.cumsum(delim, out=blank[1:])
    breaks = np.zeros(len(code) + 1, dtype=np.int32)
    np.cumsum(code == 10, out=breaks[1:])
    return starts, ends, blank, breaks


def harvest_secrets(
    *envs: Mapping[str, str],
    scrub_keys: Iterable[str] = (),
    texts: Iterable[str] = (),
    data: Iterable[Any] = (),
) -> set[str]:
    """The secret values a run holds: the values of secret-named variables of the ``envs``, what
    the shape rules find in the other values and in ``texts`` (a recipe's argv: ``--password
    X``), and the values under secret-named keys of parsed ``data`` (a recipe's ``extra_env``).

    A secret is a whole value: where a shape rule cut a value holding blanks at its first blank
    (``DB_PASSWORD: correct horse battery staple`` in a recipe's text gives ``correct``), the
    cut-off word is not a secret of its own — the whole value, known by its name, is.

    >>> sorted(harvest_secrets({"DB_PASSWORD": "hunter22", "URL": "redis://:pw0rd99@h"},
    ...                        texts=["train.py --hf-token abc123xyz"]))
    ['abc123xyz', 'hunter22', 'pw0rd99']
    >>> sorted(harvest_secrets({"DB_PASSWORD": "correct horse battery staple"},
    ...                        texts=["DB_PASSWORD: correct horse battery staple"]))
    ['correct horse battery staple']

    Not harvested: a short plain word after a token or key (``--token expired``; masked
    where its shape shows it), the recipe's :data:`OWN_PROSE` — nor what a shape finds in
    ``texts`` only inside them (the ``texts`` are the recipe's own text, which shows its
    patterns: ``regex: 'auth: invalid_grant_abc1'`` would make a secret of the very line a
    signature looks for). After a password or under a secret name a plain word is a secret:

    >>> sorted(harvest_secrets({"DB_PASSWORD": "letmein"}, texts=["--token expired"],
    ...                        data=[{"hint": "token: s3cr3tValue42"}, "--password hunter"]))
    ['hunter', 'letmein']
    >>> sorted(harvest_secrets(texts=["regex: 'auth: invalid_grant_abc1' --token s3cr3tArgv9"],
    ...                        data=[{"regex": "auth: invalid_grant_abc1"}]))
    ['s3cr3tArgv9']
    """
    keys = tuple(scrub_keys)
    named: set[str] = set()  # whole values: under a secret name, after a secret flag
    shaped: set[str] = set()  # what a shape rule found in text (cut at the first blank)
    for env in envs:
        for k, v in env.items():
            if _secret_name(k, keys):
                named.add(v)
            else:
                shaped.update(secret_shape_values(v, plain_words=False))
    from_texts = {v for text in texts for v in secret_shape_values(text, plain_words=False)}
    for d in data:
        for value, whole in _secret_values(d, keys):
            (named if whole else shaped).add(value)
    # What only the texts show, and only inside the data's own prose and patterns, is theirs
    # (a value the data holds anywhere else was found there, and stays).
    prose = [p for d in data for p in _own_prose(d)]
    if prose:
        in_prose = {v for p in prose for v in secret_shape_values(p)}
        from_texts = {
            v
            for v in from_texts
            if v in shaped or v in named or not (v in in_prose or any(v in p for p in prose))
        }
    shaped |= from_texts
    wide = [v for v in named if isinstance(v, str) and _PIECES.fullmatch(v) is None]
    shaped = {v for v in shaped if not any(v in w for w in wide)}
    return {v for v in named | shaped if isinstance(v, str) and _worth_looking_for(v)}


def _secret_values(value: Any, keys: tuple[str, ...]) -> Iterable[tuple[str, bool]]:
    """``(value, whole)``: whole under a secret-named key or after a secret flag, else a shape's."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and isinstance(v, str | int) and _secret_name(k, keys):
                yield str(v), True
            elif not (k in OWN_PROSE and isinstance(v, str)):
                yield from _secret_values(v, keys)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str) and is_secret_flag(v) and i + 1 < len(value):
                yield str(value[i + 1]), True
            yield from _secret_values(v, keys)
    elif isinstance(value, str):
        yield from ((v, False) for v in secret_shape_values(value, plain_words=False))


def _whole_secret(name: str, value: Any) -> bool:
    """Whether ``value``, under a secret name, is masked whole: a string, or a number under a
    name whose numbers are secret (not a bool: ``auth: false`` is a setting)."""
    if isinstance(value, str):
        return True
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and numbers_are_secret(name)


def _own_prose(value: Any) -> Iterable[str]:
    """The strings under :data:`OWN_PROSE` keys of parsed data, at any depth."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k in OWN_PROSE and isinstance(v, str):
                yield v
            else:
                yield from _own_prose(v)
    elif isinstance(value, list):
        for v in value:
            yield from _own_prose(v)


def load_secret_hashes(rd: RunDir) -> SecretHashes | None:
    """The run's ``secret_hashes.json`` (``None``: none, or unreadable — an older run)."""
    try:
        return SecretHashes.from_json(json.loads(rd.secret_hashes_path.read_bytes()))
    except (OSError, ValueError):
        return None


def record_secrets(rd: RunDir, values: Iterable[str]) -> SecretHashes:
    """Add ``values`` to the run's ``secret_hashes.json`` (created 0600 with a fresh salt, or
    extended under its salt on a resume) and return what the file now holds."""
    known = load_secret_hashes(rd) or SecretHashes.new()
    known = known.add(values)
    atomic_write(rd.secret_hashes_path, json.dumps(known.to_json(), indent=1) + "\n", mode=0o600)
    return known


def _load_any(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None


@dataclass(frozen=True)
class Redactor:
    """What to scrub and the secrets to look for. Cheap to copy; pure (no file is touched)."""

    scrub_keys: tuple[str, ...] = ()
    scrub_paths: bool = False
    scrub_ips: bool = False
    #: The secret values looked for, as keyed hashes (one set per run: a comparison page
    #: carries two).
    known: tuple[SecretHashes, ...] = field(default=(), repr=False)

    # -- building one --------------------------------------------------------------------------

    @classmethod
    def for_run(
        cls,
        *,
        env: Mapping[str, str] = {},
        scrub_keys: Iterable[str] = (),
        scrub_paths: bool = False,
        scrub_ips: bool = False,
        texts: Iterable[str] = (),
    ) -> Redactor:
        """A redactor for trials that see ``env`` (the process environment plus overlays) and
        run what ``texts`` say (the resolved recipe: its argv flags)."""
        keys = tuple(scrub_keys)
        values = harvest_secrets(env or {}, scrub_keys=keys, texts=texts)
        return cls(keys, scrub_paths, scrub_ips).with_values(values)

    @classmethod
    def for_recipe(
        cls, redaction: Any, *, env: Mapping[str, str] | None = None, texts: Iterable[str] = ()
    ) -> Redactor:
        """From a recipe's :class:`~aorta.recipe.blocks.Redaction` block (``None``: names only)."""
        if redaction is None:
            return cls.for_run(env=env or {}, texts=texts)
        return cls.for_run(
            env=env or {},
            scrub_keys=redaction.scrub_env_keys,
            scrub_paths=redaction.scrub_paths,
            scrub_ips=redaction.scrub_ip_addresses,
            texts=texts,
        )

    @classmethod
    def of_run(
        cls,
        run_dir: RunDir | str | Path,
        *,
        env: Mapping[str, str] | None = None,
        scrub_env_keys: Iterable[str] = (),
        scrub_paths: bool | None = None,
        scrub_ips: bool | None = None,
    ) -> Redactor:
        """The run's own redaction, usable later from any shell: its recipe's ``redaction:``
        block (the arguments add to it), the secrets its ``secret_hashes.json`` knows, and the
        secret values still readable in its files (the 0600 recipe's ``extra_env`` and argv)
        or set in ``env`` (default: this process's environment).

        >>> import tempfile
        >>> rd = RunDir.create(tempfile.mkdtemp(), ticket=None, workload="x")
        >>> _ = record_secrets(rd, ["swordfish-42"])
        >>> Redactor.of_run(rd, env={}).text("pw=swordfish-42")
        'pw=<redacted>'
        """
        rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
        recipe = _load_any(rd.recipe_path)
        block = recipe.get("redaction") if isinstance(recipe, Mapping) else None
        block = block if isinstance(block, Mapping) else {}
        keys = [str(k) for k in block.get("scrub_env_keys") or []]
        keys += [k for k in scrub_env_keys if k not in keys]
        # (Snapshots and cell.json are written redacted: only the recipe holds values in clear.)
        values = harvest_secrets(os.environ if env is None else env, scrub_keys=keys, data=[recipe])
        known = (load_secret_hashes(rd) or SecretHashes.new()).add(values)
        return cls(
            tuple(keys),
            bool(block.get("scrub_paths")) if scrub_paths is None else scrub_paths,
            bool(block.get("scrub_ip_addresses")) if scrub_ips is None else scrub_ips,
            (known,),
        )

    @classmethod
    def of_file(cls, path: str | Path) -> Redactor:
        """The secrets a file the user wrote holds — a recipe's ``extra_env`` and argv, a
        cluster file's ``env_vars`` —, for what aorta prints about it: values under secret
        names (the recipe's ``scrub_env_keys`` too), after secret argv flags, and credential
        shapes. An unreadable file gives the name and shape rules alone.

        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.yaml"
        >>> _ = p.write_text("extra_env: {HF_TOKEN: hf_s3cretVALUE99}")
        >>> Redactor.of_file(p).text("logged in as hf_s3cretVALUE99")
        'logged in as <redacted>'
        """
        data = _load_any(Path(path))
        block = data.get("redaction") if isinstance(data, Mapping) else None
        block = block if isinstance(block, Mapping) else {}
        raw = block.get("scrub_env_keys")
        keys = tuple(str(k) for k in raw if isinstance(k, str)) if isinstance(raw, list) else ()
        return cls(keys).with_values(harvest_secrets(scrub_keys=keys, data=[data]))

    def printing(self) -> Redactor:
        """This redactor for what aorta prints on a terminal: secrets, shapes and secret
        names, but home folders and IP addresses kept (a printed command must still run)."""
        return replace(self, scrub_paths=False, scrub_ips=False)

    def with_values(self, values: Iterable[str]) -> Redactor:
        """This redactor also looking for ``values`` (hashed in memory, never kept)."""
        values = list(values)
        if not values:
            return self
        first = self.known[0] if self.known else SecretHashes.new()
        return replace(self, known=(first.add(values), *self.known[1:]))

    def joined(self, other: Redactor) -> Redactor:
        """Both redactors' rules and secrets (a page that shows two runs)."""
        keys = self.scrub_keys + tuple(k for k in other.scrub_keys if k not in self.scrub_keys)
        return Redactor(
            keys,
            self.scrub_paths or other.scrub_paths,
            self.scrub_ips or other.scrub_ips,
            self.known + other.known,
        )

    @property
    def n_known(self) -> int:
        """How many secret forms this redactor looks for (for manifests: never the values)."""
        return sum(len(k) for k in self.known)

    # -- names ---------------------------------------------------------------------------------

    def is_secret_name(self, name: str) -> bool:
        """Whether a variable (or JSON key) called ``name`` holds a secret: the policy's
        names or the recipe's ``scrub_env_keys``.

        >>> r = Redactor(scrub_keys=("MY_*",))
        >>> r.is_secret_name("HF_TOKEN"), r.is_secret_name("MY_VAR"), r.is_secret_name("PATH")
        (True, True, False)
        """
        return _secret_name(name, self.scrub_keys)

    def name(self, path: str) -> str:
        """A relative path as it may leave the run: each file or folder name scrubbed as
        :meth:`text`, the markers as characters every file system takes (``[redacted]``,
        ``[ip]``).

        >>> Redactor().with_values(["s3cretTok-42"]).name("cells/a/ckpt-s3cretTok-42.pt")
        'cells/a/ckpt-[redacted].pt'
        """
        parts = [self.text(part) for part in path.split("/")]
        return "/".join(p.replace(REDACTED, "[redacted]").replace("<ip>", "[ip]") for p in parts)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with secret and scrubbed variables redacted (values scrubbed as text)."""
        out = redact_env(env, scrub_keys=self.scrub_keys)
        return {k: v if v == REDACTED else self.text(v) for k, v in out.items()}

    # -- text ----------------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with known secrets, credential shapes, assignments to secret names, and
        (when asked) home paths and IPs masked."""
        return self.text_counted(text)[0]

    def text_counted(self, text: str) -> tuple[str, int]:
        """:meth:`text` and how many things it masked, for the per-file counts of a bundle.

        >>> Redactor.for_run(env={"HF_TOKEN": "hf_abc123"}).text_counted("a hf_abc123 b hf_abc123")
        ('a <redacted> b <redacted>', 2)
        """
        text, n = self._known_counted(text)
        text, shapes = redact_secret_shapes_counted(text)
        n += shapes
        text, assigned = self._assignments(text)
        n += assigned
        if self.scrub_paths:
            text, homes = scrub_homes(text)
            n += homes
        if self.scrub_ips:
            text, ips = scrub_ip_addresses(text)
            n += ips
        return text, n

    def _known_counted(self, text: str) -> tuple[str, int]:
        """Only the known secret values masked (the first rule of :meth:`text_counted`)."""
        spans = _union(s for k in self.known for s in k.spans(text)) if self.known else []
        if not spans:
            return text, 0
        parts, pos = [], 0
        for start, end in spans:
            parts += [text[pos:start], REDACTED]
            pos = end
        return "".join(parts) + text[pos:], len(spans)

    def _assignments(self, text: str) -> tuple[str, int]:
        """``HF_TOKEN=abc`` / ``"WANDB_API_KEY": "abc"`` → the value masked (secret names)."""
        # A glob of scrub_env_keys can name anything: then every line is looked at.
        return mask_assignments(text, self.is_secret_name, any_name=bool(self.scrub_keys))

    def markdown(self, text: str) -> str:
        """:meth:`text` for Markdown: the marker escaped (``\\<redacted\\>``) outside code
        spans, where a renderer would take ``<redacted>`` for an HTML tag and hide it.

        >>> Redactor().markdown("`--token abcdef12` and --token abcdef12")
        '`--token <redacted>` and --token \\\\<redacted\\\\>'
        """
        return self.markdown_counted(text)[0]

    def markdown_counted(self, text: str) -> tuple[str, int]:
        text, n = self.text_counted(text)
        if "<redacted>" not in text:
            return text, n
        lines = []
        for line in text.split("\n"):
            parts = line.split("`")
            if len(parts) % 2 == 0:  # an unclosed backtick: the whole line is prose
                parts = [line]
            parts[::2] = [_MD_RAW.sub(lambda _: _MD_MARKER, p) for p in parts[::2]]
            lines.append("`".join(parts))
        return "\n".join(lines), n

    def html(self, page: str) -> str:
        """An HTML page (or fragment) with :meth:`text` applied to every text node and
        attribute value (unescaped first, escaped again): the marker is ``&lt;redacted&gt;``;
        tags are kept, and in comments, ``<script>`` and ``<style>`` only known secret values
        are masked (a shape rule would break code: ``e.key === 'Enter'``).

        >>> Redactor().with_values(["s3cretTok-42"]).html(
        ...     "<script>if (e.key === 'x') t = 's3cretTok-42';</script><!-- s3cretTok-42 -->")
        "<script>if (e.key === 'x') t = '<redacted>';</script><!-- <redacted> -->"
        """
        return self.html_counted(page)[0]

    def html_counted(self, page: str) -> tuple[str, int]:
        out: list[str] = []
        n = pos = 0

        def text_node(raw: str) -> str:
            nonlocal n
            clean, m = self.text_counted(_html.unescape(raw))
            if not m:
                return raw
            n += m
            return _html.escape(clean, quote=False)

        def attr(a: re.Match[str]) -> str:
            nonlocal n
            raw = a.group("dq") if a.group("dq") is not None else a.group("sq")
            if raw.startswith("data:"):  # an embedded image
                return a.group(0)
            clean, m = self.text_counted(_html.unescape(raw))
            if not m:
                return a.group(0)
            n += m
            return f'{a.group("name")}"{_html.escape(clean, quote=True)}"'

        for m in _HTML_PARTS.finditer(page):
            out.append(text_node(page[pos : m.start()]))
            if m.group("keep"):  # code and comments: known values only (shapes would break code)
                kept, hit = self._known_counted(m.group(0))
                out.append(kept)
                n += hit
            else:
                out.append(_ATTR.sub(attr, m.group(0)))
            pos = m.end()
        out.append(text_node(page[pos:]))
        return "".join(out), n

    # -- data ----------------------------------------------------------------------------------

    def data(self, value: Any) -> Any:
        """Parsed JSON/YAML data redacted (:meth:`data_counted`)."""
        return self.data_counted(value)[0]

    def data_counted(self, value: Any) -> tuple[Any, int]:
        """Parsed JSON/YAML data with every string scrubbed as :meth:`text`, every string under
        a secret-named key (``{"HF_TOKEN": "…"}``) and every list item after a secret flag
        (``["--password", "…"]``) replaced whole, a number too under a password's or a PIN's
        name (:func:`~aorta.store.secrets.numbers_are_secret`: YAML reads ``pin: 4821`` as
        one); and the count.

        >>> Redactor().data_counted({"env": {"HF_TOKEN": "x1", "N": "postgres://u:pw@h/d"}})
        ({'env': {'HF_TOKEN': '<redacted>', 'N': 'postgres://u:<redacted>@h/d'}}, 2)
        >>> Redactor().data_counted({"DB_PASSWORD": 123456, "MAX_TOKEN": 4096, "on": True})
        ({'DB_PASSWORD': '<redacted>', 'MAX_TOKEN': 4096, 'on': True}, 1)
        >>> Redactor().data_counted(["run", "--password", "pw", "--n", "3"])
        (['run', '--password', '<redacted>', '--n', '3'], 1)
        """
        if isinstance(value, str):
            return self.text_counted(value)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            n = 0
            for k, v in value.items():
                if isinstance(k, str) and _whole_secret(k, v) and self.is_secret_name(k):
                    out[k] = REDACTED
                    n += v != REDACTED
                    continue
                out[k], m = self.data_counted(v)
                n += m
            return out, n
        if isinstance(value, list):
            items: list[Any] = []
            n = 0
            for i, v in enumerate(value):
                after_flag = i > 0 and isinstance(value[i - 1], str)
                if after_flag and isinstance(v, str) and is_secret_flag(value[i - 1]):
                    items.append(REDACTED)
                    n += v != REDACTED
                    continue
                v, m = self.data_counted(v)
                items.append(v)
                n += m
            return items, n
        return value, 0

    def record(self, record: TrialRecord) -> TrialRecord:
        """A copy of ``record`` whose free text (errors, hints, warnings, info, failure details,
        the signature's matching line, the OOM lines, each rank's too) is scrubbed; numbers
        and statuses are untouched."""
        fields = ("error", "hint", "signature_line", "signature_hint")

        def scrub(part: Any) -> dict[str, Any]:
            update: dict[str, Any] = {
                f: self.text(getattr(part, f)) for f in fields if getattr(part, f)
            }
            update["warnings"] = [self.text(w) for w in part.warnings]
            update["info"] = {k: self.text(v) for k, v in part.info.items()}
            update["failure_details"] = self.data(part.failure_details)
            # Each rank's OOM line is a log line like the signature's.
            update["oom"] = [e.model_copy(update={"line": self.text(e.line)}) for e in part.oom]
            return update

        ranks = [r.model_copy(update=scrub(r)) for r in record.ranks]
        return record.model_copy(update={**scrub(record), "ranks": ranks})


def yaml_counted(redactor: Redactor, raw: str) -> tuple[str, int]:
    """A YAML file's text redacted line by line, and still YAML: when the text rules would
    break a document that parsed, or its structure holds more (a secret-named key, the item
    after a secret argv flag), the document is redacted as data and written again.

    >>> yaml_counted(Redactor(), "env: {HF_TOKEN: abc123}\\nn: 4096\\n")
    ('env: {HF_TOKEN: <redacted>}\\nn: 4096\\n', 1)
    """
    text, n = redactor.text_counted(raw)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError:
            return text, n  # it was not YAML to begin with
        data, n = redactor.data_counted(data)  # the text rules broke it: redact the data
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True), n
    # What only the structure shows (an argv list over lines: "- --password" then "- X").
    data, more = redactor.data_counted(data)
    if more:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True), n + more
    return text, n


def redact_page(page: str, *run_dirs: RunDir | str | Path) -> str:
    """An HTML page about ``run_dirs`` as it may leave them: :meth:`Redactor.html` with each
    run's own redaction (:meth:`Redactor.of_run`); with no run, credential shapes and this
    process's secret variables only. The one call every page writer makes before writing.

    >>> redact_page("<pre>mysql://root:pw@db/x</pre>")
    '<pre>mysql://root:&lt;redacted&gt;@db/x</pre>'
    """
    redactor = Redactor.for_run(env=os.environ)
    for rd in run_dirs:
        redactor = redactor.joined(Redactor.of_run(rd))
    return redactor.html(page)
