"""Credential scrubbing: well-known formats are redacted, ordinary code is left alone."""

from __future__ import annotations

import pytest
from rltray.app.scrub import scrub

# Built from pieces so secret scanners do not flag this file; the shapes are real.
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GH_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF"
OPENAI = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
OPENAI_OLD = "sk-" + "T3BlbkFJa1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6"
ANTHROPIC = "sk-ant-" + "api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-AbCdEf"
SLACK = "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp"
GOOGLE = "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
STRIPE = "sk_live_" + "51Habc123DEF456ghi789JKL"
HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabcDEF123==\n-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("secret", "kind"),
    [
        (AWS, "aws-access-key"),
        (GHP, "github-token"),
        (GH_PAT, "github-token"),
        (OPENAI, "openai-key"),
        (OPENAI_OLD, "openai-key"),
        (ANTHROPIC, "anthropic-key"),
        (SLACK, "slack-token"),
        (GOOGLE, "google-api-key"),
        (STRIPE, "stripe-key"),
        (HF, "huggingface-token"),
        (JWT, "jwt"),
        (PEM, "private-key"),
    ],
)
def test_known_formats_are_redacted(secret: str, kind: str) -> None:
    text = f"here it is: {secret} (do not share)"
    out = scrub(text)
    assert secret not in out
    assert out == f"here it is: [REDACTED:{kind}] (do not share)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "curl -H 'Authorization: Bearer abc123DEF456ghi789JKL0mn' https://x",
            "curl -H 'Authorization: Bearer [REDACTED:bearer-token]' https://x",
        ),
        ('password = "hunter2hunter2"', 'password = "[REDACTED:secret]"'),
        ("{'api_key': 'f00ba4b4z9q8w7e6'}", "{'api_key': '[REDACTED:secret]'}"),
        ('"client_secret": "Zm9vYmFyYmF6cXV4"', '"client_secret": "[REDACTED:secret]"'),
        ("DB_PASSWORD=s3cr3t-v4lue!", "DB_PASSWORD=[REDACTED:secret]"),
        ("export GH_TOKEN=abcdef123456", "export GH_TOKEN=[REDACTED:secret]"),
        (
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "AWS_SECRET_ACCESS_KEY=[REDACTED:secret]",
        ),
        (
            "postgres://app:pa55w0rd-x@db:5432/app",
            "postgres://app:[REDACTED:url-password]@db:5432/app",
        ),
    ],
)
def test_credential_assignments_keep_their_names(text: str, expected: str) -> None:
    assert scrub(text) == expected


@pytest.mark.parametrize(
    "code",
    [
        "api_key=None",
        "token = get_token()",
        "password: str",
        "def login(user: str, password: str) -> Token: ...",
        'password = ""',
        'token = "abc"',  # short
        'tokenizer = "bert-base-uncased"',
        'eos_token = "<|endoftext|>"',
        'pad_token="<|im_end|>"',
        "max_tokens = 4096",
        'token_type = "bearer"',
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "git checkout 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "pip install scikit-learn  # sk-learn is not a key",
        "the sk-some-descriptive-identifier-name class",
        "Bearer tokens are sent in the Authorization header.",
        'url = f"{scheme}://{user}:{password}@{host}"',
        "PASSWORD_FILE=/run/secrets/db",
        "ssh git@github.com:org/repo.git",
        "AKIA is the prefix of AWS key ids",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBg\n-----END PUBLIC KEY-----",
        "x = os.environ['OPENAI_API_KEY']",
    ],
)
def test_ordinary_code_is_untouched(code: str) -> None:
    assert scrub(code) == code


def test_scrub_is_idempotent_and_handles_many_secrets() -> None:
    text = f"{AWS}\n{GHP} and {JWT}\n{PEM}\npassword='{HF}'\n"
    once = scrub(text)
    assert scrub(once) == once
    for secret in (AWS, GHP, JWT, HF, "MIIEpAIBAAKCAQEA7"):
        assert secret not in once
    assert once.count("[REDACTED:") == 5


def test_unterminated_private_key_is_redacted_to_the_end() -> None:
    text = "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n(truncated"
    assert scrub(text) == "key:\n[REDACTED:private-key]"


def test_empty_text() -> None:
    assert scrub("") == ""
