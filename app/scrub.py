"""Redact well-known credential formats from captured text before it is stored.

Agents see API keys all the time (a `cat .env`, a failing curl with a bearer
header) and rltray keeps what they saw for training, so text is scrubbed at
ingest. Each rule matches a documented, recognisable format — fixed prefixes
(``AKIA``, ``ghp_``, ``sk-ant-``, ``xoxb-``, ``AIza``, ``hf_``), JWT structure,
PEM private-key blocks — or a credential-named assignment with a long literal
value. Ordinary code must survive untouched: ``api_key=None``,
``token = get_token()``, ``password: str``, ``tokenizer = "bert-base"``,
``eos_token = "<|endoftext|>"``, short values and hex commit hashes.
A match becomes ``[REDACTED:<kind>]``; scrubbing twice changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from re import Match

_NAME = (
    r"(?:password|passwd|passphrase|secret(?:_?key)?|client_?secret|token|auth_?token"
    r"|access_?token|refresh_?token|api_?key|apikey|access_?key(?:_?id)?|private_?key)"
)
# Names of tokenizer special tokens end in "token" but hold vocabulary, not secrets.
_NOT_SECRET_NAME = re.compile(r"(?i)(?:eos|bos|pad|unk|sep|cls|mask|special|start|end)_?token$")


def _sub(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _keep_group(kind: str, keep: int = 1) -> Callable[[Match[str]], str]:
    """Replacement keeping the named prefix group (e.g. ``password = "``) and redacting the rest."""
    return lambda m: m.group(keep) + _sub(kind) + (m.group("close") or "")


def _mixed(token: str) -> bool:
    """Real generated keys mix digits and letters; identifiers like sk-learn-tutorial do not."""
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _openai(m: Match[str]) -> str:
    return _sub("openai-key") if _mixed(m.group(0)[3:]) else m.group(0)


def _bearer(m: Match[str]) -> str:
    token = m.group(0)[len(m.group("head")) :]
    return m.group("head") + _sub("bearer-token") if _mixed(token) else m.group(0)


def _assignment(m: Match[str]) -> str:
    if _NOT_SECRET_NAME.search(m.group("name")):
        return m.group(0)
    return m.group("head") + _sub("secret") + m.group("close")


# Order matters: whole blocks and specific prefixes first, generic assignments last, so a
# value already replaced by a specific rule is never re-matched ("[" is not a value char).
_RULES: tuple[tuple[re.Pattern[str], str | Callable[[Match[str]], str]], ...] = (
    (
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        _sub("private-key"),
    ),
    (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), _sub("aws-access-key")),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b"), _sub("github-token")),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b"), _sub("github-token")),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), _sub("anthropic-key")),
    (re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"), _openai),
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"), _sub("slack-token")),
    (re.compile(r"\bxapp-\d-[A-Za-z0-9\-]{10,}"), _sub("slack-token")),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), _sub("google-api-key")),
    (re.compile(r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}\b"), _sub("stripe-key")),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), _sub("huggingface-token")),
    (
        re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{10,}"),
        _sub("jwt"),
    ),
    (re.compile(r"(?i)(?P<head>\bbearer\s+)[A-Za-z0-9._~+/\-]{20,}=*"), _bearer),
    # scheme://user:password@host
    (
        re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^\s:/@\"'{}$]+:)[^\s@/\"'{}$]{6,}(?P<close>@)"),
        _keep_group("url-password"),
    ),
    # password = "literal", "api_key": "literal", token='literal' (quoted, 8+ chars, one word)
    (
        re.compile(
            r"(?i)(?P<head>\b(?P<name>[A-Za-z0-9_.\-]*?" + _NAME + r")[\"']?\s*[:=]\s*"
            r"(?P<open>[\"']))[^\"'\s\[\]<>|{}()$]{8,}(?P<close>(?P=open))"
        ),
        _assignment,
    ),
    # .env / shell style: DB_PASSWORD=literal, export GH_TOKEN=literal (unquoted, 8+ chars)
    (
        re.compile(
            r"(?m)(?P<head>^[ \t]*(?:export[ \t]+)?(?P<name>[A-Z0-9_]*"
            + _NAME.upper()
            + r")=)[^\s\"'$`\[\]<>|{}()]{8,}(?P<close>)$"
        ),
        _assignment,
    ),
)


def scrub(text: str) -> str:
    """``text`` with every recognised credential replaced by ``[REDACTED:<kind>]``."""
    if not text:
        return text
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text
