"""Reconciliation in bounded memory: the day's bill split by ledger shard, matched one partition at a time.

The one parse of a run (the channel's own parser, through `OpenedBill.parser`) still builds its compact
`BillIndex`, but while it reads: every `CHUNK_LINES` lines the rows indexed so far are moved into one of
`LEDGER_SHARDS` partition files by the ledger's own key hash (`store.recon.ledger_shard`), so a partition of
the bill is exactly one shard of the ledger's `by_bill_shard` index. Per partition two files:

    pNN.idx   blocks of (rows, key bytes) + keys (\\n-joined UTF-8) + amounts (int64) + flags (uint8) + where (int64)
              + fees (int64, e-5 yuan: what the partition's FEE entries book, R43)
    pNN.rows  the rows' raw lines, as in the bill; `where` is a row's offset in this file

plus `head` (the bill's lines before its first row: what a parser needs to read any one row again). Matching a
partition reads its index, the ledger shard, and re-reads in full only the rows that are not clean matches
(`RowReader`), exactly as the in-memory path does with the whole bill. Peak memory is one chunk while parsing
and one partition while matching, not the day. The guards run on the parse's totals, unchanged.

A big plain bill on disk is parsed in line-aligned pieces, one process per CPU (`partition_file`): the later
pieces' files are appended to the first's and their parsers joined into its totals, the same files and totals as
one pass.

The same files are what a Step Functions Distributed Map child gets from S3 (docs/recon.md "Distributed Map").
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from itertools import accumulate, chain, islice
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

from tally.channels.bill_source import LineBlocks, SplittableParser
from tally.domain.recon import INDEX_WATCHER, BillIndex, BillItem, BillParseError, BillTotals
from tally.service.recon_sources import OpenedBill
from tally.store.recon import LEDGER_SHARDS

# lines parsed between two spills: bounds the parse's own index. 10,000 (~2.5 MB of lines) rather than 100,000:
# the block's lines are still in the CPU cache when the spill gathers them, and the allocator reuses the block's
# memory; parse + partition of 1M rows -10 % CPU (docs/recon.md "Session 9")
CHUNK_LINES = 10_000
_BLOCK = struct.Struct("<QQ")  # rows in the block, bytes of its keys
MANIFEST = "manifest.json"


@dataclass
class Partitioned:
    """A bill split into partition files under `directory` (see the module docstring)."""

    channel: str
    directory: Path
    partitions: int
    rows: list[int]  # rows per partition
    head: bytes = b""
    totals: BillTotals | None = field(default=None, repr=False)
    pieces: int = 1  # the processes that parsed it (partition_file): 1, or one per core for a big bill

    def index_path(self, p: int) -> Path:
        return self.directory / f"p{p:02d}.idx"

    def rows_path(self, p: int) -> Path:
        return self.directory / f"p{p:02d}.rows"

    def index(self, p: int) -> BillIndex:
        return read_index(self.index_path(p).read_bytes())

    def reader(self, p: int) -> RowReader:
        return RowReader(self.channel, self.head, open(self.rows_path(p), "rb"))  # noqa: SIM115 - closed by close()

    def manifest(self) -> dict[str, Any]:
        return {"channel": self.channel, "partitions": self.partitions, "rows": self.rows}

    def write_manifest(self) -> None:
        (self.directory / "head").write_bytes(self.head)
        (self.directory / MANIFEST).write_text(json.dumps(self.manifest()))

    @classmethod
    def load(cls, directory: Path) -> Partitioned:
        m = json.loads((directory / MANIFEST).read_text())
        return cls(m["channel"], directory, m["partitions"], m["rows"], (directory / "head").read_bytes())


class RowReader:
    """One row of a partition, in full: a fresh parser that has read the bill's head (its header, so it knows the
    layout) parses the raw line by the same rules as every other path (`parser.item_at`)."""

    def __init__(self, channel: str, head: bytes, rows: IO[bytes]):
        self._channel, self._head = channel, head
        self._parser: Any = None
        self._rows = rows

    def item_at(self, where: int) -> BillItem:
        if self._parser is None:  # a partition whose rows all match never needs one
            self._parser = OpenedBill(self._channel, self._head).parser()
            self._parser.index()  # the head only: the header, no rows
        self._rows.seek(where)
        return self._parser.item_at(self._rows.readline())

    def close(self) -> None:
        self._rows.close()


def file_lines(path: Path) -> Iterator[bytes]:
    """A bill file's lines, streamed (gunzipped on the fly if it is gzip, as the channel serves it): the open
    file, iterated line by line; closed when the caller is done with it (or garbage-collected)."""
    with open(path, "rb") as probe:
        gz = probe.read(2) == b"\x1f\x8b"
    f: Iterator[bytes] = gzip.open(path, "rb") if gz else open(path, "rb")  # noqa: SIM115
    return f


def partition_bill(
    opened: OpenedBill,
    directory: Path,
    *,
    lines: Iterable[bytes] | None = None,
    partitions: int = LEDGER_SHARDS,
    chunk_lines: int = CHUNK_LINES,
) -> Partitioned:
    """Parse once (totals for the guards, in `.totals`) and leave the rows in partition files. `lines` streams
    the bill from elsewhere (a file); without it, the opened bill's own lines."""
    return _partition(opened, directory, opened.lines() if lines is None else lines, partitions, chunk_lines)[
        0
    ]


def _partition(
    opened: OpenedBill, directory: Path, lines: Iterable[bytes], partitions: int, chunk_lines: int
) -> tuple[Partitioned, Any]:
    """partition_bill, and the parser that read the lines (its totals, and what `join` needs of it)."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = _Writer(directory, partitions)
    built: list[BillIndex] = []
    block: list[bytes] = []  # the lines handed to the parser since the last spill
    state = _Progress()

    def spill() -> None:
        size = sum(map(len, block))
        index = built[0] if built and built[0].keys else None
        if index is not None:
            if state.first_row < 0:  # the head: every line before the first row (the header)
                state.first_row = first = index.where[0]
                starts = accumulate(map(len, block), initial=state.base)
                state.head += b"".join(line for at, line in zip(starts, block, strict=False) if at < first)
            writer.spill(index, _raw_lines(index.where, block, state.base))
        elif state.first_row < 0:
            state.head += b"".join(block)  # no row yet (a bill with none keeps its whole text: small)
        state.base += size

    def blocks(source: Iterable[bytes]) -> Iterator[list[bytes]]:
        it = iter(source)
        while True:
            block[:] = islice(it, chunk_lines)
            if not block:
                return
            yield block
            # the parser asks for the line after the block only once the block is indexed: move its rows out
            spill()

    # a parser that reads by block gets each block whole; one that reads line by line, its lines at C speed
    # (chain.from_iterable): either way blocks() runs once per block
    parser = opened.parser(lines=LineBlocks(blocks(lines)))
    token = INDEX_WATCHER.set(built.append)
    try:
        parser.index()
    finally:
        INDEX_WATCHER.reset(token)
        close = getattr(lines, "close", None)
        if close is not None:
            close()  # a file streamed by file_lines
    spill()  # the last block (the parser read to the end of the file without asking again)
    writer.close()
    return Partitioned(opened.channel, directory, partitions, writer.rows, state.head, parser.totals), parser


# ---------------------------------------------------------------- a big bill on several cores

# a plain bill on disk at least this big is parsed in pieces, one process per core (below it, one process is
# done before a second has started: spawning one costs ~0.2 s)
SPLIT_BYTES = 64 << 20
_PROBE_BYTES = 1 << 20  # the head is found in the bill's first MiB, or the bill is read in one pass


def cores() -> int:
    """The CPUs this process may run on: how many processes parse a big bill unless RECON_WORKERS says."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def partition_file(
    opened: OpenedBill,
    directory: Path,
    path: Path,
    *,
    partitions: int = LEDGER_SHARDS,
    chunk_lines: int = CHUNK_LINES,
    workers: int = 0,
    split_bytes: int = SPLIT_BYTES,
) -> Partitioned:
    """partition_bill over a bill on disk. A big plain one whose parser can join pieces (`SplittableParser`) is
    cut at line boundaries into one piece per worker: the first piece is parsed here, every other one in a
    process of its own after the bill's head, into partition files of its own that are then appended to the
    first piece's (offsets moved). The same files, totals and summary checks as one pass (a test compares);
    whatever a piece cannot answer (a broken row, a summary before the cut) is read again in one pass, so an
    error names the same line as one pass does."""

    def one_pass() -> Partitioned:
        return partition_bill(
            opened, directory, lines=file_lines(path), partitions=partitions, chunk_lines=chunk_lines
        )

    n = workers or cores()
    plan = _plan(opened, path, n) if n > 1 and path.stat().st_size >= split_bytes else None
    if plan is None:
        return one_pass()
    head, cuts = plan
    pieces = [directory / f"piece{k}" for k in range(1, len(cuts))]
    children = [
        _start_piece(opened.channel, head, path, start, end, piece, partitions, chunk_lines)
        for start, end, piece in zip(cuts[1:], [*cuts[2:], None], pieces, strict=True)
    ]
    try:
        first, parser = _partition(opened, directory, _range_lines(path, 0, cuts[1]), partitions, chunk_lines)
        joined = all(_joined(parser, child, piece) for child, piece in zip(children, pieces, strict=True))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()
    if not joined:
        for piece in pieces:
            shutil.rmtree(piece, ignore_errors=True)
        return one_pass()
    for piece in pieces:
        _append_piece(first, Partitioned.load(piece))
        shutil.rmtree(piece)
    first.totals, first.pieces = parser.totals, len(cuts)
    return first


def _plan(opened: OpenedBill, path: Path, n: int) -> tuple[bytes, list[int]] | None:
    """(the bill's head, the n piece starts: 0 then line boundaries past the head), or None: one pass (a gzip
    file, a parser that cannot join pieces, no row in the first MiB)."""
    with open(path, "rb") as f:
        probe = f.read(_PROBE_BYTES)
        if probe[:2] == b"\x1f\x8b":
            return None
        lines = probe.splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()  # cut mid-line by the probe's size
        parser = opened.parser(lines=iter(lines))
        if not isinstance(parser, SplittableParser):
            return None
        try:
            index = parser.index()
        except BillParseError:
            return None  # the one pass says what is wrong with it
        if not len(index):
            return None
        head_end = index.where[0]
        size = path.stat().st_size
        cuts = [0]
        for k in range(1, n):
            f.seek(max(head_end, size * k // n))
            f.readline()  # to the end of the line the cut fell in
            cuts.append(f.tell())
    if any(b <= a for a, b in zip(cuts, cuts[1:], strict=False)) or cuts[-1] >= size:
        return None
    return probe[:head_end], cuts


def _range_lines(path: Path, start: int, end: int | None) -> Iterator[bytes]:
    """The lines of bytes [start, end) of a file (both line boundaries; end None: to the end of the file)."""
    with open(path, "rb") as f:
        f.seek(start)
        if end is None:
            yield from f
            return
        left = end - start
        while left > 0:
            chunk = f.readlines(1 << 20)
            if not chunk:
                return
            size = sum(map(len, chunk))
            if size > left:  # the chunk ran past `end`, a line boundary: cut it there
                chunk = chunk[: bisect_left(list(accumulate(map(len, chunk))), left) + 1]
                size = left
            left -= size
            yield from chunk


def _start_piece(
    channel: str,
    head: bytes,
    path: Path,
    start: int,
    end: int | None,
    directory: Path,
    partitions: int,
    chunk_lines: int,
) -> subprocess.Popen[bytes]:
    """A process that partitions bytes [start, end) of the bill, after its head, into `directory` (piece_main).
    A subprocess rather than multiprocessing: nothing of the parent (its __main__, its clients) is imported again,
    and Lambda has no /dev/shm for multiprocessing's locks."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "head").write_bytes(head)
    job = {
        "channel": channel,
        "path": str(path),
        "start": start,
        "end": end,
        "directory": str(directory),
        "partitions": partitions,
        "chunk_lines": chunk_lines,
    }
    code = "import sys; from tally.service.recon_partition import piece_main; piece_main(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the layer, as it is here
    return subprocess.Popen([sys.executable, "-c", code, json.dumps(job)], env=env, stdin=subprocess.DEVNULL)


def piece_main(job_json: str) -> None:
    """In a piece's process: partition it, write the manifest and the parser (`parser.pickle`: what `join`
    needs); exit 3 when the piece cannot be read (the parent reads the bill in one pass and says why)."""
    job = json.loads(job_json)
    directory = Path(job["directory"])
    head = (directory / "head").read_bytes()
    lines = chain(head.splitlines(keepends=True), _range_lines(Path(job["path"]), job["start"], job["end"]))
    try:
        parts, parser = _partition(
            OpenedBill(job["channel"], b""), directory, lines, job["partitions"], job["chunk_lines"]
        )
    except BillParseError:
        sys.exit(3)
    parts.write_manifest()
    (directory / "parser.pickle").write_bytes(pickle.dumps(parser))


def _joined(parser: Any, child: subprocess.Popen[bytes], piece: Path) -> bool:
    """The piece's process done and its parser folded into `parser` (False: the piece could not be read)."""
    if child.wait() != 0:
        return False
    later = pickle.loads((piece / "parser.pickle").read_bytes())  # noqa: S301 - written by our own child
    return bool(parser.join(later))


def _append_piece(into: Partitioned, piece: Partitioned) -> None:
    """A later piece's partition files appended to the first piece's: its rows after theirs, its index blocks
    with `where` moved by the length of the rows already there. Each piece file goes once appended: /tmp holds
    at most one partition twice."""
    for p in range(into.partitions):
        base = into.rows_path(p).stat().st_size
        with open(into.rows_path(p), "ab") as out, open(piece.rows_path(p), "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        with open(into.index_path(p), "ab") as out:
            out.write(_moved(piece.index_path(p).read_bytes(), base))
        into.rows[p] += piece.rows[p]
        piece.rows_path(p).unlink()
        piece.index_path(p).unlink()


def _moved(data: bytes, base: int) -> bytes:
    """An index file's blocks with every `where` offset moved by `base`."""
    out = []
    pos = 0
    while pos < len(data):
        n, k = _BLOCK.unpack_from(data, pos)
        at = pos + _BLOCK.size + k + 9 * n  # header, keys, amounts (8n), flags (n): then `where` (8n)
        where = array("q")
        where.frombytes(data[at : at + 8 * n])
        out += [data[pos:at], array("q", map(base.__add__, where)).tobytes()]
        pos = at + 8 * n
        out.append(data[pos : pos + 8 * n])  # fees
        pos += 8 * n
    return b"".join(out)


@dataclass
class _Progress:
    base: int = 0  # offset in the bill of the current block's first line
    first_row: int = -1  # offset of the bill's first row, once seen
    head: bytes = b""


def _raw_lines(where: array[int], block: list[bytes], base: int) -> list[bytes]:
    """The raw line of every row indexed from `block` (its first line at offset `base` of the bill), in the
    index's order. A block of rows only (every block but a bill's first and last) is its own answer: the rows
    start exactly where the block's lines do. Each line is at most one row, so as many rows as lines means every
    line is a row: said by two lengths, without the offsets of a block's lines summed (~0.2 µs a row)."""
    if len(where) == len(block) and (not where or where[0] == base):
        return block
    starts = array("q", accumulate(map(len, block), initial=base))
    del starts[-1]
    if where == starts:
        return block
    lines = dict(zip(starts, block, strict=True))  # offset in the bill → raw line
    return [lines[at] for at in where]


def _take(values: Any, rows: list[int]) -> Any:
    """values[i] for i in rows, gathered in C (itemgetter) rather than a comprehension: a tuple."""
    return itemgetter(*rows)(values) if len(rows) > 1 else (values[rows[0]],)


class _Writer:
    def __init__(self, directory: Path, partitions: int):
        self.partitions = partitions
        self.idx = [open(directory / f"p{p:02d}.idx", "wb") for p in range(partitions)]  # noqa: SIM115
        self.raw = [open(directory / f"p{p:02d}.rows", "wb") for p in range(partitions)]  # noqa: SIM115
        self.offset = [0] * partitions
        self.rows = [0] * partitions

    def spill(self, index: BillIndex, lines: list[bytes]) -> None:
        """Move the rows indexed so far (row i's raw line is lines[i]) to their partitions' files."""
        keys, amounts, flags, where, fees = index.keys, index.amounts, index.flags, index.where, index.fees
        encoded = "\n".join(keys).encode().split(b"\n")  # every key's UTF-8 at once (a key has no newline)
        if len(encoded) != len(keys):
            raise ValueError("a bill key with a newline cannot be partitioned")
        groups: list[list[int]] = [[] for _ in range(self.partitions)]
        for i, p in enumerate(partitions_of(encoded, self.partitions)):
            groups[p].append(i)
        for p, rows in enumerate(groups):
            if not rows:
                continue
            raw = _take(lines, rows)
            at = array("q", accumulate(map(len, raw), initial=self.offset[p]))
            self.offset[p] = at.pop()
            self.raw[p].write(b"".join(raw))
            key_bytes = b"\n".join(_take(encoded, rows))
            self.idx[p].write(
                b"".join(
                    (
                        _BLOCK.pack(len(rows), len(key_bytes)),
                        key_bytes,
                        array("q", _take(amounts, rows)).tobytes(),
                        bytes(_take(flags, rows)),
                        at.tobytes(),
                        array("q", _take(fees, rows)).tobytes(),
                    )
                )
            )
            self.rows[p] += len(rows)
        del keys[:]
        del amounts[:]
        del flags[:]
        del where[:]
        del fees[:]

    def close(self) -> None:
        for f in self.idx + self.raw:
            f.close()


def partitions_of(keys: Sequence[bytes], n: int) -> list[int]:
    """Each bill key's partition (the key's UTF-8 bytes): store.tables.shard_of(key, n), the ledger's shard when
    n == LEDGER_SHARDS (ledger_shard), inlined for a 10M-row bill. shard_of is the first 4 SHA-256 digest bytes,
    big-endian, mod n; for a power of two n that is the low bits of the 4th byte, so the common case reads one
    byte. The digest is the same whichever implementation computes it (a test compares with shard_of)."""
    sha = _sha256  # a local, not a global looked up per key (100,000 keys: 44 -> 40 ms, docs/recon.md Session 9)
    if n & (n - 1) == 0 and n <= 256:
        mask = n - 1
        return [sha(k).digest()[3] & mask for k in keys]
    return [int.from_bytes(sha(k).digest()[:4], "big") % n for k in keys]


# CPython's own SHA-256 (HACL* in 3.12: `_sha2`) costs ~20 % less per short key than OpenSSL's through hashlib,
# whose per-object setup dominates a 40-byte input (measured on the 10M-row bench); hashlib's where it is absent
try:
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found,unused-ignore]  # Python 3.12+
except ImportError:  # pragma: no cover - the interpreter in use decides
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # 3.11
    except ImportError:
        _sha256 = sha256


def read_index(data: bytes) -> BillIndex:
    """One partition's index file → a BillIndex (`where` = offsets in the partition's rows file)."""
    index = BillIndex()
    pos = 0
    while pos < len(data):
        n, k = _BLOCK.unpack_from(data, pos)
        pos += _BLOCK.size
        index.keys += data[pos : pos + k].decode().split("\n")
        pos += k
        index.amounts.frombytes(data[pos : pos + 8 * n])
        pos += 8 * n
        index.flags += data[pos : pos + n]
        pos += n
        index.where.frombytes(data[pos : pos + 8 * n])
        pos += 8 * n
        index.fees.frombytes(data[pos : pos + 8 * n])
        pos += 8 * n
    return index


def tmp_dir(name: str) -> Path:
    """Where a run's partition files go: the function's ephemeral storage (TMPDIR, /tmp on Lambda)."""
    base = Path(os.environ.get("TALLY_RECON_TMP") or os.environ.get("TMPDIR") or "/tmp")  # noqa: S108
    return base / "tally-recon" / name.replace("#", "_").replace("/", "_")
