"""aorta.store.secrets: the one home of secret names, shapes, homes and IP addresses, shared by
the host snapshot (aorta.store.hostenv, also on nodes without aorta) and the run's redaction
(aorta.store.redact).

Issue 38: the IP rule had two patterns — ``Redactor.text("... 10.0.0.1.")`` kept the address,
the snapshot's path turned the version ``2.4.0.1.2`` into ``<ip>.2``. Both now use one rule;
the property test runs both paths on the same strings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import aorta
from aorta.launch.node_command import setup_command
from aorta.recipe.cluster import Cluster
from aorta.recipe.launch_spec import LaunchSpec
from aorta.store.redact import Redactor
from aorta.store.secrets import redact_env

PACKAGE = Path(aorta.__file__).parent
octet = st.integers(0, 255).map(str)
address = st.tuples(octet, octet, octet, octet).map(".".join)
before = st.sampled_from(["", " ", "at ", "(", "=", "[", "'", "peer:"])
after = st.sampled_from(["", ".", ",", ")", ":29500", ";", " and", "/24", "]", ". Then", "'"])


def _both(text: str) -> tuple[str, str]:
    """``text`` through the redactor and through the snapshot's env path."""
    return Redactor(scrub_ips=True).text(text), redact_env({"X": text}, scrub_ips=True)["X"]


@settings(max_examples=200)
@given(ip=address, pre=before, post=after)
def test_property_an_address_is_masked_alike_on_both_paths(ip, pre, post):
    text = f"rendezvous failed {pre}{ip}{post}"
    run, env = _both(text)
    assert run == env == f"rendezvous failed {pre}<ip>{post}"


@settings(max_examples=200)
@given(
    parts=st.lists(octet, min_size=5, max_size=7).map(".".join),
    glued=st.tuples(address, st.sampled_from(["x", "_v", "ms"])).map("".join),
    post=st.sampled_from(["", ".", ",", ")", " "]),
)
def test_property_versions_and_glued_numbers_are_left_alike_on_both_paths(parts, glued, post):
    for text in (f"torch {parts}{post}", f"build {glued}{post}", f"v{parts}"):
        run, env = _both(text)
        assert run == env == text


def test_the_two_defects_of_issue_38():
    # Before: the redactor left the address before a full stop; the env path ate a version.
    assert Redactor(scrub_ips=True).text("rendezvous failed at 10.0.0.1.") == (
        "rendezvous failed at <ip>."
    )
    assert redact_env({"V": "2.4.0.1.2"}, scrub_ips=True) == {"V": "2.4.0.1.2"}


#: What only aorta/store/secrets.py may define: a second copy of a rule is a second home.
RULES = {
    "an IPv4 pattern": re.compile(r"\\d\{1,3\}\\\.|\\d\{0,2\}\(\?:\\\.\\d\{1,3\}\)"),
    "a home-folder pattern": re.compile(r"\(\?:home\|Users\)"),
    "a secret-name rule": re.compile(r"(?m)^def is_secret_name|SECRET_LAST_PARTS\s*="),
    "a PEM pattern": re.compile(r"BEGIN \(\?:\[A-Z0-9\]"),
    "an argv-flag rule": re.compile(r"\(\?:password\|passwd\|passphrase"),
}


def test_no_rule_has_a_second_home():
    homes = {
        what: sorted(
            p.relative_to(PACKAGE).as_posix()
            for p in PACKAGE.rglob("*.py")
            if pattern.search(p.read_text(encoding="utf-8"))
        )
        for what, pattern in RULES.items()
    }
    assert homes == {what: ["store/secrets.py"] for what in RULES}


def test_the_node_snapshot_runs_where_aorta_cannot_be_imported(tmp_path):
    """The launcher ships hostenv.py and secrets.py as source: the node helper's setup, run by
    an isolated Python without site-packages or the repo on its path, still masks secrets."""
    cluster = Cluster.from_dict({"node_dict": {"n1": {"workdir": str(tmp_path)}}})
    spec = LaunchSpec(argv=("x",), scrub_env_keys=("MY_*",), env={"NCCL_IB_PASSWD": "pw1234"})
    _, stdin = setup_command(cluster.head, spec, run_id="r-1", probe_port=False, dry_run=True)
    helper = (PACKAGE / "launch" / "_remote.py").read_text()
    check = "import sys; sys.exit('aorta' in sys.modules or __import__('importlib.util').util.find_spec('aorta') is not None)"
    assert subprocess.run([sys.executable, "-I", "-S", "-c", check], cwd=tmp_path).returncode == 0
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", helper, "setup"],
        input=stdin,
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    env = json.loads(done.stdout.splitlines()[-1])["snapshot"]["env"]
    assert env["NCCL_IB_PASSWD"] == "<redacted>" and env["AORTA_NODE_RANK"] == "0"
