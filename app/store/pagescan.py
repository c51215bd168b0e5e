"""Rows of rltray's tables read straight from a damaged file's pages, as `.recover` reads them.

Why this module exists: SQLite reaches a row by walking its table's b-tree from
the root page the schema names, and the schema lives on page 1. One damaged root
or interior page hides every row below it, and a damaged page 1 hides the whole
file, while the leaf pages that hold the rows are usually intact. The sqlite3
shell's `.recover` reads leaf pages directly, but it is not part of Python's
sqlite3 module and Debian's shell fails on rltray's files, so this module does
the same with the standard library only (the file format is ``store/pages.py``).
rltray's schema is known, so each leaf page's records are matched to a table by
how many values they hold and of which types (``Shape``), as `.recover` fills
``lost_and_found``; the leaves under one readable interior page, or named by a
schema record found anywhere, belong to one table.

No maintained pure-Python library fits: sqbrite (GPL, last release 2018) and
xsqlite (not on PyPI) carve deleted records of a table named in a readable
schema, and sqlite-dissect also reads the schema from page 1; none matches
records to known tables once page 1 is gone, nor says which rows were lost.

What it cannot read it accounts for, so a repair can say what was left behind:
cells whose record or overflow chain is broken (their rowid is known), leaf
pages that are gone (the unreadable child of an interior page one level above
the leaves, with the rowid range the parent's keys give), a table whose root was
a leaf and is gone, and damaged pages whose role cannot be traced. A damaged
page with no readable parent is taken for a schema page while the schema has
fewer pages than an intact file of it, or for an interior page above orphaned
subtrees, before it counts as untraced. The rows found are held in memory (a
repair's one-off cost, about the file's size).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rltray.app.store.pages import (
    INDEX_LEAF,
    TABLE_INTERIOR,
    TABLE_LEAF,
    Broken,
    Node,
    Pages,
    node,
    record,
    signed,
    u32,
    varint,
)

SCHEMA = "sqlite_schema"
_KINDS: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "real": (int, float),  # SQLite stores a whole REAL as an integer
    "numeric": (int, float, str),
    "text": (str,),
    "blob": (int, float, str, bytes),
}


# -- what a table's records look like ------------------------------------------------


@dataclass(frozen=True)
class Column:
    """What one column may hold on disk."""

    affinity: str  # a key of _KINDS
    notnull: bool = False
    rowid: bool = False  # INTEGER PRIMARY KEY: the record holds NULL, the rowid is the value

    def holds(self, value: Any) -> bool:
        if value is None:
            return self.rowid or not self.notnull
        return not self.rowid and isinstance(value, _KINDS[self.affinity])


@dataclass(frozen=True)
class Shape:
    """A table's records: the values they hold, in order, and an optional test of the values."""

    table: str
    columns: tuple[Column, ...]
    least: int  # fewest values a record holds (rows older than an ADD COLUMN hold fewer)
    accept: Callable[[tuple[Any, ...]], bool] | None = None

    def matches(self, values: tuple[Any, ...]) -> bool:
        if not self.least <= len(values) <= len(self.columns):
            return False
        if not all(c.holds(v) for c, v in zip(self.columns, values, strict=False)):
            return False
        return self.accept is None or self.accept(values)


_SCHEMA_SHAPE = Shape(
    SCHEMA,
    (Column("text", True), Column("text", True), Column("text", True), Column("integer", True),
     Column("text")),
    5,
)


def affinity(declared: str) -> str:
    """The column affinity SQLite gives a declared type (its documented rules, in order)."""
    t = declared.upper()
    if "INT" in t:
        return "integer"
    if any(word in t for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if not t or "BLOB" in t:
        return "blob"
    if any(word in t for word in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "numeric"


def shape_of(
    conn: sqlite3.Connection, table: str, accept: Callable[[tuple[Any, ...]], bool] | None = None
) -> Shape:
    """The shape of ``table`` as declared in the database ``conn`` opens (an intact one)."""
    info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    keys = [r for r in info if r[5]]
    # A key is taken as never NULL: SQLite allows NULL in a non-integer PRIMARY KEY, rltray
    # never writes one, and the stricter shape keeps tags' rows from passing for runs'.
    columns = [
        Column(affinity(declared), bool(notnull or pk), bool(pk) and len(keys) == 1
               and declared.upper() == "INTEGER")
        for _cid, _name, declared, notnull, _default, pk in info
    ]
    required = [i for i, r in enumerate(info) if r[3] and r[4] is None and not columns[i].rowid]
    least = required[-1] + 1 if required else 1
    return Shape(table, tuple(columns), least, accept)


# -- the scan -------------------------------------------------------------------------


@dataclass
class Table:
    """What the pages hold of one table."""

    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # rowid -> values
    broken: set[int] = field(default_factory=set)  # rowids whose cell could not be read
    cut: int = 0  # cells whose rowid could not be read either
    # Leaf pages that are gone: (rowids above, rowids up to, rows it probably held);
    # None where no readable parent bounds the range.
    lost: list[tuple[int | None, int | None, int]] = field(default_factory=list)
    lost_root: bool = False  # the root was a leaf and is gone: how many rows, nothing says
    leaves: int = 0  # readable leaf pages

    def per_leaf(self, cap: int) -> int:
        """Rows a leaf page of this table holds on average (at least 1)."""
        cells = len(self.rows) + len(self.broken) + self.cut
        return max(1, min(cap, math.ceil(cells / self.leaves))) if self.leaves else 1


@dataclass
class Scan:
    pages: int
    page_size: int
    tables: dict[str, Table]
    damaged: int = 0  # pages that are neither b-tree, overflow nor freelist pages
    untraced: int = 0  # damaged (or unmatched) pages that may have held rows of any table


class _Scanner:
    """One scan of one file: the pages, the trees they form, the rows in them."""

    def __init__(self, pages: Pages, shapes: list[Shape]) -> None:
        self.p = pages
        self.shapes = [_SCHEMA_SHAPE, *shapes]
        self.free = pages.freelist()
        self.nodes: dict[int, Node] = {}
        for n in range(1, pages.count + 1):
            data = pages.page(n)
            if n not in self.free and data is not None:
                found = node(data, n, pages.usable, pages.count)
                if found is not None:
                    self.nodes[n] = found
        self.parent: dict[int, int] = {}
        for page in self.nodes.values():
            for child in page.children:
                self.parent.setdefault(child, page.number)
        self.overflow: set[int] = set()
        self.cells: dict[int, list[tuple[int | None, tuple[Any, ...] | None]]] = {}
        for page in self.nodes.values():
            if page.kind == TABLE_LEAF:
                self.cells[page.number] = [self._table_cell(page, c) for c in page.cells]
            elif not page.table:
                for c in page.cells:
                    self._index_cell(page, c)
        self.roots = self._roots()
        self.trees = self._assign()

    def _table_cell(self, page: Node, at: int) -> tuple[int | None, tuple[Any, ...] | None]:
        data = self.p.page(page.number) or b""
        try:
            size, at = varint(data, at, self.p.usable)
            rowid, at = varint(data, at, self.p.usable)
        except Broken:
            return None, None
        try:
            payload = self.p.payload(data, at, size, True, self.overflow)
            return signed(rowid), record(payload, self.p.encoding)
        except Broken:
            return signed(rowid), None

    def _index_cell(self, page: Node, at: int) -> None:
        """Follow an index cell's overflow chain only to know its pages are accounted for."""
        data = self.p.page(page.number) or b""
        try:
            size, at = varint(data, at + (0 if page.kind == INDEX_LEAF else 4), self.p.usable)
            self.p.payload(data, at, size, False, self.overflow)
        except Broken:
            pass

    # -- trees --------------------------------------------------------------------

    def top(self, number: int) -> int:
        """The highest readable page above ``number`` (itself when its parent is unreadable)."""
        seen = {number}
        while (up := self.parent.get(number)) in self.nodes and up not in seen:
            seen.add(up)
            number = up
        return number

    def height(self, page: Node) -> int | None:
        """Levels between ``page`` and its leaves, from any readable child; None when unknown."""
        depth = 0
        while not page.leaf:
            readable = [self.nodes[c] for c in page.children if c in self.nodes]
            if not readable:
                return None
            page, depth = readable[0], depth + 1
        return depth

    def bounds(self) -> dict[int, tuple[int | None, int | None]]:
        """Each child page's rowid range (above, up to) as the readable interior pages give it."""
        ranges: dict[int, tuple[int | None, int | None]] = {}
        for top in {self.top(n) for n in self.nodes}:
            todo: list[tuple[int, int | None, int | None]] = [(top, None, None)]
            while todo:
                number, lo, hi = todo.pop()
                ranges[number] = (lo, hi)
                page = self.nodes.get(number)
                if page is None or page.kind != TABLE_INTERIOR:
                    continue
                edges = [lo, *page.keys, hi]
                for i, child in enumerate(page.children):
                    if child not in ranges:
                        todo.append((child, edges[i], edges[i + 1]))
        return ranges

    def _roots(self) -> dict[int, tuple[str, str]]:
        """Root page -> (``table`` or ``index``, name), from every schema record found."""
        found: dict[int, tuple[str, str]] = {}
        for cells in self.cells.values():
            for _rowid, values in cells:
                if values is not None and _SCHEMA_SHAPE.matches(values):
                    kind, name, _tbl, root, _sql = values
                    if kind in ("table", "index") and 2 <= root <= self.p.count:
                        found.setdefault(root, (kind, name))
        return found

    def _assign(self) -> dict[int, str | None]:
        """Which table each tree (by its top page) belongs to: by the schema, else by a vote."""
        votes: dict[int, dict[str, int]] = {}
        for number, cells in self.cells.items():
            tally = votes.setdefault(self.top(number), {})
            for _rowid, values in cells:
                for shape in self.shapes:
                    if values is not None and shape.matches(values):
                        tally[shape.table] = tally.get(shape.table, 0) + 1
        names = {s.table for s in self.shapes}
        trees: dict[int, str | None] = {}
        for top in {self.top(n) for n in self.nodes if self.nodes[n].table}:
            known = SCHEMA if top == 1 else self.roots.get(top, ("", ""))[1]
            tally = votes.get(top, {})
            trees[top] = (
                known if known in names else max(tally, key=tally.__getitem__) if tally else None
            )
        return trees

    # -- rows and what is missing -------------------------------------------------

    def rows(self, tables: dict[str, Table]) -> int:
        """Fill each table with the rows its leaves hold; the leaves no table claims."""
        by_name = {s.table: s for s in self.shapes}
        unclaimed = 0
        # Pages under a readable parent first, so a stray page never takes a rowid.
        for number in sorted(self.cells, key=lambda n: (n not in self.parent, n)):
            name = self.trees.get(self.top(number))
            table = tables.get(name or "")
            if table is None:
                unclaimed += name is None and bool(self.cells[number])
                continue
            table.leaves += 1
            for rowid, values in self.cells[number]:
                if rowid is None:
                    table.cut += 1
                elif values is not None and by_name[name or ""].matches(values):
                    table.rows.setdefault(rowid, values)
                else:
                    table.broken.add(rowid)
        for table in tables.values():
            table.broken -= table.rows.keys()
        return unclaimed

    def tops(self) -> dict[str, int]:
        """Table -> how many of its trees have no readable parent (its root, and orphans)."""
        count: dict[str, int] = {}
        for name in self.trees.values():
            if name is not None:
                count[name] = count.get(name, 0) + 1
        return count

    def _stray_chains(self, pages: set[int]) -> set[int]:
        """Overflow chains no readable cell reaches (two pages or more, ending in a 0 link):
        the rest of cells on lost pages, holding no row of their own."""
        link = {n: u32(data, 0) for n in pages if (data := self.p.page(n)) is not None}
        found: set[int] = set()
        for start in link:
            chain, at = [start], link[start]
            while at in link and at not in chain:
                chain.append(at)
                at = link[at]
            if at == 0 and len(chain) >= 2:
                found.update(chain)
        return found

    def losses(
        self, tables: dict[str, Table], schema_pages: int, indexes: int
    ) -> tuple[int, int]:
        """Record lost leaves and roots in ``tables``; (damaged pages, untraced pages)."""
        roots = {root: name for root, (_kind, name) in self.roots.items()}
        root_of = {name: root for root, name in roots.items()}
        tops = self.tops()

        def orphans(name: str) -> int:
            """Trees of ``name`` with no readable parent that are not its root."""
            root = root_of.get(name)
            return tops.get(name, 0) - (0 if root is not None and root not in self.nodes else 1)

        ranges, cap = self.bounds(), (self.p.usable - 8) // 6
        lock_page = (1 << 30) // self.p.size + 1
        schema_seen = sum(1 for n in self.nodes if self.trees.get(self.top(n)) == SCHEMA)
        accounted = self.nodes.keys() | self.free | self.overflow | {lock_page}
        others = {n for n in range(1, self.p.count + 1) if n not in accounted}
        others -= self._stray_chains(others)
        unknown = damaged = 0
        for number in sorted(others):
            damaged += 1
            up = self.parent.get(number)
            name = self.trees.get(self.top(up)) if up in self.nodes else None
            if up in self.nodes and name == SCHEMA:
                schema_seen += 1
            elif up in self.nodes and name in tables and self.nodes[up].table:
                # A b-tree is balanced: the child of a page one level above the leaves was a
                # leaf. With no readable child to measure by, orphaned pages elsewhere in the
                # table say the lost pages were interior ones.
                level = self.height(self.nodes[up])
                if level == 1 if level is not None else orphans(name) <= 0:
                    lo, hi = ranges.get(number, (None, None))
                    rows = tables[name].per_leaf(cap)
                    if lo is not None and hi is not None:
                        rows = max(0, min(hi - lo, cap))
                    tables[name].lost.append((lo, hi, rows))
            elif up in self.nodes:
                unknown += self.nodes[up].table  # an index page's child holds no rows
            elif number == 1:
                schema_seen += 1
            elif number in roots:
                if roots[number] in tables and orphans(roots[number]) <= 0:
                    tables[roots[number]].lost_root = True
            else:
                data = self.p.page(number)
                # An all-zero page with no freelist to check is taken as a freed one.
                unknown += not (data and not any(data) and not self.p.header_ok)
        index_tops = sum(1 for t in {self.top(n) for n in self.nodes} if not self.nodes[t].table)
        capacity = max(0, schema_pages - schema_seen) + max(0, index_tops - indexes)
        capacity += sum(max(0, orphans(name)) for name in tops if name != SCHEMA)
        return damaged, max(0, unknown - capacity)


def scan(pages: Pages, shapes: list[Shape], *, schema_pages: int = 1, indexes: int = 0) -> Scan:
    """Every row of the ``shapes``' tables the pages hold, and what was lost, as counts.

    ``schema_pages`` (how many pages the schema takes in an intact file of this
    schema) and ``indexes`` (how many indexes it has) let damaged pages with no
    readable parent be taken for schema or interior pages instead of lost leaves.
    """
    scanner = _Scanner(pages, shapes)
    tables = {shape.table: Table() for shape in shapes}
    unclaimed = scanner.rows(tables)
    damaged, untraced = scanner.losses(tables, schema_pages, indexes)
    return Scan(pages.count, pages.size, tables, damaged, untraced + unclaimed)
