"""Redact well-known credential formats from captured text before it is stored.

Agents see API keys all the time (a `cat .env`, a failing curl with a bearer
header) and rltray keeps what they saw for training, so text is scrubbed at
ingest. Each rule matches a documented, recognisable format — fixed prefixes
(``AKIA``, ``ghp_``, ``glpat-``, ``npm_``, ``pypi-``, ``sk-ant-``, ``xoxb-``,
``AIza``, ``hf_``, SendGrid ``SG.``), JWT structure, PEM private-key blocks, Slack
webhooks, Azure ``AccountKey=``, ``Authorization`` headers of any scheme, credential
headers (``X-API-Key:``), ``curl -u user:pass``, passwords on command lines
(``mysql -pPW``, ``docker login -p PW``, ``--password=PW``) and in connection strings
(``;Password=PW;``) — or a credential-named assignment with a literal value (quoted
anywhere; unquoted on a ``.env``, INI or YAML line, or as an upper-case environment
variable anywhere: ``PGPASSWORD=PW psql``). Names end in a credential word
(``password``, ``secret``, ``token``, ``api_key`` …; ``pass`` and ``pwd`` only as a
whole word: ``DB_PASS`` but not ``BYPASS``).
Ordinary code must survive untouched: ``api_key=None``, ``token = get_token()``,
``password: str``, ``tokenizer = "bert-base"``, ``eos_token = "<|endoftext|>"``,
``password: ${{ secrets.X }}``, ``curl -u "$USER:$PASS"``, ``mysql -u root -p``,
``ssh -p 2222``, ``PASS=0``, ``PWD=/home/x``, short values (except under password
names) and hex commit hashes. A match becomes ``[REDACTED:<kind>]``; scrubbing twice
changes nothing.

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
  ``str.endswith`` against ``_SECRET_NAMES``; command lines are judged the same way,
  looking back at most 500 characters for the program (``_command_before``).

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
# Names that are credential names only as a whole word or camelCase part: DB_PASS, dbPwd,
# PASS; not BYPASS, COMPASS, OLDPWD.
_SHORT_SECRET_NAMES = ("pass", "pwd")
# Names under which even a short quoted value is a credential (``password = "hunter2"``);
# under other names short values are placeholders or vocabulary (``api_key = "test"``).
_PASSWORD_NAMES = ("password", "passwd", "passphrase", *_SHORT_SECRET_NAMES)
# Values that are code, switches or type names, not credentials (DEBUG_PASS=true, a schema's
# "password": "string"); compared lower-cased, without a trailing "?".
_CODE_WORDS = frozenset(
    ("true", "false", "none", "null", "nil", "yes", "no", "on", "off", "str", "string", "bytes")
)
# Names of tokenizer special tokens end in "token" but hold vocabulary, not secrets.
_NOT_SECRET_NAME = re.compile(r"(?i)(?:eos|bos|pad|unk|sep|cls|mask|special|start|end)_?token$")
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
# YAML values starting with these are tags, anchors, aliases, block scalars or flow syntax.
_YAML_INDICATORS = tuple("!&*%@|>#?,-~")
_COMMAND_SEPARATOR = re.compile(r"[|;&]")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
# The last letters of the secret names (d, e, n, s, t, y). Checked looking back from an
# operator, so most `key=value` and `name: value` pairs are refused without a Python call.
_LAST_LETTERS = "".join(sorted({n[-1] for n in (*_SECRET_NAMES, *_SHORT_SECRET_NAMES)}))
_LAST_LETTER = f"[{_LAST_LETTERS}{_LAST_LETTERS.upper()}]"
_LAST_UPPER = f"[{_LAST_LETTERS.upper()}]"
_ENDS_LIKE_SECRET_NAME = f"(?<={_LAST_LETTER})"


def _word_start(name: str) -> str:
    """``name`` at a word's start or after a ``/``, the literal first (see the docstring)."""
    return f"{name}(?<![^\\s/]{name})"


# Programs that take a password right after -p (mysql -phunter2, the whole MySQL and MariaDB
# families by prefix), and those that also take one after "-p " or "--password "
# (docker/podman/helm/oras login, mongosh, sshpass). For mysql "-p mydb" prompts, and
# "mydb" is a database.
_MYSQL_PROGRAM = re.compile(f"{_word_start('mysql')}|{_word_start('mariadb')}")
_LOGIN_PROGRAM = re.compile(
    "|".join((_word_start("login") + r"(?!\S)", *map(_word_start, ("sshpass", "mycli", "mongo"))))
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
    low = name.lower()
    if low.endswith(_SECRET_NAMES):
        return not _NOT_SECRET_NAME.search(name)
    short = next((s for s in _SHORT_SECRET_NAMES if low.endswith(s)), "")
    at = len(name) - len(short)
    if not short or at == 0:
        return bool(short)
    before = name[at - 1]
    return not before.isalnum() or (before.islower() and name[at].isupper())


def _is_password_name(name: str) -> bool:
    return _is_secret_name(name) and name.lower().endswith(_PASSWORD_NAMES)


def _is_path(value: str) -> bool:
    """A file that holds the credential (``private_key = "/etc/ssl/x.key"``, ``PWD=/home/x``)."""
    return value.startswith(("/", "./", "../", "~/"))


def _is_placeholder(value: str) -> bool:
    """A slot filled in later or an elided example, not a value: ``--password=%s``,
    ``user_pass = '%s:%s'``, ``OPENAI_API_KEY=sk-...``, ``"password": "string"``."""
    return (
        value.startswith("%")
        or value.endswith(("...", "\u2026"))
        or value.rstrip("?").lower() in _CODE_WORDS
    )


def _is_reference(value: str) -> bool:
    """An unquoted value that names where a credential is, not the credential itself."""
    return (
        _is_path(value)
        or _is_placeholder(value)
        or "://" in value
        or _DOTTED_NAME.fullmatch(value) is not None
    )


def _command_before(text: str, start: int) -> str:
    """The shell command that ``start`` is in, up to ``start``: from the line's start or the
    last ``|``, ``;`` or ``&``, at most 500 characters back (so each call is constant work)."""
    line_start = max(text.rfind("\n", max(0, start - 500), start) + 1, start - 500, 0)
    segment = text[line_start:start]
    return segment[max(segment.rfind("|"), segment.rfind(";"), segment.rfind("&")) + 1 :]


def _name_before(text: str, end: int) -> str:
    """The identifier ending just before ``end``, past blanks and one closing quote, or the
    key of a subscript (``os.environ["DB_PASSWORD"] =``).

    Reads at most 128 characters back, so each call is constant work.
    """
    head = text[max(0, end - 128) : end].rstrip()
    if head.endswith(('"]', "']")):
        head = head[:-1]
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


def _header(m: Match[str]) -> str:
    """``X-API-Key: value``: the name is a header's (hyphenated, or opening a quoted
    ``-H "apikey: …"``) and the value looks generated."""
    head = m.string[max(0, m.start() - 128) : m.start()]
    name = head[len(head.rstrip(_NAME_CHARS)) :]
    opens = head[-len(name) - 1 : -len(name)] if 0 < len(name) < len(head) else ""
    header_like = "-" in name.strip("-") or opens in ("'", '"')
    if not (header_like and _is_secret_name(name) and _mixed(m.group("value"))):
        return m.group(0)
    return m.group("head") + _sub("secret")


def _authorization(m: Match[str]) -> str:
    """``Authorization: <scheme> <credential>`` for the schemes the Bearer and Basic rules
    leave alone (Token, Bot, SSWS, none at all)."""
    scheme, cred = m.group("scheme"), m.group("cred")
    if scheme and scheme.lower() in ("bearer", "basic"):
        return m.group(0)
    if not _mixed(cred) or (not scheme and _DOTTED_NAME.fullmatch(cred)):
        return m.group(0)  # a word, or code: ``authorization = self.header2``
    if not scheme and m.string.startswith("[REDACTED:", m.end() + 1):
        return m.group(0)  # the "credential" is a scheme whose credential is already gone
    return m.group("head") + _sub("authorization")


def _password_flag(m: Match[str]) -> str:
    """``-pVALUE`` for mysql and login programs, ``-p VALUE`` / ``--password VALUE`` for login
    programs, ``--password=VALUE`` (any credential-named long option) for every program."""
    flag, sep, value = m.group("flag"), m.group("sep") or "", m.group("value")
    name = flag[1:]
    if flag != "p" and (not sep or not _is_secret_name(name) or name.startswith("no-")):
        return m.group(0)
    if flag != "p" and sep == "=":
        secret = not _is_reference(value)
    elif flag == "p" and sep == "=":
        secret = False
    else:
        command = _command_before(m.string, m.start())
        mysql = _MYSQL_PROGRAM.search(command) is not None
        login = _LOGIN_PROGRAM.search(command) is not None
        if flag == "p":
            secret = (login and not mysql) if sep else (mysql or login)
        else:
            secret = not mysql and (login or _mixed(value)) and not _is_reference(value)
    kind = "password" if flag == "p" or _is_password_name(name) else "secret"
    return m.group("head") + _sub(kind) + m.group("close") if secret else m.group(0)


def _quoted_assignment(m: Match[str]) -> str:
    """A quoted literal under a credential name: 8+ characters, or 3+ under a password name."""
    name, value = _name_before(m.string, m.start()), m.group("value")
    keep = (
        not _is_secret_name(name)
        or (len(value) < 8 and not _is_password_name(name))
        or _is_path(value)
        or _is_placeholder(value)
    )
    return m.group(0) if keep else m.group("head") + _sub("secret") + m.group("close")


def _inline_assignment(m: Match[str]) -> str:
    """``PGPASSWORD=s3cret psql``, ``-e DB_PASS=x``, ``?API_KEY=x&``: an upper-case (environment)
    credential name given a literal, whatever follows on the line."""
    name, value = _name_before(m.string, m.start()), m.group("value")
    keep = (
        not name.isupper()
        or not _is_secret_name(name)
        or value.isdigit()
        or not any(c.isalnum() for c in value)
        or _is_reference(value)
    )
    return m.group(0) if keep else m.group("head") + _sub("secret")


def _env_assignment(m: Match[str]) -> str:
    if not _is_secret_name(m.group("name")) or _is_reference(m.group("value")):
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
        or _is_reference(value)
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
    (
        re.compile(r"SG\.(?<=\b.{3})[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])"),
        _sub("sendgrid-key"),
    ),
    # Azure storage / Service Bus connection strings: AccountKey=<base64>==
    (
        re.compile(r"(?P<head>(?:AccountKey|SharedAccessKey)=)[A-Za-z0-9+/]{20,}=*"),
        _keep_head("azure-key"),
    ),
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
    # Authorization: Token …, {'Authorization': 'Bot …'}, AUTHORIZATION=SSWS …, no scheme at all
    (
        re.compile(
            r"(?P<head>[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn](?<=\b.{13})"
            r"[\"']?[ \t]*[:=][ \t]*[\"']?(?:(?P<scheme>[A-Za-z][A-Za-z0-9_\-]{0,24})[ \t]+)?)"
            + _atomic("cred", r"[A-Za-z0-9._~+/\-]{8,}=*")
            + r"(?=[\s\"',;)}\]]|\Z)"
        ),
        _authorization,
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
    # X-API-Key: value, PRIVATE-TOKEN: value (a header: curl -H, curl -v output, HTTP dumps);
    # found by the ":" after a name ending like a secret name, the name checked in _header.
    (
        re.compile(
            f"(?P<head>:(?<={_LAST_LETTER}:)[ \t]*)"
            + _atomic("value", r"[A-Za-z0-9._~+/\-]{8,}=*")
            + r"(?=[\s\"',;)}\]]|\Z)"
        ),
        _header,
    ),
    # mysql -phunter2, docker login -p pw, --password pw, --api-key=value (see _password_flag)
    (
        re.compile(
            r"(?P<head>-(?<=\s-)"
            + _atomic("flag", r"p|-[A-Za-z][A-Za-z0-9_\-]*")
            + r"(?P<sep>=|[ \t]+)?(?P<q>[\"'])?)(?!-|\[REDACTED:)"
            + _atomic("value", r"(?(q)[^\"'\n$`]+|[^\s\"'$`;&|<>()\[\]{}]+)")
            + r"(?P<close>(?(q)(?P=q)))"
        ),
        _password_flag,
    ),
    # Server=db;User ID=sa;Password=Str0ng!;  Driver={…};Pwd=hunter2;  (ADO.NET / ODBC)
    (
        re.compile(
            r"(?P<head>;[ \t]*(?:[Pp]assword|PASSWORD|[Pp]wd|PWD)[ \t]*=[ \t]*)"
            + _atomic("value", r"[^;\s\"'$<>{}\[\]]+")
            + r"(?=[;\"'\r\n]|\Z)"
        ),
        _keep_head("password"),
    ),
    # password = "literal", "api_key": "literal", token='literal' (quoted, one word, 8+ chars
    # or 3+ under a password name); found by the operator, the name checked in
    # _quoted_assignment.
    (
        re.compile(
            r"(?P<head>[:=]\s*(?P<q>[\"']))(?P<value>[^\"'\s\[\]<>|{}()$]{3,})(?P<close>(?P=q))"
        ),
        _quoted_assignment,
    ),
    # PGPASSWORD=s3cret psql, docker run -e DB_PASS=x, ?API_KEY=x&: an upper-case name ending
    # like a secret name, an unquoted value ending where a shell word or query value ends.
    (
        re.compile(
            f"(?P<head>=(?<={_LAST_UPPER}=))"
            + _atomic("value", r"[^\s\"'$`\[\]<>|{}();&=]+=*")
            + r"(?![^\s;&|)\"'])"
        ),
        _inline_assignment,
    ),
    # .env / shell style: DB_PASSWORD=literal, export GH_TOKEN=literal (unquoted, 8+ chars)
    (
        re.compile(
            r"(?m)(?P<head>^"
            + _atomic("indent", r"[ \t]*")
            + r"(?:export[ \t]+)?(?P<name>[A-Z0-9_]+)"
            + _ENDS_LIKE_SECRET_NAME
            + r"=)"
            r"(?P<value>[^\s\"'$`\[\]<>|{}()]{8,})(?=\r?$)"
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
