"""A SQLite file read page by page without SQLite, for salvaging rows SQLite cannot reach.

Why: a damaged root, interior or schema page stops SQLite's own reading of every
row below it, while the leaf pages that hold the rows are usually intact.
``store/pagescan.py`` reads those; this module is the file format it needs, standard
library only (no maintained pure-Python reader fits: see ``store/pagescan.py``).

The parts of the file format relied on (https://www.sqlite.org/fileformat2.html):

- The 100-byte header on page 1: page size at offset 16 (1 means 65536), bytes
  reserved at the end of each page at 20, first freelist trunk page at 32, text
  encoding at 56. With page 1 gone the page size comes from the write-ahead log,
  else it is the smallest size under which (nearly) every page parses.
- A b-tree page (its header at offset 100 on page 1, else 0): a type byte (13
  table leaf, 5 table interior, 10 index leaf, 2 index interior), the first
  freeblock, the cell count, where cell content starts, the fragmented bytes and,
  on interior pages, the right-most child; then one 2-byte offset per cell.
- A table leaf cell: varint payload size, varint rowid, the payload's first bytes
  and, when it spills, the first overflow page; how much stays on the page is the
  formula in ``local``. An overflow page starts with the next one's number (0 on
  the last) and carries the usable size minus 4 bytes of payload.
- A table interior cell: a 4-byte child page and a varint key, the largest rowid
  under that child; the right-most child holds the rowids above the last key.
  Index cells carry a payload (spilling like a table's, with other limits).
- A record: a varint header size, one varint serial type per column (0 NULL,
  1-6 big-endian integers of 1, 2, 3, 4, 6 or 8 bytes, 7 a double, 8 and 9 the
  integers 0 and 1, even N >= 12 a blob and odd N >= 13 text of (N - 12) // 2
  bytes), then the values. An INTEGER PRIMARY KEY column holds NULL: the rowid
  is its value.
- The freelist: trunk pages (next trunk, leaf count, leaf page numbers). A freed
  page may still look like a leaf, so freelist pages are never read for rows.
- A write-ahead log beside the file: a 32-byte header (magic, page size, salts,
  checksum) and frames of a 24-byte header (page number, page count after a
  commit, salts, running checksum) plus the page. Frames whose salts and checksum
  hold, up to the last commit, replace the file's pages, as SQLite reads them.

Auto-vacuum pointer-map pages are not handled: rltray never enables auto-vacuum.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE_LEAF, TABLE_INTERIOR, INDEX_LEAF, INDEX_INTERIOR = 13, 5, 10, 2
_MAGIC = b"SQLite format 3\x00"
_WAL_MAGIC = (0x377F0682, 0x377F0683)  # checksums little-endian / big-endian
_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_INT_BYTES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
_ENCODINGS = {1: "utf-8", 2: "utf-16-le", 3: "utf-16-be"}


class Broken(ValueError):
    """Bytes that do not decode as what the format says must be there."""


def u32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "big")


def varint(data: bytes, at: int, end: int | None = None) -> tuple[int, int]:
    """A SQLite varint at ``at``: (value, offset after it); Broken past ``end``."""
    end = len(data) if end is None else end
    value = 0
    for i in range(8):
        if at + i >= end:
            raise Broken("varint runs off its space")
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    if at + 8 >= end:
        raise Broken("varint runs off its space")
    return (value << 8) | data[at + 8], at + 9


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def local(size: int, usable: int, table: bool) -> int:
    """How many payload bytes of a cell stay on its page (the rest spills to overflow pages)."""
    most = usable - 35 if table else (usable - 12) * 64 // 255 - 23
    if size <= most:
        return size
    least = (usable - 12) * 32 // 255 - 23
    k = least + (size - least) % (usable - 4)
    return k if k <= most else least


def _checksum(data: bytes, s1: int, s2: int, big: bool) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s1 = (s1 + words[i] + s2) & 0xFFFFFFFF
        s2 = (s2 + words[i + 1] + s1) & 0xFFFFFFFF
    return s1, s2


def _wal_frames(wal: bytes) -> tuple[int, int, dict[int, int]]:
    """(page size, page count after the last commit, page -> offset of its newest frame)."""
    if len(wal) < 32:
        return 0, 0, {}
    magic, _version, size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", wal[:32])
    big = magic == _WAL_MAGIC[1]
    if magic not in _WAL_MAGIC or size not in _SIZES:
        return 0, 0, {}
    s1, s2 = _checksum(wal[:24], 0, 0, big)
    if (s1, s2) != (c1, c2):
        return 0, 0, {}
    frames: list[tuple[int, int]] = []
    committed, count, at = 0, 0, 32
    while at + 24 + size <= len(wal):
        page, after, f1, f2, k1, k2 = struct.unpack(">6I", wal[at : at + 24])
        if (f1, f2) != (salt1, salt2):
            break
        s1, s2 = _checksum(wal[at : at + 8], s1, s2, big)
        s1, s2 = _checksum(wal[at + 24 : at + 24 + size], s1, s2, big)
        if (s1, s2) != (k1, k2):
            break
        frames.append((page, at + 24))
        if after:
            committed, count = len(frames), after
        at += 24 + size
    return size, count, dict(frames[:committed])


class Pages:
    """The file's pages, numbered from 1, with the log's committed frames laid over them."""

    def __init__(self, data: bytes | mmap.mmap, wal: bytes = b"") -> None:
        self._data = data
        self._wal = wal
        wal_size, wal_count, self._frames = _wal_frames(wal)
        header = bytes(data[:100])
        self.header_ok = header[:16] == _MAGIC and self._size(header) is not None
        if self.header_ok:
            self.size = self._size(header) or 4096
            self.usable = self.size - header[20]
            self.encoding = _ENCODINGS.get(u32(header, 56), "utf-8")
        else:
            self.size = wal_size or self._guess_size()
            self.usable, self.encoding = self.size, "utf-8"
        self.count = max(len(data) // self.size, wal_count, max(self._frames, default=0))
        if wal_count:
            self.count = wal_count  # as SQLite reads it: the size after the last commit

    @staticmethod
    def _size(header: bytes) -> int | None:
        size = int.from_bytes(header[16:18], "big")
        size = 65536 if size == 1 else size
        return size if size in _SIZES and header[20] < size - 480 else None

    def _guess_size(self) -> int:
        """The smallest page size under which nearly as many pages parse as under any other.

        Read at twice its size, a page still parses (its first half is the page);
        read at half its size, every other piece is the back half of one and fails.
        """
        share = {}
        for size in sorted(_SIZES):
            pages = min(len(self._data) // size, 256)
            if pages < 2:
                continue
            parsed = sum(
                node(self._data[(n - 1) * size : n * size], n, size, 1 << 31) is not None
                for n in range(2, pages + 1)
            )
            share[size] = parsed / (pages - 1)
        best = max(share.values(), default=0.0)
        if not best:
            return 4096  # nothing parses at all: rltray's (and SQLite's) default
        return min(size for size, part in share.items() if part >= 0.75 * best)

    def page(self, number: int) -> bytes | None:
        """Page ``number``'s bytes as SQLite would read them, or None when the file lacks it."""
        if not 1 <= number <= self.count:
            return None
        at = self._frames.get(number)
        if at is not None:
            return self._wal[at : at + self.size]
        data = self._data[(number - 1) * self.size : number * self.size]
        return bytes(data) if len(data) == self.size else None

    def payload(self, data: bytes, at: int, size: int, table: bool, chain: set[int]) -> bytes:
        """A cell's payload starting at ``at`` on page ``data``, its overflow chain followed
        (each overflow page read is added to ``chain``); Broken when the chain is cut."""
        usable = self.usable
        kept = local(size, usable, table)
        if at + kept + (4 if kept < size else 0) > usable:
            raise Broken("cell runs off its page")
        parts, need = [data[at : at + kept]], size - kept
        nxt = u32(data, at + kept) if need else 0
        seen: set[int] = set()
        while need > 0:
            page = self.page(nxt) if nxt not in seen and nxt >= 2 else None
            if page is None:
                raise Broken("overflow chain leaves the file")
            seen.add(nxt)
            chain.add(nxt)
            parts.append(page[4 : 4 + min(need, usable - 4)])
            need -= usable - 4
            nxt = u32(page, 0)
        if nxt:
            raise Broken("overflow chain does not end where the payload does")
        return b"".join(parts)

    def freelist(self) -> set[int]:
        """Trunk and leaf pages of the freelist, when page 1's header says where it starts."""
        if not self.header_ok:
            return set()
        free: set[int] = set()
        trunk = u32(self.page(1) or b"", 32)
        while 2 <= trunk <= self.count and trunk not in free:
            free.add(trunk)
            data = self.page(trunk) or b""
            leaves = min(u32(data, 4), (self.usable - 8) // 4)
            free.update(
                n for i in range(leaves) if 2 <= (n := u32(data, 8 + 4 * i)) <= self.count
            )
            trunk = u32(data, 0)
        return free


@contextmanager
def open_pages(path: Path) -> Iterator[Pages]:
    """The file at ``path`` (and its ``-wal``), read only and never written."""
    wal_path = path.with_name(path.name + "-wal")
    try:
        wal = wal_path.read_bytes()
    except OSError:
        wal = b""
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            yield Pages(b"", wal)
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield Pages(data, wal)


# -- b-tree pages and records --------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """A page that parses as a b-tree page."""

    number: int
    kind: int
    cells: tuple[int, ...]  # offsets of the cells in the page
    children: tuple[int, ...] = ()  # interior pages: each cell's child, then the right-most
    keys: tuple[int, ...] = ()  # table interior pages: the largest rowid under each cell's child

    @property
    def leaf(self) -> bool:
        return self.kind in (TABLE_LEAF, INDEX_LEAF)

    @property
    def table(self) -> bool:
        return self.kind in (TABLE_LEAF, TABLE_INTERIOR)


def node(data: bytes | mmap.mmap, number: int, usable: int, count: int) -> Node | None:
    """Page ``number`` as a b-tree page, or None when its header or cell offsets make no sense."""
    at = 100 if number == 1 else 0
    if len(data) < at + 12:
        return None
    kind = data[at]
    if kind not in (TABLE_LEAF, TABLE_INTERIOR, INDEX_LEAF, INDEX_INTERIOR):
        return None
    leaf = kind in (TABLE_LEAF, INDEX_LEAF)
    first_free, ncells, content, fragmented = struct.unpack_from(">HHHB", data, at + 1)
    content = content or 65536
    end = at + (8 if leaf else 12) + 2 * ncells
    if end > usable or fragmented > 60 or (ncells and not end <= content < usable):
        return None
    if first_free and not end <= first_free <= usable - 4:
        return None
    cells = struct.unpack_from(f">{ncells}H", data, end - 2 * ncells)
    if any(not content <= c <= usable - 4 for c in cells):
        return None
    if leaf:
        return Node(number, kind, cells)
    children, keys = [], []
    try:
        for c in cells:
            children.append(u32(data, c))
            if kind == TABLE_INTERIOR:
                keys.append(signed(varint(data, c + 4, usable)[0]))
    except Broken:
        return None
    children.append(u32(data, at + 8))
    if any(not 2 <= child <= count for child in children):
        return None
    return Node(number, kind, cells, tuple(children), tuple(keys))


def record(payload: bytes, encoding: str) -> tuple[Any, ...]:
    """The values of one record; Broken when its header and body do not add up."""
    head, at = varint(payload, 0)
    if not 1 <= head <= len(payload):
        raise Broken("record header size out of range")
    types = []
    while at < head:
        serial, at = varint(payload, at, head)
        types.append(serial)
    values: list[Any] = []
    body = head
    for serial in types:
        if serial == 0:
            values.append(None)
            continue
        if serial in (8, 9):
            values.append(serial - 8)
            continue
        if serial in (10, 11):
            raise Broken("reserved serial type")
        n = _INT_BYTES.get(serial) or (8 if serial == 7 else (serial - 12) // 2)
        chunk = payload[body : body + n]
        if len(chunk) < n:
            raise Broken("record body shorter than its header says")
        if serial in _INT_BYTES:
            values.append(int.from_bytes(chunk, "big", signed=True))
        elif serial == 7:
            values.append(struct.unpack(">d", chunk)[0])
        elif serial % 2:
            values.append(chunk.decode(encoding, "replace"))
        else:
            values.append(bytes(chunk))
        body += n
    if body != len(payload):
        raise Broken("record body longer than its header says")
    return tuple(values)


def tree_pages(path: Path, root: int = 1) -> int:
    """How many pages the b-tree rooted at ``root`` takes in the (intact) file at ``path``."""
    with open_pages(path) as pages:
        todo, seen = [root], set()
        while todo:
            number = todo.pop()
            data = pages.page(number)
            found = node(data, number, pages.usable, pages.count) if data else None
            if found is None or number in seen:
                continue
            seen.add(number)
            todo.extend(found.children)
        return len(seen)
