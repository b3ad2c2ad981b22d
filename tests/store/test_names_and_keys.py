"""Issue 39, items 1 and 2: a known secret is masked whole wherever it stands — with blanks in
it (a passphrase), next to ``-``, ``_`` or a colour escape, as a JSON object key, in a file or
folder name, inside a compressed member — and its parts are not secrets of their own.

Pure redaction and bundles of run directories laid out by hand (no sweep: the real sweep is
in test_bundle_forensics.py). Each test failed before the change."""

from __future__ import annotations

import bz2
import gzip
import html
import io
import json
import tarfile

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.store import redact_stream
from aorta.store.bundle import plan_bundle, write_bundle
from aorta.store.redact import Redactor, harvest_secrets, record_secrets, yaml_counted
from aorta.store.redact_stream import redact_file
from aorta.store.rundir import RunDir

PASS = "correct horse battery staple"
TOKEN = "Tok3nValue-9f8e7d"


def _run_knowing(tmp_path, *values: str) -> RunDir:
    rd = RunDir.create(tmp_path / "runs", ticket="T-39", workload="x")
    rd.manifest_path.write_text(json.dumps({"ticket": "T-39"}))
    record_secrets(rd, values)
    return rd


# -- 1. a secret with blanks is masked whole, its words are not secrets --------------------------


def test_a_passphrase_is_masked_whole_and_its_first_word_is_no_secret():
    # Before: the recipe's text gave "correct" as a secret (the `password: X` shape stops at
    # the first blank), so "the answer is correct" lost its last word, and the passphrase's
    # other words stayed in clear.
    env = {"DB_PASSWORD": PASS}
    found = harvest_secrets(env, texts=[f"extra_env:\n  DB_PASSWORD: {PASS}\n"])
    assert found == {PASS}
    r = Redactor.for_run(env=env, texts=[f"DB_PASSWORD: {PASS}"])
    log = f"login with {PASS}.\nthe answer is correct\nDB_PASSWORD={PASS}\n"
    assert r.text(log) == (
        "login with <redacted>.\nthe answer is correct\nDB_PASSWORD=<redacted>\n"
    )
    page = r.html(f"<pre>pw: {PASS}</pre><p title='{PASS}'>correct</p>")
    assert "horse" not in page and "battery" not in page and ">correct</p>" in page
    doc = yaml.safe_dump({"extra_env": {"DB_PASSWORD": PASS}, "note": f"was {PASS}"})
    out, _ = yaml_counted(r, doc)
    assert "horse" not in out and yaml.safe_load(out)["note"] == "was <redacted>"
    assert r.data({"argv": ["--password", PASS], "msg": f"x {PASS} y"}) == {
        "argv": ["--password", "<redacted>"],
        "msg": "x <redacted> y",
    }


def test_a_passphrase_is_masked_from_the_run_hashes_alone(tmp_path):
    rd = _run_knowing(tmp_path, PASS)
    r = Redactor.of_run(rd, env={})
    assert r.text(f"a {PASS} b correct horse") == "a <redacted> b correct horse"
    # Its words alone, or a longer run holding it glued to letters, are not it.
    assert r.text(f"x{PASS}") == f"x{PASS}"


# -- 2. boundaries: -, _, colour escapes; never inside a run of letters and digits -------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"ckpt-{TOKEN}.txt", "ckpt-<redacted>.txt"),
        (f"run_{TOKEN}_2", "run_<redacted>_2"),
        (f"\x1b[31m{TOKEN}\x1b[0m", "\x1b[31m<redacted>\x1b[0m"),
        (f"\x1b[1;32m{TOKEN}", "\x1b[1;32m<redacted>"),
        (f"--{TOKEN}--", "--<redacted>--"),
        (f"x{TOKEN}", f"x{TOKEN}"),  # glued to letters: a limit, said in reliability.md
        (f"{TOKEN}9", f"{TOKEN}9"),
    ],
)
def test_a_token_is_masked_at_every_boundary_outside_its_alphabet(line, expected):
    # Before: `-`, `_` and the `m` ending a colour escape were not boundaries.
    assert Redactor().with_values([TOKEN]).text(line) == expected


# -- 2. JSON keys, nested evidence, compressed members ------------------------------------------

FORENSICS = {
    # a flight-recorder dump: entries with frames, process-group config, an env capture
    "fr_0.json": {
        "version": "2.4",
        "pg_config": {"0": {"desc": f"default_pg {TOKEN}", "ranks": "[0, 1]"}},
        "entries": [
            {"record_id": 0, "frames": [{"name": "allreduce", "filename": f"/w/{TOKEN}.py"}]},
            {"record_id": 1, "env": {"HF_TOKEN": "hf_NotKnownButNamed1", TOKEN: "1"}},
        ],
    },
    # py-spy stacks with locals
    "stacks_0.json": [
        {
            "thread_id": 1,
            "frames": [
                {"name": "train", "locals": {"api_key": "ShapelessKey-123", "x": TOKEN}},
                {"name": "step", "locals": {"argv": ["--hf-token", "NotKnownFlagVal9"]}},
            ],
        }
    ],
    "capture_0.json": {"rank": 0, "tool": "py-spy", "note": f"captured {PASS}", TOKEN: {"n": 3}},
}


def test_json_is_redacted_key_by_key_nested_and_still_parses(tmp_path):
    # Before: keys were never masked ({"<token>": 1} kept the token), so a JSON file whose keys
    # held a secret left the run with it.
    r = Redactor().with_values([TOKEN, PASS])
    for name, data in FORENSICS.items():
        path = tmp_path / name
        path.write_text(json.dumps(data, indent=2))
        out = io.BytesIO()
        n = redact_file(path, out, r, limit=1 << 20)
        text = out.getvalue().decode()
        assert TOKEN not in text and "horse" not in text and n >= 1, name
        assert "NotKnown" not in text and "ShapelessKey" not in text
        json.loads(text)  # still JSON, layout kept
        assert text.count("\n") == path.read_text().count("\n")


@pytest.mark.parametrize("suffix", [".gz", ".bz2"])
def test_a_compressed_trace_is_redacted_inside_keys_included(tmp_path, suffix):
    # Before: a gzipped trace's `args` key holding the token went into the bundle as it was.
    doc = {"traceEvents": [{"name": "k", "ph": "X", "args": {TOKEN: 1, "id": TOKEN}}]}
    opener = {".gz": gzip.open, ".bz2": bz2.open}[suffix]
    path = tmp_path / f"rank0.pt.trace.json{suffix}"
    with opener(path, "wt") as fh:
        json.dump(doc, fh)
    out = io.BytesIO()
    assert redact_file(path, out, Redactor().with_values([TOKEN]), limit=1 << 20) == 2
    inner = json.loads(opener(io.BytesIO(out.getvalue())).read())
    assert inner["traceEvents"][0]["args"] == {"<redacted>": 1, "id": "<redacted>"}


# -- 2. names in the archive and its manifest ----------------------------------------------------


def test_names_holding_a_secret_are_redacted_in_the_archive_and_said_in_the_manifest(tmp_path):
    # Before: `ckpt-<token>.txt` kept its name in the tar and in bundle_manifest.json.
    rd = _run_knowing(tmp_path, TOKEN)
    art = rd.artifact_dir("leaky", 0)
    (art / "hang").mkdir(parents=True)
    (art / "stdout.log").write_text("fine\n")
    (art / f"ckpt-{TOKEN}.txt").write_text("weights\n")
    (art / f"{TOKEN}.txt").write_text("one\n")
    (art / "[redacted].txt").write_text("two: a name that is already the marker\n")
    (art / f"run_{TOKEN}").mkdir()
    (art / f"run_{TOKEN}" / "stdout.log").write_text(f"\x1b[32m{TOKEN}\x1b[0m\n")
    for name, data in FORENSICS.items():
        (art / "hang" / name).write_text(json.dumps(data))
    (art / "hang" / f"fr_{TOKEN}.json").write_text("{}")
    plan = plan_bundle(rd.path, env={})
    archive = write_bundle(plan, tmp_path / "out")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        texts = {n: tar.extractfile(n).read().decode() for n in names if tar.getmember(n).isfile()}
    manifest = json.loads(next(t for n, t in texts.items() if n.endswith("bundle_manifest.json")))
    trial = "cells/leaky/trial_0000"
    assert not [n for n in names if TOKEN in n]
    assert not [n for n, t in texts.items() if TOKEN in t]
    files = {f["path"]: f for f in manifest["files"]}
    assert files[f"{trial}/ckpt-[redacted].txt"]["name_redacted"] is True
    assert files[f"{trial}/stdout.log"]["name_redacted"] is False
    assert files[f"{trial}/run_[redacted]/stdout.log"]["redactions"] == 1
    # two names that become one are both kept
    assert f"{trial}/[redacted].txt" in files and f"{trial}/[redacted]-2.txt" in files
    assert files[f"{trial}/hang/fr_[redacted].json"]["name_redacted"] is True
    assert manifest["names_redacted"] == 4
    for name in FORENSICS:
        json.loads(texts[f"{plan.name}/{trial}/hang/{name}"])


# -- the property: a random passphrase in a random context and format ----------------------------

words = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=8), min_size=2, max_size=5
)
contexts = st.sampled_from(
    ["{s}", "pw: {s}", "DB_PASSWORD={s}", "got ({s}).", "'{s}'", "--password '{s}'", "x\t{s}\ty"]
)


@settings(max_examples=150, deadline=None)
@given(parts=words, context=contexts, fmt=st.sampled_from(["text", "json", "yaml", "html"]))
def test_property_a_passphrase_is_gone_whole_and_its_words_stay(parts, context, fmt):
    secret = " ".join(parts)
    r = Redactor.for_run(env={"PLANTED_PASSWORD": secret}, texts=[f"password: {secret}"])
    line = context.format(s=secret)
    alone = f"only {parts[0]}."
    if fmt == "text":
        out = r.text(f"{line}\n{alone}")
    elif fmt == "json":
        out = json.dumps(r.data({"msg": line, "argv": ["--token", secret], "n": alone}))
        json.loads(out)
    elif fmt == "yaml":
        out, _ = yaml_counted(r, yaml.safe_dump({"msg": line, "n": alone}))
        yaml.safe_load(out)
    else:
        out = html.unescape(r.html(f"<pre>{html.escape(line)}</pre><p>{alone}</p>"))
    assert secret not in out
    assert alone in out  # a word of it alone is no secret


_SAFE_KEYS = st.sampled_from(["name", "args", "ts", "ph", "frames", "locals", "x", "HF_TOKEN"])
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([TOKEN, f"at {TOKEN}.", "--password", "plain words", 'q"uote\\\n', "é ü"]),
    st.text(max_size=12),
)
documents = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(_SAFE_KEYS, inner, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=100, deadline=None)
@given(doc=documents, indent=st.sampled_from([None, 1, 4]), read=st.integers(1, 40))
def test_property_the_json_stream_masks_what_the_data_walk_masks(
    tmp_path_factory, doc, indent, read
):
    """Whatever the document and wherever the reads cut it, the streamed JSON parses and holds
    what the data walk makes of it (keys here are no secrets, so both agree)."""
    r = Redactor().with_values([TOKEN])
    path = tmp_path_factory.mktemp("j") / "doc.json"
    path.write_text(json.dumps(doc, indent=indent, ensure_ascii=False))
    out = io.BytesIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redact_stream, "_READ", read)
        redact_file(path, out, r, limit=1 << 20)
    assert json.loads(out.getvalue()) == r.data(doc)


@pytest.mark.parametrize(
    "raw", [f'{{"a": "{TOKEN}"}}\n{{"b": 1}}\n', f'{{"a": "{TOKEN}", ', f'[1, "{TOKEN}"] x', ""]
)
def test_a_json_file_that_is_not_json_is_redacted_as_text(tmp_path, raw):
    path = tmp_path / "lines.json"
    path.write_text(raw)
    out = io.BytesIO()
    redact_file(path, out, Redactor().with_values([TOKEN]), limit=1 << 20)
    assert out.getvalue().decode() == raw.replace(TOKEN, "<redacted>")


# -- attacks on the new paths (found in this round's hostile pass) --------------------------------


def test_an_html_artifact_loses_a_known_secret_in_its_script_comments_and_style(tmp_path):
    # Before: <script>, <style> and comments went into a bundle as they were ("aorta's own
    # code"), so a job's profile.html with the token in a script kept it.
    page = (
        f"<html><script>var key = '{TOKEN}'; if (e.key === 'Enter') go();</script>"
        f"<!-- built by {TOKEN} --><style>/* {TOKEN} */ p {{}}</style><p>{TOKEN}</p></html>"
    )
    path = tmp_path / "profile.html"
    path.write_text(page)
    out = io.BytesIO()
    assert redact_file(path, out, Redactor().with_values([TOKEN]), limit=1 << 20) == 4
    text = out.getvalue().decode()
    assert TOKEN not in text
    assert "if (e.key === 'Enter') go();" in text  # code is not rewritten by the shape rules


def test_a_json_string_past_the_bound_is_left_out_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(redact_stream, "MAX_STRING", 1000)
    monkeypatch.setattr(redact_stream, "_READ", 256)
    rd = _run_knowing(tmp_path, TOKEN)
    art = rd.artifact_dir("c", 0)
    art.mkdir(parents=True)
    (art / "big.json").write_text(json.dumps({"s": "x" * 5000}))
    left = {e.path.rsplit("/", 1)[-1]: e.note for e in plan_bundle(rd.path, env={}).left_out}
    assert left["big.json"] == "a JSON string longer than 1,000 characters: it cannot be scanned"


def test_a_line_past_the_bound_is_cut_after_a_delimiter_never_inside_a_token(tmp_path, monkeypatch):
    monkeypatch.setattr(redact_stream, "MAX_LINE", 4096)
    monkeypatch.setattr(redact_stream, "BLOCK", 1024)
    monkeypatch.setattr(redact_stream, "_READ", 100)
    r = Redactor().with_values([TOKEN])
    for filler in ("a" * 35 + ",", "b" * 61 + " "):  # no line break: 4096 falls in a token
        path = tmp_path / "long.log"
        path.write_text((filler + TOKEN + ";") * 400)
        out = io.BytesIO()
        assert redact_file(path, out, r, limit=1 << 20) == 400
        assert TOKEN not in out.getvalue().decode()


def test_a_markup_bomb_is_redacted_in_blocks_not_held_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(redact_stream, "MAX_WHOLE", 10_000)
    monkeypatch.setattr(redact_stream, "_READ", 1000)
    r = Redactor().with_values([TOKEN])
    for name in ("page.html.gz", "notes.md", "conf.yaml"):
        path = tmp_path / name
        text = "".join(f"<p>line {i} {TOKEN}</p>\n" for i in range(2000))
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
        out = io.BytesIO()
        assert redact_file(path, out, r, limit=1 << 30) == 2000
        raw = out.getvalue()
        raw = gzip.decompress(raw) if name.endswith(".gz") else raw
        assert TOKEN.encode() not in raw and raw.count(b"\n") == 2000
