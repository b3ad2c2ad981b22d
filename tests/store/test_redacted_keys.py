"""Redacted JSON keys (#45.7): two keys that redact to the same marker stay two keys, and a
secret that is also a field name aorta writes never masks that field, so a redacted trial record
still loads."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.store.record import RECORD_KEYS, TrialRecord
from aorta.store.redact import Redactor
from aorta.store.redact_stream import redact_file


def _redact(tmp_path, text: str, r: Redactor) -> str:
    path = tmp_path / "doc.json"
    path.write_text(text)
    out = io.BytesIO()
    redact_file(path, out, r, limit=1 << 20)
    return out.getvalue().decode()


def _pairs(text: str) -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    json.loads(text, object_pairs_hook=lambda pairs: found.extend(pairs) or dict(pairs))
    return found


def test_two_secret_keys_stay_two_keys(tmp_path) -> None:
    r = Redactor().with_values(["Tok3nValue-one", "Tok3nValue-two", "Tok3nValue-three"])
    doc = {"Tok3nValue-one": 1, "Tok3nValue-two": 2, "Tok3nValue-three": {"Tok3nValue-one": 3}}
    text = _redact(tmp_path, json.dumps(doc), r)
    keys = [k for k, _ in _pairs(text)]
    assert "Tok3nValue" not in text
    # The inner object first (it closes first), then the outer one's three.
    assert keys == ["<redacted>", "<redacted>", "<redacted> (2)", "<redacted> (3)"]
    assert sorted(json.loads(text).values(), key=str) == [1, 2, {"<redacted>": 3}]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(k for k in RECORD_KEYS if len(k) >= 6)), min_size=1, max_size=4)
)
def test_a_secret_equal_to_a_record_field_keeps_the_record_readable(
    tmp_path_factory, fields
) -> None:
    rec = TrialRecord(
        cell="base",
        cell_id="abc",
        trial=0,
        status="workload_failed",
        passed=False,
        error="signature matched",
        signature="nccl_error",
        step_times_ms=[1.0, 2.0],
    )
    r = Redactor().with_values(fields)
    text = _redact(tmp_path_factory.mktemp("r"), rec.to_json().decode(), r)
    back = TrialRecord.model_validate_json(text)
    assert (back.cell, back.status, back.step_times_ms, back.trial) == (
        "base",
        rec.status,
        [1.0, 2.0],
        0,
    )
    # The values are still redacted where the secret stands in them.
    if "signature" in fields:
        assert "signature matched" not in text
