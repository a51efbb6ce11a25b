"""Offloaded ledgers: one Parquet object per sealed, decided ledger in an object store.

Tiered storage as Pulsar's ledger offloader and Kafka's KIP-405 do it, with KIP-1058's
``txnIdxEmpty`` flag, in a format any engine can query:

* **Layout.** ``<base>/<topic>/<ledger id, 20 digits>-<store id>.parquet`` (no
  ``-<store id>`` for objects written before store identities) holds every entry of a
  ledger, one row each, in entry order: the Spark source's columns (``position``,
  ``ledger_id``, ``entry_id``, ``key``, ``value``, ``value_json``, ``properties``,
  ``txn``, ``publish_time``) plus ``kind`` (``data``/``commit``/``abort``), ``aborted``
  (data of an aborted transaction: known, since only decided ledgers are offloaded) and
  ``payload``: the stored payload, set only on the rare rows whose value the other
  columns cannot carry exactly (a map with integer keys, bytes inside a list, NaN), so
  every entry reads back exactly as appended. ``WHERE kind = 'data' AND NOT aborted``
  is the committed view. Row groups of about :data:`ROW_GROUP_BYTES` (zstd, statistics
  and page checksums on), so a range read fetches only the groups it needs. The
  footer records the sidecar's size and SHA-256, when there is one.
* **Sidecar.** ``<same>.aborted.parquet`` exists only when the ledger has aborted-index
  rows (the transactions whose ABORT marker lies in it, as Kafka's per-segment
  transaction index): ``has_aborts`` false is our ``txnIdxEmpty``, and readers never
  fetch a sidecar for such a ledger.
* **Upload, verify, switch.** :meth:`OffloadStore.write_ledger` serializes in memory,
  uploads (a local store writes a temporary name and renames it, so a reader never
  sees half an object; an S3 PUT is atomic), then reads the object back and checks
  its size and SHA-256 before returning. Only then does the caller switch the ledger's
  row and delete its local entries, in one SQLite transaction.
* **Reading by URL** (``file://...`` or ``s3://bucket/key``): a reader needs no
  configuration beyond the standard ``AWS_*`` environment (``AWS_ENDPOINT_URL``
  included). Bounded LRU caches keep open objects with their footers, sidecars,
  decoded row groups (by bytes) and per-ledger committed masks, so a sequential reader
  fetches each row group once and a sidecar is never fetched twice. Counters (via the
  ``on_*`` callbacks) count remote requests: one per sidecar read, one per data read
  (all the row groups one request needs count once). Every read is verified (see
  :class:`OffloadStore`): a damaged object is never served.

Every method blocks (file or network I/O, CPU): async code calls them through
``asyncio.to_thread``. They are thread-safe; one lock guards the caches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import time
import urllib.parse
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from ._entry import Entry
from ._errors import (
    CorruptEntryError,
    CorruptObjectError,
    InvalidArgumentError,
    LedgerError,
    OffloadPrefixClaimedError,
    RemoteStorageError,
)
from ._parquet import (
    _COMMITTED_KEY,
    _ENTRY_COLUMNS,
    _KINDS,
    _SIDECAR_KEY,
    _SIDECAR_SUFFIX,
    _SUFFIX,
    AbortedIndexRow,
    MetaRow,
    OffloadedObject,
    RawRow,
    Row,
    _parquet_bytes,
    _row_group_rows,
    _sidecar_rows,
    _sidecar_table,
    entries_of,
    ledger_table,
    rows_of,
)


def normalize_url(url: str) -> str:
    """The canonical form of an offload base: ``file:///abs/dir`` or ``s3://bucket/prefix``.

    A plain path is a local directory. Raises :class:`InvalidArgumentError` otherwise.

    >>> normalize_url("s3://bucket/some/prefix/")
    's3://bucket/some/prefix'
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgumentError("offload_url must be a non-empty string")
    text = url.strip()
    if text.startswith("s3://"):
        rest = text[5:].strip("/")
        if not rest or rest.startswith("/"):
            raise InvalidArgumentError(f"offload_url {url!r} names no bucket")
        return "s3://" + rest
    if "://" in text:
        if not text.startswith("file://"):
            raise InvalidArgumentError(
                f"offload_url {url!r}: expected file:///dir, a plain directory path or"
                " s3://bucket/prefix"
            )
        parsed = urllib.parse.urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"offload_url {url!r}: a file URL names no host")
        text = urllib.parse.unquote(parsed.path)
    path = Path(text).expanduser().resolve()
    return "file://" + urllib.parse.quote(str(path).rstrip("/") or "/")


def sidecar_url(url: str) -> str:
    """The aborted-index object next to a ledger object."""
    return url[: -len(_SUFFIX)] + _SIDECAR_SUFFIX if url.endswith(_SUFFIX) else url + ".aborted"


_S3: Any = None
_S3_LOCK = threading.Lock()


def _s3_filesystem() -> Any:
    """One S3 file system per process, from the standard ``AWS_*`` environment."""
    global _S3
    with _S3_LOCK:
        if _S3 is None:
            from pyarrow import fs  # type: ignore[import-untyped]

            options: dict[str, Any] = {}
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                parsed = urllib.parse.urlparse(endpoint)
                if parsed.scheme in ("http", "https") and parsed.netloc:
                    options["scheme"] = parsed.scheme
                    options["endpoint_override"] = parsed.netloc
                else:
                    options["endpoint_override"] = endpoint
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region:
                options["region"] = region
            _S3 = fs.S3FileSystem(**options)
        return _S3


def _locate(url: str) -> tuple[Any, str]:
    """``(pyarrow file system, path inside it)`` of an object URL."""
    from pyarrow import fs

    if url.startswith("s3://"):
        return _s3_filesystem(), url[5:]
    if url.startswith("file://"):
        return fs.LocalFileSystem(), urllib.parse.unquote(urllib.parse.urlparse(url).path)
    raise LedgerError(f"not an offloaded object URL: {url!r}")


# -- values ---------------------------------------------------------------------------

MARKER_NAME = "__txnstream_owner.json"
"""The object that claims an offload prefix for one store identity (topic names cannot
start with ``__``, so it never meets a topic's folder)."""

_T = TypeVar("_T")
_META_COLUMNS = ["entry_id", "kind", "txn"]


def _damage_types() -> tuple[type[BaseException], ...]:
    """What reading or decoding a damaged object raises (pyarrow raises OSError for a
    failed page checksum or a bad page, ArrowInvalid, a ValueError, for bad structure)."""
    import pyarrow as pa

    return (OSError, pa.ArrowException, ValueError, KeyError, IndexError, CorruptEntryError)


@dataclass(slots=True)
class _Object:
    """An open ledger object with its footer (cached)."""

    file: Any
    meta: Any
    starts: list[int]
    committed: int | None
    names: frozenset[str]


_TEMPORARY = re.compile(r"\.[0-9a-f]{32}\.tmp$")


class OffloadStore:
    """Access to offloaded ledger objects: write and verify, read (cached, verified),
    delete what is its own.

    ``base_url`` (see :func:`normalize_url`) is where new objects go; None makes a
    read-only store (objects are read by their own URLs). ``on_index_fetch`` and
    ``on_data_fetch`` are called once per remote sidecar read and per remote data
    request. The counts are kept in :attr:`index_fetches` and :attr:`data_fetches` too.

    **Ownership.** :attr:`owner` is the writing store's identity (see
    :meth:`~txnstream.ledger.Catalog.store_identity`): it is part of every object name
    it writes, :meth:`claim` claims the prefix with the :data:`MARKER_NAME` object, and
    :meth:`owns` says which objects it may delete (those named with its identity, and
    with ``adopts_legacy`` the unnamed ones a directory wrote before identities).

    **Verification.** Objects are written with Parquet page checksums, verified on every
    read; a whole-object read checks the size and SHA-256 recorded for the URL
    (:meth:`expect`); every row read must carry the entry id asked for; a sidecar is
    checked against the size and digest its ledger object's footer records. A failure
    that the whole object's recorded checksum confirms (or that cannot come from the
    transport) raises :class:`~txnstream.ledger.CorruptObjectError`, calls
    ``on_corrupt`` once per object and lists it in :attr:`corrupt`; a read that fails on
    the way while the object is intact stays an ``OSError`` (unavailable).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        cache_objects: int = 256,
        cache_sidecars: int = 4096,
        cache_bytes: int = 64 << 20,
    ) -> None:
        self.base_url = None if base_url is None else normalize_url(base_url)
        self.owner: str | None = None
        """The identity written into object names and the prefix marker (None: names
        without one, as before identities; such a store claims nothing)."""
        self.adopts_legacy = False
        """True: objects named without an identity are this store's own (a data
        directory that offloaded before identities existed)."""
        self.on_index_fetch: Callable[[], None] | None = None
        self.on_data_fetch: Callable[[], None] | None = None
        self.on_corrupt: Callable[[CorruptObjectError], None] | None = None
        self.index_fetches = 0
        self.data_fetches = 0
        self.corrupt: dict[str, str] = {}
        """Damaged objects found (URL -> what is wrong), until deleted or verified."""
        self._lock = threading.Lock()
        self._expected: dict[str, tuple[int | None, str | None]] = {}
        self._objects: OrderedDict[str, _Object] = OrderedDict()
        self._sidecars: OrderedDict[str, list[AbortedIndexRow]] = OrderedDict()
        self._groups: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._masks: OrderedDict[str, Any] = OrderedDict()
        self._group_bytes = 0
        self._max_objects = cache_objects
        self._max_sidecars = cache_sidecars
        self._max_bytes = cache_bytes

    # -- names and ownership --------------------------------------------------------

    def ledger_url(self, topic: str, ledger_id: int) -> str:
        """``<base>/<topic>/<ledger id, 20 digits>-<owner>.parquet`` (without an owner:
        ``<ledger id, 20 digits>.parquet``)."""
        tail = "" if self.owner is None else f"-{self.owner}"
        return f"{self._base()}/{topic}/{ledger_id:020d}{tail}{_SUFFIX}"

    def marker_url(self) -> str:
        """The object claiming the prefix: ``<base>/__txnstream_owner.json``."""
        return f"{self._base()}/{MARKER_NAME}"

    def _base(self) -> str:
        if self.base_url is None:
            raise LedgerError("no offload URL is configured")
        return self.base_url

    @staticmethod
    def _stem(url: str) -> str | None:
        name = url.rsplit("/", 1)[-1]
        # a local write's temporary name (see _put): a kill -9 mid-write leaves it behind,
        # and it is its object's (so the orphan sweep removes it)
        name = _TEMPORARY.sub("", name)
        for suffix in (_SIDECAR_SUFFIX, _SUFFIX):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return None

    @staticmethod
    def ledger_id_of(url: str) -> int | None:
        """The ledger id an object URL names (ledger object or sidecar), else None."""
        stem = OffloadStore._stem(url)
        head = None if stem is None else stem.split("-", 1)[0]
        return int(head) if head is not None and head.isdigit() else None

    @staticmethod
    def owner_of(url: str) -> str | None:
        """The store identity an object URL names, or None (a name from before
        identities, or not an object of ours at all)."""
        stem = OffloadStore._stem(url)
        if stem is None or "-" not in stem:
            return None
        head, owner = stem.split("-", 1)
        return owner if head.isdigit() and owner else None

    def owns(self, url: str) -> bool:
        """True if ``url`` is this store's to delete: named with its identity, or (with
        :attr:`adopts_legacy`, or for a store without an identity) a ledger object or
        sidecar named without one."""
        if self.ledger_id_of(url) is None:
            return False
        owner = self.owner_of(url)
        if owner is None:
            return self.adopts_legacy or self.owner is None  # (no identity: as before them)
        return owner == self.owner

    def claim(self, *, takeover: bool = False, details: dict[str, Any] | None = None) -> str | None:
        """Make sure the prefix is claimed by :attr:`owner`: write the marker object if
        there is none (or, with ``takeover``, over another identity's). Returns the
        identity taken over from, if any. Raises
        :class:`~txnstream.ledger.OffloadPrefixClaimedError` when another identity holds
        it (or won a race to claim it) and ``takeover`` is off."""
        if self.owner is None:
            raise LedgerError("a store without an identity cannot claim a prefix")
        url = self.marker_url()
        current = self._read_marker(url)
        if current is not None and current.get("store") == self.owner:
            return None
        if current is not None and not takeover:
            raise OffloadPrefixClaimedError(self._claimed_message(current))
        body = {
            "store": self.owner,
            "claimed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": socket.gethostname(),
            **(details or {}),
        }
        data = json.dumps(body, indent=1).encode()
        self._put(url, data, exclusive=current is None)
        written = self._read_marker(url)
        if written is None or written.get("store") != self.owner:
            raise OffloadPrefixClaimedError(self._claimed_message(written or {}))
        if current is None:
            return None
        return str(current.get("store"))

    def _claimed_message(self, marker: dict[str, Any]) -> str:
        where = ", ".join(
            f"{k} {marker[k]}" for k in ("data_dir", "host", "claimed_at") if marker.get(k)
        )
        return (
            f"offload prefix {self.base_url} is claimed by store {marker.get('store')!r}"
            f"{f' ({where})' if where else ''}, not by this data directory's store"
            f" {self.owner!r} (a copied or restored data directory gets an identity of"
            " its own): nothing is offloaded there, so neither overwrites the other's"
            " objects. Use another offload URL, or, if that store is gone for good, take"
            " the prefix over with --offload-takeover (EngineConfig(offload_takeover=True))"
        )

    def _read_marker(self, url: str) -> dict[str, Any] | None:
        fs, path = _locate(url)
        try:
            with fs.open_input_stream(path) as stream:
                raw = stream.readall()
        except FileNotFoundError:
            return None
        try:
            marker = json.loads(raw)
        except ValueError:
            return {"store": "<unreadable marker>"}
        return marker if isinstance(marker, dict) else {"store": "<unreadable marker>"}

    # -- writing -------------------------------------------------------------------

    def write_ledger(
        self,
        topic: str,
        ledger_id: int,
        rows: Sequence[RawRow],
        aborted: Collection[int],
        index: Sequence[AbortedIndexRow],
    ) -> OffloadedObject:
        """Upload ledger ``ledger_id`` of ``topic`` (and its sidecar when ``index`` has
        rows), then read both back to verify size and checksum. An object left at the
        same name by an interrupted earlier attempt is replaced. Raises
        :class:`~txnstream.ledger.LedgerError` (or the store's ``OSError``) on failure."""
        url = self.ledger_url(topic, ledger_id)
        table = ledger_table(ledger_id, rows, aborted)
        sidecar_size = None
        if index:
            sidecar = _parquet_bytes(_sidecar_table(index), max(1, len(index)))
            digest = self._upload(sidecar_url(url), sidecar)
            sidecar_size = sidecar.size
            extra = {_SIDECAR_KEY: f"{sidecar.size} {digest}".encode()}
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **extra})
        data = _parquet_bytes(table, _row_group_rows(rows))
        checksum = self._upload(url, data)
        return OffloadedObject(url, data.size, checksum, sidecar_size)

    def _upload(self, url: str, data: Any) -> str:
        self._forget(url)
        digest = _digest(memoryview(data))
        self._put(url, data)
        fs, path = _locate(url)
        with fs.open_input_stream(path) as stream:
            back = stream.readall()
        if len(back) != data.size:
            raise LedgerError(f"offload of {url}: wrote {data.size} bytes, read {len(back)} back")
        if _digest(back) != digest:
            raise LedgerError(f"offload of {url}: checksum mismatch after upload")
        return digest

    @staticmethod
    def _put(url: str, data: Any, *, exclusive: bool = False) -> None:
        """Write an object whole (a local store: a temporary name, then a rename, or
        with ``exclusive`` a link that fails if the name exists; S3: one PUT)."""
        fs, path = _locate(url)
        if not url.startswith("file://"):
            with fs.open_output_stream(path) as out:
                out.write(data)
            return
        parent = path.rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with fs.open_output_stream(temporary) as out:
                out.write(data)
            if exclusive:
                try:
                    os.link(temporary, path)
                except FileExistsError:
                    pass  # another claimed it first: the caller reads who
            else:
                fs.move(temporary, path)
        finally:
            if _exists(fs, temporary):
                fs.delete_file(temporary)

    def delete_ledger(self, url: str) -> bool:
        """Delete a ledger object and its sidecar (missing ones are fine) if they are
        this store's own (:meth:`owns`); False (nothing deleted) otherwise."""
        if not self.owns(url):
            self._forget(url)
            return False
        for target in (url, sidecar_url(url)):
            self.delete_url(target)
        return True

    def list_topic(self, topic: str) -> list[str]:
        """URLs of every object under ``<base>/<topic>/``."""
        from pyarrow import fs as pafs

        prefix = f"{self._base()}/{topic}"
        fs, path = _locate(prefix)
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        scheme = prefix[: prefix.index("://") + 3]
        out = []
        for info in infos:
            if info.type == pafs.FileType.File:
                tail = info.path if scheme == "s3://" else urllib.parse.quote(info.path)
                out.append(scheme + tail)
        return sorted(out)

    def delete_topic(self, topic: str) -> int:
        """Delete this store's own objects (:meth:`owns`) under ``<base>/<topic>/``;
        returns how many (another store's objects stay)."""
        urls = [url for url in self.list_topic(topic) if self.owns(url)]
        for url in urls:
            self.delete_url(url)
        return len(urls)

    def delete_url(self, url: str) -> None:
        """Delete one object (missing is fine)."""
        self._forget(url)
        with self._lock:
            self._expected.pop(url, None)
            self.corrupt.pop(url, None)
        fs, path = _locate(url)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass

    # -- verification --------------------------------------------------------------

    def expect(self, url: str, size: int | None, checksum: str | None) -> None:
        """Record what object ``url`` must be (its size and ``sha256:<hex>``), as the
        ledger's row says: whole-object reads check it."""
        with self._lock:
            self._expected[url] = (size, checksum)

    def _damaged(self, url: str, detail: str) -> CorruptObjectError:
        """The error for a damaged object (noted, reported once, dropped from caches)."""
        ledger_id = self.ledger_id_of(url)
        what = "aborted index" if url.endswith(_SIDECAR_SUFFIX) else "object"
        error = CorruptObjectError(
            f"offloaded ledger {ledger_id} is damaged: {what} {url}: {detail}",
            ledger_id=ledger_id,
            url=url,
        )
        self._forget(url)
        with self._lock:
            first = url not in self.corrupt
            self.corrupt[url] = str(error)
        if first and self.on_corrupt is not None:
            self.on_corrupt(error)
        return error

    def _whole(self, url: str) -> bytes:
        """The object's bytes, read whole and checked against its recorded size and
        SHA-256 (:class:`CorruptObjectError` if they differ; ``OSError`` if it cannot
        be read)."""
        fs, path = _locate(url)
        with fs.open_input_stream(path) as stream:
            data: bytes = stream.readall()
        self._count_data()
        with self._lock:
            size, checksum = self._expected.get(url, (None, None))
        if size is not None and len(data) != size:
            raise self._damaged(url, f"{len(data)} bytes, {size} recorded")
        if checksum is not None:
            if _digest(data) != checksum:
                raise self._damaged(url, f"SHA-256 differs from the recorded {checksum}")
            with self._lock:
                self.corrupt.pop(url, None)  # verified whole: fine (again)
        return data

    def _diagnose(self, url: str, exc: BaseException, parse: Callable[[Any], object]) -> NoReturn:
        """A read of ``url`` failed with ``exc``: damaged object, or a failure on the way?
        The whole object decides: read it, check its recorded size and digest, parse
        it from memory (where nothing but its bytes can fail)."""
        import pyarrow as pa

        if isinstance(exc, FileNotFoundError | RemoteStorageError):
            raise exc
        data = self._whole(url)  # CorruptObjectError if it differs from the record
        try:
            parse(pa.BufferReader(data))
        except _damage_types() as again:
            raise self._damaged(url, str(again) or type(again).__name__) from again
        raise RemoteStorageError(f"reading {url} failed, the object is intact: {exc}") from exc

    def _converted(self, url: str, convert: Callable[[], _T]) -> _T:
        """``convert()`` of rows read from ``url``: a failure is the object's damage."""
        try:
            return convert()
        except _damage_types() as exc:
            raise self._damaged(url, f"a row does not decode: {exc}") from exc

    # -- reading -------------------------------------------------------------------

    def read_entries(self, ledger_id: int, url: str, lo: int, hi: int) -> list[Entry]:
        """Entries ``lo <= entry_id <= hi`` of an offloaded ledger, in order."""
        table = self._rows(url, lo, hi)
        return self._converted(url, lambda: entries_of(ledger_id, table))

    def read_rows(self, ledger_id: int, url: str, lo: int, hi: int) -> list[Row]:
        """:meth:`read_entries` as raw rows (see :func:`rows_of`)."""
        table = self._rows(url, lo, hi)
        return self._converted(url, lambda: rows_of(ledger_id, table))

    def read_positions(self, ledger_id: int, url: str, entry_ids: Sequence[int]) -> list[Entry]:
        """The entries with exactly these ids (missing ones left out), in order."""
        import pyarrow as pa
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        if not entry_ids:
            return []
        table = self._rows(url, min(entry_ids), max(entry_ids))
        wanted = pc.is_in(table.column("entry_id"), value_set=pa.array(entry_ids, pa.int64()))
        return self._converted(url, lambda: entries_of(ledger_id, table.filter(wanted)))

    def read_meta(self, url: str, lo: int, hi: int) -> list[MetaRow]:
        """``(entry_id, kind, txn sequence)`` of entries ``lo..hi`` (inclusive): only
        those three columns are fetched, and nothing is cached (recovery reads each
        ledger once; a reader's payload reads fetch their own row groups)."""
        obj = self._object(url)
        groups = _groups_for(obj.starts, obj.meta, lo, hi)
        if not groups:
            return []
        table = self._load(url, obj, groups, _META_COLUMNS)
        self._count_data()
        first = obj.starts[groups[0]]
        last = obj.starts[groups[-1]] + obj.meta.row_group(groups[-1]).num_rows - 1
        begin, end = max(lo, first), min(hi, last)
        table = table.slice(begin - first, end - begin + 1)

        def convert() -> list[MetaRow]:
            ids = table.column("entry_id").to_pylist()
            kinds = table.column("kind").to_pylist()
            txns = table.column("txn").to_pylist()
            return [
                (e, _KINDS[k], None if t is None else int(t[4:]))
                for e, k, t in zip(ids, kinds, txns, strict=True)
            ]

        return self._converted(url, convert)

    def count_committed(
        self, url: str, lo: int, hi: int, entries: int, except_ids: Collection[int] = ()
    ) -> int:
        """Committed data entries (data, not aborted) with ``lo <= entry_id <= hi``,
        leaving out ``except_ids``; ``entries`` is the ledger's size. A whole ledger with
        nothing left out is answered from the footer."""
        import pyarrow.compute as pc

        obj = self._object(url)
        if lo <= 0 and hi >= entries - 1 and not except_ids and obj.committed is not None:
            return obj.committed
        mask = self._mask(url, obj)
        lo, hi = max(lo, 0), min(hi, len(mask) - 1)
        if hi < lo:
            return 0
        total = int(pc.sum(mask.slice(lo, hi - lo + 1)).as_py() or 0)
        for entry_id in except_ids:
            if lo <= entry_id <= hi and mask[entry_id].as_py():
                total -= 1
        return total

    def read_aborted(self, url: str) -> list[AbortedIndexRow]:
        """The aborted index of an offloaded ledger (its sidecar; cached), checked
        against the size and digest its ledger object records. Call it only for a
        ledger whose ``has_aborts`` is set."""
        import pyarrow as pa
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        target = sidecar_url(url)
        with self._lock:
            cached = self._sidecars.get(target)
            if cached is not None:
                self._sidecars.move_to_end(target)
                return cached
        recorded = (self._object(url).meta.metadata or {}).get(_SIDECAR_KEY)
        fs, path = _locate(target)
        with fs.open_input_stream(path) as stream:
            data = stream.readall()
        self._count_index()
        if recorded is not None:
            size, _, digest = recorded.decode().partition(" ")
            if len(data) != int(size):
                raise self._damaged(target, f"{len(data)} bytes, {size} recorded")
            if _digest(data) != digest:
                raise self._damaged(target, f"SHA-256 differs from the recorded {digest}")
        ledger_id = self.ledger_id_of(url)

        def parse() -> list[AbortedIndexRow]:
            table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
            rows = _sidecar_rows(table)
            if any(row.marker.ledger_id != ledger_id for row in rows):
                raise ValueError(f"a row's ABORT marker is not in ledger {ledger_id}")
            return rows

        rows = self._converted(target, parse)
        with self._lock:
            self._sidecars[target] = rows
            while len(self._sidecars) > self._max_sidecars:
                self._sidecars.popitem(last=False)
        return rows

    def read_batches(
        self,
        url: str,
        lo: int,
        hi: int,
        *,
        columns: Sequence[str],
        committed: bool,
        rows: int = 8192,
    ) -> Iterator[Any]:
        """Arrow record batches of the data entries ``lo <= entry_id <= hi`` with
        ``columns`` (the Spark source's, which every object starts with); ``committed``
        drops aborted data. For readers outside the engine (Spark tasks): no cache of
        decoded row groups."""
        import pyarrow.compute as pc

        obj = self._object(url)
        groups = _groups_for(obj.starts, obj.meta, lo, hi)
        if not groups:
            return
        self._count_data()
        for group in groups:
            table = self._load(
                url, obj, [group], list(dict.fromkeys([*columns, "entry_id", "kind", "aborted"]))
            )
            ids = table.column("entry_id")
            keep = pc.and_(
                pc.equal(table.column("kind"), "data"),
                pc.and_(pc.greater_equal(ids, lo), pc.less_equal(ids, hi)),
            )
            if committed:
                keep = pc.and_(keep, pc.invert(table.column("aborted")))
            chosen = table.filter(keep).select(list(columns))
            yield from chosen.to_batches(max_chunksize=rows)

    # -- caches --------------------------------------------------------------------

    def _object(self, url: str) -> _Object:
        import pyarrow.parquet as pq

        with self._lock:
            obj = self._objects.get(url)
            if obj is not None:
                self._objects.move_to_end(url)
                return obj
            size = self._expected.get(url, (None, None))[0]
        fs, path = _locate(url)
        file = fs.open_input_file(path)
        if size is not None and file.size() != size:
            raise self._damaged(url, f"{file.size()} bytes, {size} recorded")
        try:
            meta = pq.read_metadata(file)
        except _damage_types() as exc:
            self._diagnose(url, exc, pq.read_metadata)
        starts, at = [], 0
        for i in range(meta.num_row_groups):
            starts.append(at)
            at += meta.row_group(i).num_rows
        extra = meta.metadata or {}
        raw = extra.get(_COMMITTED_KEY)
        names = frozenset(meta.schema.to_arrow_schema().names)
        obj = _Object(file, meta, starts, None if raw is None else int(raw), names)
        with self._lock:
            self._objects[url] = obj
            while len(self._objects) > self._max_objects:
                # not closed here: another thread may still be reading it (GC closes it)
                self._objects.popitem(last=False)
        return obj

    def _load(
        self, url: str, obj: _Object, groups: list[int], columns: list[str], *, whole: bool = False
    ) -> Any:
        """Row groups ``groups`` of ``columns``, page checksums verified, each row
        carrying the entry id its place says; with ``whole``, from the object read whole
        and checked against its recorded size and digest."""
        import pyarrow as pa

        def parse(source: Any) -> Any:
            return _read_groups(obj, groups, columns, source)

        if whole:
            data = self._whole(url)
            try:
                table = parse(pa.BufferReader(data))
            except _damage_types() as exc:
                raise self._damaged(url, str(exc) or type(exc).__name__) from exc
        else:
            try:
                table = parse(obj.file)
            except _damage_types() as exc:
                self._diagnose(url, exc, parse)
        if "entry_id" in table.column_names:
            _check_ids(self, url, obj, groups, table)
        return table

    def _rows(self, url: str, lo: int, hi: int) -> Any:
        """The rows ``lo..hi`` (inclusive) of a ledger object, through the row-group cache."""
        import pyarrow as pa

        obj = self._object(url)
        groups = _groups_for(obj.starts, obj.meta, lo, hi)
        tables: dict[int, Any] = {}
        with self._lock:
            for group in groups:
                cached = self._groups.get((url, group))
                if cached is not None:
                    self._groups.move_to_end((url, group))
                    tables[group] = cached
        missing = [g for g in groups if g not in tables]
        if missing:
            with self._lock:
                known = self._expected.get(url, (None, None))[1] is not None
            whole = known and len(missing) == obj.meta.num_row_groups
            if not whole:
                self._count_data()  # (a whole read counts in _whole)
            table = self._load(url, obj, missing, list(_ENTRY_COLUMNS), whole=whole)
            at = 0
            with self._lock:
                for group in missing:
                    size = obj.meta.row_group(group).num_rows
                    part = table.slice(at, size)
                    at += size
                    tables[group] = part
                    self._groups[(url, group)] = part
                    self._group_bytes += part.nbytes
                while self._group_bytes > self._max_bytes and len(self._groups) > 1:
                    _, old = self._groups.popitem(last=False)
                    self._group_bytes -= old.nbytes
        if not groups:
            return _read_groups(obj, [], list(_ENTRY_COLUMNS))
        table = pa.concat_tables([tables[g] for g in groups])
        first = obj.starts[groups[0]]
        last = obj.starts[groups[-1]] + obj.meta.row_group(groups[-1]).num_rows - 1
        begin, end = max(lo, first), min(hi, last)
        return table.slice(begin - first, end - begin + 1)

    def _mask(self, url: str, obj: _Object) -> Any:
        import pyarrow.compute as pc

        with self._lock:
            mask = self._masks.get(url)
            if mask is not None:
                self._masks.move_to_end(url)
                return mask
        groups = list(range(obj.meta.num_row_groups))
        table = self._load(url, obj, groups, ["kind", "aborted"])
        mask = self._converted(
            url,
            lambda: pc.and_(
                pc.equal(table.column("kind"), "data"), pc.invert(table.column("aborted"))
            ).combine_chunks(),
        )
        self._count_data()
        with self._lock:
            self._masks[url] = mask
            while len(self._masks) > self._max_objects * 4:
                self._masks.popitem(last=False)
        return mask

    def _forget(self, url: str) -> None:
        with self._lock:
            self._objects.pop(url, None)
            self._sidecars.pop(url, None)
            self._masks.pop(url, None)
            for key in [k for k in self._groups if k[0] == url]:
                self._group_bytes -= self._groups.pop(key).nbytes

    def _count_index(self) -> None:
        with self._lock:
            self.index_fetches += 1
        if self.on_index_fetch is not None:
            self.on_index_fetch()

    def _count_data(self) -> None:
        with self._lock:
            self.data_fetches += 1
        if self.on_data_fetch is not None:
            self.on_data_fetch()


def _digest(data: Any) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _exists(fs: Any, path: str) -> bool:
    from pyarrow import fs as pafs

    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def _groups_for(starts: list[int], meta: Any, lo: int, hi: int) -> list[int]:
    """Row groups holding entries ``lo..hi``: entry ids are dense from 0, in order."""
    out = []
    for i, start in enumerate(starts):
        end = start + meta.row_group(i).num_rows - 1
        if start > hi:
            break
        if end >= lo:
            out.append(i)
    return out


def _check_ids(store: OffloadStore, url: str, obj: _Object, groups: list[int], table: Any) -> None:
    """Every row of ``groups`` must carry the entry id of its place (ids are dense from
    0): a damaged id never serves one message at another's position."""
    import pyarrow.compute as pc

    ids = table.column("entry_id")
    at = 0
    for group in groups:
        count = obj.meta.row_group(group).num_rows
        part = ids.slice(at, count).combine_chunks()
        at += count
        if not count:
            continue
        start = obj.starts[group]
        steps = pc.pairwise_diff(part).slice(1)  # each id one more than the one before
        if (
            part.null_count
            or part[0].as_py() != start
            or (len(steps) and not pc.all(pc.equal(steps, 1)).as_py())
        ):
            found = part.to_pylist()
            bad = next(i for i, e in enumerate(found) if e != start + i)
            raise store._damaged(
                url, f"the row of entry {start + bad} carries entry id {found[bad]}"
            )


def _read_groups(obj: _Object, groups: list[int], columns: list[str], source: Any = None) -> Any:
    import pyarrow.parquet as pq

    present = [c for c in columns if c in obj.names]
    file = pq.ParquetFile(
        obj.file if source is None else source, metadata=obj.meta, page_checksum_verification=True
    )
    return file.read_row_groups(groups, columns=present)
