"""Bytes → JSON chunks of whole events, streamed from a Chrome-trace file.

A Kineto trace is one JSON object whose ``traceEvents`` array holds every event. Decoding it in
one piece costs a Python object per event (≈1 KB each), so this module never does: it reads the
file (or the gzip stream) in blocks, cuts each block after the last complete event and hands the
cut — a valid JSON array — to a decoder, then reuses the buffer.

The cut is found cheaply (the last ``}`` followed by ``,`` and ``{``). A wrong cut (one inside a
string, or inside a nested object) always makes the decoder fail, so a failure falls back to an
exact structural scan (numpy, string- and escape-aware) of the block. The same scan locates the
``traceEvents`` key, the end of the array, control characters to sanitise and the byte offset of
a corruption. Top-level keys before and after the array are returned as the ``header``.

Bounds on hostile input (each a :class:`~aorta.errors.TraceError` naming the file and offset):
whitespace between events, before the object and after the array is skipped as it streams
(never accumulated), so memory stays a few blocks whatever its size; one event, the header
before ``traceEvents`` or the keys after the array may not exceed :data:`MAX_EVENT_BYTES`; JSON
nested deeper than the decoder's recursion allows (about Python's recursion limit, 1,000
levels) is an error whose offset is where the nesting passes :data:`DEEP` levels.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

from aorta.errors import TraceError

__all__ = [
    "BLOCK_SIZE",
    "DEEP",
    "MAX_EVENT_BYTES",
    "RAW_EVENTS",
    "RangeReader",
    "ScanStats",
    "Scanner",
    "scan_events",
]

T = TypeVar("T")

#: Default bytes read per block; a chunk handed to the decoder is at most about this large.
BLOCK_SIZE = 8 << 20
#: The largest single event, header (before ``traceEvents``) or trailer (after the array), in
#: bytes (whitespace between top-level keys included). Real events are bytes to a few MB.
MAX_EVENT_BYTES = 256 << 20
#: A nesting error's offset is where the nesting first passes this depth (Kineto nests ~4).
DEEP = 128
_WS = b" \t\r\n"
_NOT_WS = re.compile(rb"[^ \t\r\n]")
_SPECIAL = np.zeros(256, dtype=bool)
for _c in b'"\\{}[]':
    _SPECIAL[_c] = True
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_DECODE_ANY = msgspec.json.Decoder()
#: A chunk's events as raw JSON (nothing decoded, nor its UTF-8 checked).
RAW_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass
class ScanStats:
    """What the scanner saw: bytes read, chunks, repairs and the top-level keys."""

    #: Uncompressed bytes read.
    nbytes: int = 0
    #: Whether the file was gzip-compressed.
    gzipped: bool = False
    #: Chunks decoded, and how many needed the exact scan.
    chunks: int = 0
    slow_chunks: int = 0
    #: Control characters inside strings replaced by spaces.
    sanitized_bytes: int = 0
    #: Events whose invalid UTF-8 (in a value the decoder reads) was replaced by U+FFFD, and
    #: the file offset of the first such byte.
    lossy_utf8_events: int = 0
    lossy_utf8_at: int = -1
    #: Top-level keys other than ``traceEvents`` (deviceProperties, distributedInfo, ...).
    header: dict[str, Any] = field(default_factory=dict)


class _Reader:
    """Block reader over a plain or gzip file that knows its uncompressed offset."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._raw: io.FileIO = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise TraceError(f"{path}: cannot open: {exc.strerror or exc}") from exc
        magic = self._raw.read(2)
        self._raw.seek(0)
        self.gzipped = magic == b"\x1f\x8b"
        self._src: Any = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzipped else self._raw
        self.offset = 0  # uncompressed bytes delivered so far
        self.eof = False
        #: The file offset of the stream's first byte (a range's prefix stands before it).
        self.origin = 0

    def readinto(self, view: memoryview) -> int:
        if self.eof or len(view) == 0:
            return 0
        total = 0
        try:
            while total < len(view):
                got = self._src.readinto(view[total:])
                if not got:
                    self.eof = True
                    break
                total += got
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            where = self._raw.tell()
            what = "truncated gzip stream" if isinstance(exc, EOFError) else "corrupt gzip stream"
            raise TraceError(f"{self.path}: {what} at compressed byte {where} ({exc})") from exc
        except OSError as exc:
            raise TraceError(
                f"{self.path}: read error at byte {self.offset + total}: {exc}"
            ) from exc
        self.offset += total
        return total

    def close(self) -> None:
        if self._src is not self._raw:
            self._src.close()
        self._raw.close()


class RangeReader(_Reader):
    """Bytes ``[lo, hi)`` of a plain (not gzip) file, after ``prefix`` and before ``suffix``:
    one byte range of a ``traceEvents`` array read as an array of its own."""

    def __init__(self, path: Path, lo: int, hi: int, *, prefix: bytes, suffix: bytes) -> None:
        super().__init__(path)
        if self.gzipped:
            raise TraceError(f"{path}: a gzip stream cannot be read by byte ranges")
        self._raw.seek(lo)
        self._segments: list[bytes | int] = [prefix, hi - lo, suffix]  # int: bytes of the file
        self.origin = lo - len(prefix)

    def readinto(self, view: memoryview) -> int:
        total = 0
        while total < len(view) and self._segments:
            head = self._segments[0]
            room = len(view) - total
            if isinstance(head, bytes):
                n = min(len(head), room)
                view[total : total + n] = head[:n]
                rest: bytes | int = head[n:]
            else:
                n = self._raw.readinto(view[total : total + min(head, room)]) if head else 0
                if head and not n:
                    raise TraceError(f"{self.path}: file shrank while reading")
                rest = head - n
            total += n
            if rest:
                self._segments[0] = rest
            else:
                self._segments.pop(0)
        self.eof = not self._segments
        self.offset += total
        return total


def _escaped(quotes: np.ndarray, backslashes: np.ndarray) -> np.ndarray:
    """Mask of the quotes preceded by an odd run of backslashes (escaped quotes)."""
    breaks = np.flatnonzero(np.diff(backslashes) != 1)
    run_end = backslashes[np.r_[breaks, backslashes.size - 1]]
    run_len = run_end - backslashes[np.r_[0, breaks + 1]] + 1
    idx = np.searchsorted(run_end, quotes - 1)
    hit = np.zeros(quotes.size, dtype=bool)
    ok = idx < run_end.size
    hit[ok] = (run_end[idx[ok]] == quotes[ok] - 1) & (run_len[idx[ok]] % 2 == 1)
    return hit


def _structure(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Structural characters outside strings of ``a`` (which starts outside a string).

    Returns ``(positions, chars, quotes)``: positions and bytes of ``{}[]`` outside strings and
    the positions of the unescaped quotes.
    """
    special = np.flatnonzero(_SPECIAL[a])
    chars = a[special]
    quotes = special[chars == 34]
    backslashes = special[chars == 92]
    if backslashes.size:
        quotes = quotes[~_escaped(quotes, backslashes)]
    is_struct = (chars != 34) & (chars != 92)
    pos, sch = special[is_struct], chars[is_struct]
    outside = (np.searchsorted(quotes, pos) & 1) == 0
    return pos[outside], sch[outside], quotes


def _depths(chars: np.ndarray) -> np.ndarray:
    """Nesting depth after each structural character (opening +1, closing −1)."""
    return np.cumsum(np.where((chars == 123) | (chars == 91), 1, -1))


class Scanner(Generic[T]):
    """One pass over a trace file; see :func:`scan_events`."""

    def __init__(
        self,
        path: Path,
        decode: Callable[[memoryview], T],
        stats: ScanStats,
        block_size: int,
        reader: _Reader | None = None,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, not {block_size}")
        self.path = path
        self.block_size = block_size
        self.decode = decode
        self.stats = stats
        self.reader = reader if reader is not None else _Reader(path)
        stats.gzipped = self.reader.gzipped
        self.buf = bytearray(block_size + 1)
        self.fill = 0
        self.base = 0  # uncompressed offset of buf[0]
        self.bare = False  # the file is a bare array of events, not an object

    # -- buffer management ----------------------------------------------------------------------
    def _read_more(self, s: int) -> int:
        """Drop the bytes before ``s - 1``, fill the buffer up and return ``s``'s new position.

        One byte before ``s`` is kept so that a ``[`` can be written there (see ``_decode_slice``).
        """
        drop = max(s - 1, 0)
        if drop:
            n = self.fill - drop
            self.buf[0:n] = self.buf[drop : self.fill]
            self.base += drop
            self.fill = n
        if self.fill >= len(self.buf) - 1:  # one event larger than the buffer: grow it
            if self.fill >= MAX_EVENT_BYTES:
                what = "header" if s <= 0 else "event"
                raise self._error(
                    f"one {what} larger than {MAX_EVENT_BYTES >> 20} MiB (not a real trace)",
                    max(s - drop, 0),
                )
            bigger = bytearray(2 * len(self.buf))
            bigger[: self.fill] = self.buf[: self.fill]
            self.buf = bigger
        with memoryview(self.buf) as mv:
            self.fill += self.reader.readinto(mv[self.fill : len(self.buf) - 1])
        return s - drop

    def _error(self, what: str, pos: int) -> TraceError:
        where = "byte" if not self.stats.gzipped else "byte (uncompressed)"
        return TraceError(f"{self.path}: {what} at {where} {self.base + pos}")

    def _skip_ws(self, pos: int) -> int:
        match = _NOT_WS.search(self.buf, pos, self.fill)
        return match.start() if match else max(pos, self.fill)

    def _nested(self, data: bytes | bytearray | memoryview, at: int) -> TraceError:
        """The error for JSON nested too deeply for the decoder; ``data`` starts outside a
        string at offset ``at`` of the buffer."""
        pos, chars, _ = _structure(np.frombuffer(data, dtype=np.uint8))
        depth = _depths(chars) if chars.size else np.zeros(1, dtype=np.int64)
        deep = np.flatnonzero(depth > DEEP)
        k = int(deep[0]) if deep.size else int(np.argmax(depth))
        where = at + (int(pos[k]) if pos.size else 0)
        return self._error(
            f"JSON nested {int(depth.max())} levels deep, deeper than the decoder allows; "
            f"the nesting passes {DEEP} levels",
            where,
        )

    def _any(self, text: bytes | bytearray, at: int) -> Any:
        """``text`` decoded as any JSON; nesting too deep is a TraceError at ``at`` + offset."""
        try:
            return _DECODE_ANY.decode(text)
        except RecursionError:
            raise self._nested(text, at) from None

    # -- header ---------------------------------------------------------------------------------
    def find_events(self) -> int:
        """Position just after the ``[`` that opens ``traceEvents`` (reading as needed)."""
        self._read_more(0)
        while True:
            start = self._skip_ws(3 if self.buf.startswith(b"\xef\xbb\xbf") else 0)
            if start < self.fill and self.buf[start] == 91:  # a bare array of events
                self.bare = True
                return start + 1
            if start < self.fill and self.buf[start] != 123:
                raise self._error("not a JSON object (no traceEvents array)", start)
            if start >= self.fill and not self.reader.eof:  # only whitespace so far: drop it
                self._read_more(start)
                continue
            found = self._locate_key()
            if found is not None:
                key, bracket = found
                self.stats.header.update(self._decode_object(self.buf[:key], b"}", key, 0))
                return bracket + 1
            if self.reader.eof:
                raise TraceError(f"{self.path}: no traceEvents array found")
            self._read_more(0)

    def _locate_key(self) -> tuple[int, int] | None:
        search = 0
        while (key := self.buf.find(b'"traceEvents"', search, self.fill)) >= 0:
            search = key + 1
            # the key must open a string at depth 1: check the structure of the prefix only
            _, chars, quotes = _structure(np.frombuffer(self.buf, dtype=np.uint8, count=key))
            if quotes.size % 2 or int(_depths(chars)[-1] if chars.size else 0) != 1:
                continue
            colon = self._skip_ws(key + 13)
            bracket = self._skip_ws(colon + 1)
            if bracket >= self.fill:
                return None
            if self.buf[colon] != 58 or self.buf[bracket] != 91:
                raise self._error("traceEvents is not an array", bracket)
            return key, bracket
        return None

    def _decode_object(
        self, body: bytes | bytearray, close: bytes, at: int, base: int
    ) -> dict[str, Any]:
        """Decode top-level ``key: value`` pairs given as ``{ ... ,`` (prefix) or ``, ... }``
        (``body`` starts at ``base`` in the buffer, outside a string)."""
        try:
            return self._decode_object_text(body, close, at)
        except RecursionError:
            raise self._nested(body, base) from None

    def _decode_object_text(self, body: bytes | bytearray, close: bytes, at: int) -> dict[str, Any]:
        text = bytes(body).removeprefix(b"\xef\xbb\xbf").strip(_WS)
        # the prefix "{ k: v, k: v," → "{ k: v, k: v }"; the suffix ", k: v }" → "{ k: v }"
        text = text.rstrip(b",").rstrip(_WS) + b"}" if close == b"}" else b"{" + text.lstrip(b",")
        try:
            value = _DECODE_ANY.decode(text)
        except msgspec.DecodeError:
            repaired = bytearray(text)
            _sanitize_inplace(repaired, 0, len(repaired))
            try:
                value = _DECODE_ANY.decode(repaired)
            except msgspec.DecodeError as exc:
                raise self._error(f"malformed top-level JSON ({_reason(exc)})", at) from exc
        return value if isinstance(value, dict) else {}

    # -- events ---------------------------------------------------------------------------------
    def events(self, start: int) -> Iterator[T]:
        """Decoded chunks of events from ``start`` (just after the array's ``[``) to its end."""
        s = start
        while True:
            if not self.reader.eof and self.fill - s < self.block_size // 2:
                s = self._read_more(s)
            p = self._skip_ws(s)
            if p >= self.fill:
                if self.reader.eof:
                    raise self._error("truncated: traceEvents array not closed", self.fill)
                s = self._read_more(p)  # drop the whitespace
                continue
            if self.buf[p] == 44 and not self.reader.eof and self._skip_ws(p + 1) >= self.fill:
                # a comma then only whitespace: keep the comma, drop the whitespace
                self.buf[self.fill - 1] = 44
                s = self._read_more(self.fill - 1)
                continue
            if self.buf[p] == 93:  # "]": the array ends
                self._finish(p)
                return
            cut = self._fast_cut(p)
            if cut > 0:
                try:
                    value = self._decode_slice(p, cut)
                except msgspec.DecodeError as exc:
                    ends = self._ends_from_error(p, cut, exc)  # the array closed inside the slice?
                    if ends is not None:
                        last_end, array_end = ends
                        self.stats.chunks += 1
                        yield from self._decode_checked(p, last_end)
                        self._finish(array_end)
                        return
                    # else a wrong cut, or a problem the exact path below reports precisely
                else:
                    self.stats.chunks += 1
                    yield value
                    s = cut + 1
                    continue
            result = self._exact(p)
            if result is None:  # not one complete event in the buffer yet
                if self.reader.eof:
                    raise self._diagnose(p)
                s = self._read_more(s)
                continue
            last_end, array_end = result
            if last_end > 0:
                self.stats.chunks += 1
                self.stats.slow_chunks += 1
                yield from self._decode_checked(p, last_end)
            if array_end >= 0:
                self._check_gap(last_end + 1 if last_end > 0 else p, array_end)
                self._finish(array_end)
                return
            s = last_end + 1

    def _ends_from_error(
        self, p: int, cut: int, exc: msgspec.DecodeError
    ) -> tuple[int, int] | None:
        """When a fast cut overshot the array (its ``]`` then trailing keys), where it ended.

        The decoder stops with "trailing characters" just after the array's own ``]``; the byte
        before it (past whitespace) must be that ``]`` and the one before the last event's ``}``.
        Anything else returns None and the exact scan decides.
        """
        match = _BYTE_RE.search(str(exc))
        if "trailing characters" not in str(exc) or match is None:
            return None
        left = p if self.buf[p] == 44 else p - 1
        q = left + int(match.group(1)) - 1  # at or just past the first trailing character
        for _ in range(2):
            while q > p and self.buf[q] in _WS:
                q -= 1
            if self.buf[q] == 93:
                break
            q -= 1  # step over the trailing character itself
        if q >= cut or self.buf[q] != 93:
            return None
        end = q - 1
        while end > p and self.buf[end] in _WS:
            end -= 1
        if self.buf[end] == 44:  # a tolerated trailing comma
            end -= 1
            while end > p and self.buf[end] in _WS:
                end -= 1
        return (end, q) if self.buf[end] == 125 else None

    def _fast_cut(self, p: int) -> int:
        """Position of the last ``}`` in the buffer followed by ``,`` and ``{``; 0 if none."""
        buf, fill = self.buf, self.fill
        end = fill
        while (cut := buf.rfind(b"}", p, end)) > p:
            j = cut + 1
            while j < fill and buf[j] in _WS:
                j += 1
            if j < fill and buf[j] == 44:
                j += 1
                while j < fill and buf[j] in _WS:
                    j += 1
                if j < fill and buf[j] == 123:
                    return cut
            end = cut
        return 0

    def _exact(self, p: int) -> tuple[int, int] | None:
        """``(last event end, array end or -1)`` in ``buf[p:]``, or ``None`` if neither is there."""
        a = np.frombuffer(self.buf, dtype=np.uint8, count=self.fill)[p:]
        pos, chars, _ = _structure(a)
        depth = _depths(chars)
        closing = np.flatnonzero(depth < 0)
        array_end = -1
        if closing.size:
            k = closing[0]
            if chars[k] != 93:
                raise self._error("unbalanced '}' in traceEvents", p + int(pos[k]))
            array_end = p + int(pos[k])
            pos, chars, depth = pos[:k], chars[:k], depth[:k]
        ends = pos[(chars == 125) & (depth == 0)]
        if ends.size == 0 and array_end < 0:
            return None
        last_end = p + int(ends[-1]) if ends.size else 0
        return last_end, array_end

    def _decode_slice(self, p: int, cut: int) -> T:
        """Decode ``buf[p..cut]`` (``p`` at ``,``/``{``, ``cut`` at ``}``) as a JSON array."""
        buf = self.buf
        left = p if buf[p] == 44 else p - 1
        saved = buf[left], buf[cut + 1]
        buf[left], buf[cut + 1] = 91, 93
        try:
            with memoryview(buf) as mv:
                return self.decode(mv[left : cut + 2])
        except RecursionError:
            raise self._nested(bytes(buf[left : cut + 2]), left) from None
        finally:
            buf[left], buf[cut + 1] = saved

    def _decode_checked(self, p: int, cut: int) -> list[T]:
        """Like :meth:`_decode_slice` but repairs control characters and bad UTF-8, else raises."""
        try:
            return [self._decode_slice(p, cut)]
        except msgspec.DecodeError:
            pass
        left = p if self.buf[p] == 44 else p - 1
        self.stats.sanitized_bytes += _sanitize_inplace(self.buf, left, cut + 1)
        try:
            return [self._decode_slice(p, cut)]
        except msgspec.DecodeError as exc:
            match = _BYTE_RE.search(str(exc))
            if match:
                raise self._error(
                    f"malformed JSON ({_reason(exc)})", left + int(match.group(1))
                ) from exc
        return self._decode_lossy(left, cut)

    def _decode_lossy(self, left: int, cut: int) -> list[T]:
        """``buf[left + 1 .. cut]`` (whole events; the decode failed on invalid UTF-8, which has
        no offset) decoded event by event, the events the decoder rejects with their invalid
        UTF-8 replaced by U+FFFD and counted, the first bad byte's file offset kept. Event by
        event, so what is repaired never depends on how the file was cut into chunks (a
        serial parse and a parallel one agree)."""
        body = bytes(self.buf[left + 1 : cut + 1])
        out: list[T] = []
        pos = 0
        for raw in RAW_EVENTS.decode(b"[" + body + b"]"):
            event = bytes(raw)
            at = body.find(event, pos)  # events come in order: one pass over the chunk
            pos = at + len(event)
            where = left + 1 + at  # in the buffer
            try:
                out.append(self._decode_one(event, where))
                continue
            except msgspec.DecodeError as exc:
                try:
                    event.decode()
                except UnicodeDecodeError as bad:
                    self.stats.lossy_utf8_events += 1
                    if self.stats.lossy_utf8_at < 0:
                        self.stats.lossy_utf8_at = (
                            self.reader.origin + self.base + where + bad.start
                        )
                else:
                    raise self._error(f"malformed JSON ({_reason(exc)})", where) from exc
            try:
                out.append(self._decode_one(event.decode("utf-8", "replace").encode(), where))
            except msgspec.DecodeError as exc:
                raise self._error(f"malformed JSON ({_reason(exc)})", where) from exc
        return out

    def _decode_one(self, event: bytes, where: int) -> T:
        text = b"[" + event + b"]"
        try:
            return self.decode(memoryview(text))
        except RecursionError:
            raise self._nested(text, where - 1) from None

    def _check_gap(self, lo: int, hi: int) -> None:
        """Only whitespace (and one tolerated trailing comma) may sit between the last event and ``]``."""
        gap = bytes(self.buf[lo:hi])
        stripped = gap.strip(_WS)
        if stripped in (b"", b","):
            return
        body = stripped[1:] if stripped.startswith(b",") else stripped
        try:  # values that are not objects (not events) are valid JSON: skip them
            self._any(b"[" + body + b"]", lo)
        except msgspec.DecodeError:
            bad = lo + len(gap) - len(gap.lstrip(_WS))
            raise self._error(
                "malformed JSON (unexpected bytes after the last event)", bad
            ) from None

    def _diagnose(self, p: int) -> TraceError:
        """The error for a stream that ended inside the array: a malformed byte, or truncation."""
        text = bytearray(self.buf[p : self.fill])
        if text[:1] == b",":
            text[0] = 91
        else:
            text[:0] = b"["
        try:
            self._any(text, p)
        except msgspec.DecodeError as exc:
            match = _BYTE_RE.search(str(exc))
            if match and int(match.group(1)) < len(text):
                shift = 0 if self.buf[p] == 44 else -1
                return self._error(
                    f"malformed JSON ({_reason(exc)})", p + int(match.group(1)) + shift
                )
        return self._error("truncated: traceEvents array not closed", self.fill)

    def _finish(self, array_end: int) -> None:
        """Read the rest of the stream after the array's ``]`` and decode the trailing keys."""
        tail = bytearray(self.buf[array_end + 1 : self.fill])
        chunk = bytearray(self.block_size)
        with memoryview(chunk) as mv:
            while (got := self.reader.readinto(mv)) > 0:
                # a block of whitespace streams past as one space (bounded memory); the offsets
                # of errors after it are then approximate
                tail += mv[:got] if _NOT_WS.search(chunk, 0, got) else b" "
                if len(tail) > MAX_EVENT_BYTES:
                    raise self._error(
                        f"keys after the traceEvents array larger than {MAX_EVENT_BYTES >> 20} MiB",
                        array_end + 1,
                    )
        if self.bare:
            if _NOT_WS.search(tail):
                raise self._error("trailing characters after the events array", array_end + 1)
            return
        if not _NOT_WS.search(tail):
            raise self._error("truncated after the traceEvents array", array_end + 1)
        self.stats.header.update(self._decode_object(tail, b"{", array_end + 1, array_end + 1))

    def close(self) -> None:
        self.stats.nbytes = self.reader.offset
        self.reader.close()


def _reason(exc: Exception) -> str:
    return _BYTE_RE.sub("", str(exc).replace("JSON is malformed: ", "")).strip()


def _sanitize_inplace(buf: bytearray, lo: int, hi: int) -> int:
    """Replace raw control characters inside strings of ``buf[lo:hi]`` by spaces; count them."""
    a = np.frombuffer(buf, dtype=np.uint8, count=hi)[lo:]
    ctrl = np.flatnonzero(a < 32)
    if ctrl.size == 0:
        return 0
    _, _, quotes = _structure(a)
    inside = ctrl[(np.searchsorted(quotes, ctrl) & 1) == 1]
    for i in inside.tolist():
        buf[lo + i] = 32
    return int(inside.size)


def scan_events(
    path: str | Path,
    decode: Callable[[memoryview], T],
    *,
    stats: ScanStats | None = None,
    block_size: int = BLOCK_SIZE,
) -> Iterator[T]:
    """Yield ``decode(chunk)`` for consecutive chunks of ``traceEvents`` in the file at ``path``.

    ``chunk`` is a memoryview of a JSON array of whole events, valid only during the call.
    ``stats`` (filled in as the scan goes, complete once the iterator is exhausted) receives the
    top-level keys and counters. ``block_size`` is the number of bytes read at a time (the
    buffer grows for an event larger than that); small blocks exercise every chunk boundary.

    Raises
    ------
    TraceError
        The file cannot be opened, is not a trace, is truncated or corrupt; the message names
        the file and the byte offset.
    """
    stats = stats if stats is not None else ScanStats()
    scanner = Scanner(Path(path), decode, stats, block_size)
    try:
        start = scanner.find_events()
        yield from scanner.events(start)
    finally:
        scanner.close()
