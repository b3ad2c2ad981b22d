"""Flight-recorder dumps: bytes → the dict PyTorch wrote, safely.

PyTorch's flight recorder (``torch._C._distributed_c10d._dump_fr_trace_json`` /
``_dump_fr_trace``, ``TORCH_NCCL_DUMP_ON_TIMEOUT``) writes one dump per rank, as JSON or as a
pickle. A pickle is a program: :func:`parse_dump` runs it with an unpickler whose
``find_class`` refuses every global, so only plain containers, strings and numbers come out
(PyTorch's own dumps need nothing else), and never ``pickle.load``. Every failure is one
:class:`~aorta.errors.HangEvidenceError` naming the file, the byte offset and the problem.

Bounds: a dump is at most :data:`MAX_DUMP_BYTES` (callers check the size before reading);
JSON may nest as deep as Python's recursion limit allows (msgspec's decoder counts its
levels against it: some 990 levels at the top of a program; a dump nests six). A pickle's shared references stay
shared: nothing in aorta walks a dump whole — the analysis reads only the fields it knows,
each checked for its type before use — so a small pickle that would expand to a huge tree
costs nothing (and is never expanded: do not ``json.dumps`` a dump from an untrusted source).
A pickle's memo is bounded too: the C unpickler sizes its memo table by the largest index a
``PUT`` or ``LONG_BINPUT`` names (twice it, 8 bytes a slot, zeroed: 9 bytes naming index 2**31
take 32 GiB), so every pickle is walked before it is unpickled (:func:`_memo_walk`, a regular
expression over its opcodes: ~7 ms a MiB, 0.22 s for the 30 MiB of 64 ranks' pickles that
take 0.49 s to unpickle), and one whose memo index passes :func:`memo_bound` (256 and a quarter
of its size: more than a pickler that numbers its memo from 0, as PyTorch's and Python's do,
can reach) is refused unread.
Parsing runs with the cyclic garbage collector paused (:func:`paused_gc`): a 2,000-entry dump
is ~100,000 acyclic containers, and collections triggered while they are built cost four
times the parse.

Examples
--------
>>> dump = parse_dump(b'{"version": "2.10", "pg_config": {}, "entries": []}', name="fr_0.json")
>>> dump["version"]
'2.10'
>>> parse_dump(b"\\x80\\x04cos\\nsystem\\n.", name="evil.pkl")
Traceback (most recent call last):
...
aorta.errors.HangEvidenceError: evil.pkl: byte 2: the pickle names the global os.system; \
a flight-recorder dump holds only plain containers, so aorta refuses it (nothing was run)
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import pickle
import pickletools
import re
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import msgspec

from aorta.errors import HangEvidenceError

__all__ = [
    "MAX_DUMP_BYTES",
    "MAX_PICKLE_BYTES",
    "Cost",
    "JSONProblem",
    "decode_json",
    "dump_kind",
    "memo_bound",
    "parse_dump",
    "paused_gc",
    "read_cost",
]

#: The largest dump read (256 MiB): 2,000 NCCL entries with stack traces are a few MiB.
MAX_DUMP_BYTES = 256 * 2**20
#: The largest pickled dump read (32 MiB): a pickle of one-byte opcodes that each make an
#: empty dict takes 72 times its size in memory (JSON at most 24 times).
MAX_PICKLE_BYTES = 32 * 2**20
#: The keys that make a mapping a flight-recorder dump (any one of them).
DUMP_KEYS = frozenset({"entries", "pg_config", "pg_status"})

#: One decoder for every dump (msgspec reuses its key cache across calls).
_DECODER = msgspec.json.Decoder()
_GLOBAL_OPS = frozenset({"GLOBAL", "STACK_GLOBAL", "INST", "EXT1", "EXT2", "EXT4"})
#: Opcodes that call something or ask the loader for an object: a dump has none of them.
_CALL_OPS = frozenset({"REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX", "OBJ", "PERSID", "BINPERSID"})


def _opcode_widths() -> list[int | None]:
    """Each opcode's argument as pickletools codes it: a width in bytes (0: none), -1 a line,
    -2 to -5 a length of 1, 4 (signed), 4 or 8 bytes before the data; ``None``: no opcode."""
    width: list[int | None] = [None] * 256
    for op in pickletools.opcodes:
        width[ord(op.code)] = 0 if op.arg is None else op.arg.n
    return width


_WIDTH = _opcode_widths()


def _byte_range(low: int, high: int) -> bytes:
    return b"[" + re.escape(bytes([low])) + b"-" + re.escape(bytes([high])) + b"]"


def _at_most_uint4(bound: int) -> bytes:
    """A pattern for the 4-byte little-endian numbers 0 to ``bound``: below it in one byte
    (the higher ones equal, any lower ones), or equal.

    >>> import re
    >>> [bool(re.fullmatch(_at_most_uint4(300), n.to_bytes(4, "little"), re.DOTALL))
    ...  for n in (0, 255, 299, 300, 301, 2**16, 2**31)]
    [True, True, True, True, False, False, False]
    """
    low = bound.to_bytes(4, "little")
    alts = [
        b"." * i + _byte_range(0, low[i] - 1) + re.escape(low[i + 1 :])
        for i in range(3, -1, -1)
        if low[i]
    ]
    return b"(?:" + b"|".join([*alts, re.escape(low)]) + b")"


def _at_most_decimal(bound: int) -> bytes:
    """A pattern for the numbers 0 to ``bound`` in plain digits (no sign, space or leading 0).

    >>> import re
    >>> [bool(re.fullmatch(_at_most_decimal(256), n)) for n in (b"0", b"9", b"99", b"199",
    ...                                                          b"249", b"256", b"257", b"300",
    ...                                                          b"1000", b"01", b" 1")]
    [True, True, True, True, True, True, False, False, False, False, False]
    """
    text = str(bound).encode()
    alts = [b"0"] + ([b"[1-9][0-9]{0,%d}" % (len(text) - 2)] if len(text) > 1 else [])
    for i, digit in enumerate(text):
        first = 0x31 if i == 0 else 0x30  # no leading 0
        if digit > first:
            alts.append(
                text[:i] + _byte_range(first, digit - 1) + b"[0-9]{%d}" % (len(text) - i - 1)
            )
    return b"(?:" + b"|".join([*alts, text]) + b")"


@functools.cache
def _run(bound: int) -> re.Pattern[bytes]:
    """A pattern that steps over a run of opcodes which cannot name a memo index past
    ``bound``, at C speed: any opcode but STOP of a fixed width, of a line, or with a length
    below 256, and a LONG_BINPUT or a PUT (in plain digits) of an index at most ``bound``.
    What it does not take, :func:`_memo_walk` reads one opcode at a time (~0.5 µs: a long
    string, the end, or what it refuses). Compiled when first needed (~25 ms), once for each
    bound (:func:`memo_bound` has few)."""
    fixed: dict[int, list[bytes]] = {0: [], 1: [], 2: [], 4: [], 8: []}
    lines: list[bytes] = []
    counted: dict[int, list[bytes]] = {-2: [], -3: [], -4: [], -5: []}
    for code, width in enumerate(_WIDTH):
        if width is None or code in b".pr":
            continue
        group = fixed if width >= 0 else counted if width < -1 else None
        (lines if group is None else group[width]).append(bytes([code]))

    def one_of(codes: list[bytes]) -> bytes:
        return b"[" + b"".join(re.escape(c) for c in codes) + b"]"

    def sized(zeros: int) -> bytes:  # a length below 256, then that many bytes
        pad = b"\0" * zeros
        return (
            b"(?:"
            + b"|".join(re.escape(bytes([n]) + pad) + b".{%d}" % n for n in range(256))
            + b")"
        )

    # The most frequent first (a dump is mostly BINGETs, memo entries and short strings): a
    # quarter faster than in the order of the widths.
    parts = [one_of(fixed[1]) + b".", one_of(fixed[0]), one_of(counted[-2]) + sized(0)]
    parts += [one_of(counted[-3] + counted[-4]) + sized(3), b"r" + _at_most_uint4(bound)]
    parts += [one_of(fixed[n]) + b".{%d}" % n for n in (2, 4, 8)]
    parts.append(one_of([c for c in lines if c not in (b"c", b"i")]) + b"[^\n]*+\n")
    parts.append(b"[ci][^\n]*+\n[^\n]*+\n")  # GLOBAL and INST: two lines
    parts.append(one_of(counted[-5]) + sized(7))
    parts.append(b"p" + _at_most_decimal(bound) + b"\n")
    return re.compile(b"(?:" + b"|".join(parts) + b")*+", re.DOTALL)


class _NoGlobals(pickle.Unpickler):
    """An unpickler that builds plain containers only: every global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"{module}.{name}")


class _Refused(Exception):
    """A global a pickle asked for (internal: becomes a :class:`HangEvidenceError`)."""


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (as it was before, after).

    >>> with paused_gc():
    ...     gc.isenabled()
    False
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def dump_kind(head: bytes) -> str | None:
    """``"json"`` or ``"pickle"`` from a file's first bytes, ``None`` for anything else.

    >>> dump_kind(b'  {"entries": []}'), dump_kind(b"\\x80\\x02}q\\x00"), dump_kind(b"PK\\x03")
    ('json', 'pickle', None)
    """
    text = head.lstrip()
    if text[:1] == b"{":
        return "json"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    return None


def parse_dump(data: bytes, *, name: str = "<dump>") -> dict[str, Any]:
    """One rank's flight-recorder dump (JSON or pickle) as the dict PyTorch wrote.

    Parameters
    ----------
    data
        The file's bytes (at most :data:`MAX_DUMP_BYTES`).
    name
        What the errors call it (the file name).

    Returns
    -------
    dict
        The dump: ``version``, ``pg_config``, ``pg_status``, ``entries`` (each a dict with
        ``collective_seq_id``, ``profiling_name``, ``state``, ...) as PyTorch wrote them; a
        pickle's tuples come out as tuples.

    Raises
    ------
    HangEvidenceError
        ``data`` is neither JSON nor a pickle, is truncated or malformed (the byte offset
        says where), is too large, names a global, nests JSON too deep, or is not a mapping
        with ``entries``, ``pg_config`` or ``pg_status``.

    Examples
    --------
    >>> import pickle
    >>> blob = pickle.dumps({"version": "2.10", "entries": [{"collective_seq_id": 1}]})
    >>> parse_dump(blob, name="nccl_trace_rank_0")["entries"][0]["collective_seq_id"]
    1
    >>> parse_dump(blob[:-9], name="nccl_trace_rank_0")
    Traceback (most recent call last):
    ...
    aorta.errors.HangEvidenceError: nccl_trace_rank_0: byte 45: truncated pickle (expected 17 bytes in a \
unicodestring1, but only 15 remain)
    """
    if len(data) > MAX_DUMP_BYTES:
        raise HangEvidenceError(f"{name}: {_size(len(data))} is above the dump limit")
    kind = dump_kind(data[:64])
    if kind == "json":
        with paused_gc():
            dump = _json(data, name)
    elif kind == "pickle":
        with paused_gc():
            dump = _pickle(data, name)
    else:
        raise HangEvidenceError(
            f"{name}: byte 0: neither a JSON nor a pickled flight-recorder dump "
            f"(it starts with {data[:8]!r})"
        )
    if not isinstance(dump, dict) or not (DUMP_KEYS & set(dump)):
        got = "a mapping" if isinstance(dump, dict) else type(dump).__name__
        raise HangEvidenceError(
            f"{name}: not a flight-recorder dump ({got} without entries, pg_config or pg_status)"
        )
    entries = dump.get("entries", [])
    if not isinstance(entries, list | tuple) or not all(isinstance(e, dict) for e in entries):
        raise HangEvidenceError(f"{name}: entries: must be a list of mappings")
    return dump


class Cost(NamedTuple):
    """What reading a file takes in memory at most (bytes): while it is read (``peak``) and
    once it is read (``held``: the parsed dump, or a log's lines)."""

    peak: int
    held: int


def read_cost(data: bytes, kind: str) -> Cost:
    """An upper bound of the memory ``data`` takes when read: parsed as a ``"json"`` or
    ``"pickle"`` dump, or split into the lines of a ``"text"`` log.

    Counted, not parsed (``bytes.count``: ~1 ms a MiB): every byte that can start an object
    is charged the most that object takes (an empty dict is 64 bytes, one more reference 8;
    a character up to 4 bytes once a string holds one beyond ASCII), and the decoder's
    scratch while it parses (twice the JSON: msgspec builds objects straight from the bytes,
    unescaping a string into a buffer of at most its size). No file,
    however hostile, takes more than its cost (``tests/hang/test_bounds.py`` measures both
    with ``tracemalloc``); a real dump takes about a third of what it is charged.

    >>> read_cost(b'{"entries": []}', "json")
    Cost(peak=277, held=247)
    >>> read_cost(b"\\x80\\x04}" * 10, "pickle"), read_cost(b"a\\nbc\\n", "text")
    (Cost(peak=1520, held=1520), Cost(peak=143, held=133))
    """
    wide = 1 if data.isascii() else 4  # bytes a character of a string takes
    if kind == "pickle":
        # Any opcode pushes at most one reference (8 bytes, or a memo slot; 16 while the list
        # holding it grows) and makes at most an object of ~60 bytes plus its payload: 24 per
        # byte. The one-byte opcodes that make a container (}, ], tuples of 1 to 3, an empty
        # set) or open one (MARK), and the short strings' two-byte ones, cost more.
        ops = (b"}", b"]", b"\x85", b"\x86", b"\x87", b"\x8f")
        held = (
            24 * len(data)
            + 80 * sum(data.count(op) for op in ops)
            + 56 * data.count(b"(")
            + 48 * (data.count(b"\x8c") + data.count(b"U"))
        )
        return Cost(held, held)
    if kind == "json":
        # Each value follows a comma, a colon or a bracket (8 bytes of reference, an int or a
        # float of up to 32); a string has two quotes (a header of ~50).
        values = data.count(b",") + data.count(b":")
        held = (
            wide * len(data)
            + 72 * data.count(b"{")
            + 64 * data.count(b"[")
            + 40 * values
            + 28 * data.count(b'"')
        )
        return Cost(held + 2 * len(data), held)
    # A log's lines: each a string (~50 bytes of header and a reference) of its characters;
    # the whole text is decoded once before it is split.
    held = wide * len(data) + 64 * data.count(b"\n")
    return Cost(held + (wide + 1) * len(data), held)


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


class JSONProblem(ValueError):
    """Why bytes are not JSON: where (``pos``, a byte offset; ``None`` where the decoder does
    not say, as for a number out of range) and what (``problem``); ``deep`` for nesting past
    the recursion limit (a bracket bomb), ``truncated`` for data that ends early."""

    def __init__(
        self, pos: int | None, problem: str, *, deep: bool = False, truncated: bool = False
    ) -> None:
        super().__init__(problem)
        self.pos, self.problem, self.deep, self.truncated = pos, problem, deep, truncated


_AT_BYTE = re.compile(r"^(?:JSON is malformed: )?(.*?)(?: \(byte (\d+)\))?$", re.DOTALL)


def decode_json(data: bytes) -> Any:
    """``data`` as JSON (msgspec's decoder), or one :class:`JSONProblem` saying where and why.

    >>> decode_json(b'{"entries": [1, 2]}')
    {'entries': [1, 2]}
    >>> try:
    ...     decode_json(b'{"entries": [1, 2')
    ... except JSONProblem as exc:
    ...     exc.pos, exc.problem, exc.truncated
    (17, 'unexpected end of data', True)
    >>> try:
    ...     decode_json(b"[" * 100_000)
    ... except JSONProblem as exc:
    ...     exc.deep
    True
    """
    try:
        return _DECODER.decode(data)
    except RecursionError:
        # msgspec counts its levels against Python's recursion limit: a bracket bomb stops
        # here, after a few hundred microseconds, instead of exhausting the C stack.
        limit = sys.getrecursionlimit()
        problem = f"nests deeper than the depth limit, Python's recursion limit of {limit}"
        raise JSONProblem(None, problem, deep=True) from None
    except msgspec.ValidationError as exc:  # a number out of range: valid syntax, no offset
        raise JSONProblem(None, " ".join(str(exc).split())) from None
    except msgspec.DecodeError as exc:
        text = " ".join(str(exc).split())
        if text == "Input data was truncated":
            raise JSONProblem(len(data), "unexpected end of data", truncated=True) from None
        if "UTF-8" in text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise JSONProblem(bad.start, "invalid UTF-8") from None
        m = _AT_BYTE.match(text)
        assert m is not None  # the pattern matches any text
        # msgspec puts trailing characters at the end of the data, not where they start.
        pos = int(m.group(2)) if m.group(2) and m.group(1) != "trailing characters" else None
        raise JSONProblem(pos, m.group(1)) from None


def _json(data: bytes, name: str) -> Any:
    try:
        return decode_json(data)
    except JSONProblem as exc:
        if exc.pos is None:
            raise HangEvidenceError(f"{name}: invalid JSON ({exc.problem})") from None
        where = "truncated JSON" if exc.truncated else "invalid JSON"
        raise HangEvidenceError(f"{name}: byte {exc.pos}: {where} ({exc.problem})") from None


def memo_bound(size: int) -> int:
    """The largest memo index a ``PUT`` or ``LONG_BINPUT`` of a pickle of ``size`` bytes may
    name: 256 and a quarter of the size, rounded down to four significant bits.

    A pickler numbers its memo from 0, one entry per object it stores: below 256 with a
    ``BINPUT`` (of any pickle: a table of 4 kB at most), past it with a ``LONG_BINPUT`` of 5
    bytes (or a ``PUT`` of as many) after the object's own opcode, so no pickle a pickler
    wrote names more than 256 and a sixth of its size. The table (twice the index, 8 bytes a
    slot) is then at most 4 bytes a byte of pickle, within what :func:`read_cost` charges the
    cheapest opcodes (``tests/hang/test_bounds.py`` measures it). Rounded, the bounds are few
    (eight a doubling of size), and the walk's pattern for each is compiled once.

    >>> memo_bound(9), memo_bound(2**20), memo_bound(32 * 2**20)
    (256, 262144, 8388608)
    """
    bound = 256 + size // 4
    shift = max(bound.bit_length() - 4, 0)
    return (bound >> shift) << shift


def _memo_walk(data: bytes) -> tuple[int, int, str] | None:
    """The first memo index past :func:`memo_bound`: ``(byte, index, opcode)`` (index -1: a
    PUT's index not in plain digits); ``None``
    when there is none before the pickle stops or stops being readable (where the unpickler
    fails too, before it stores anything further).

    The walk reads opcodes exactly as the unpickler does (the same table, pickletools'), so a
    string that holds ``r`` is never taken for an opcode.

    >>> _memo_walk(b"\\x80\\x02}q\\x00."), _memo_walk(b"\\x80\\x02}r\\x00\\x00\\x00\\x80.")
    (None, (3, 2147483648, 'LONG_BINPUT'))
    """
    bound, end = memo_bound(len(data)), len(data)
    run = _run(bound)
    pos = 0
    while pos < end:  # a length may point far past the end (2**64 - 1 bytes)
        match = run.match(data, pos)
        pos = match.end() if match else pos
        if pos >= end:
            break
        op, at = data[pos], pos + 1
        width = _WIDTH[op]
        if width is None or op == 0x2E:  # unknown (the unpickler fails here) or STOP
            return None
        if width >= 0:  # a LONG_BINPUT (any other opcode of a fixed width is in the run)
            index = int.from_bytes(data[at : at + width], "little")
            if op == 0x72 and index > bound:
                return pos, index, "LONG_BINPUT"
            pos = at + width
        elif width == -1:  # a line: PUT's index, or a number, a string, a global's two lines
            eol = data.find(b"\n", at)
            if op in (0x63, 0x69) and eol >= 0:  # GLOBAL, INST
                eol = data.find(b"\n", eol + 1)
            if eol < 0:
                return None
            if op == 0x70:  # PUT
                line = data[at:eol]
                # A pickler writes the index in plain digits; the unpickler also takes " 1",
                # "+1", "01", "1_0" (int()'s forms), which the run does not: were they read
                # here one at a time, 32 MiB of them would take 7 s. No pickler writes them:
                # refused (as -1).
                if not (line.isdigit() and line.isascii()) or line[:1] == b"0" != line:
                    return pos, -1, "PUT"
                if (index := int(line)) > bound:
                    return pos, index, "PUT"
            pos = eol + 1
        else:  # a length of 1, 4 (signed, or not) or 8 bytes, then that many bytes
            size = {-2: 1, -3: 4, -4: 4, -5: 8}[width]
            count = int.from_bytes(data[at : at + size], "little", signed=width == -3)
            if count < 0:
                return None
            pos = at + size + count
    return None


def _pickle(data: bytes, name: str) -> Any:
    sparse = _memo_walk(data)
    if sparse is not None:
        at, index, op = sparse
        if index < 0:
            raise HangEvidenceError(
                f"{name}: byte {at}: PUT names its memo index in other than plain digits, as no "
                "pickler writes it; refused before unpickling"
            )
        table = f" (its memo table alone would take {_size(16 * index)})" if index >= 2**16 else ""
        raise HangEvidenceError(
            f"{name}: byte {at}: {op} names memo index {index:,}, past the {memo_bound(len(data)):,} "
            f"a pickle of {len(data):,} bytes can number (a dump numbers its memo from 0); "
            f"refused before unpickling{table}"
        )
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except _Refused as exc:
        raise HangEvidenceError(
            f"{name}: byte {_first_global(data)}: the pickle names the global {exc}; a "
            "flight-recorder dump holds only plain containers, so aorta refuses it "
            "(nothing was run)"
        ) from None
    # A hostile pickle can fail in any of the unpickler's ways (bad opcodes, wrong stack
    # contents, persistent ids, memory): each is one located error, never a traceback.
    except Exception as exc:
        offset, problem = _locate(data)
        detail = problem or f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        raise HangEvidenceError(f"{name}: byte {offset}: {detail}") from None


def _first_global(data: bytes) -> int:
    try:
        for op, _arg, pos in pickletools.genops(data):
            if op.name in _GLOBAL_OPS:
                return pos or 0
    except (ValueError, OverflowError):  # OverflowError: a length of 2**63 bytes or more
        pass
    return 0


def _locate(data: bytes) -> tuple[int, str | None]:
    """Where a pickle that failed to load goes wrong, read without running it: the opcode
    that cannot be read (``None`` for the problem when every opcode reads, then the first
    opcode that needs what a dump never holds: a callable, a persistent id)."""
    calls = None
    try:
        for op, _arg, pos in pickletools.genops(data):
            if calls is None and op.name in _CALL_OPS:
                calls = pos or 0
            if op.name == "STOP":
                return (calls if calls is not None else pos or 0), None
    except (ValueError, OverflowError) as exc:
        # pickletools reads a length of 2**63 bytes or more (BINUNICODE8) as an OverflowError.
        text = "a length past any file" if isinstance(exc, OverflowError) else str(exc)
        words = ("but only", "no newline", "truncat", "remain", "not enough data", "past any")
        truncated = any(w in text for w in words)
        pos = _last_readable(data)
        return pos, f"{'truncated' if truncated else 'malformed'} pickle ({text})"
    return len(data), "truncated pickle (no STOP opcode)"


def _last_readable(data: bytes) -> int:
    """The offset of the opcode pickletools cannot read: where the last one it read ends (its
    start was named before, one opcode early: a cut string's MEMOIZE, not the string)."""
    stream = io.BytesIO(data)
    last = 0
    try:
        for _op in pickletools.genops(stream):
            last = stream.tell()
    except (ValueError, OverflowError):
        pass
    return last
