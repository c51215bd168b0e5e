"""Redact well-known credential formats from captured text before it is stored.

Agents see API keys all the time (a `cat .env`, a failing curl with a bearer
header) and rltray keeps what they saw for training, so text is scrubbed at
ingest. Each rule matches a documented, recognisable format — fixed prefixes
(``AKIA``, ``ghp_``, ``glpat-``, ``npm_``, ``pypi-``, ``sk-ant-``, ``xoxb-``,
``AIza``, ``hf_``), JWT structure, PEM private-key blocks, Slack webhooks,
``Basic`` credentials, ``curl -u user:pass`` — or a credential-named assignment
with a literal value (quoted anywhere; unquoted on a ``.env``, INI or YAML line).
Ordinary code must survive untouched: ``api_key=None``, ``token = get_token()``,
``password: str``, ``tokenizer = "bert-base"``, ``eos_token = "<|endoftext|>"``,
``password: ${{ secrets.X }}``, ``curl -u "$USER:$PASS"``, short values and hex
commit hashes. A match becomes ``[REDACTED:<kind>]``; scrubbing twice changes nothing.

Every rule runs in time linear in the text: tool output holds megabytes of base64,
lockfiles and minified code, and one lazy name prefix retried from every position
made scrubbing quadratic (12 s for 40 KB of base64). The rules keep to three habits:

* A rule starts with a literal (``ghp_``, ``://``, ``[:=]``) or a line start, so ``re``
  finds candidates with its fast literal search; a word boundary is checked looking
  back after the literal (``ghp_(?<=\\b.{4})``), because a leading ``\\b``, lookbehind
  or case-insensitive letter makes ``re`` attempt a match at every position.
* No rule scans a run of characters from each of its positions: a run that can fail
  after it (a JWT segment before its ``.``) may only start where such a run starts,
  and no quantifier is nested in another over the same characters.
* Credential names are not matched by the regexes. Assignments are found by their
  operator or line shape, then the identifier before the operator is compared with
  ``str.endswith`` against ``_SECRET_NAMES``.

Stdlib only, no rltray imports: the hook program may load this file by path.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable
from re import Match


def _spellings(name: str) -> list[str]:
    """``api_?key`` → ``api_key``, ``api-key``, ``apikey``."""
    out = [""]
    for i, part in enumerate(name.split("_?")):
        out = [s + sep + part for s in out for sep in (("",) if i == 0 else ("_", "-", ""))]
    return out


# How a credential-named identifier ends (compared lower-cased): DB_PASSWORD, clientSecret,
# aws_secret_access_key, GH_TOKEN, SECRET_KEY_BASE.
_SECRET_NAMES = tuple(
    spelling
    for name in (
        "password",
        "passwd",
        "passphrase",
        "secret",
        "secret_?key",
        "secret_?key_?base",
        "token",
        "api_?key",
        "access_?key",
        "access_?key_?id",
        "private_?key",
    )
    for spelling in _spellings(name)
)
# Names of tokenizer special tokens end in "token" but hold vocabulary, not secrets.
_NOT_SECRET_NAME = re.compile(r"(?i)(?:eos|bos|pad|unk|sep|cls|mask|special|start|end)_?token$")
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
# YAML values starting with these are tags, anchors, aliases, block scalars or flow syntax.
_YAML_INDICATORS = tuple("!&*%@|>#?,-~")
_COMMAND_SEPARATOR = re.compile(r"[|;&]")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
# Put right after an identifier in the line rules: it ends in the last letter of some secret
# name (d, e, n, t, y), so most `key=value` lines are refused without calling back into Python.
_ENDS_LIKE_SECRET_NAME = (
    "(?<=[" + "".join(sorted({c for n in _SECRET_NAMES for c in (n[-1], n[-1].upper())})) + "])"
)


def _atomic(name: str, regex: str) -> str:
    """``regex`` matched once, greedily, and never backtracked into: ``(?>regex)`` before 3.11."""
    return f"(?=(?P<{name}>{regex}))(?P={name})"


def _sub(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _keep_head(kind: str) -> Callable[[Match[str]], str]:
    """Keeps the ``head`` group (``scheme://user:``) and ``close``, the rest redacted."""
    return lambda m: m.group("head") + _sub(kind) + (m.groupdict().get("close") or "")


def _mixed(token: str) -> bool:
    """Real generated keys mix digits and letters; identifiers like sk-learn-tutorial do not."""
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _is_secret_name(name: str) -> bool:
    return name.lower().endswith(_SECRET_NAMES) and not _NOT_SECRET_NAME.search(name)


def _name_before(text: str, end: int) -> str:
    """The identifier ending just before ``end``, past blanks and one closing quote.

    Reads at most 128 characters back, so each call is constant work.
    """
    head = text[max(0, end - 128) : end].rstrip()
    if head.endswith(('"', "'")):
        head = head[:-1]
    return head[len(head.rstrip(_NAME_CHARS)) :]


def _openai(m: Match[str]) -> str:
    return _sub("openai-key") if _mixed(m.group(0)[3:]) else m.group(0)


def _bearer(m: Match[str]) -> str:
    token = m.group(0)[len(m.group("head")) :]
    return m.group("head") + _sub("bearer-token") if _mixed(token) else m.group(0)


def _basic(m: Match[str]) -> str:
    """``Basic <base64>`` is redacted only when it decodes to printable ``user:password``."""
    cred = m.group("cred")
    try:
        decoded = binascii.a2b_base64(cred).decode("utf-8") if len(cred) % 4 == 0 else ""
    except (binascii.Error, UnicodeDecodeError):
        decoded = ""
    if ":" in decoded and decoded.isprintable():
        return m.group("head") + _sub("basic-auth")
    return m.group(0)


def _curl_password(m: Match[str]) -> str:
    """``-u user:pass`` is redacted when ``curl`` starts the same command (not ``docker -u``)."""
    text, start = m.string, m.start()
    line_start = max(text.rfind("\n", max(0, start - 500), start) + 1, start - 500, 0)
    cmd = text.rfind("curl", line_start, start)
    if cmd < 0 or _COMMAND_SEPARATOR.search(text, cmd, start):
        return m.group(0)
    return m.group("head") + _sub("password") + m.group("close")


def _quoted_assignment(m: Match[str]) -> str:
    if not _is_secret_name(_name_before(m.string, m.start())):
        return m.group(0)
    return m.group("head") + _sub("secret") + m.group("close")


def _env_assignment(m: Match[str]) -> str:
    if not _is_secret_name(m.group("name")):
        return m.group(0)
    return m.group("head") + _sub("secret")


def _config_line(m: Match[str]) -> str:
    """An unquoted INI/YAML value is redacted when it looks generated, not like code.

    Kept: values without both letters and digits (``str``, ``None``, ``changeme``),
    YAML tags/anchors (``!vault``), paths, URLs and dotted attribute access.
    """
    value = m.group("value")
    keep = (
        not _is_secret_name(m.group("name"))
        or not _mixed(value)
        or (":" in m.group("sep") and value.startswith(_YAML_INDICATORS))
        or value.startswith(("/", "./", "../", "~/"))
        or "://" in value
        or _DOTTED_NAME.fullmatch(value) is not None
    )
    return m.group(0) if keep else m.group("head") + _sub("secret") + m.group("close")


# Order matters: whole blocks and specific prefixes first, generic assignments last, so a
# value already replaced by a specific rule is never re-matched ("[" is not a value char).
# `(?<=\b.{N})` right after an N-character literal prefix is a `\b` before it (see above).
_RULES: tuple[tuple[re.Pattern[str], str | Callable[[Match[str]], str]], ...] = (
    (
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        _sub("private-key"),
    ),
    (re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)(?<=\b.{4})[0-9A-Z]{16}\b"), _sub("aws-access-key")),
    (re.compile(r"gh[pousr]_(?<=\b.{4})[A-Za-z0-9]{36,255}\b"), _sub("github-token")),
    (re.compile(r"github_pat_(?<=\b.{11})[A-Za-z0-9_]{22,255}\b"), _sub("github-token")),
    (
        re.compile(r"glpat-(?<=\b.{6})[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+)*"),
        _sub("gitlab-token"),
    ),
    (re.compile(r"npm_(?<=\b.{4})[A-Za-z0-9]{36}\b"), _sub("npm-token")),
    # A PyPI token is a macaroon whose base64 starts with its location, pypi.org or test.pypi.org.
    (
        re.compile(r"pypi-(?<=\b.{5})AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_\-]{50,}"),
        _sub("pypi-token"),
    ),
    (re.compile(r"sk-ant-(?<=\b.{7})[A-Za-z0-9_\-]{20,}"), _sub("anthropic-key")),
    (re.compile(r"sk-(?<=\b.{3})(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"), _openai),
    (re.compile(r"xox[abposre]-(?<=\b.{5})[A-Za-z0-9\-]{10,}"), _sub("slack-token")),
    (re.compile(r"xapp-(?<=\b.{5})\d-[A-Za-z0-9\-]{10,}"), _sub("slack-token")),
    (
        re.compile(
            r"(?P<head>hooks\.slack\.com/services/)"
            r"T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{16,64}\b"
        ),
        _keep_head("slack-webhook"),
    ),
    (re.compile(r"AIza(?<=\b.{4})[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), _sub("google-api-key")),
    (re.compile(r"(?:sk|rk)_(?:live|test)_(?<=\b.{8})[0-9A-Za-z]{16,}\b"), _sub("stripe-key")),
    (re.compile(r"hf_(?<=\b.{3})[A-Za-z0-9]{30,}\b"), _sub("huggingface-token")),
    # The first segment may not follow "-" or a word character: otherwise every "eyJ" inside
    # one long run of base64url would rescan the rest of the run looking for the ".".
    (
        re.compile(
            r"eyJ(?<![\w\-]eyJ)[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{10,}"
        ),
        _sub("jwt"),
    ),
    (
        re.compile(r"(?P<head>[Bb][Ee][Aa][Rr][Ee][Rr](?<=\b.{6})\s+)[A-Za-z0-9._~+/\-]{20,}=*"),
        _bearer,
    ),
    (
        re.compile(
            r"(?P<head>[Bb][Aa][Ss][Ii][Cc](?<=\b.{5})[ \t]+)(?P<cred>[A-Za-z0-9+/]{8,}={0,2})"
            r"(?![A-Za-z0-9+/=])"
        ),
        _basic,
    ),
    # scheme://user:password@host
    (
        re.compile(
            r"(?P<head>://(?<=[A-Za-z0-9]://)[^\s:/@\"'{}$]+:)[^\s@/\"'{}$]{6,}(?P<close>@)"
        ),
        _keep_head("url-password"),
    ),
    # curl -u user:pass, curl --user 'user:pass word' (a quoted password may hold blanks)
    (
        re.compile(
            r"(?P<head>-(?<=\s-)(?:u[ \t]*|-user[ \t]+)(?P<q>[\"'])?[^\s:\"'$]+:)"
            r"(?!\[REDACTED:)(?(q)[^\"'$\n]+|[^\s\"'$]+)(?P<close>(?(q)(?P=q)))"
        ),
        _curl_password,
    ),
    # password = "literal", "api_key": "literal", token='literal' (quoted, 8+ chars, one word);
    # found by the operator, the name before it is checked in _quoted_assignment.
    (
        re.compile(r"(?P<head>[:=]\s*(?P<q>[\"']))[^\"'\s\[\]<>|{}()$]{8,}(?P<close>(?P=q))"),
        _quoted_assignment,
    ),
    # .env / shell style: DB_PASSWORD=literal, export GH_TOKEN=literal (unquoted, 8+ chars)
    (
        re.compile(
            r"(?m)(?P<head>^"
            + _atomic("indent", r"[ \t]*")
            + r"(?:export[ \t]+)?(?P<name>[A-Z0-9_]+)"
            + _ENDS_LIKE_SECRET_NAME
            + r"=)"
            r"[^\s\"'$`\[\]<>|{}()]{8,}(?=\r?$)"
        ),
        _env_assignment,
    ),
    # INI / YAML / properties: aws_secret_access_key = wJalr..., password: hunter2isnotsafe
    (
        re.compile(
            r"(?m)(?P<head>^"
            + _atomic("indent", r"[ \t]*(?:-[ \t]+)?")
            + _atomic("name", r"[A-Za-z0-9_.\-]+")
            + _ENDS_LIKE_SECRET_NAME
            + r"(?P<sep>[ \t]*=[ \t]*|[ \t]*:[ \t]+))"
            r"(?P<value>[^\s\"'`$<>{}\[\]()]{8,})(?P<close>[ \t]+#[^\r\n]*|[ \t]*)(?=\r?$)"
        ),
        _config_line,
    ),
)


def scrub(text: str) -> str:
    """``text`` with every recognised credential replaced by ``[REDACTED:<kind>]``."""
    if not text:
        return text
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text
