"""``aorta bundle`` tells a file's compression and encoding by its bytes, not its name: a
known secret in UTF-16 text, in gzip bytes named ``.log`` and in gzip inside gzip is masked
(each written back as it was); what cannot be scanned (zip data, compression nested too
deep, a bomb past the size cap) is left out with the reason in the manifest. Real sweeps
write the files, real archives are read back."""

from __future__ import annotations

import bz2
import contextlib
import functools
import gzip
import io
import json
import lzma
import tarfile
import zipfile

import pytest

from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.redact_stream import MAX_LAYERS, sniff

SECRET = "hf_Zq8vN3kW7pL2xR9tY4mB6cD1"

# Each file the trial writes, and the bytes of its text "token in use: <secret>".
WRITE = f"""
import bz2, gzip, io, json, lzma, os, zipfile
d = os.environ["AORTA_ARTIFACT_DIR"]
line = "step 1 ok\\ntoken in use: " + os.environ["HF_TOKEN"] + "\\nstep 2 ok\\n"
def put(name, data):
    open(os.path.join(d, name), "wb").write(data)
put("utf16.log", line.encode("utf-16"))
put("utf16be.txt", line.encode("utf-16-be"))
put("utf32.log", line.encode("utf-32"))
put("gzipped.log", gzip.compress(line.encode()))
put("twice.log.gz", gzip.compress(gzip.compress(line.encode())))
put("mixed.out", lzma.compress(bz2.compress(gzip.compress(line.encode("utf-16")))))
put("utf16.json.gz", gzip.compress(json.dumps({{"msg": line}}).encode("utf-16")))
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("inner.log", line)
put("zipped.log", buf.getvalue())
deep = line.encode()
for _ in range({MAX_LAYERS + 1}):
    deep = gzip.compress(deep)
put("deep.log", deep)
put("bomb.log", gzip.compress(b" " * (8 << 20) + line.encode()))
put("binary.log.gz", gzip.compress(b"\\0" * 4096 + line.encode()))
put("padded.log", b"\\0" * 4096 + line.encode())
put("plain.log", line.encode())
"""


@pytest.fixture(scope="module")
def leaky_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("enc")
    recipe = load_recipe_text(
        f'mode: probe\ntrials: 1\nmitigation_axis: [none]\nextra_env: {{HF_TOKEN: "{SECRET}"}}\n',
        command=["python3", "-c", WRITE],
    )
    result = sweep(recipe, output=root / "runs", progress="none")
    assert result.exit_code == ExitCode.OK
    return result.run_dir


def _texts(data: bytes, depth: int = 0) -> list[str]:
    """Every way ``data`` can be read as text: decompressed (any depth) and decoded."""
    out: list[str] = []
    if not data or depth > 8:
        return out
    xz = functools.partial(lzma.decompress, format=lzma.FORMAT_XZ)
    for opener in (gzip.decompress, bz2.decompress, xz):
        with contextlib.suppress(Exception):  # not that compression
            out += _texts(opener(data), depth + 1)
    if data.startswith(b"PK"):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            out += [t for n in z.namelist() for t in _texts(z.read(n), depth + 1)]
    for enc in ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
        for skip in (0, 1):
            out.append(data[skip:].decode(enc, "ignore"))
    return out


def _bundle(run_dir, out, run_cli, *args):
    code, said, err = run_cli("bundle", run_dir, "-o", out, "--ticket", "T-1", *args)
    assert code == ExitCode.OK, err
    (archive,) = out.glob("T-1-*.tar.gz")
    members = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.isfile():
                members[m.name.split("/", 1)[1]] = tar.extractfile(m).read()
    manifest = json.loads(members["bundle_manifest.json"])
    return said, members, manifest


def test_the_secret_is_written_in_every_encoding_and_compression(leaky_run):
    (folder,) = (p.parent for p in leaky_run.rglob("plain.log"))
    for path in folder.iterdir():
        if path.name not in ("stdout.log", "stderr.log"):
            assert any(SECRET in t for t in _texts(path.read_bytes())), path.name
    assert sniff(folder / "gzipped.log").layers == (".gz",)
    assert sniff(folder / "mixed.out").layers == (".xz", ".bz2", ".gz")
    assert sniff(folder / "utf16be.txt").encoding == "utf-16-be"  # no mark: by its NULs
    assert sniff(folder / "padded.log").encoding == "utf-8"  # NUL padding is not UTF-16


def test_no_secret_leaves_in_any_encoding_or_compression(leaky_run, tmp_path, run_cli):
    said, members, manifest = _bundle(leaky_run, tmp_path / "b", run_cli, "--max-size", "4M")
    for name, data in members.items():
        assert not any(SECRET in t for t in _texts(data)), name
    by_name = {m.rsplit("/", 1)[-1]: data for m, data in members.items()}
    notes = {e["path"].rsplit("/", 1)[-1]: e.get("note") for e in manifest["files"]}
    left = {e["path"].rsplit("/", 1)[-1]: e["reason"] for e in manifest["left_out"]}
    # Masked, and written back as it was: the same layers, the same encoding.
    assert sniff_bytes(by_name["gzipped.log"], tmp_path).layers == (".gz",)
    text = gzip.decompress(gzip.decompress(by_name["twice.log.gz"])).decode()
    assert "token in use: <redacted>" in text and "step 2 ok" in text
    assert "token in use: <redacted>" in by_name["utf16.log"].decode("utf-16")
    assert "token in use: <redacted>" in by_name["utf16be.txt"].decode("utf-16-be")
    assert "<redacted>" in by_name["utf32.log"].decode("utf-32")
    assert "<redacted>" in gzip.decompress(by_name["utf16.json.gz"]).decode("utf-16")
    inner = gzip.decompress(bz2.decompress(lzma.decompress(by_name["mixed.out"])))
    assert "token in use: <redacted>" in inner.decode("utf-16")
    assert notes["twice.log.gz"] == "gzip inside gzip: decompressed, scanned, recompressed"
    assert notes["utf16.log"] == "UTF-16 text"
    assert notes["plain.log"] is None
    # Refused, each with why.
    assert left["zipped.log"] == "zip data: it cannot be scanned"
    assert (
        left["deep.log"] == f"compressed more than {MAX_LAYERS} levels deep: it cannot be scanned"
    )
    assert left["bomb.log"].startswith("decompresses past the size cap (4,194,304 bytes)")
    assert left["binary.log.gz"] == "compressed binary data: it cannot be scanned"
    assert not {"bomb.log", "zipped.log", "deep.log", "binary.log.gz"} & set(by_name)
    assert "padded.log" in by_name  # NULs before UTF-8 text: scanned as it was
    assert "<redacted>" in by_name["padded.log"].decode("utf-8")
    assert "left out" in said


def sniff_bytes(data: bytes, tmp_path):
    path = tmp_path / "sniffed"
    path.write_bytes(data)
    return sniff(path)
