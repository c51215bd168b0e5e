"""What `rltray doctor --repair` recovers from each page-damage pattern of issue 18, and how fast.

Builds one database of N turns (two per 4 KB leaf page, like the issue's 3,000),
every tenth rated, a few with prompts long enough to spill onto overflow pages,
and no backup. For each pattern it overwrites those pages of a copy with 0xFF,
repairs it in process and prints turns and ratings recovered, what the report
says was left behind, and the seconds the repair took (scan included). Pages are
located with SQLite's dbstat table. Run with
`.venv/bin/python bench/repair_damage.py [--turns N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rltray.app.paths import Paths
from rltray.app.store import Store
from rltray.app.store import repair as dbrepair

BIG = 4


def build(db: Path, turns: int) -> None:
    with Store(db) as store, store.batch():
        for n in range(turns + BIG):
            turn_id, _ = store.add_turn(
                {
                    "agent": "codex",
                    "session": "s",
                    "turn": f"t{n}",
                    "prompt": f"<turn-{n:05d}>" * (2000 if n >= turns else 100),
                    "response": f"answer {n}",
                    "captured_at": f"2025-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
                }
            )
            if n % 10 == 0:
                store.rate(turn_id, 1, "cli")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def stat(db: Path, sql: str, *args: object) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute(sql, args)]
    finally:
        conn.close()


def stat_rows(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def dbstat(kind: str, name: str | None = None) -> Callable[[Path, int], set[int]]:
    sql = "SELECT pageno FROM dbstat WHERE pagetype = ?" + (" AND name = ?" if name else "")
    return lambda db, n: set(stat(db, sql, *([kind, name] if name else [kind])))


def root(name: str) -> Callable[[Path, int], set[int]]:
    return lambda db, n: set(stat(db, "SELECT rootpage FROM sqlite_master WHERE name = ?", name))


PATTERNS: dict[str, Callable[[Path, int], set[int]]] = {
    "turns root": root("turns"),
    "every interior page": dbstat("internal"),
    "page 1": lambda db, n: {1},
    "the schema pages": lambda db, n: set(
        stat(db, "SELECT pageno FROM dbstat WHERE name IN ('sqlite_schema', 'sqlite_master')")
    ),
    "ratings root": root("ratings"),
    "three turn leaves": lambda db, n: set(sorted(dbstat("leaf", "turns")(db, n))[10:13]),
    "two overflow pages": lambda db, n: overflow_pages(db),
}


def overflow_pages(db: Path) -> set[int]:
    """The middle overflow page of the first chain and the last page of the second."""
    chains: dict[str, list[int]] = {}
    for page, path in stat_rows(
        db, "SELECT pageno, path FROM dbstat WHERE pagetype = 'overflow' ORDER BY path"
    ):
        chains.setdefault(path.split("+")[0], []).append(page)
    first, second = list(chains.values())[:2]
    return {first[len(first) // 2], second[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template.db"
        build(template, args.turns)
        total = len(stat(template, "SELECT id FROM turns"))
        rated = len(stat(template, "SELECT id FROM ratings"))
        print(f"{total} turns, {rated} ratings, {template.stat().st_size // 4096} pages")
        print(f"{'pattern':22} {'pages':>5} {'turns':>11} {'ratings':>9} {'left':>5} {'s':>6}")
        for i, (name, pick) in enumerate(PATTERNS.items()):
            home = Path(tmp) / f"home{i}"
            home.mkdir()
            paths = Paths(home)
            shutil.copy(template, paths.db)
            hit = pick(paths.db, args.turns)
            with open(paths.db, "r+b") as f:
                for page in hit:
                    f.seek((page - 1) * 4096)
                    f.write(b"\xff" * 4096)
            os.environ["RLTRAY_HOME"] = str(home)
            start = time.perf_counter()
            report = dbrepair.repair(paths)
            took = time.perf_counter() - start
            left = sum(report.left.values()) + report.untraced
            print(
                f"{name:22} {len(hit):>5} {report.total('turns'):>5}/{total:<5} "
                f"{report.total('ratings'):>4}/{rated:<4} {left:>5} {took:>6.2f}"
                + ("" if report.complete else "  (reported: left behind)")
            )


if __name__ == "__main__":
    main()
