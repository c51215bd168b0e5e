"""Credential scrubbing: well-known formats are redacted, ordinary code is left alone."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

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
NPM = "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITLAB = "glpat-" + "x1Y2z3A4b5C6d7E8f9G0"
PYPI = (
    "pypi-"
    + "AgEIcHlwaS5vcmc"
    + "CJGI3ZTU1ZjYtOWZlZC00YWM1LWJhMmItMmUxNDQ4NWQ1NjcxAAIqWzMsImY1MDk5"
)
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
SLACK_HOOK = (
    "https://hooks.slack.com/services/" + "T0A1B2C3D/B4E5F6G7H/" + "a1b2C3d4E5f6G7h8I9j0K1l2"
)
RAILS_SECRET = "9f86d081884c7d659a2feaa0c55ad015" * 4


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
        (NPM, "npm-token"),
        (GITLAB, "gitlab-token"),
        (GITLAB + ".01.0f1e2d3c4", "gitlab-token"),
        (PYPI, "pypi-token"),
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


def check(text: str, expected: str) -> None:
    out = scrub(text)
    assert out == expected
    assert scrub(out) == out  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "npm_config_registry=https://registry.npmjs.org/",
        "echo $npm_package_version",
        "GitLab personal access tokens start with glpat- and are 20+ characters",
        "glpat-short",
        "PyPI tokens start with pypi-AgEIcHlwaS5vcmc, the base64 of their location",
        "pip install --index-url https://pypi.org/simple pypi-simple-index",
    ],
)
def test_token_prefixes_alone_are_untouched(text: str) -> None:
    assert scrub(text) == text


# -- ~/.aws/credentials and unquoted INI / properties lines ---------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"[default]\naws_access_key_id = {AWS}\naws_secret_access_key = {AWS_SECRET}\n"
            "region = us-east-1\n",
            "[default]\naws_access_key_id = [REDACTED:aws-access-key]\n"
            "aws_secret_access_key = [REDACTED:secret]\nregion = us-east-1\n",
        ),
        (
            "spring.datasource.password=hunter2isnotsafe",
            "spring.datasource.password=[REDACTED:secret]",
        ),
        ("db_password = s3cr3t-v4lue\r\n", "db_password = [REDACTED:secret]\r\n"),
    ],
)
def test_unquoted_ini_values_of_credential_names_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "code",
    [
        "aws_secret_access_key = None",
        'aws_secret_access_key = os.environ["AWS_SECRET_ACCESS_KEY"]',
        "secret_key = settings.SECRET_KEY2",  # attribute access
        "private_key = /etc/ssl/private/key1.pem",  # a path
        "token_url = https://oauth2.example.com/t0ken",
        "token = token_endpoint",  # no digits: an identifier, not a generated value
        "num_tokens = 4096abc",
        "    password = password_for(user, 2)",
    ],
)
def test_ini_lookalikes_in_code_are_untouched(code: str) -> None:
    assert scrub(code) == code


# -- YAML ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password: hunter2isnotsafe", "password: [REDACTED:secret]"),
        (
            "db:\n  user: app\n  password: hunter2isnotsafe  # prod\n",
            "db:\n  user: app\n  password: [REDACTED:secret]  # prod\n",
        ),
        ("  - api_key: a1b2c3d4e5f6a7b8", "  - api_key: [REDACTED:secret]"),
        ("X-Api-Key: 0f1e2d3c4b5a69788796", "X-Api-Key: [REDACTED:secret]"),
    ],
)
def test_unquoted_yaml_values_of_credential_names_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "password: str",
        "    password: str\n    api_key: SecretStr\n",
        "    password: Optional[str] = None",
        "password: ${{ secrets.DB_PASSWORD }}",
        "token: ${{ github.token }}",
        "password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6238643462356436",
        "password: ${DB_PASSWORD}",
        "password: $DB_PASSWORD",
        "password: '{{ vault_db_password }}'",
        "password: <your-password-here>",
        "password: changeme",
        "password: *default_password1",  # an alias
        "eos_token: </s>",
        "pad_token: pad0token1",
        "tokenizer: bert-base-uncased",
        "max_tokens: 4096",
    ],
)
def test_yaml_types_references_and_placeholders_are_untouched(text: str) -> None:
    assert scrub(text) == text


# -- Rails SECRET_KEY_BASE -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"SECRET_KEY_BASE={RAILS_SECRET}", "SECRET_KEY_BASE=[REDACTED:secret]"),
        (f"export SECRET_KEY_BASE={RAILS_SECRET}\n", "export SECRET_KEY_BASE=[REDACTED:secret]\n"),
        (f"  secret_key_base: {RAILS_SECRET}", "  secret_key_base: [REDACTED:secret]"),
    ],
)
def test_rails_secret_key_base_is_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "code",
    [
        "SECRET_KEY_BASE=$(bin/rails secret)",
        'config.secret_key_base = ENV["SECRET_KEY_BASE"]',
        "secret_key_base: <%= ENV['SECRET_KEY_BASE'] %>",
        "SECRET_KEY_BASE_DUMMY=1",
    ],
)
def test_rails_secret_key_base_references_are_untouched(code: str) -> None:
    assert scrub(code) == code


# -- Slack webhooks --------------------------------------------------------------------------


def test_slack_webhook_url_is_redacted() -> None:
    check(
        f"curl -X POST -d @msg.json {SLACK_HOOK}",
        "curl -X POST -d @msg.json https://hooks.slack.com/services/[REDACTED:slack-webhook]",
    )


@pytest.mark.parametrize(
    "text",
    [
        "https://hooks.slack.com/services/${SLACK_WEBHOOK_PATH}",
        "see https://api.slack.com/messaging/webhooks and hooks.slack.com/services/",
    ],
)
def test_slack_webhook_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


# -- Authorization: Basic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Authorization: Basic " + "YWxpY2U6czNjcmV0LXB3",  # alice:s3cret-pw
            "Authorization: Basic [REDACTED:basic-auth]",
        ),
        (
            "curl -H 'Authorization: Basic " + "ZGVwbG95Omh1bnRlcjI=' https://x",  # deploy:hunter2
            "curl -H 'Authorization: Basic [REDACTED:basic-auth]' https://x",
        ),
        (
            '{"authorization": "basic ' + 'ZGVwbG95Omh1bnRlcjI="}',
            '{"authorization": "basic [REDACTED:basic-auth]"}',
        ),
    ],
)
def test_basic_auth_credentials_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "Basic authentication sends the password on every request.",
        "Basic settings are in config.toml",
        'WWW-Authenticate: Basic realm="api"',
        "Authorization: Basic ${CREDENTIALS}",
        "Authorization: Basic QmFzaWNBdXRo",  # decodes to "BasicAuth": no user:password
    ],
)
def test_basic_auth_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


# -- curl -u user:password -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -u alice:s3cretpw https://x", "curl -u alice:[REDACTED:password] https://x"),
        (
            "curl -s -X POST --user deploy:hunter2hunter2 https://x",
            "curl -s -X POST --user deploy:[REDACTED:password] https://x",
        ),
        (
            "curl --user 'alice:correct horse' https://x",
            "curl --user 'alice:[REDACTED:password]' https://x",
        ),
        ('curl -u "bob:pa55word" https://x', 'curl -u "bob:[REDACTED:password]" https://x'),
        ("curl -uadmin:hunter22 https://x", "curl -uadmin:[REDACTED:password] https://x"),
    ],
)
def test_curl_user_passwords_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        'curl -u "$USER:$PASS" https://x',
        'curl --user "${API_USER}:${API_PASS}" https://x',
        "curl -u alice https://x",  # curl prompts for the password
        "docker run -u 1000:1000 image",
        "curl -sSL https://x | docker run -u 1000:1000 -i image",
        "git push -u origin main",
    ],
)
def test_curl_user_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


def test_new_rules_together_are_idempotent() -> None:
    text = (
        f"{NPM} {GITLAB} {PYPI}\n{SLACK_HOOK}\nAuthorization: Basic ZGVwbG95Omh1bnRlcjI=\n"
        f"curl -u a:b4dpassw0rd x\naws_secret_access_key = {AWS_SECRET}\n"
        f"password: hunter2isnotsafe\nSECRET_KEY_BASE={RAILS_SECRET}\n"
    )
    once = scrub(text)
    assert scrub(once) == once
    assert once.count("[REDACTED:") == 9


# -- linear time -----------------------------------------------------------------------------

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "scrub_speed.py"
_spec = importlib.util.spec_from_file_location("scrub_speed", _BENCH)
assert _spec is not None and _spec.loader is not None
scrub_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scrub_speed)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(scrub_speed.GENERATORS))
def test_scrub_time_grows_linearly_with_adversarial_text(name: str) -> None:
    """Regression: scrub() was quadratic — 12 s for 40 KB of random base64url, 282 s for 200 KB.

    Lazy credential-name prefixes (``[\\w.-]*?password``) and ``\\b``-led runs (``sk-``,
    JWT, ``scheme://``) were retried from every position of a long run. Eight times the
    text may take at most 24 times as long (the inputs are bench/scrub_speed.py's): linear
    time gives 8x and quadratic 64x, and 24x, about halfway on a log scale, leaves a busy
    2-core CI box room (one run measured 15x beside a benchmark; 12x failed it).
    """
    generate = scrub_speed.GENERATORS[name]
    small = generate(32 * 1024, random.Random(1))
    large = generate(256 * 1024, random.Random(2))
    t_small = scrub_speed.best_time(scrub, small, 5)
    t_large = scrub_speed.best_time(scrub, large, 5)
    assert t_large <= 24 * t_small + 0.005, f"{name}: 32 KB {t_small:.4f} s, 256 KB {t_large:.4f} s"


# -- issue 18 part 5: shapes agents see every day ---------------------------------------------
# Each shape below was stored verbatim (hook -> store -> export); each has its true negatives
# beside it: text of the same look that holds no credential and must stay as it is.

SENDGRID = "SG." + "aB3dE6gH9jK2mN5pQ8sT1v" + "." + "wY4zA7cD0fG3iJ6lM9oP2rS5uV8xZ1bE4hK7nQ0tW3y"
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2" + "UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
DRF_TOKEN = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'curl -H "X-API-Key: 3f9a1c7e5b2d4f60a8c1" https://api.example.com/v1',
            'curl -H "X-API-Key: [REDACTED:secret]" https://api.example.com/v1',
        ),
        (
            "curl --header 'PRIVATE-TOKEN: 9a8b7c6d5e4f3a2b1c0d' https://gitlab.example.com",
            "curl --header 'PRIVATE-TOKEN: [REDACTED:secret]' https://gitlab.example.com",
        ),
        ("> X-Auth-Token: abc123def456ghi789\n", "> X-Auth-Token: [REDACTED:secret]\n"),
        ('curl -H "apikey: 4f2a9c8e7d6b5a41" x', 'curl -H "apikey: [REDACTED:secret]" x'),
    ],
)
def test_credential_headers_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        'curl -H "X-API-Key: $API_KEY" https://api.example.com',
        'curl -H "X-API-Key: ${API_KEY}" https://api.example.com',
        "curl -H 'X-API-Key: <your key>' https://api.example.com",
        'curl -H "Content-Type: application/json" -H "X-Request-Id: 3f9a1c7e5b2d4f60a8c1"',
        "Send it in the X-API-Key: header, see the docs.",
        "The api key: abcdefghijklmnop (letters only: a placeholder)",
        "the monkey: ab12cd34ef56gh78",
    ],
)
def test_credential_header_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f'curl -H "Authorization: Token {DRF_TOKEN}" https://x',
            'curl -H "Authorization: Token [REDACTED:authorization]" https://x',
        ),
        (
            f"headers = {{'Authorization': 'Token {DRF_TOKEN}'}}",
            "headers = {'Authorization': 'Token [REDACTED:authorization]'}",
        ),
        (
            '{"authorization": "Bot MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs"}',
            '{"authorization": "Bot [REDACTED:authorization]"}',
        ),
        (
            "Authorization: lin_api_0123456789abcdefXYZ",
            "Authorization: [REDACTED:authorization]",
        ),
        (
            "Proxy-Authorization: Token abc123def456",
            "Proxy-Authorization: Token [REDACTED:authorization]",
        ),
        ("AUTHORIZATION=SSWS 00QCjAl4MlV-WPXM", "AUTHORIZATION=SSWS [REDACTED:authorization]"),
    ],
)
def test_authorization_schemes_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Token <token>",
        "Authorization: Token {token}",
        'headers["Authorization"] = f"Token {token}"',
        '"Authorization": "Token " + token',
        "Authorization: Token authentication is required for this endpoint.",
        'WWW-Authenticate: Token realm="api"',
        "Authorization: Bearer $TOKEN",
        "Authorization: Token",
        "Authorization: Bearer short",  # the bearer rule's call: not a generated token
        "the authorization: granted in step 2",
    ],
)
def test_authorization_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mysql -u root -phunter2 mydb", "mysql -u root -p[REDACTED:password] mydb"),
        (
            "mysqldump -uroot -p'my secret' app > dump.sql",
            "mysqldump -uroot -p'[REDACTED:password]' app > dump.sql",
        ),
        (
            "docker exec -it db mysql -uroot -pS3cret! -e 'select 1'",
            "docker exec -it db mysql -uroot -p[REDACTED:password] -e 'select 1'",
        ),
        ("mariadb --password=hunter2 -h db", "mariadb --password=[REDACTED:password] -h db"),
        ("/usr/bin/mysql -proot", "/usr/bin/mysql -p[REDACTED:password]"),
    ],
)
def test_mysql_passwords_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "mysql -u root -p",
        "mysql -u root -p mydb",  # -p then a blank prompts; mydb is the database
        "mysql -h db -P 3306 -u app -p",
        'mysql -u root -p"$MYSQL_PWD"',
        "mysql -u root -p$MYSQL_ROOT_PASSWORD",
        "mysql --password mydb",
        "ssh -p2222 dev@host",
        "ssh -p 2222 dev@host mysql -u root -p",
        "docker run -p 8080:80 nginx",
        "docker run -p 3306:3306 -d mysql:8",
        "psql -h db -p 5432 -U app",
        "mkdir -p build/out && cp -pR src build/out",
        "git log -p -- app/scrub.py",
    ],
)
def test_port_and_other_p_flags_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "docker login -u ci -p Dh8s7Xq2 registry.example.com",
            "docker login -u ci -p [REDACTED:password] registry.example.com",
        ),
        (
            "docker login --password hunter2 --username ci ghcr.io",
            "docker login --password [REDACTED:password] --username ci ghcr.io",
        ),
        (
            "podman login -u me -p'hunter2' quay.io",
            "podman login -u me -p'[REDACTED:password]' quay.io",
        ),
        (
            "mongosh -u admin -p s3cret --authenticationDatabase admin",
            "mongosh -u admin -p [REDACTED:password] --authenticationDatabase admin",
        ),
        ("deploy --api-key=a1b2c3d4e5f6 prod", "deploy --api-key=[REDACTED:secret] prod"),
    ],
)
def test_login_passwords_on_the_command_line_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "docker login -u ci --password-stdin",
        'echo "$PW" | docker login -u ci --password-stdin registry.example.com',
        'docker login -u ci -p "$REGISTRY_PASSWORD" registry.example.com',
        "docker run -p 5000:5000 registry:2",
        "docker login",
        "Use --password when prompted, or --password-stdin in CI.",
        "psql --no-password app2",
    ],
)
def test_login_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "PGPASSWORD=s3cret psql -h db -U app",
            "PGPASSWORD=[REDACTED:secret] psql -h db -U app",
        ),
        ("MYSQL_PWD=root mysql -u root", "MYSQL_PWD=[REDACTED:secret] mysql -u root"),
        (
            "docker run -e POSTGRES_PASSWORD=postgres -p 5432:5432 postgres",
            "docker run -e POSTGRES_PASSWORD=[REDACTED:secret] -p 5432:5432 postgres",
        ),
        ("export DB_PASS=hunter2", "export DB_PASS=[REDACTED:secret]"),
        ("DB_PASS=hunter2\nDB_USER=app\n", "DB_PASS=[REDACTED:secret]\nDB_USER=app\n"),
        (
            "curl 'https://x/api?API_KEY=abc123&q=1'",
            "curl 'https://x/api?API_KEY=[REDACTED:secret]&q=1'",
        ),
        ("SMTP_PASS=mailpw; ./send", "SMTP_PASS=[REDACTED:secret]; ./send"),
    ],
)
def test_inline_environment_credentials_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "PGPASSWORD=$DB_PASSWORD psql -h db",
        'PGPASSWORD="$(cat ~/.pgpass)" psql -h db',
        "PASS=0; FAIL=0",  # counters in a test script
        "BYPASS_CACHE=1 make",
        "BYPASS=abc123def make",  # a name that merely ends in "pass"
        "COMPASS=north",
        "PASSWORD_FILE=/run/secrets/db psql",
        "PWD=/home/dev/app",
        "OLDPWD=/home/dev",
        "MAX_TOKEN=4096 ./run",
        "DEBUG_PASS=true ./run",
        "SECRET_KEY=settings.SECRET_KEY",
    ],
)
def test_inline_environment_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("db_pass: hunter2x", "db_pass: [REDACTED:secret]"),
        ('smtp_pass = "mailpw1"', 'smtp_pass = "[REDACTED:secret]"'),
        ('const dbPass = "hunter2";', 'const dbPass = "[REDACTED:secret]";'),
        ("DB_PWD=r00t", "DB_PWD=[REDACTED:secret]"),
    ],
)
def test_pass_and_pwd_names_are_credential_names(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "make the tests pass: run pytest -x",
        "def f():\n    pass\n",
        "bypass: true",
        'compass = "north-by-northwest"',
        "$ pwd\n/home/dev/app",
        'cd "$(pwd)/build"',
        "pwd = os.getcwd()",
        'pwd = "/home/dev/app"',  # a path: the working folder, not a password
        "pwd: /srv/app2",
    ],
)
def test_pass_as_a_verb_and_pwd_as_a_command_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"SENDGRID_API_KEY={SENDGRID}", "SENDGRID_API_KEY=[REDACTED:sendgrid-key]"),
        (f"sg.send(key='{SENDGRID}')", "sg.send(key='[REDACTED:sendgrid-key]')"),
    ],
)
def test_sendgrid_keys_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "SG. Pepper is a band; SG.Net is a library.",
        "call SG.open() then SG.close()",
        "SG." + "aB3dE6gH9jK2mN5pQ8sT1v" + ".tooShort123",
        "SG.aB3dE6gH9jK2mN5pQ8sT1v",
    ],
)
def test_sendgrid_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;"
            f"AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
            "DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;"
            "AccountKey=[REDACTED:azure-key];EndpointSuffix=core.windows.net",
        ),
        (
            '"AzureWebJobsStorage": "DefaultEndpointsProtocol=https;AccountName=app;'
            f'AccountKey={AZURE_KEY}"',
            '"AzureWebJobsStorage": "DefaultEndpointsProtocol=https;AccountName=app;'
            'AccountKey=[REDACTED:azure-key]"',
        ),
        (
            "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=q1W2e3R4t5Y6u7I8o9P0aSdFgHjKlZxCvBnM1234567=",
            "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=[REDACTED:azure-key]",
        ),
        (
            "Server=tcp:db,1433;Database=app;User ID=sa;Password=Str0ng!Passw0rd;Encrypt=True",
            "Server=tcp:db,1433;Database=app;User ID=sa;Password=[REDACTED:password];Encrypt=True",
        ),
        (
            "Driver={ODBC};Server=db;Uid=sa;Pwd=hunter2;",
            "Driver={ODBC};Server=db;Uid=sa;Pwd=[REDACTED:password];",
        ),
    ],
)
def test_connection_string_keys_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        "AccountName=devstoreaccount1;AccountKey=<key>;EndpointSuffix=core.windows.net",
        'f"AccountName={name};AccountKey={account_key}"',
        '"AccountKey=" + key',
        "UseDevelopmentStorage=true",
        "Server=db;User ID=sa;Password=;Encrypt=True",
        "Server=db;Trusted_Connection=True;Password={0}",
        "Server=db;Password=$DB_PASSWORD;",
    ],
)
def test_connection_string_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('password = "hunter2"', 'password = "[REDACTED:secret]"'),
        ('{"password": "pw123"}', '{"password": "[REDACTED:secret]"}'),
        ("PGPASSWORD='secret' psql -h db", "PGPASSWORD='[REDACTED:secret]' psql -h db"),
        ('db_pwd: "abc"', 'db_pwd: "[REDACTED:secret]"'),
    ],
)
def test_short_quoted_passwords_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "text",
    [
        'password = ""',
        'password = "%s"',
        'password: "{password}"',
        'token = "abc"',  # short values are credentials only under a password name
        'api_key = "test"',
        '<input type="password" name="password" autocomplete="current-password">',
        'label = "Password"',
        'private_key = "/etc/ssl/private/server.key"',  # a path to the key, not the key
    ],
)
def test_short_quoted_lookalikes_are_untouched(text: str) -> None:
    assert scrub(text) == text


def test_issue_18_shapes_together_are_idempotent() -> None:
    text = (
        f'curl -H "X-API-Key: 3f9a1c7e5b2d4f60a8c1" -H "Authorization: Token {DRF_TOKEN}" x\n'
        "mysql -u root -phunter2\nPGPASSWORD=s3cret psql\ndocker login -p Dh8s7Xq2 r.io\n"
        f"DB_PASS=hunter2\n{SENDGRID}\nAccountKey={AZURE_KEY}\npassword = 'hunter2'\n"
        f"{{'Authorization': 'Token {DRF_TOKEN}'}}\n"
    )
    once = scrub(text)
    assert scrub(once) == once
    assert once.count("[REDACTED:") == 10
    for secret in ("3f9a1c7e5b2d4f60a8c1", DRF_TOKEN, "hunter2", "s3cret", "Dh8s7Xq2", AZURE_KEY):
        assert secret not in once


@pytest.mark.parametrize(
    "code",
    [
        "authorization = base64.decodebytes(authorization)",
        "authorization = self.header_v2",
        'creds = " --username=%s --password=%s" % (user, pw)',
        "user_pass = '%s:%s' % (unquote(user), unquote(password))",
        'env = f"ANTHROPIC_API_KEY=\\"\\" claude"',
        '{"username": "string", "password": "string", "passphrase": "string?"}',
        "hf spaces secrets add me/space -s OPENAI_API_KEY=sk-... -s HF_TOKEN=hf_...",
    ],
)
def test_code_around_the_new_rules_is_untouched(code: str) -> None:
    """Found by scrubbing the standard library and this repository with the new rules."""
    assert scrub(code) == code


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'DATABASES["default"]["PASSWORD"] = "gnu42x"',
            'DATABASES["default"]["PASSWORD"] = "[REDACTED:secret]"',
        ),
        (
            "os.environ['DB_PASSWORD'] = 'hunter2'",
            "os.environ['DB_PASSWORD'] = '[REDACTED:secret]'",
        ),
    ],
)
def test_subscript_assignments_of_credential_names_are_redacted(text: str, expected: str) -> None:
    check(text, expected)


@pytest.mark.parametrize(
    "code",
    [
        'os.environ["DB_PASSWORD"] = password',
        'cfg["token"] = "abc"',
        'x = y["password"] == "hunter2"',  # a comparison, not a quoted value after ":" or "="
    ],
)
def test_subscript_lookalikes_are_untouched(code: str) -> None:
    assert scrub(code) == code
