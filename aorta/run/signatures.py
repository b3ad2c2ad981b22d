"""Failure signatures: which known failure a trial's captured output shows.

A :class:`Signature` is a named log pattern with a tier and a one-line hint. The library is
three sources, in this order:

1. the built-ins, ``aorta/run/signatures.yaml`` (versioned: ``SignatureLibrary.version``);
2. installed plugins, through the ``aorta.signatures`` entry-point group: the object an entry
   point names is a list of signatures (:class:`Signature` or mappings with the YAML file's
   keys), a mapping with a ``signatures`` list, or a callable returning either; a broken
   plugin is named in a warning and skipped;
3. the recipe's ``custom_patterns`` (named ``custom:<id>``; tier 0 unless they say).

:meth:`SignatureLibrary.scan` streams files in blocks (memory bounded by the block size
and :data:`MAX_LINE_BYTES`) and keeps each signature's first matching line. Every pattern is
RE2 (:mod:`aorta.regex`: no backtracking), and one automaton over all pending
signatures finds the candidate lines, so a scan's time is linear in the bytes read whatever
the patterns, the lines or their number. A trial's signature is its lowest-tier match, the earliest on a tie
(:func:`top_match`). The engine matches every failed trial's captured output, and every
trial's when the recipe has ``custom_patterns`` (they may fail a passing trial):
:func:`classify`.

Examples
--------
>>> lib = SignatureLibrary.load(entry_points=False)
>>> m = lib.scan_text(["step 3", "RuntimeError: CUDA error: an illegal memory access was encountered"])
>>> [(x.name, x.tier) for x in m]
[('illegal_memory_access', 2), ('cuda_error', 2), ('python_exception', 6)]
>>> top_match(m).hint.split(";")[0]
'out-of-bounds device access'
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aorta.errors import AortaError
from aorta.recipe.blocks import CustomPattern  # a block's model: not on aorta.recipe's face
from aorta.recipe.condition import compile_condition, evaluate
from aorta.recipe.yamldoc import parse_yaml
from aorta.regex import RegexError, compile_alternation, compile_regex
from aorta.text import printable

__all__ = [
    "MAX_LINE_BYTES",
    "SIGNATURES_GROUP",
    "Signature",
    "SignatureLibrary",
    "SignatureMatch",
    "TrialClassification",
    "classify",
    "top_match",
]

SIGNATURES_GROUP = "aorta.signatures"
#: A matching line is kept up to this many bytes; longer lines are matched in pieces.
MAX_LINE_BYTES = 64 * 1024
#: What a record keeps of the matching line.
KEPT_LINE_CHARS = 500
#: Bytes read at a time.
BLOCK_BYTES = 8 * 1024 * 1024
#: Bytes of one log scanned at most (the first quarter and the last three quarters of this
#: budget); ``None`` in :meth:`SignatureLibrary.scan` scans whole files.
MAX_SCAN_BYTES = 512 * 1024 * 1024
_DATA_FILE = "signatures.yaml"

OnMatch = Literal["fail", "warn", "info"]


@dataclass(frozen=True)
class Signature:
    """A named failure pattern: ``regex`` (one line, RE2 syntax), ``tier`` (lower = closer to
    the root cause) and a one-line ``hint``. ``on_match``, ``required_for_pass`` and
    ``condition`` are the recipe's ``custom_patterns`` options; ``source`` says where it came
    from."""

    name: str
    regex: str
    tier: int = 5
    hint: str = ""
    on_match: OnMatch = "fail"
    required_for_pass: bool = False
    condition: str | None = None
    source: str = "builtin"
    #: Literal pieces one of which every matching line holds. Documentation only since the
    #: scan became one RE2 automaton (kept so entries that give them stay valid).
    keywords: tuple[str, ...] = ()
    _rx: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a signature needs a non-empty name")
        try:
            rx = compile_regex(self.regex)
        except RegexError as exc:
            raise ValueError(f"signature {self.name!r}: bad regex: {exc}") from None
        object.__setattr__(self, "_rx", rx)
        object.__setattr__(self, "keywords", tuple(str(k) for k in self.keywords))
        object.__setattr__(
            self, "_cond", compile_condition(self.condition) if self.condition else None
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str) -> Signature:
        known = {"name", "regex", "tier", "hint", "on_match", "keywords"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} (allowed: {sorted(known)})")
        return cls(
            name=str(data["name"]),
            regex=str(data["regex"]),
            tier=int(data.get("tier", 5)),
            hint=str(data.get("hint", "")),
            on_match=data.get("on_match", "fail"),
            source=source,
            keywords=tuple(data.get("keywords") or ()),
        )

    @classmethod
    def from_custom(cls, pattern: CustomPattern) -> Signature:
        """The signature of one recipe ``custom_patterns`` entry (named ``custom:<id>``)."""
        return cls(
            name=f"custom:{pattern.id}",
            regex=pattern.match.regex,
            tier=pattern.tier,
            hint=pattern.hint or "",
            on_match=pattern.on_match,
            required_for_pass=pattern.required_for_pass,
            condition=pattern.match.condition,
            source="recipe",
        )


@dataclass(frozen=True)
class SignatureMatch:
    """One signature's first match: the line (at most :data:`KEPT_LINE_CHARS`), its 1-based
    number in ``file`` (0 for text that is not a file, such as the trial's error), and the
    regex's named groups."""

    signature: Signature
    line: str
    file: str
    line_number: int
    captures: dict[str, str] = field(default_factory=dict)
    #: Position for ordering: (index of the source, offset of the line, library order).
    order: tuple[int, int, int] = (0, 0, 0)

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def tier(self) -> int:
        return self.signature.tier

    @property
    def hint(self) -> str:
        return self.signature.hint


def top_match(matches: Iterable[SignatureMatch]) -> SignatureMatch | None:
    """The match that names a trial's failure: lowest tier, then earliest line, then library
    order.

    Only ``on_match: fail`` signatures name a failure (a ``required_for_pass`` line is
    wanted, not a failure).
    """
    fails = [
        m for m in matches if m.signature.on_match == "fail" and not m.signature.required_for_pass
    ]
    return min(fails, key=lambda m: (m.tier, m.order), default=None)


def _line_text(line: bytes) -> str:
    """A matching line as a record keeps it: decoded, control characters escaped, capped."""
    text = printable(line.rstrip(b"\r").decode("utf-8", "replace"))
    if len(text) > KEPT_LINE_CHARS:
        text = text[: KEPT_LINE_CHARS - 1] + "…"
    return text


#: Matches whose ``condition`` is false, per signature and scan, before the signature is given
#: up for the rest of the scan (said in ``problems``). Each try costs one line, so the scan
#: stays linear either way; this bounds the constant (a log whose every line matches).
MAX_CONDITION_TRIES = 100_000


class _Scanner:
    """Matches signatures against successive buffers of whole lines, first match each.

    One RE2 automaton over every pending signature (:func:`compile_alternation`) finds the
    next line any of them matches, in one linear pass; only that line is then matched with
    each pending signature's own pattern (captures, ``condition``). Found signatures leave
    the automaton, so a log full of one error costs a line per signature, not per error.
    """

    def __init__(self, signatures: Sequence[Signature], facts: Mapping[str, Any]) -> None:
        self.pending: dict[int, Signature] = dict(enumerate(signatures))
        self.found: list[SignatureMatch] = []
        self.facts = facts
        self.problems: list[str] = []
        self._finders: dict[frozenset[int], Any] = {}
        self._tries = dict.fromkeys(self.pending, 0)

    def _finder(self, active: frozenset[int]) -> Any:
        if active not in self._finders:
            self._finders[active] = compile_alternation(
                [self.pending[k].regex for k in sorted(active)]
            )
        return self._finders[active]

    def _next_candidate(self, active: frozenset[int], buf: bytes, pos: int) -> int:
        """Start of the first match of any ``active`` signature at or after ``pos``; -1."""
        finder = self._finder(active)
        if finder is not None:
            m = finder.search(buf, pos)
            return -1 if m is None else m.start()
        own = (self.pending[k]._rx.search(buf, pos) for k in active)
        return min((m.start() for m in own if m is not None), default=-1)

    def feed(self, buf: bytes, *, source: str, index: int, offset: int, line0: int) -> None:
        if not buf or not self.pending:
            return
        active = frozenset(self.pending)
        pos = 0
        while active and pos <= len(buf):
            start = self._next_candidate(active, buf, pos)
            if start < 0:
                break
            lo = buf.rfind(b"\n", 0, start) + 1
            hi = buf.find(b"\n", start)
            hi = len(buf) if hi < 0 else hi
            line = buf[lo:hi]
            gone = set()
            for k in sorted(active):
                sig = self.pending[k]
                caps = self._on_line(k, line, source)
                if caps is None:
                    if self._tries[k] >= MAX_CONDITION_TRIES:
                        self.problems.append(
                            f"{sig.name}: its condition was false on {MAX_CONDITION_TRIES:,} "
                            f"matching lines; not tried past byte {offset + hi:,} of {source}"
                        )
                        del self.pending[k]
                        gone.add(k)
                    continue
                number = line0 + buf.count(b"\n", 0, lo) + 1 if line0 >= 0 else 0
                self.found.append(
                    SignatureMatch(
                        sig, _line_text(line), source, number, caps, (index, offset + lo, k)
                    )
                )
                del self.pending[k]
                gone.add(k)
            if gone:
                active = active - gone
            pos = hi + 1

    def _on_line(self, k: int, line: bytes, source: str) -> dict[str, str] | None:
        """The captures of signature ``k``'s first match on ``line`` whose condition holds."""
        sig = self.pending[k]
        cond = getattr(sig, "_cond", None)
        for m in sig._rx.finditer(line):
            caps = _captures(m)
            if cond is None:
                return caps
            self._tries[k] += 1
            errors: list[str] = []
            if evaluate(cond, capture=caps, errors=errors, **self.facts):
                return caps
            for e in errors:
                msg = f"{sig.name}: the condition was counted as false on a line of {source}: {e}"
                if msg not in self.problems:
                    self.problems.append(msg)
            if self._tries[k] >= MAX_CONDITION_TRIES:
                break
        return None


def _captures(m: Any) -> dict[str, str]:
    return {
        k.decode("utf-8", "replace"): v.decode("utf-8", "replace")[:KEPT_LINE_CHARS]
        for k, v in m.groupdict().items()
        if v is not None
    }


def _read_blocks(
    path: Path, block: int, start: int = 0, stop: int | None = None
) -> Iterable[tuple[bytes, int, int]]:
    """``(buffer of whole lines, its byte offset, newlines added)`` of ``path[start:stop]``;
    a line longer than :data:`MAX_LINE_BYTES` is cut into pieces of that size (a newline
    added after each). A ``start`` inside a line skips to the next line."""
    carry = b""
    offset = start
    with open(path, "rb") as fh:
        if start:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                skipped = fh.readline(MAX_LINE_BYTES)
                offset += len(skipped)
        while True:
            want = block if stop is None else min(block, stop - fh.tell())
            chunk = fh.read(want) if want > 0 else b""
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                whole, carry = b"", data
            else:
                whole, carry = data[: cut + 1], data[cut + 1 :]
            added = 0
            if len(carry) > MAX_LINE_BYTES:
                whole, carry = whole + carry[:MAX_LINE_BYTES] + b"\n", carry[MAX_LINE_BYTES:]
                added = 1
            if whole:
                yield whole, offset, added
                offset += len(whole) - added
    if carry:
        yield carry, offset, 0


class SignatureLibrary:
    """An ordered set of signatures (names unique) and the scans over them.

    Cheap to build once per sweep; :meth:`scan` reads files and keeps nothing between calls.
    """

    def __init__(self, signatures: Iterable[Signature], *, version: int = 0) -> None:
        table: dict[str, Signature] = {}
        for sig in signatures:
            if sig.name in table:
                raise AortaError(
                    f"failure signature {sig.name!r} is defined twice "
                    f"({table[sig.name].source}; {sig.source})"
                )
            table[sig.name] = sig
        self.signatures: tuple[Signature, ...] = tuple(table.values())
        self.version = version

    def __len__(self) -> int:
        return len(self.signatures)

    def __getitem__(self, name: str) -> Signature:
        for sig in self.signatures:
            if sig.name == name:
                return sig
        raise KeyError(name)

    @classmethod
    def builtin(cls) -> SignatureLibrary:
        """The signatures shipped with aorta (``aorta/run/signatures.yaml``)."""
        version, sigs = _builtin()
        return cls(sigs, version=version)

    @classmethod
    def load(
        cls,
        *,
        custom: Iterable[CustomPattern] = (),
        entry_points: bool = True,
    ) -> SignatureLibrary:
        """The built-ins, then plugins (when ``entry_points``), then the recipe's ``custom``."""
        version, sigs = _builtin()
        if entry_points:
            sigs += _plugin_signatures()
        sigs += [Signature.from_custom(p) for p in custom]
        return cls(sigs, version=version)

    def describe(self) -> list[dict[str, Any]]:
        """One row per signature: name, tier, source, hint, regex."""
        return [
            {"name": s.name, "tier": s.tier, "source": s.source, "hint": s.hint, "regex": s.regex}
            for s in self.signatures
        ]

    def scan(
        self,
        paths: Sequence[str | Path],
        *,
        text: Sequence[str] = (),
        facts: Mapping[str, Any] | None = None,
        only: Callable[[Signature], bool] | None = None,
        block_bytes: int = BLOCK_BYTES,
        max_bytes: int | None = MAX_SCAN_BYTES,
        skipped: list[str] | None = None,
        problems: list[str] | None = None,
        until: Mapping[str, int] | None = None,
    ) -> list[SignatureMatch]:
        """Each signature's first match in ``text`` (lines such as the trial's error), then in
        ``paths`` in order (missing files are skipped); sorted by tier, then position.

        ``facts`` are the ``exit_code`` and ``walltime_sec`` a ``condition`` may read;
        ``only`` limits the scan to some signatures. A file over ``max_bytes`` is scanned in
        its first quarter and last three quarters of that budget (the middle is named in
        ``skipped``), so a scan's time is bounded whatever the log's size; memory is
        bounded by ``block_bytes`` and :data:`MAX_LINE_BYTES` either way. Line numbers past a
        skipped middle are counted from the end of the head (``skipped`` says so).
        ``problems`` receives a line per ``condition`` that hit a bound (counted as false).
        ``until`` (path → bytes) ends a file's scan there: what a killed trial printed after
        aorta's signal stays in its log but is not its cause.
        """
        sigs = [s for s in self.signatures if only is None or only(s)]
        scanner = _Scanner(sigs, {"exit_code": None, "walltime_sec": None, **(facts or {})})
        if text:
            joined = "\n".join(t.replace("\r", "") for t in text if t).encode("utf-8", "replace")
            scanner.feed(joined, source="error", index=0, offset=0, line0=-1)
        for index, path in enumerate(paths, start=1):
            if not scanner.pending:
                break
            path = Path(path)
            if not path.is_file():
                continue
            try:
                size = path.stat().st_size
                if until is not None and str(path) in until:
                    size = min(size, until[str(path)])
                spans: list[tuple[int, int | None]] = [(0, size)]
                if max_bytes is not None and size > max_bytes:
                    head = max_bytes // 4
                    spans = [(0, head), (size - (max_bytes - head), size)]
                    if skipped is not None:
                        skipped.append(
                            f"{path.name}: {size:,} bytes; scanned the first {head:,} and the "
                            f"last {max_bytes - head:,}"
                        )
                line0 = 0
                for start, stop in spans:
                    for buf, offset, added in _read_blocks(path, block_bytes, start, stop):
                        scanner.feed(buf, source=path.name, index=index, offset=offset, line0=line0)
                        if not scanner.pending:
                            break
                        line0 += buf.count(b"\n") - added
            except OSError:
                continue
        if problems is not None:
            problems.extend(scanner.problems)
        return sorted(scanner.found, key=lambda m: (m.tier, m.order))

    def scan_text(self, lines: Sequence[str]) -> list[SignatureMatch]:
        """:meth:`scan` of in-memory lines (tests, notebooks)."""
        return self.scan([], text=lines)


# --- sources ---------------------------------------------------------------------------------


def _builtin() -> tuple[int, list[Signature]]:
    text = importlib.resources.files("aorta.run").joinpath(_DATA_FILE).read_text("utf-8")
    doc = parse_yaml(text)
    return int(doc["version"]), [
        Signature.from_mapping(item, "builtin") for item in doc["signatures"]
    ]


def _from_object(obj: Any, source: str) -> list[Signature]:
    if callable(obj) and not isinstance(obj, type):
        obj = obj()
    if isinstance(obj, Mapping):
        obj = obj.get("signatures", [])
    if not isinstance(obj, list | tuple):
        raise ValueError("expected a list of signatures or a mapping with a 'signatures' list")
    out = []
    for item in obj:
        if isinstance(item, Signature):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(Signature.from_mapping(item, source))
        else:
            raise ValueError(f"not a signature: {item!r}")
    return out


def _plugin_signatures() -> list[Signature]:
    found: list[Signature] = []
    eps = sorted(importlib.metadata.entry_points(group=SIGNATURES_GROUP), key=lambda e: e.name)
    for ep in eps:
        source = f"entry point {ep.name!r} ({ep.value})"
        try:
            found.extend(_from_object(ep.load(), source))
        except Exception as exc:  # a broken plugin must not take the sweep down
            warnings.warn(
                f"skipping {SIGNATURES_GROUP} plugin {source}: {exc}", RuntimeWarning, stacklevel=3
            )
    return found


# --- one trial -------------------------------------------------------------------------------


@dataclass
class TrialClassification:
    """What the signatures say about one trial on this rank."""

    #: The top ``fail`` match (names the trial's failure), if any.
    top: SignatureMatch | None = None
    #: A recipe pattern decided a trial that had passed (``on_match: fail`` matched, or a
    #: ``required_for_pass`` line is missing): the reason.
    fails_passing: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: ``capture.<group>`` → value, from ``info`` (and other) recipe patterns that matched.
    info: dict[str, str] = field(default_factory=dict)

    def record_fields(self) -> dict[str, Any]:
        """The record fields this classification sets (``signature`` …)."""
        if self.top is None:
            return {}
        where = f"{self.top.file}:{self.top.line_number}" if self.top.line_number else "error"
        return {
            "signature": self.top.name,
            "signature_tier": self.top.tier,
            "signature_hint": self.top.hint or None,
            "signature_line": f"{where}: {self.top.line}",
        }


def classify(
    library: SignatureLibrary,
    *,
    failed: bool,
    logs: Sequence[Path],
    error: str | None = None,
    facts: Mapping[str, Any] | None = None,
    skipped: list[str] | None = None,
    until: Mapping[str, int] | None = None,
) -> TrialClassification:
    """Match one trial's captured output (``logs``, and its ``error`` text).

    A failed trial is matched against every signature. A passing one only against the
    recipe's (``source == "recipe"``): nothing is read when the recipe has none.
    ``until`` (path → bytes): where each log stood when aorta signalled a killed trial;
    later lines are not read (:meth:`SignatureLibrary.scan`).
    """
    recipe_only = not failed
    only = (lambda s: s.source == "recipe") if recipe_only else None
    if recipe_only and not any(s.source == "recipe" for s in library.signatures):
        return TrialClassification()
    problems: list[str] = []
    matches = library.scan(
        logs,
        text=[error] if error else [],
        facts=facts,
        only=only,
        skipped=skipped,
        problems=problems,
        until=until,
    )
    out = TrialClassification(top=top_match(matches), warnings=problems)
    for m in matches:
        for k, v in m.captures.items():
            out.info[f"capture.{k}"] = printable(v)
        if m.signature.on_match == "warn":
            out.warnings.append(f"{m.name}: {m.line}")
    if not failed:
        hit = {m.name for m in matches}
        missing = [
            s.name
            for s in library.signatures
            if s.required_for_pass and s.source == "recipe" and s.name not in hit
        ]
        if out.top is not None:
            out.fails_passing = f"the output matched {out.top.name}: {out.top.line}"
        elif missing:
            out.fails_passing = f"required line(s) missing from the output: {', '.join(missing)}"
            out.top = SignatureMatch(
                Signature(name="missing_pass_signal", regex="$^", tier=0, source="recipe"),
                line=f"no match for {', '.join(missing)}",
                file="",
                line_number=0,
            )
    return out
