"""Redaction throughput on a training log: the run's redaction (known secrets as salted hashes,
token by token, plus every shape rule) against its peer in the same run, the shape rules alone
(what a redactor without knowledge of the run can do).

    .venv/bin/python benchmarks/redact.py [--mb 20] [--secrets 20] [--repeat 3]

Prints MB/s for both and their ratio, and the run's redaction when one of its secrets holds
blanks (a passphrase; results: docs/performance.md, "Redaction").

``--bundle``: instead, ``aorta bundle`` of a run holding that log (plan + write), against its
peer in the same run, the same bundle with the scan's redacted bytes dropped before the write
(each file redacted twice, as before the bundle kept them).

``--console``: instead, what the ``aorta`` command prints (every line through its redacting
stdout, ``aorta.cli._options.redacted_output``, knowing the secrets of a recipe) against its
peer in the same run, the same lines printed to the same buffer without it.

``--trace PATH``: instead, a gzipped trace redacted as a bundle does it
(``aorta.store.redact_stream.redact_file``: token by token, keys too, recompressed on the fly)
against its peer in the same run, the data walk bundles did before (``json.loads``,
``Redactor.data_counted``, ``json.dumps``, ``gzip.compress``; values only).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import json
import random
import statistics
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aorta.store.bundle import plan_bundle, write_bundle
from aorta.store.redact import Redactor
from aorta.store.redact_stream import redact_file
from aorta.store.rundir import RunDir
from aorta.store.secrets import redact_secret_shapes_counted


def synthetic_log(mb: int, secrets: list[str], seed: int = 0) -> str:
    """Lines like a training log (steps, losses, NCCL info, paths), a secret every ~5,000."""
    rng = random.Random(seed)
    lines, size, i = [], 0, 0
    while size < mb * 1_000_000:
        i += 1
        line = (
            f"[rank{i % 8}] step {i} loss {rng.random():.5f} lr 3.0e-4 tokens/s {rng.randint(10_000, 90_000)}"
            f" grad_norm {rng.random():.3f} time {rng.uniform(80, 120):.2f}ms"
        )
        if i % 7 == 0:
            line = f"NCCL INFO Channel {i % 32:02d}/0 : {i % 8}[{i % 8}] -> {(i + 1) % 8} via P2P/IPC/read"
        if i % 5000 == 0:
            line += f" token={rng.choice(secrets)}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--secrets", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bundle", action="store_true", help="time aorta bundle (plan + write)")
    ap.add_argument("--trace", type=Path, help="time the redaction of this gzipped trace")
    ap.add_argument("--console", action="store_true", help="time the command's printed lines")
    args = ap.parse_args()
    if args.trace:
        trace(args.trace, args.repeat)
        return
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits + "-_"
    secrets = ["".join(rng.choices(alphabet, k=rng.randint(12, 40))) for _ in range(args.secrets)]
    text = synthetic_log(args.mb, secrets)
    mb = len(text) / 1e6
    if args.bundle:
        bundle(text, mb, args.repeat)
        return
    if args.console:
        console(text, mb, secrets, args.repeat)
        return
    run = Redactor(scrub_paths=True, scrub_ips=True).with_values(secrets)

    def timed(fn: Callable[[str], tuple[str, int]]) -> tuple[float, int]:
        times: list[float] = []
        n = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            _, n = fn(text)
            times.append(time.perf_counter() - t0)
        return statistics.median(times), n

    t_run, n_run = timed(run.text_counted)
    t_shape, n_shape = timed(redact_secret_shapes_counted)
    # A secret holding blanks is looked for across tokens too (one vectorised pass).
    t_pass, _ = timed(run.with_values(["correct horse battery staple"]).text_counted)
    print(f"log: {mb:.1f} MB, {text.count(chr(10)) + 1:,} lines, {args.secrets} known secrets")
    print(
        f"run redaction (hashes + shapes + names + homes + IPs): {mb / t_run:.1f} MB/s, {n_run} masked"
    )
    print(f"peer, shapes alone: {mb / t_shape:.1f} MB/s, {n_shape} masked")
    print(f"ratio (time, run / peer): {t_run / t_shape:.2f}x")
    print(
        f"run redaction also knowing a passphrase: {mb / t_pass:.1f} MB/s "
        f"({t_pass / t_run:.2f}x the run's time)"
    )


def console(text: str, mb: float, secrets: list[str], repeat: int) -> None:
    """``text`` printed as the CLI prints it, redacted: line by line (the worst case, a fixed
    cost per write) against plain prints, and as one text (how the summaries and tables are
    printed) against the same redactor's ``text`` on it (what the files get)."""
    import contextlib
    import sys

    from aorta.cli._options import redact_secrets_of, redacted_output

    lines = text.splitlines()
    known = Redactor().with_values(secrets)

    def printed(redacted: bool, whole: bool) -> float:
        buf = io.StringIO()
        quiet = redacted_output() if redacted else contextlib.nullcontext()
        with contextlib.redirect_stdout(buf), quiet:
            if redacted:
                redact_secrets_of(known)
            t0 = time.perf_counter()
            for chunk in [text] if whole else lines:
                print(chunk)
            sys.stdout.flush()
            took = time.perf_counter() - t0
        assert not redacted or not any(s in buf.getvalue() for s in secrets)
        return took

    def direct() -> float:
        t0 = time.perf_counter()
        known.printing().text(text)
        return time.perf_counter() - t0

    def median(fn: Callable[..., float], *a: bool) -> float:
        return statistics.median(fn(*a) for _ in range(repeat))

    print(f"printed: {mb:.1f} MB, {len(lines):,} lines, {len(secrets)} known secrets")
    red, raw = median(printed, True, False), median(printed, False, False)
    print(
        f"line by line: redacting stdout {mb / red:.2f} MB/s ({len(lines) / red:,.0f} lines/s); "
        f"peer, plain print {mb / raw:.1f} MB/s; ratio (time) {red / raw:.0f}x"
    )
    red, peer = median(printed, True, True), median(direct)
    print(
        f"as one text: redacting stdout {mb / red:.2f} MB/s; peer, Redactor.text on it "
        f"{mb / peer:.2f} MB/s; ratio (time) {red / peer:.2f}x"
    )


def bundle(text: str, mb: float, repeat: int) -> None:
    """``plan_bundle`` + ``write_bundle`` of a run holding ``text`` as a trial's log."""
    with tempfile.TemporaryDirectory() as tmp:
        rd = RunDir.create(tmp, ticket="BENCH", workload="command")
        rd.write_json(rd.manifest_path, {"status": "complete", "ticket": "BENCH"})
        log = rd.path / "cells" / "base" / "trial_0000" / "stdout.log"
        log.parent.mkdir(parents=True)
        log.write_text(text)

        def once(twice: bool) -> float:
            out = Path(tempfile.mkdtemp(dir=tmp))
            t0 = time.perf_counter()
            plan = plan_bundle(rd.path, env={})
            if twice:  # the peer: the write redacts every file again
                plan = dataclasses.replace(plan, spooled={})
            write_bundle(plan, out)
            return time.perf_counter() - t0

        once_s = statistics.median(once(False) for _ in range(repeat))
        twice_s = statistics.median(once(True) for _ in range(repeat))
    print(json.dumps({"log_mb": round(mb, 1)}))
    print(f"bundle, each file redacted once (kept from the scan): {mb / once_s:.1f} MB/s")
    print(f"peer, same run: redacted again at the write: {mb / twice_s:.1f} MB/s")
    print(f"ratio (time, once / twice): {once_s / twice_s:.2f}x")


def trace(path: Path, repeat: int) -> None:
    """A gzipped trace as the bundle streams it, against the old data walk."""
    r = Redactor(scrub_paths=True).with_values(
        ["SomeSecret-123456", "correct horse battery staple"]
    )
    raw = gzip.decompress(path.read_bytes())

    def walk() -> float:
        t0 = time.perf_counter()
        data, _ = r.data_counted(json.loads(raw))
        gzip.compress(json.dumps(data, indent=1, ensure_ascii=False).encode(), compresslevel=6)
        return time.perf_counter() - t0

    def stream() -> float:
        t0 = time.perf_counter()
        redact_file(path, io.BytesIO(), r, limit=1 << 40)
        return time.perf_counter() - t0

    t_stream = statistics.median(stream() for _ in range(repeat))
    t_walk = statistics.median(walk() for _ in range(repeat))
    mb = len(raw) / 1e6
    print(f"trace: {path.name}, {mb:.1f} MB of JSON")
    print(f"streamed (keys too): {mb / t_stream:.1f} MB/s")
    print(f"peer, same run: the data walk (values only): {mb / t_walk:.1f} MB/s")
    print(f"ratio (time, stream / walk): {t_stream / t_walk:.2f}x")


if __name__ == "__main__":
    main()
