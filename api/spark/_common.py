"""Shared pieces of the Spark data source that do not import pyspark.

Options (Spark hands them over lowercased, as strings), positions and read windows, and
the Arrow side: the fixed schema and the builder that turns decoded log entries into
``pyarrow.RecordBatch``es matching it exactly. The error type is the tree's
:class:`~txnstream.api.TxnStreamSourceError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from txnstream.api import InvalidArgumentError, Position
from txnstream.api.support import CommittedReader, validate_name

from ._errors import TxnStreamSourceError

FORMAT = "txnstream"

# The DDL of the DataFrame schema; ARROW_SCHEMA is the same as Spark's
# ``to_arrow_schema(schema, timezone="UTC")`` (a test checks they are equal).
SCHEMA_DDL = (
    "position STRING, ledger_id BIGINT, entry_id BIGINT, key STRING, value BINARY,"
    " value_json STRING, properties MAP<STRING, STRING>, txn STRING, publish_time TIMESTAMP"
)
_MAP_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        pa.field("position", pa.string()),
        pa.field("ledger_id", pa.int64()),
        pa.field("entry_id", pa.int64()),
        pa.field("key", pa.string()),
        pa.field("value", pa.binary()),
        pa.field("value_json", pa.string()),
        pa.field("properties", _MAP_TYPE),
        pa.field("txn", pa.string()),
        pa.field("publish_time", pa.timestamp("us", tz="UTC")),
    ]
)
SPARK_COLUMNS = tuple(ARROW_SCHEMA.names)
"""The source's columns, in order; an offloaded ledger's object starts with them, so a
task reads them straight from it (:meth:`~txnstream.api.CommittedReader.read_offloaded`)."""

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

DEFAULT_MAX_ENTRIES_PER_PARTITION = 200_000
DEFAULT_FETCH_SIZE = 10_000
DEFAULT_TXN_TIMEOUT_MS = 600_000
DEFAULT_WRITE_BATCH = 2_000
DEFAULT_HTTP_TIMEOUT = 60.0
BATCH_ROWS = 8_192
"""Rows per Arrow record batch a reader yields."""


# -- positions ---------------------------------------------------------------------


def after(position: Position) -> Position:
    """The smallest position greater than ``position`` (exclusive-end arithmetic).

    Entry ids are dense within a ledger, so ``(L, E + 1)`` is either the next entry of
    ledger ``L`` or, if ``L`` ends at ``E``, an empty slot ordered before ledger ``L + 1``.
    """
    return Position(position.ledger_id, position.entry_id + 1)


def parse_position(text: str, option: str) -> Position:
    """Parse an ``"L:E"`` option value, raising a clear error that names the option."""
    try:
        return Position.parse(text.strip())
    except InvalidArgumentError:
        raise TxnStreamSourceError(
            f"invalid {option} {text!r}: expected 'earliest', 'latest' or a position 'L:E'"
            " (ledger id and entry id, e.g. '3:17')"
        ) from None


def offset_of(position: Position) -> dict[str, str]:
    """A streaming offset: everything strictly before ``next`` has been covered."""
    return {"next": str(position)}


def position_of(offset: Mapping[str, Any]) -> Position:
    """The position of a streaming offset made by :func:`offset_of`."""
    try:
        return Position.parse(str(offset["next"]))
    except (KeyError, InvalidArgumentError):
        raise TxnStreamSourceError(f"not a txnstream streaming offset: {offset!r}") from None


@dataclass(frozen=True, slots=True)
class Window:
    """Positions ``start <= p < end`` of one topic."""

    start: Position
    end: Position

    @property
    def empty(self) -> bool:
        return self.end <= self.start


# -- options -------------------------------------------------------------------------


def _int_option(options: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise TxnStreamSourceError(f"option {name} must be an integer, not {raw!r}") from None
    if not low <= value <= high:
        raise TxnStreamSourceError(f"option {name} must be in {low}..{high}, not {value}")
    return value


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The options of one ``spark.read``/``readStream``/``write`` call, validated.

    Exactly one of ``url`` (a running server) or ``path`` (a local data directory).
    """

    topic: str
    url: str | None
    path: str | None
    starting: str
    ending: str
    isolation: str
    max_entries_per_partition: int
    fetch_size: int
    http_timeout: float
    max_entries_per_trigger: int | None
    txn_timeout_ms: int
    write_batch: int
    value_format: str
    token: str | None = None
    offload_url: str | None = None
    """Where the executors read offloaded ledgers (default: each ledger's own URL)."""

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        options = {str(k).lower(): str(v) for k, v in raw.items()}
        url = options.get("url") or None
        path = options.get("path") or None
        if (url is None) == (path is None):
            raise TxnStreamSourceError(
                "set exactly one of the options 'url' (a running txnstream server, e.g."
                " http://host:8080) or 'path' (a local txnstream data directory)"
            )
        if url is not None:
            url = url.strip().rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise TxnStreamSourceError(
                    f"option url must start with http:// or https://: {url!r}"
                )
        topic = options.get("topic")
        if not topic:
            raise TxnStreamSourceError("the option 'topic' is required")
        try:
            validate_name(topic)
        except InvalidArgumentError as exc:
            raise TxnStreamSourceError(str(exc)) from None
        starting = options.get("startingposition", "earliest").strip().lower() or "earliest"
        if starting not in ("earliest", "latest"):
            parse_position(starting, "startingPosition")
        ending = options.get("endingposition", "latest").strip().lower() or "latest"
        if ending not in ("earliest", "latest"):
            parse_position(ending, "endingPosition")
        isolation = options.get("isolation", READ_COMMITTED).strip().lower() or READ_COMMITTED
        if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
            raise TxnStreamSourceError(
                "option isolation must be 'read_committed' or 'read_uncommitted',"
                f" not {isolation!r}"
            )
        value_format = options.get("valueformat", "raw").strip().lower() or "raw"
        if value_format not in ("raw", "json"):
            raise TxnStreamSourceError(
                f"option valueFormat must be 'raw' or 'json', not {value_format!r}"
            )
        per_trigger = options.get("maxentriespertrigger")
        timeout_raw = options.get("timeout")
        try:
            http_timeout = float(timeout_raw) if timeout_raw else DEFAULT_HTTP_TIMEOUT
        except ValueError:
            raise TxnStreamSourceError(
                f"option timeout must be a number of seconds, not {timeout_raw!r}"
            ) from None
        if not http_timeout > 0:
            raise TxnStreamSourceError("option timeout must be positive")
        return cls(
            topic=topic,
            url=url,
            path=path,
            starting=starting,
            ending=ending,
            isolation=isolation,
            max_entries_per_partition=_int_option(
                options, "maxentriesperpartition", DEFAULT_MAX_ENTRIES_PER_PARTITION, 1, 10**12
            ),
            fetch_size=_int_option(options, "fetchsize", DEFAULT_FETCH_SIZE, 1, 10_000),
            http_timeout=http_timeout,
            max_entries_per_trigger=(
                None
                if per_trigger is None
                else _int_option(options, "maxentriespertrigger", 0, 1, 10**12)
            ),
            txn_timeout_ms=_int_option(
                options, "transactiontimeoutms", DEFAULT_TXN_TIMEOUT_MS, 1, 86_400_000
            ),
            write_batch=_int_option(options, "writebatchsize", DEFAULT_WRITE_BATCH, 1, 10_000),
            value_format=value_format,
            token=options.get("token") or None,
            offload_url=(options.get("offloadurl") or "").strip() or None,
        )

    def object_url(self, ledger_id: int, recorded: str | None) -> str | None:
        """Where to read offloaded ledger ``ledger_id``: under the ``offloadUrl`` option
        when set (with the recorded object's file name), else its recorded URL."""
        if self.offload_url is None:
            return recorded
        try:
            url = CommittedReader.object_url(self.offload_url, self.topic, ledger_id)
        except InvalidArgumentError as exc:
            raise TxnStreamSourceError(f"option offloadUrl: {exc}") from None
        if recorded is not None:  # its own file name (it names the store that wrote it)
            url = f"{url.rsplit('/', 1)[0]}/{recorded.rsplit('/', 1)[-1]}"
        return url

    @property
    def where(self) -> str:
        """Human text naming the source, for error messages."""
        return f"server {self.url}" if self.url is not None else f"data directory {self.path}"


# -- Arrow ---------------------------------------------------------------------------


split_value = CommittedReader.split_value
"""``(value, value_json)`` columns of one message value: the ledger's own rule, which
offloaded objects were written with, so both tiers read the same."""


def make_batch(
    ledger_ids: int | Sequence[int],
    entry_ids: Sequence[int],
    keys: Sequence[str | None] | None,
    values: Sequence[Any] | Any,
    properties: Sequence[dict[str, str] | None] | None,
    txns: Sequence[int | None] | Sequence[str | None],
    publish_ms: Sequence[int] | Any,
    *,
    txn_text: bool = False,
) -> Any:
    """A record batch of ARROW_SCHEMA from columns of decoded data entries.

    ``ledger_ids`` may be one id shared by every row. ``keys`` None: all null;
    ``properties`` None: all empty. ``values`` are message values as decoded (see
    :func:`split_value`), or an Arrow binary array of bytes values. ``txns`` are
    sequence numbers, or the ids as text with ``txn_text``. ``publish_ms`` is
    milliseconds since the epoch (a list or an Arrow integer array), or an Arrow array
    that casts to a UTC timestamp (ISO 8601 strings).
    """
    n = len(entry_ids)
    if isinstance(ledger_ids, int):
        ledgers = pa.repeat(pa.scalar(ledger_ids, pa.int64()), n)
    else:
        ledgers = pa.array(ledger_ids, pa.int64())
    entries = pa.array(entry_ids, pa.int64())
    position = pc.binary_join_element_wise(
        pc.cast(ledgers, pa.string()), pc.cast(entries, pa.string()), ":"
    )
    if isinstance(values, pa.Array):
        value_array = values.cast(pa.binary())
        json_array = pa.nulls(n, pa.string())
    elif all(type(v) is bytes for v in values):
        value_array = pa.array(values, pa.binary())
        json_array = pa.nulls(n, pa.string())
    else:
        pairs = [split_value(v) for v in values]
        value_array = pa.array([p[0] for p in pairs], pa.binary())
        json_array = pa.array([p[1] for p in pairs], pa.string())
    if txn_text:
        txn = pa.array(txns, pa.string())
    else:
        txn = pc.binary_join_element_wise(
            "txn-", pc.cast(pa.array(txns, pa.int64()), pa.string()), ""
        )
    if not isinstance(publish_ms, pa.Array):
        publish_ms = pa.array(publish_ms, pa.int64())
    if pa.types.is_integer(publish_ms.type):
        publish = pc.multiply(publish_ms.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    else:
        publish = publish_ms.cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [
            position,
            ledgers,
            entries,
            pa.nulls(n, pa.string()) if keys is None else pa.array(keys, pa.string()),
            value_array,
            json_array,
            _empty_maps(n) if properties is None else _map_array(properties),
            txn,
            publish,
        ],
        schema=ARROW_SCHEMA,
    )


def _empty_maps(n: int) -> Any:
    offsets = pa.array([0] * (n + 1), pa.int32())
    empty = pa.array([], pa.string())
    return pa.MapArray.from_arrays(offsets, empty, empty).cast(_MAP_TYPE)


def _map_array(props: Sequence[dict[str, str] | None]) -> Any:
    if not any(props):
        return _empty_maps(len(props))
    offsets = [0]
    keys: list[str] = []
    items: list[str | None] = []
    total = 0
    for entry in props:
        if entry:
            for k, v in entry.items():
                keys.append(k)
                items.append(v)
            total += len(entry)
        offsets.append(total)
    array = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(items, pa.string())
    )
    return array.cast(_MAP_TYPE)
