"""The typed reads of the SQL stores, written once: :class:`SqlStore` (the engine's reads)
and :class:`SqlStoreReader` (another process's), over what differs between the stores.

What differs is small and typed:

* **the statement text**: each store's statement module (:mod:`._sqlite_sql`,
  :mod:`._pg_sql`) provides the queries, in its dialect and with its placeholders, and
  the few parameters the dialects pass differently (lists of ids: JSON text for SQLite's
  ``json_each``, arrays for PostgreSQL's ``= ANY``): :class:`ReadStatements` and
  :class:`ViewStatements` say what a module must provide, and mypy checks each module
  against them;
* **how a query runs**: :meth:`SqlStore.read` (aiosqlite read connections; a psycopg
  pool) and :meth:`SqlStoreReader._rows` / :meth:`SqlStoreReader._one` (a synchronous
  ``sqlite3`` or psycopg connection).

Everything else, which statement serves which read and how its rows become the seam's
shapes, is here. A store's class keeps only what is its own (PostgreSQL's recovery
prefetch, SQLite's pre-tiers schema).
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, cast

from ._batch import Params
from ._position import Position
from ._store import Row, Store, StoreReader


class ReadStatements(Protocol):
    """What a store's statement module provides for :class:`SqlStore`'s reads (the row
    shapes are those of the :class:`~txnstream.ledger.Store` method each serves)."""

    MARK: str
    """The dialect's parameter placeholder (``?``, ``%s``)."""
    # the log
    LEDGERS: str
    LEDGER_TOTALS: str
    RANGE: str
    METAS: str
    COUNT_DATA: str
    """Parameters: topic, start, end, then :meth:`int_list` of the transactions and of
    the position keys to leave out."""
    LEDGER_ROWS: str
    LEDGER_ABORTED: str
    # the catalog
    TOPICS: str
    NEXT_TOPIC_ID: str
    PARTITIONED: str
    PRODUCERS: str
    # subscriptions
    SUBSCRIPTIONS: str
    SUBSCRIPTION_POLICIES: str
    REDELIVERIES: str
    DELIVERY_TIMES: str
    TOPIC_TTLS: str
    # the coordinator
    NEXT_TXN_SEQ: str
    STORE_META: str
    """Parameter: :meth:`str_list` of the keys."""
    REMOTE_LEDGERS: str
    NTH_NEWEST_ENDED: str
    TXNS: str
    FINISH_KEYS: str
    PRODUCER_EPOCHS: str
    ENDED_ROWS: str
    """Every ended transaction's row (``... WHERE state <> 'open'``): filters are added."""
    ENDED_TXN: str
    OUTCOME_FLAGS: str
    """``committed | fenced << 1`` of a ``txns`` row as an integer expression."""
    # snapshots
    SNAPSHOTS: str
    SNAPSHOT_COUNTERS: str

    def int_list(self, values: Sequence[int]) -> object:
        """``values`` as one parameter of a ``NOT IN`` list."""

    def str_list(self, values: Sequence[str]) -> object:
        """``values`` as one parameter of an ``IN`` list."""

    def positions(self, topic_id: int, at: Sequence[Position]) -> tuple[str, Params]:
        """The query and parameters of the log rows at ``at`` (not empty), in log order."""

    def segments(self, topic_id: int, ids: Sequence[int]) -> tuple[str, Params]:
        """The query and parameters of ``(segment_id, data)`` of ``ids`` (not empty)."""


class ViewStatements(Protocol):
    """What a store's statement module provides for :class:`SqlStoreReader` (the reads
    of :class:`~txnstream.ledger.StoreReader`)."""

    VIEW_TOPIC: str
    VIEW_FIRST: str
    VIEW_LAST: str
    VIEW_LAST_BEFORE: str
    VIEW_REMOTE: str
    VIEW_AFTER: str
    """Appended to :meth:`view_first_data`'s query: after a position."""
    VIEW_FIRST_ORDER: str
    VIEW_NTH: str
    VIEW_LEDGER_TOPS: str
    VIEW_HAS_ABORTS: str
    VIEW_ABORTED: str

    def view_undecided(self, decided: Sequence[str]) -> tuple[str, Params]:
        """``(seq, topics)`` of the transactions whose state is not in ``decided``."""

    def view_first_data(self, topic_id: int, txns: Sequence[int]) -> tuple[str, Params]:
        """``(ledger_id, entry_id)`` of the data entries of ``txns`` (no order yet)."""


# -- SQL both dialects build the same way -----------------------------------------------


@functools.lru_cache(maxsize=32)
def ended_txns(
    ended_rows: str, mark: str, state: bool, label_prefix: bool, born_before: bool
) -> str:
    """A page of ended transactions' rows, filtered by what is given (parameters in this
    order: state, label prefix length and prefix, born-before, then after, upto, limit)."""
    sql = [ended_rows]
    if state:
        sql.append(f"AND state = {mark}")
    if label_prefix:  # substr counts characters, as str.startswith does
        sql.append(f"AND substr(label, 1, {mark}) = {mark}")
    if born_before:
        sql.append(f"AND created_ms <= {mark}")
    sql.append(f"AND seq > {mark} AND seq <= {mark} ORDER BY seq LIMIT {mark}")  # keyset pages
    return " ".join(sql)


def outcome_codes(statements: ReadStatements, reason_codes: Mapping[str, int]) -> str:
    """``(seq, code)`` of ended transactions, the code computed by the database:
    ``committed | fenced << 1 | reason_codes[reason] << 2`` (0 for another reason).
    Parameters: ended since, seq below, limit."""
    return _outcome_codes(
        statements.OUTCOME_FLAGS, statements.MARK, tuple(sorted(reason_codes.items()))
    )


@functools.lru_cache(maxsize=8)
def _outcome_codes(flags: str, mark: str, reason_codes: tuple[tuple[str, int], ...]) -> str:
    cases = " ".join(
        f"WHEN '{reason.replace(chr(39), chr(39) * 2)}' THEN {int(code)}"
        for reason, code in reason_codes
    )
    # (SQLite gives | and << one precedence, left to right: hence the parentheses)
    return (
        f"SELECT seq, ({flags} | ((CASE reason {cases} ELSE 0 END) << 2)) FROM txns"
        f" WHERE state <> 'open' AND ended_ms >= {mark} AND seq < {mark}"
        f" ORDER BY seq DESC LIMIT {mark}"
    )


# -- the engine's reads ------------------------------------------------------------------


class SqlStore(Store):
    """:class:`~txnstream.ledger.Store`'s typed reads over :attr:`_sql` and :meth:`read`;
    a subclass supplies those two and the write transport."""

    _sql: ClassVar[ReadStatements]
    """The store's statement module."""

    @abc.abstractmethod
    async def read(self, query: str, params: Params = ()) -> list[Row]:
        """Run the store's own SQL on a read connection; sees only committed (durable)
        data. (The typed reads use it, and the store's tests and tools.)"""

    # -- the log -------------------------------------------------------------------

    async def ledger_rows(self, topic_id: int) -> list[Row]:
        return await self.read(self._sql.LEDGERS, (topic_id,))

    async def ledger_totals(self, topic_id: int, ledger_id: int) -> tuple[int, int]:
        ((entries, size),) = await self.read(self._sql.LEDGER_TOTALS, (topic_id, ledger_id))
        return int(entries), int(size)

    async def read_log(self, query: str, params: Params) -> list[Row]:
        """:meth:`read` for rows of the log itself (positions and payloads): the hot read
        of every delivery, which a store may run its own faster way."""
        return await self.read(query, params)

    async def read_range(
        self, topic_id: int, start: Position, end: Position, limit: int
    ) -> list[Row]:
        return await self.read_log(
            self._sql.RANGE,
            (topic_id, start.ledger_id, start.entry_id, end.ledger_id, end.entry_id, limit),
        )

    async def read_positions(self, topic_id: int, positions: Sequence[Position]) -> list[Row]:
        if not positions:
            return []
        return await self.read_log(*self._sql.positions(topic_id, positions))

    async def read_metas(self, topic_id: int, start: Position, limit: int) -> list[Row]:
        return await self.read(self._sql.METAS, (topic_id, start.ledger_id, start.entry_id, limit))

    async def count_data(
        self,
        topic_id: int,
        start: Position,
        end: Position,
        except_txns: Sequence[int],
        except_keys: Sequence[int],
    ) -> int:
        sql = self._sql
        rows = await self.read(
            sql.COUNT_DATA,
            (
                topic_id,
                start.ledger_id,
                start.entry_id,
                end.ledger_id,
                end.entry_id,
                sql.int_list(except_txns),
                sql.int_list(except_keys),
            ),
        )
        return int(rows[0][0])

    async def ledger_entries(self, topic_id: int, ledger_id: int) -> list[Row]:
        return await self.read(self._sql.LEDGER_ROWS, (topic_id, ledger_id))

    async def ledger_aborted(self, topic_id: int, ledger_id: int) -> list[Row]:
        return await self.read(self._sql.LEDGER_ABORTED, (topic_id, ledger_id))

    # -- the catalog ---------------------------------------------------------------

    async def topic_rows(self) -> list[Row]:
        return await self.read(self._sql.TOPICS)

    async def partitioned_rows(self) -> list[Row]:
        return await self.read(self._sql.PARTITIONED)

    async def next_topic_id(self) -> int:
        ((highest, reserved),) = await self.read(self._sql.NEXT_TOPIC_ID)
        return max(int(highest) + 1, int(reserved or 0))

    async def producer_rows(self, topic_id: int) -> list[Row]:
        return await self.read(self._sql.PRODUCERS, (topic_id,))

    # -- subscriptions -------------------------------------------------------------

    async def subscription_rows(self) -> list[Row]:
        return await self.read(self._sql.SUBSCRIPTIONS)

    async def subscription_policy_rows(self) -> list[Row]:
        return await self.read(self._sql.SUBSCRIPTION_POLICIES)

    async def redelivery_rows(self) -> list[Row]:
        return await self.read(self._sql.REDELIVERIES)

    async def delivery_time_rows(self, after_ms: int) -> list[Row]:
        return await self.read(self._sql.DELIVERY_TIMES, (after_ms,))

    async def topic_ttl_rows(self) -> list[Row]:
        return await self.read(self._sql.TOPIC_TTLS)

    # -- the coordinator -----------------------------------------------------------

    async def store_meta(self, keys: Sequence[str]) -> dict[str, Any]:
        return dict(await self.read(self._sql.STORE_META, (self._sql.str_list(keys),)))

    async def remote_ledger_count(self) -> int:
        return int((await self.read(self._sql.REMOTE_LEDGERS))[0][0])

    async def next_txn_seq(self) -> int | None:
        rows = await self.read(self._sql.NEXT_TXN_SEQ)
        return int(rows[0][0]) if rows else None

    async def nth_newest_ended_seq(self, ended_since_ms: int, n: int) -> int | None:
        rows = await self.read(self._sql.NTH_NEWEST_ENDED, (ended_since_ms, n))
        return int(rows[0][0]) if rows else None

    async def outcome_codes(
        self, ended_since_ms: int, below_seq: int, limit: int, reason_codes: Mapping[str, int]
    ) -> list[tuple[int, int]]:
        # Up to every ended transaction (recovery): the rows as the driver gives them,
        # two ints each in both dialects, with no pass over them here.
        query = outcome_codes(self._sql, reason_codes)
        rows = await self.read(query, (ended_since_ms, below_seq, limit))
        return cast("list[tuple[int, int]]", rows)

    async def txn_rows(self, ended_since_ms: int, from_seq: int) -> list[Row]:
        return await self.read(self._sql.TXNS, (ended_since_ms, from_seq))

    async def finish_keys(self) -> list[str]:
        return [key for (key,) in await self.read(self._sql.FINISH_KEYS)]

    async def producer_epoch_rows(self) -> list[Row]:
        return await self.read(self._sql.PRODUCER_EPOCHS)

    async def ended_txn_row(self, seq: int) -> Row | None:
        rows = await self.read(self._sql.ENDED_TXN, (seq,))
        return rows[0] if rows else None

    async def ended_txn_rows(
        self,
        *,
        state: str | None,
        label_prefix: str | None,
        born_before_ms: int | None,
        after_seq: int,
        upto_seq: int,
        limit: int,
    ) -> list[Row]:
        params: list[object] = []
        if state is not None:
            params.append(state)
        if label_prefix is not None:
            params += [len(label_prefix), label_prefix]
        if born_before_ms is not None:
            params.append(born_before_ms)
        query = ended_txns(
            self._sql.ENDED_ROWS,
            self._sql.MARK,
            state is not None,
            label_prefix is not None,
            born_before_ms is not None,
        )
        return await self.read(query, (*params, after_seq, upto_seq, limit))

    # -- snapshots -----------------------------------------------------------------

    async def snapshot_rows(self, topic_id: int) -> list[tuple[int, bytes]]:
        return cast("list[tuple[int, bytes]]", await self.read(self._sql.SNAPSHOTS, (topic_id,)))

    async def snapshot_counters(self, topic_id: int) -> tuple[int, int]:
        ((snapshot, segment),) = await self.read(self._sql.SNAPSHOT_COUNTERS, (topic_id, topic_id))
        return int(snapshot), int(segment)

    async def snapshot_segments(
        self, topic_id: int, segment_ids: Sequence[int]
    ) -> dict[int, bytes]:
        if not segment_ids:
            return {}
        return dict(await self.read(*self._sql.segments(topic_id, segment_ids)))


# -- another process's reads ---------------------------------------------------------------


class SqlStoreReader(StoreReader):
    """:class:`~txnstream.ledger.StoreReader`'s reads over :attr:`_sql`, :meth:`_rows`
    and :meth:`_one`; a subclass supplies those, opening, snapshots and
    :meth:`data_rows` (how a ledger's rows stream differs)."""

    _sql: ClassVar[ViewStatements]
    """The store's statement module."""

    @abc.abstractmethod
    def _rows(self, query: str, params: Params) -> list[Row]:
        """Every row of ``query``."""

    @abc.abstractmethod
    def _one(self, query: str, params: Params) -> Row | None:
        """The first row of ``query``, if any."""

    def _position(self, query: str, params: Params) -> Position | None:
        row = self._one(query, params)
        return None if row is None else Position(row[0], row[1])

    def topic_id(self, name: str) -> int | None:
        row = self._one(self._sql.VIEW_TOPIC, (name,))
        return None if row is None else int(row[0])

    def first_local(self, topic_id: int) -> Position | None:
        return self._position(self._sql.VIEW_FIRST, (topic_id,))

    def last_local(self, topic_id: int, before: Position | None = None) -> Position | None:
        if before is None:
            return self._position(self._sql.VIEW_LAST, (topic_id,))
        return self._position(
            self._sql.VIEW_LAST_BEFORE, (topic_id, before.ledger_id, before.entry_id)
        )

    def remote_ledgers(self, topic_id: int) -> list[tuple[int, int, str, int | None]]:
        rows = self._rows(self._sql.VIEW_REMOTE, (topic_id,))
        return [(int(i), int(n), str(u), s) for i, n, u, s in rows]

    def undecided_txns(self, decided: Sequence[str]) -> list[tuple[int, bytes]]:
        rows = self._rows(*self._sql.view_undecided(decided))
        return [(int(seq), topics) for seq, topics in rows]

    def first_data_of(
        self, topic_id: int, txns: Sequence[int], after: Position | None
    ) -> Position | None:
        query, params = self._sql.view_first_data(topic_id, txns)
        if after is not None:
            query += self._sql.VIEW_AFTER
            params = (*params, after.ledger_id, after.entry_id)
        return self._position(query + self._sql.VIEW_FIRST_ORDER, params)

    def nth_local(self, topic_id: int, start: Position, n: int) -> Position | None:
        return self._position(self._sql.VIEW_NTH, (topic_id, start.ledger_id, start.entry_id, n))

    def ledger_tops(self, topic_id: int) -> list[tuple[int, int | None]]:
        rows = self._rows(self._sql.VIEW_LEDGER_TOPS, (topic_id,))
        return [(int(ledger), top) for ledger, top in rows]

    def has_aborts_from(self, topic_id: int, ledger_id: int) -> bool:
        return self._one(self._sql.VIEW_HAS_ABORTS, (topic_id, ledger_id)) is not None

    def aborted_in(self, topic_id: int, ledger_id: int, lo: int, hi: int) -> set[int]:
        rows = self._rows(
            self._sql.VIEW_ABORTED, (topic_id, ledger_id, lo, ledger_id, hi, ledger_id, lo)
        )
        return {int(txn) for (txn,) in rows}
