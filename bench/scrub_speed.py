"""How fast credential scrubbing is on text built to make regexes backtrack: seconds per MB.

Tool output reaches ``rltray.app.scrub.scrub`` whole (base64 blobs, lockfiles, minified
bundles), so each generator below is a kind of text a quadratic pattern chokes on. Every
case runs at each size (--repeat times, the fastest kept) and the table shows seconds per
MB; linear scrubbing gives the same figure at every size. The target is at most 0.5 s/MB.
Once one run of a generator takes longer than --budget seconds its larger sizes are
skipped (shown as "-"), so the quadratic original can be measured too:

    python bench/scrub_speed.py                                 # this checkout's scrub
    git show 2c91733:app/scrub.py > /tmp/old_scrub.py   # before the linear rewrite
    python bench/scrub_speed.py --scrub /tmp/old_scrub.py --sizes 8,32 --budget 5

The last line is one JSON object holding every figure, for scripts. The generators are
also what tests/app/test_scrub.py times for linear growth.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import string
import time
from collections.abc import Callable
from pathlib import Path

B64URL = string.ascii_letters + string.digits + "-_"
B64 = string.ascii_letters + string.digits + "+/"
WORDS = [
    "the",
    "a",
    "parser",
    "token",
    "file",
    "value",
    "returns",
    "list",
    "of",
    "and",
    "to",
    "key",
    "password",
    "secret",
    "error",
    "test",
    "config",
    "name",
    "user",
    "data",
    "read",
    "write",
    "cache",
    "build",
    "fails",
    "passes",
    "when",
    "with",
    "from",
    "into",
    "each",
]


def _fill(size: int, piece: Callable[[], str]) -> str:
    parts, n = [], 0
    while n < size:
        parts.append(piece())
        n += len(parts[-1])
    return "".join(parts)[:size]


def base64url(size: int, rng: random.Random) -> str:
    return "".join(rng.choices(B64URL, k=size))


def hex_digits(size: int, rng: random.Random) -> str:
    return "".join(rng.choices("0123456789abcdef", k=size))


def one_char(size: int, rng: random.Random) -> str:
    return "a" * size


def query_chain(size: int, rng: random.Random) -> str:
    """``a=b&c=d&...`` on one line."""
    return _fill(size, lambda: f"{rng.choice(string.ascii_lowercase)}=b&")


def env_lines(size: int, rng: random.Random) -> str:
    """``KEY_12=value12`` lines, half of them credential-named (each reaches a callback)."""
    names = ("KEY", "DB_PASSWORD", "PATH", "API_TOKEN")
    return _fill(
        size, lambda: f"{rng.choice(names)}_{rng.randrange(99)}=v4lue{rng.randrange(10**6)}\n"
    )


def quoted_secrets(size: int, rng: random.Random) -> str:
    """``password = "..."`` and ``"api_key": "..."`` over and over: every one is redacted."""
    return _fill(
        size,
        lambda: f'password = "{base64url(16, rng)}", "api_key": \'{base64url(24, rng)}\'\n',
    )


def minified_js(size: int, rng: random.Random) -> str:
    def ident() -> str:
        return "".join(rng.choices(string.ascii_letters, k=rng.randint(1, 3)))

    shapes = (
        lambda: f"var {ident()}={ident()}.{ident()}({ident()},{rng.randrange(999)});",
        lambda: f'{ident()}:function({ident()}){{return {ident()}?"{ident()}":{ident()}}},',
        lambda: f"if({ident()}==={ident()}){{{ident()}[{ident()}]=!0}}",
        lambda: f'{ident()}="{ident()}-{ident()}://{ident()}:{ident()}@",',
    )
    return _fill(size, lambda: rng.choice(shapes)())


def data_url(size: int, rng: random.Random) -> str:
    head = "data:image/png;base64,"
    return head + "".join(rng.choices(B64, k=size - len(head)))


def lockfile(size: int, rng: random.Random) -> str:
    """package-lock.json entries: URLs, versions and sha512 integrity hashes."""

    def entry() -> str:
        name = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12)))
        v = f"{rng.randrange(9)}.{rng.randrange(20)}.{rng.randrange(30)}"
        return (
            f'    "node_modules/{name}": {{\n      "version": "{v}",\n'
            f'      "resolved": "https://registry.npmjs.org/{name}/-/{name}-{v}.tgz",\n'
            f'      "integrity": "sha512-{"".join(rng.choices(B64, k=86))}=="\n    }},\n'
        )

    return _fill(size, entry)


def prose_and_code(size: int, rng: random.Random) -> str:
    shapes = (
        lambda: " ".join(rng.choices(WORDS, k=rng.randint(8, 20))).capitalize() + ".\n",
        lambda: "def login(user: str, password: str) -> Token:\n    token = get_token()\n",
        lambda: '    api_key = None\n    tokenizer = "bert-base-uncased"\n',
        lambda: "    password: str\n    max_tokens = 4096\n",
        lambda: f"commit {hex_digits(40, rng)}\nAuthor: A <a@b.c>\n\n",
        lambda: "curl -H 'Authorization: Bearer $TOKEN' https://api.example.com/v1/x\n",
    )
    return _fill(size, lambda: rng.choice(shapes)())


def _pieces(*pieces: str, end: str = "") -> Callable[[int, random.Random], str]:
    """The first of ``pieces``, then all of them in random order with no separator between
    them, then ``end`` (a character on which every match still open fails, so none is skipped
    over). A fixed start keeps what the line-start rules do the same whatever the seed."""

    def generate(size: int, rng: random.Random) -> str:
        head = pieces[0]
        return head + _fill(size - len(head) - len(end), lambda: rng.choice(pieces)) + end

    return generate


# Runs of what the command-line, header and assignment rules start on, so that a rule that
# rescans from each start (or looks back a whole line per match) shows up as quadratic.
password_flags = _pieces(
    "-p", " -p", " -p ", " -pa", " mysql", " login", " --password", "=x ", " -p'", end="$"
)
equals_runs = _pieces("=", "A=", "PASS=", "_KEY=", "a1", "==", "DB_PWD=", end="$")
quote_runs = _pieces('"', "'", 'password="', "pwd='", ":'", '= "', "x", " ", end="$")
authorization_runs = _pieces(
    "Authorization: ",
    "Authorization: Token ",
    "authorization=",
    "X-API-Key: ",
    "a1b2",
    "'",
    end="$",
)
connection_strings = _pieces(";Password=", ";", "AccountKey=", "SG.", "a1B2", "Pwd=", "==", end="$")

GENERATORS: dict[str, Callable[[int, random.Random], str]] = {
    "base64url": base64url,
    "hex": hex_digits,
    "one char": one_char,
    "a=b&c=d": query_chain,
    "key=value lines": env_lines,
    "quoted secrets": quoted_secrets,
    "minified js": minified_js,
    "data url": data_url,
    "lockfile": lockfile,
    "prose + code": prose_and_code,
    "-p --password": password_flags,
    "= runs": equals_runs,
    "quote runs": quote_runs,
    "Authorization:": authorization_runs,
    ";Password=": connection_strings,
}


def load_scrub(path: Path | None) -> Callable[[str], str]:
    """``scrub`` from this checkout, or from a scrub.py file at ``path`` (an older version)."""
    if path is None:
        from rltray.app.scrub import scrub

        return scrub
    spec = importlib.util.spec_from_file_location("scrub_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scrub


def best_time(scrub: Callable[[str], str], text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        scrub(text)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrub", type=Path, help="a scrub.py to time instead of rltray's")
    parser.add_argument("--sizes", default="64,256,1024", help="KB, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=10.0, help="seconds; skip larger sizes")
    args = parser.parse_args(argv)
    scrub = load_scrub(args.scrub)
    sizes = [int(kb) * 1024 for kb in args.sizes.split(",")]

    results: dict[str, dict[str, float | None]] = {}
    print(f"{'s/MB':<16}" + "".join(f"{kb_label(s):>10}" for s in sizes))
    for name, generate in GENERATORS.items():
        row: dict[str, float | None] = {}
        over = False
        for size in sizes:
            if over:
                row[kb_label(size)] = None
                continue
            text = generate(size, random.Random(size))
            seconds = best_time(scrub, text, args.repeat)
            row[kb_label(size)] = seconds / (size / 2**20)
            over = seconds > args.budget
        results[name] = row
        cells = "".join("-".rjust(10) if v is None else f"{v:10.3f}" for v in row.values())
        print(f"{name:<16}{cells}", flush=True)
    worst = max((v for row in results.values() for v in row.values() if v is not None), default=0)
    print(f"worst {worst:.3f} s/MB (target <= 0.5)")
    print(json.dumps({"seconds_per_mb": results, "worst_seconds_per_mb": worst}))
    return 0


def kb_label(size: int) -> str:
    return f"{size // 2**20} MB" if size % 2**20 == 0 else f"{size // 1024} KB"


if __name__ == "__main__":
    raise SystemExit(main())
