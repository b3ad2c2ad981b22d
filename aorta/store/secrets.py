"""Secrets: the one home of what is secret and how it is found in text — secret *names*,
credential *shapes*, users' *homes* and *IP addresses* — used by the host snapshot
(:mod:`aorta.store.hostenv`) and by the run's redaction (:mod:`aorta.store.redact`) alike.

The node agent of ``aorta launch`` runs the snapshot where aorta may not be installed (the
launcher ships this file's source and :mod:`~aorta.store.hostenv`'s): so this module imports
only the standard library and its syntax runs on Python 3.8.

* **names** — :func:`is_secret_name` (``HF_TOKEN``, ``hfToken``, ``DB_PASSWD``, not
  ``NUM_TOKENS``); :func:`mask_assignments` masks ``NAME=value`` / ``"NAME": "value"`` for them;
  :func:`is_secret_flag` is an argv flag whose next item is a secret (``--password``, not
  ``--cpu-pin``: the names' rule);
* **shapes** — :func:`redact_secret_shapes`: URL passwords, bearer tokens, argv flags,
  ``key: value`` to secret keys, ``curl -u``, PEM private keys, well-known token formats, each
  rule line-bounded and linear in the text;
* **homes** — :func:`scrub_homes`: ``/home/<user>``, ``/Users/<user>``, ``/root`` and this
  user's own home as ``~``;
* **IPs** — :func:`scrub_ip_addresses`: IPv4 addresses as ``<ip>``, also before ``.``, ``,``, ``)`` or
  ``:port``; a dotted version string (``2.4.0.1.2``) is not one.

:func:`redact_env` applies them to an environment (a snapshot's, a launch's description).

Examples
--------
>>> redact_env({"HF_TOKEN": "abc", "DB_PASSWD": "x", "NCCL_DEBUG": "INFO", "MY_VAR": "v"},
...            scrub_keys=["MY_*"])
{'HF_TOKEN': '<redacted>', 'DB_PASSWD': '<redacted>', 'NCCL_DEBUG': 'INFO', 'MY_VAR': '<redacted>'}
>>> scrub_ip_addresses("rendezvous failed at 10.0.0.1. (torch 2.4.0.1.2, peer 10.0.0.2:29500)")
('rendezvous failed at <ip>. (torch 2.4.0.1.2, peer <ip>:29500)', 2)
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from typing import Any, Callable, Iterable, Iterator, Mapping  # noqa: UP035 - Python 3.8 on nodes

__all__ = [
    "LOOKUP_KEY_PARTS",
    "REDACTED",
    "SECRET_ANY_PARTS",
    "SECRET_FLAG",
    "SECRET_LAST_PARTS",
    "SECRET_SUFFIXES",
    "is_secret_flag",
    "is_secret_name",
    "mask_assignments",
    "numbers_are_secret",
    "redact_env",
    "redact_secret_shapes",
    "redact_secret_shapes_counted",
    "scrub_homes",
    "scrub_ip_addresses",
    "secret_shape_values",
    "sub_on_lines",
]

#: What marks a variable (or JSON/YAML key) as secret. A name is split into parts at ``_``,
#: ``-``, ``.`` and camelCase humps (``hfToken`` → ``HF``, ``TOKEN``), upper-cased; it is secret
#: when its last part is one of :data:`SECRET_LAST_PARTS` or ends with one of
#: :data:`SECRET_SUFFIXES` (``HFTOKEN``), or when any part is one of :data:`SECRET_ANY_PARTS`.
#: A PIN is one too: a last part ``PIN`` or ``PINCODE``, or ``PIN`` before a last ``CODE`` or
#: ``NUMBER`` (``SIM_PIN``, ``pinCode``, ``PIN_NUMBER``; see :data:`PIN_PARTS`).
#: So ``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWD`` are secret and
#: ``NUM_TOKENS``, ``TOKENIZERS_PARALLELISM``, ``TOKEN_COUNT``, ``HF_TOKEN_PATH`` are not (the
#: first rule of this module, ``*TOKEN*`` anywhere, masked token counts in every log).
SECRET_LAST_PARTS = frozenset(
    {"TOKEN", "KEY", "APIKEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "PAT",
     "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "PIN", "PINCODE"}
)  # fmt: skip
SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "ACCESSKEY")
SECRET_ANY_PARTS = frozenset(
    {"SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS"}
)
#: A ``KEY`` that names a place in data, not a credential: ``SORT_KEY``, ``PARTITION_KEY``,
#: ``SHARD_KEY``, ``FOREIGN_KEY`` (their values are column or field names). Kept short on
#: purpose: ``PRIMARY_KEY`` (an Azure account's), ``ROUTING_KEY`` (PagerDuty's), ``GROUP_KEY``
#: and ``HASH_KEY`` can be credentials and stay secret; a secret part anywhere still wins.
LOOKUP_KEY_PARTS = frozenset({"SORT", "PARTITION", "SHARD", "FOREIGN"})
#: ``PIN`` before one of these last parts is a PIN too (``PIN_CODE``, ``pinNumber``).
PIN_PARTS = frozenset({"CODE", "NUMBER", "NUM"})
#: A ``PIN`` that pins work to hardware, not a credential: ``CPU_PIN``, ``NUMA_PIN``,
#: ``GPU_PIN`` (their values are core lists or switches; masked, an affinity setting a triage
#: needs read ``<redacted>``, and a value such as ``enabled`` became a secret word of the run).
#: Kept to hardware words on purpose: ``USER_PIN``, ``SIM_PIN``, ``HSM_PIN`` stay secret, and
#: a secret part anywhere still wins.
PINNING_PARTS = frozenset(
    {"CPU", "CPUS", "GPU", "GPUS", "NUMA", "CORE", "CORES", "THREAD", "THREADS", "MEM",
     "MEMORY", "IRQ", "AFFINITY"}
)  # fmt: skip
#: Bare names (``key: bf16``, ``token=abc``) whose short values are not credentials: a
#: generated key or token is longer (the ``token`` shape asks for 6 characters too). A bare
#: ``pass``/``password``/``secret``/``pin`` is human-chosen and masked whatever its length.
_BARE_GENERATED = frozenset({"KEY", "TOKEN"})
_MIN_GENERATED_LEN = 6
REDACTED = "<redacted>"
#: An IPv4 address: four dotted numbers that are not part of a longer dotted number (a version
#: string such as ``2.4.0.1.2``) or of a word; a ``.``, ``,``, ``)`` or ``:port`` may follow.
#: (Digit first, then the look-behinds: ~1.5x faster than a leading ``\b``.)
_IP = re.compile(r"\d(?<![\w]\d)(?<!\d\.\d)\d{0,2}(?:\.\d{1,3}){3}(?![\w])(?!\.\d)")
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_PARTS = re.compile(r"[^A-Z0-9]+")
#: A value in text: up to whitespace, a quote, markup, or a marker already there.
_VALUE = r"(?![\\<])[^\s'\"`<>]*[^\s'\"`<>\\]"
#: Key names whose value is a credential (``api_key: X``), and flags (``--hf-token X``).
_SECRET_KEYS = (
    r"(?:[a-z0-9]+[-_])*(?:password|passwd|passphrase|secret|api[-_]?key|access[-_]?key"
    r"|private[-_]?key|secret[-_]?key|credentials?|auth)"
)
#: Flags also take a token or a PIN (``--pin 4821``, ``--pin-code``; not ``--pin-memory``, and
#: not ``--cpu-pin``, whose name :func:`is_secret_name` keeps: see :func:`is_secret_flag`).
_SECRET_WORDS = _SECRET_KEYS[:-1] + "|token|pin(?:[-_]?code)?)"


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
    # (``f``, the flag's name, is read by the name rule: ``--cpu-pin 0-3`` is no PIN.) A next
    # word that is a long flag is no value: ``--use-auth-token --hub-token X`` (a boolean
    # before a secret flag) consumed ``--hub-token`` as its value and left X in clear.
    re.compile(
        r"(?i)(?<![\w-])--?(?P<f>"
        + _SECRET_WORDS
        + r")(?:[ \t]*=[ \t]*|(?:[ \t]+|\\?[\"'][ \t]*,[ \t]*)(?!(?:\\?[\"'])?--[A-Za-z]))"
        + r"(?:\\?[\"'])?(?P<s>"
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
    re.compile(r"(?<![a-z0-9_-])--?(?:[a-z0-9]+[-_])*(?:pass|secret|key|token|auth|cred|pin)"),
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
    >>> is_secret_name("SORT_KEY"), is_secret_name("SECRET_SORT_KEY"), is_secret_name("API_KEY")
    (False, True, True)
    >>> [is_secret_name(n) for n in ("PIN", "pinCode", "SIM_PIN", "CPU_PIN", "PIN_MEMORY")]
    [True, True, True, False, False]
    """
    if any(fnmatch.fnmatchcase(name, g) for g in scrub_keys):
        return True
    parts = [p for p in _PARTS.split(_HUMP.sub(r"\1_\2", name).upper()) if p]
    if not parts:
        return False
    if any(p in SECRET_ANY_PARTS for p in parts):
        return True
    last = parts[-1]
    if last == "KEY" and len(parts) > 1 and parts[-2] in LOOKUP_KEY_PARTS:
        return False
    if last in PIN_PARTS and len(parts) > 1 and parts[-2] == "PIN":
        last = "PIN"  # PIN_CODE, pinNumber: the PIN rule below
    if last == "PIN" and any(p in PINNING_PARTS for p in parts[:-1]):
        return False
    return last in SECRET_LAST_PARTS or last.endswith(SECRET_SUFFIXES)


#: ``NAME=value`` / ``"NAME": "value"`` in text (:func:`mask_assignments`).
_NAME_VALUE = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)(?P<sep>[\"']?[ \t]*[=:][ \t]*[\"']?)"
    r"(?P<value>(?![\\<])(?![|>][-+0-9]*(?:\s|$))[^\s\"'`,;&{}\[\]<>]*[^\s\"'`,;&{}\[\]<>\\])"
)
#: Lower-case substrings of every secret name (the lines an assignment can be on).
_NAME_KEYS = re.compile(
    r"(?:token|key|secret|pass|pat|credential|auth|cookie|pin)[a-z0-9_]*[\"']?[ \t]*[=:]"
)
#: Names whose all-digit values are still secret (a PIN, a numeric password; not a count).
_STRONG_NAME = re.compile(r"(?i)pass|secret|credential|pin(?:[-_]?(?:code|num(?:ber)?))?\b")
_DIGITS = re.compile(r"[0-9]+")
#: An argv flag whose next list item is a secret (``["--password", "X"]`` in JSON/YAML data).
SECRET_FLAG = re.compile(
    r"(?i)--?(?:[a-z0-9]+[-_])*(?:password|passwd|passphrase|secret|token|api[-_]?key"
    r"|access[-_]?key|private[-_]?key|credentials?|auth|pin(?:[-_]?code)?)"
)


def is_secret_flag(token: str) -> bool:
    """Whether an argv item is a flag whose next item is a secret: :data:`SECRET_FLAG`'s
    shape, its name secret by :func:`is_secret_name` — the rule of names, so a flag that pins
    work to hardware is kept as ``CPU_PIN`` is (see :data:`PINNING_PARTS`).

    >>> [is_secret_flag(f) for f in ("--pin", "--pin-code", "--pincode", "--hf-token")]
    [True, True, True, True]
    >>> [is_secret_flag(f) for f in ("--cpu-pin", "--numa-pin", "--pin-memory", "--tokens")]
    [False, False, False, False]
    """
    return SECRET_FLAG.fullmatch(token) is not None and is_secret_name(token.lstrip("-"))


def numbers_are_secret(name: str) -> bool:
    """Whether an all-digit value (a JSON or YAML number) under ``name``, a secret name, is a
    secret too: a password's, a secret's, a credential's or a PIN's; not a count under a
    ``TOKEN`` or a ``KEY`` (``MAX_TOKEN=4096``).

    >>> [numbers_are_secret(n) for n in ("DB_PASSWORD", "SIM_PIN", "pinCode", "MAX_TOKEN")]
    [True, True, True, False]
    """
    return _STRONG_NAME.search(name) is not None


def mask_assignments(
    text: str, is_secret: Callable[[str], bool] = is_secret_name, *, any_name: bool = False
) -> tuple[str, int]:
    """``HF_TOKEN=abc`` / ``"WANDB_API_KEY": "abc"`` with the value masked where ``is_secret``
    says the name is secret (an all-digit value only for a strong name: ``token=4096`` is a
    count), and how many. ``any_name``: look on every line, not only those holding a secret
    word (``is_secret`` also matches globs that can name anything).

    >>> mask_assignments("HF_TOKEN=abc123 NUM_TOKENS=4096 MAX_TOKEN=4096 DB_PASSWORD=1234")
    ('HF_TOKEN=<redacted> NUM_TOKENS=4096 MAX_TOKEN=4096 DB_PASSWORD=<redacted>', 2)
    >>> mask_assignments("autocast with key: bf16; key: Zq8vLm2pR4")
    ('autocast with key: bf16; key: <redacted>', 1)
    """
    n = 0

    def mask(m: re.Match[str]) -> str:
        nonlocal n
        name = m.group("name")
        if not is_secret(name) or not is_secret(_dashed_name(m)):
            return m.group(0)
        value = m.group("value")
        if _DIGITS.fullmatch(value) and not numbers_are_secret(name):
            return m.group(0)
        if name.upper() in _BARE_GENERATED and len(value) < _MIN_GENERATED_LEN:
            return m.group(0)  # prose ("key: bf16"), not a generated credential
        n += 1
        return f"{name}{m.group('sep')}{REDACTED}"

    return sub_on_lines(_NAME_VALUE, mask, text, None if any_name else _NAME_KEYS), n


#: The dashed words before a name (``--cpu-`` before ``pin=4``), read back a bounded way.
_DASHED_BEFORE = re.compile(r"(?<![A-Za-z0-9_-])-*((?:[A-Za-z0-9_]+-)+)$")


def _dashed_name(m: re.Match[str]) -> str:
    """The whole dashed name an assignment's name ends (``cpu-pin`` of ``--cpu-pin=4``), so
    it is judged as a flag's is (:func:`is_secret_flag`); the name itself when no dashed
    words lead to it, or more than a bounded look back holds (then the name alone decides:
    masked rather than kept)."""
    start = m.start("name")
    before = _DASHED_BEFORE.search(m.string[max(0, start - 64) : start])
    if before is None or (before.start() == 0 and start > 64):  # none, or cut by the bound
        return m.group("name")
    return before.group(1) + m.group("name")


def redact_secret_shapes(text: str) -> str:
    """``text`` with credentials recognised by their shape redacted.

    >>> redact_secret_shapes("postgres://u:hunter2@db/x --password s3cret Bearer abcdefgh123")
    'postgres://u:<redacted>@db/x --password <redacted> Bearer <redacted>'
    >>> redact_secret_shapes("num_tokens: 4096, processed 1024 tokens")
    'num_tokens: 4096, processed 1024 tokens'
    """
    return redact_secret_shapes_counted(text)[0]


def _flag_not_secret(m: re.Match[str]) -> bool:
    """A flag shape's match whose flag the name rule keeps (``--cpu-pin``): one rule for
    ``CPU_PIN=0-3`` and ``--cpu-pin 0-3``."""
    return "f" in m.re.groupindex and not is_secret_name(m.group("f"))


def _mask_secret_part(m: re.Match[str]) -> str:
    whole = m.group(0)
    if m.group("s") == REDACTED or _flag_not_secret(m):
        return whole  # already masked (do not count it twice), or no secret's flag
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


#: A short plain lower-case word: no generated token or key looks like one (``token: expired``).
_PLAIN_WORD = re.compile(r"[a-z]{1,7}")
#: Before a value: a person chose it (a password, a URL's or ``curl -u``'s), so a plain word
#: after it is still a secret.
_CHOSEN = re.compile(r"(?i)pass|secret|cred|auth|pin|://|(?<![\w-])(?:-u|--user)\b")


def secret_shape_values(text: str, *, plain_words: bool = True) -> list[str]:
    """The secret parts the shape rules find in ``text`` (argv, URLs, …), so a run can look
    for them later where they stand alone. ``plain_words=False`` leaves out a short plain
    lower-case word after a token or key (``--token expired``: a generated credential never
    looks like that); after a password, a secret, in a URL or ``curl -u``, it stays.

    >>> secret_shape_values("train.py --hf-token abc123xyz --db mysql://root:pw@db/x")
    ['pw', 'abc123xyz']
    >>> secret_shape_values("token: expired --password hunter", plain_words=False)
    ['hunter']
    """
    out = []
    for shape in _SECRET_SHAPES:
        for m in shape.finditer(text):
            value = m.group("s")
            if not value or _flag_not_secret(m):
                continue
            before = m.group(0)[: m.start("s") - m.start()]
            if not plain_words and _PLAIN_WORD.fullmatch(value) and not _CHOSEN.search(before):
                continue
            out.append(value)
    return out


# Keyed on the folder, not read inside: HOME changes within one process (a test's monkeypatch,
# a notebook's os.environ), and a pattern cached from the first call scrubbed the old folder
# while the new one was the one looked for.
@functools.lru_cache(maxsize=4)
def _own_home(home: str) -> re.Pattern[str] | None:
    """``home`` (this user's folder), bounded, when the general rule misses it (``/work/u``)."""
    if len(home) <= 1 or _HOME.search(home):
        return None
    return re.compile(r"(?<![\w.~-])(?<!:/)" + re.escape(home) + r"(?=[/\s'\"`<>:]|$)")


def scrub_homes(text: str) -> tuple[str, int]:
    """Every user's home folder (``/home/<user>``, ``/Users/<user>``, ``/root``, and this user's
    own wherever it is) as ``~``, and how many.

    >>> scrub_homes("/home/alice/x.py and /Users/bob and /root/.cache, not /opt/home/x")
    ('~/x.py and ~ and ~/.cache, not /opt/home/x', 3)
    """
    n = 0

    def home(_: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return "~"

    text = sub_on_lines(_HOME, home, text, ("/home/", "/users/", "/root"))
    own_home = os.path.expanduser("~")
    own = _own_home(own_home)
    if own is not None and own_home in text:
        text = own.sub(home, text)
    return text, n


def scrub_ip_addresses(text: str) -> tuple[str, int]:
    """IPv4 addresses as ``<ip>`` (see :data:`_IP`), and how many.

    >>> scrub_ip_addresses("10.1.2.3, (10.1.2.4) 10.1.2.5:29500 10.1.2.6. v1.2.3.4.5 10.1.2.3x")
    ('<ip>, (<ip>) <ip>:29500 <ip>. v1.2.3.4.5 10.1.2.3x', 4)
    """
    return _IP.subn("<ip>", text)


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
            value = scrub_ip_addresses(value)[0]
        out[key] = value
    return out
