"""Environment snapshots: what a host is and what it runs with (``host_env.json``).

This module is the one implementation of every ``host_env.json``: the sweep's (this host) and
the launch's (each node, taken by the node agent, where aorta may not be installed — the
launcher ships this file's source to it). So it imports only the standard library, its syntax
runs on Python 3.8, and it never imports torch (versions are read from files).

Secrets never reach disk: :func:`redact_env` replaces the value of every variable whose name
is secret (:func:`is_secret_name`) or matches one of the caller's ``scrub_keys`` globs (a
recipe's ``redaction.scrub_env_keys``); with ``scrub_paths`` / ``scrub_ips`` every user's home
folder and IP addresses in the other values are masked. Values are also scrubbed by shape
(:func:`redact_secret_shapes`: credentials in URLs, bearer tokens, ``--password X``, PEM private
keys, well-known token formats), whatever their variable is called. These are the rules every
other redaction builds on (:mod:`aorta.store.redact`).

Snapshots of several hosts are compared with :func:`diff_snapshots`: a classic cluster-only bug
is a version, a driver or an NCCL/RCCL variable that differs between nodes.

Examples
--------
>>> redact_env({"HF_TOKEN": "abc", "DB_PASSWD": "x", "NCCL_DEBUG": "INFO", "MY_VAR": "v"},
...            scrub_keys=["MY_*"])
{'HF_TOKEN': '<redacted>', 'DB_PASSWD': '<redacted>', 'NCCL_DEBUG': 'INFO', 'MY_VAR': '<redacted>'}
>>> sorted(diff_snapshots({
...     "node0": {"torch": {"version": "2.4.0"}, "env": {"NCCL_DEBUG": "INFO"}, "host": "a"},
...     "node1": {"torch": {"version": "2.3.1"}, "env": {}, "host": "b"},
... }))
['env.NCCL_DEBUG', 'torch.version']
"""

from __future__ import annotations

import datetime
import fnmatch
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping  # noqa: UP035 - Python 3.8 on the nodes

__all__ = [
    "PER_HOST_KEYS",
    "REDACTED",
    "RELEVANT_PREFIXES",
    "diff_snapshots",
    "is_secret_name",
    "redact_env",
    "redact_secret_shapes",
    "redact_secret_shapes_counted",
    "scrub_homes",
    "secret_shape_values",
    "snapshot",
    "sub_on_lines",
]

#: Variables worth keeping in a snapshot: the stacks a triage touches.
RELEVANT_PREFIXES = (
    "NCCL_", "RCCL_", "HSA_", "HIP_", "ROC", "AMD_", "GPU_", "DEBUG_HIP", "DEBUG_CLR", "MIOPEN_",
    "HIPBLASLT_", "CUDA_", "NVIDIA_", "CUBLAS", "TORCH_", "PYTORCH_", "OMP_", "MKL_", "KMP_",
    "GLOO_", "UCX_", "FI_", "AORTA_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK",
    "LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "DISABLE_TF32",
    "ATEN_", "XLA_", "TRITON_",
)  # fmt: skip
#: What marks a variable (or JSON/YAML key) as secret. A name is split into parts at ``_``,
#: ``-``, ``.`` and camelCase humps (``hfToken`` → ``HF``, ``TOKEN``), upper-cased; it is secret
#: when its last part is one of :data:`SECRET_LAST_PARTS` or ends with one of
#: :data:`SECRET_SUFFIXES` (``HFTOKEN``), or when any part is one of :data:`SECRET_ANY_PARTS`.
#: So ``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWD`` are secret and
#: ``NUM_TOKENS``, ``TOKENIZERS_PARALLELISM``, ``TOKEN_COUNT``, ``HF_TOKEN_PATH`` are not (the
#: first rule of this module, ``*TOKEN*`` anywhere, masked token counts in every log).
SECRET_LAST_PARTS = frozenset(
    {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "PAT",
     "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE"}
)  # fmt: skip
SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "ACCESSKEY")
SECRET_ANY_PARTS = frozenset(
    {"SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS"}
)
REDACTED = "<redacted>"
_IP = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_PARTS = re.compile(r"[^A-Z0-9]+")
#: A value in text: up to whitespace, a quote, markup, or a marker already there.
_VALUE = r"(?![\\<])[^\s'\"`<>]*[^\s'\"`<>\\]"
#: Key names whose value is a credential (``api_key: X``), and flags (``--hf-token X``).
_SECRET_KEYS = (
    r"(?:[a-z0-9]+[-_])*(?:password|passwd|passphrase|secret|api[-_]?key|access[-_]?key"
    r"|private[-_]?key|secret[-_]?key|credentials?|auth)"
)
_SECRET_WORDS = _SECRET_KEYS[:-1] + "|token)"


class _UrlPasswords:
    """The ``scheme://user:SECRET@host`` rule, linear in the text.

    One regex over a whole line is quadratic there twice over: every start inside a long
    scheme-like run (``a-a-a-…``) scans the run again, and every ``x://u:`` of a token without a
    later ``@`` scans the token to its end. So the scheme starts only where a run of scheme
    characters starts (the lookbehind), and the pattern runs on one token (a run of characters a
    URL may hold) at a time, only on tokens holding ``://``, and only up to the token's last
    ``@``: there the first start that reaches its ``:`` matches to that ``@``, and every start
    that fails stops at the next ``:``, ``/`` or ``@``.
    """

    _TOKEN = re.compile(r"[^\s'\"`<>]+")

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        for token in self._TOKEN.finditer(text):
            end = text.rfind("@", token.start(), token.end())
            if end != -1 and text.find("://", token.start(), end) != -1:
                yield from self.pattern.finditer(text, token.start(), end + 1)

    def sub(self, repl: Any, text: str) -> str:
        out, pos = [], 0
        for m in self.finditer(text):
            out += [text[pos : m.start()], repl(m) if callable(repl) else m.expand(repl)]
            pos = m.end()
        out.append(text[pos:])
        return "".join(out)


class _KeyAssignments:
    """``finditer`` of :attr:`PATTERN` (a secret word, then ``=`` or ``:`` after the rest of its
    name: the lines the ``key = value`` shape runs on), with the same matches, linear in the text.

    The pattern alone is quadratic on ``passpass…``: each ``pass`` starts a scan to the end of
    the run that finds no ``=``. But a match's name part always runs to the end of its run of
    name characters (the character after it must be a quote, a blank, ``=`` or ``:``), so every
    word in a run shares the run's fate, and the leftmost match of a run starts at its first
    word. So each run followed by ``=``/``:`` is found once (it starts where no name character
    precedes it), and the pattern is matched once, at the run's first word.
    """

    PATTERN = re.compile(r"(?:pass|secret|key|cred|auth)[a-z0-9_-]*[\"']?[ \t]*[=:]")
    _RUN = re.compile(r"(?<![a-z0-9_-])(?P<run>[a-z0-9_-]+)[\"']?[ \t]*[=:]")
    _WORD = re.compile(r"pass|secret|key|cred|auth")

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        for run in self._RUN.finditer(text):
            word = self._WORD.search(text, run.start(), run.end("run"))
            if word is not None:
                match = self.PATTERN.match(text, word.start())
                if match is not None:  # always: the run is followed by the assignment
                    yield match


#: Values that carry a credential whatever the variable is called: the secret part of each
#: match (group ``s``) becomes ``<redacted>``. Every pattern stays on one line (``[ \t]``,
#: never ``\s``, between the parts): a match never eats the next line or the markup around it.
_SECRET_SHAPES: tuple[re.Pattern[str] | _UrlPasswords, ...] = (
    # scheme://user:SECRET@host (postgres, mysql, https, redis://:SECRET@host, amqp, …); the
    # password may hold / and @: it runs to the last @ of the URL. Matched one token at a
    # time, so it stays linear (:class:`_UrlPasswords`).
    _UrlPasswords(
        re.compile(
            r"(?i)(?<![a-z0-9+.-])[0-9+.-]*[a-z][a-z0-9+.-]*://[^\s:/@'\"`<>]*:"
            r"(?P<s>(?![\\<])[^\s'\"`<>]+)@"
        )
    ),
    # Authorization: Bearer SECRET / Basic SECRET (headers, curl -H, logs).
    re.compile(r"(?i)\b(?:bearer|basic)[ \t]+(?P<s>[A-Za-z0-9._~+/=-]{8,})"),
    re.compile(
        r"(?i)\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?:(?:token|digest)[ \t]+)?(?P<s>(?![\\<])[^\s'\"`<>]{7,}[^\s'\"`<>\\])"
    ),
    # Command-line flags: --password X, --api-key=X, --hf-token X, and the list forms of
    # argv as Python or JSON print it: "--token", "X".
    re.compile(
        r"(?i)(?<![\w-])--?"
        + _SECRET_WORDS
        + r"(?:[ \t]*=[ \t]*|[ \t]+|\\?[\"'][ \t]*,[ \t]*)(?:\\?[\"'])?(?P<s>"
        + _VALUE
        + ")"
    ),
    # key = value / key: value (configs, logs): password, secret, api_key, credentials …
    re.compile(
        r"(?i)(?<![\w-])"
        + _SECRET_KEYS
        + r"[\"']?[ \t]*[=:][ \t]*[\"']?(?P<s>(?![\\<])[^\s'\"`<>,;&{}\[\]]{3,}[^\s'\"`<>,;&{}\[\]\\])"
    ),
    # … and *_token / token (not a count: ``max_tokens: 4096``, ``token: 4096`` stay).
    re.compile(
        r"(?i)(?<![\w-])(?:[a-z0-9]+[-_])*token[\"']?[ \t]*[=:][ \t]*[\"']?"
        r"(?P<s>(?![\\<])(?![0-9]+(?:[^\w.]|$))[^\s'\"`<>,;&{}\[\]]{5,}[^\s'\"`<>,;&{}\[\]\\])"
    ),
    # curl -u user:SECRET, --user user:SECRET
    re.compile(
        r"(?<![\w-])(?:-u|--user)(?:[ \t]*=[ \t]*|[ \t]+)[\"']?[^\s:'\"`<>-][^\s:'\"`<>]*:"
        r"(?P<s>" + _VALUE + ")"
    ),
    # Well-known token formats: GitHub, Hugging Face, Slack, GitLab, OpenAI, AWS keys, JWTs.
    re.compile(
        r"\b(?P<s>(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,}|hf_[A-Za-z0-9]{20,}"
        r"|xox[abposr]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{20,}))"
    ),
    re.compile(r"\b(?P<s>(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[0-9A-Z]{16})\b"),
    re.compile(r"\b(?P<s>eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"),
)
#: Per shape, what every match holds in lower case (the lines to run it on): substrings, or a
#: literal-first pattern where a substring would pick every line of a log ("tokens/s").
_SHAPE_KEYS: tuple[Any, ...] = (
    ("://",),
    ("bearer", "basic"),
    ("authorization",),
    # (a flag starts where no word or dash precedes it, as in its shape: linear on ``a-a-a-…``)
    re.compile(r"(?<![a-z0-9_-])--?(?:[a-z0-9]+[-_])*(?:pass|secret|key|token|auth|cred)"),
    _KeyAssignments(),
    re.compile(r"token[\"']?[ \t]*[=:]"),
    ("-u", "--user"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "xox", "glpat-", "sk-"),
    ("akia", "asia", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "abia", "acca"),
    ("eyj",),
)
#: A PEM private key block: the one shape that spans lines. Its base64 runs are masked, its
#: BEGIN/END lines and line structure kept (a YAML block or JSON string stays valid); a block
#: cut short (a log tail) is masked to the end of the text.
_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_BASE64_RUN = re.compile(r"(?:(?<=\\n)|(?<![\\A-Za-z0-9+/=<]))[A-Za-z0-9+/]{8,}={0,2}")
#: Home folders of every user (``/home/<user>``, ``/Users/<user>``, ``/root``) → ``~``.
_HOME = re.compile(r"(?<![\w.~-])(?<!:/)(?:/(?:home|Users)/[^/\s'\"`<>:]+|/root(?=[/\s'\"`<>:]|$))")


def is_secret_name(name: str, scrub_keys: Iterable[str] = ()) -> bool:
    """Whether a variable (or key) called ``name`` holds a secret: the rule above, or one of
    ``scrub_keys`` (globs matched as written, e.g. a recipe's ``redaction.scrub_env_keys``).

    >>> [is_secret_name(n) for n in ("HF_TOKEN", "hfToken", "NUM_TOKENS", "TOKEN_COUNT")]
    [True, True, False, False]
    >>> is_secret_name("MY_VAR", ["MY_*"]), is_secret_name("TOKENIZERS_PARALLELISM")
    (True, False)
    """
    if any(fnmatch.fnmatchcase(name, g) for g in scrub_keys):
        return True
    parts = [p for p in _PARTS.split(_HUMP.sub(r"\1_\2", name).upper()) if p]
    if not parts:
        return False
    last = parts[-1]
    return (
        last in SECRET_LAST_PARTS
        or last.endswith(SECRET_SUFFIXES)
        or any(p in SECRET_ANY_PARTS for p in parts)
    )


def redact_secret_shapes(text: str) -> str:
    """``text`` with credentials recognised by their shape redacted.

    >>> redact_secret_shapes("postgres://u:hunter2@db/x --password s3cret Bearer abcdefgh123")
    'postgres://u:<redacted>@db/x --password <redacted> Bearer <redacted>'
    >>> redact_secret_shapes("num_tokens: 4096, processed 1024 tokens")
    'num_tokens: 4096, processed 1024 tokens'
    """
    return redact_secret_shapes_counted(text)[0]


def _mask_secret_part(m: re.Match[str]) -> str:
    whole = m.group(0)
    if m.group("s") == REDACTED:
        return whole  # already masked: do not count it twice
    return whole[: m.start("s") - m.start()] + REDACTED + whole[m.end("s") - m.start() :]


def _mask_pem(text: str) -> tuple[str, int]:
    out: list[str] = []
    n = pos = 0
    while True:
        begin = _PEM_BEGIN.search(text, pos)
        if begin is None:
            break
        end = _PEM_END.search(text, begin.end())
        stop = end.start() if end else len(text)
        body, hits = _BASE64_RUN.subn(REDACTED, text[begin.end() : stop])
        n += hits > 0
        out += [text[pos : begin.end()], body]
        pos = stop if end is None else end.end()
        if end is not None:
            out.append(end.group(0))
    out.append(text[pos:])
    return "".join(out), n


def redact_secret_shapes_counted(text: str) -> tuple[str, int]:
    """:func:`redact_secret_shapes` and how many credentials it masked (for bundle manifests).

    >>> redact_secret_shapes_counted("Bearer abcdefgh123 and Bearer <redacted>")
    ('Bearer <redacted> and Bearer <redacted>', 1)
    """
    total = 0
    if "PRIVATE KEY-----" in text:
        text, total = _mask_pem(text)
    for shape, keys in zip(_SECRET_SHAPES, _SHAPE_KEYS):  # noqa: B905 - Python 3.8 on nodes
        masked = 0

        def mask(m: re.Match[str]) -> str:
            nonlocal masked
            out = _mask_secret_part(m)
            masked += out != m.group(0)
            return out

        text = sub_on_lines(shape, mask, text, keys)
        total += masked
    return text, total


def sub_on_lines(
    pattern: re.Pattern[str] | _UrlPasswords,
    repl: Any,
    text: str,
    keys: Iterable[str] | re.Pattern[str] | _KeyAssignments | None,
) -> str:
    r"""``pattern.sub(repl, text)`` for a line-bounded ``pattern``, run only on the lines that
    hold one of ``keys`` (lower-case substrings every match contains, or a pattern every match's
    lower case contains; ``None``: every line). Finding the lines is a substring search or a
    literal-first pattern, so a rule costs little where nothing could match.

    >>> sub_on_lines(re.compile("b+"), "B", "abba\nxyz\nbob", ["b"])
    'aBa\nxyz\nBoB'
    """
    if keys is None:
        return pattern.sub(repl, text)
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case is longer: no shortcut
        return pattern.sub(repl, text)
    spans = []

    def line_of(i: int) -> tuple[int, int]:
        end = text.find("\n", i)
        return text.rfind("\n", 0, i) + 1, len(text) if end == -1 else end

    if isinstance(keys, (re.Pattern, _KeyAssignments)):
        last = -1
        for m in keys.finditer(low):
            if m.start() > last:
                spans.append(line_of(m.start()))
                last = spans[-1][1]
    else:
        for key in keys:
            i = low.find(key)
            while i != -1:
                spans.append(line_of(i))
                i = low.find(key, spans[-1][1])
    if not spans:
        return text
    spans.sort()
    merged = [list(spans[0])]
    for start, end in spans[1:]:
        if start <= merged[-1][1] + 1:  # the same or the next line: one block
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, pos = [], 0
    for start, end in merged:
        out += [text[pos:start], pattern.sub(repl, text[start:end])]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def secret_shape_values(text: str) -> list[str]:
    """The secret parts the shape rules find in ``text`` (argv, URLs, …), so a run can look
    for them later where they stand alone.

    >>> secret_shape_values("train.py --hf-token abc123xyz --db mysql://root:pw@db/x")
    ['pw', 'abc123xyz']
    """
    return [m.group("s") for shape in _SECRET_SHAPES for m in shape.finditer(text) if m.group("s")]


def scrub_homes(text: str) -> tuple[str, int]:
    """Every user's home folder (``/home/<user>``, ``/Users/<user>``, ``/root``) as ``~``.

    >>> scrub_homes("/home/alice/x.py and /Users/bob and /root/.cache, not /opt/home/x")
    ('~/x.py and ~ and ~/.cache, not /opt/home/x', 3)
    """
    n = 0

    def home(_: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return "~"

    return sub_on_lines(_HOME, home, text, ("/home/", "/users/", "/root")), n


def redact_env(
    env: Mapping[str, str],
    *,
    scrub_keys: Iterable[str] = (),
    scrub_paths: bool = False,
    scrub_ips: bool = False,
) -> dict[str, str]:
    """A copy of ``env`` safe to write down (see the module docstring).

    ``scrub_keys`` are name globs redacted on top of :func:`is_secret_name`, matched as
    written (``fnmatch`` case-sensitive), e.g. a recipe's ``redaction.scrub_env_keys``.
    """
    globs = list(scrub_keys)
    out = {}
    for key, value in env.items():
        if is_secret_name(key, globs):
            out[key] = REDACTED
            continue
        value = redact_secret_shapes(value)
        if scrub_paths:
            value = scrub_homes(value)[0]
        if scrub_ips:
            value = _IP.sub("<ip>", value)
        out[key] = value
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _read(path: str, limit: int = 65536) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _listdir(folder: str, prefix: str = "") -> list[str]:
    try:
        return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.startswith(prefix)]
    except OSError:
        return []


def _run(argv: list[str], timeout: float = 5.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _torch() -> tuple[dict[str, Any], str | None]:
    # torch/version.py holds the build's CUDA/HIP versions: executing it avoids importing torch.
    info: dict[str, Any] = {"version": _version("torch"), "cuda": None, "hip": None, "git": None}
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return info, None
    root = next(iter(spec.submodule_search_locations))
    scope: dict[str, Any] = {}
    try:
        with open(os.path.join(root, "version.py")) as fh:
            exec(compile(fh.read(), "torch/version.py", "exec"), scope)
    except Exception:  # an odd build: the version from the metadata is still worth having
        return info, root
    info.update(cuda=scope.get("cuda"), hip=scope.get("hip"), git=scope.get("git_version"))
    return info, root


def _libraries(torch_root: str | None) -> dict[str, Any]:
    # NCCL/RCCL as the loader would find them (real names of the shared objects), and the
    # NCCL wheel pip installs beside CUDA builds of torch.
    dirs = ["/opt/rocm/lib", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib"]
    if torch_root:
        dirs.insert(0, os.path.join(torch_root, "lib"))
    found: dict[str, Any] = {}
    for lib in ("nccl", "rccl"):
        names = [
            os.path.basename(os.path.realpath(p)) for d in dirs for p in _listdir(d, f"lib{lib}.so")
        ]
        found[lib] = max(names, key=len) if names else None
    wheels = (_version(f"nvidia-nccl-cu{v}") for v in (13, 12, 11))
    found["nccl_wheel"] = next((w for w in wheels if w), None)
    return found


def _drivers() -> dict[str, Any]:
    nvidia = _read("/proc/driver/nvidia/version")
    if nvidia:
        nvidia = next((w for w in nvidia.split() if w[:1].isdigit() and "." in w), nvidia[:80])
    amd_gpus = 0
    for node in _listdir("/sys/class/kfd/kfd/topology/nodes"):
        lines = (_read(os.path.join(node, "properties")) or "").splitlines()
        amd_gpus += any(line.startswith("simd_count") and line.split()[-1] != "0" for line in lines)
    return {
        "nvidia": nvidia,
        "amdgpu": _read("/sys/module/amdgpu/version"),
        "rocm": _read("/opt/rocm/.info/version"),
        "gpus_nvidia": len(_listdir("/proc/driver/nvidia/gpus")),
        "gpus_amd": amd_gpus,
    }


def _gpus() -> dict[str, Any]:
    gpus: dict[str, Any] = {}
    query = "--query-gpu=index,name,driver_version,memory.total"
    nvidia = _run(["nvidia-smi", query, "--format=csv,noheader"])
    if nvidia:
        gpus["nvidia"] = [line.strip() for line in nvidia.splitlines() if line.strip()]
    rocm = _run(["rocm-smi", "--showproductname", "--showdriverversion", "--csv"])
    if rocm:
        gpus["rocm_smi"] = rocm.splitlines()
    return gpus


def snapshot(
    *,
    env: Mapping[str, str] | None = None,
    scrub_keys: Iterable[str] = (),
    scrub_paths: bool = False,
    scrub_ips: bool = False,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """This host's facts (one schema everywhere): Python, aorta and torch with the build's
    CUDA/HIP, NCCL/RCCL libraries, GPU drivers and devices, tools the launch uses, the git commit
    of ``cwd`` when it is a checkout, and the relevant variables of ``env`` (redacted)."""
    env = os.environ if env is None else env
    relevant = {k: v for k, v in sorted(env.items()) if k.startswith(RELEVANT_PREFIXES)}
    torch, torch_root = _torch()
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "taken_at": now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "aorta": _version("aorta"),
        "torch": torch,
        "libraries": _libraries(torch_root),
        "drivers": _drivers(),
        "gpus": _gpus(),
        "tools": {name: shutil.which(name) is not None for name in ("setsid", "tar")},
        "git_commit": _run(["git", "-C", str(cwd or Path.cwd()), "rev-parse", "HEAD"], 3.0),
        "env": redact_env(
            relevant, scrub_keys=scrub_keys, scrub_paths=scrub_paths, scrub_ips=scrub_ips
        ),
    }


#: Snapshot keys that differ between hosts by design.
PER_HOST_KEYS = frozenset({"host", "taken_at"})


def _flatten(snapshot: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in snapshot.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def diff_snapshots(
    snapshots: Mapping[str, Mapping[str, Any] | None], *, ignore: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """Where the hosts' snapshots differ, but for :data:`PER_HOST_KEYS` and ``ignore`` (dotted
    keys): ``{"torch.version": {name: value}}``, a key some lack ``(unset)`` there; ``{}`` with
    fewer than two snapshots (``None``: a host that has none)."""
    flat = {name: _flatten(s) for name, s in snapshots.items() if s}
    if len(flat) < 2:
        return {}
    skew: dict[str, dict[str, Any]] = {}
    for key in sorted(set().union(*flat.values()) - PER_HOST_KEYS - set(ignore)):
        values = {name: f.get(key, "(unset)") for name, f in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            skew[key] = values
    return skew
