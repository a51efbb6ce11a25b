"""Engine metrics: hooks the engine calls, recorded with prometheus-client.

Each :class:`Engine` owns one :class:`EngineMetrics` with its own ``CollectorRegistry``,
so several engines in one process (tests) never share counters. The registry also holds
prometheus-client's own process, platform and garbage-collector collectors and
``txnstream_build_info``. What is cheaper to read at scrape time than to track (topic
and subscription gauges, open transactions, file sizes) is handed to :meth:`render`.

No ``*_created`` series: prometheus-client writes one per counter and histogram by
default (a timestamp per series, doubling the exposition for little use); it is turned
off for the process when this module is imported.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable, Iterator, Sequence
from importlib import metadata
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._stats import TopicStats

disable_created_metrics()  # type: ignore[no-untyped-call]

FLUSH_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
"""Flush latency buckets: a WAL commit takes ~0.1 ms without fsync, ms with one, and
seconds only on a sick disk."""


def package_version() -> str:
    """The installed txnstream version (``0+unknown`` when run from a bare checkout)."""
    try:
        return metadata.version("txnstream")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class EngineMetrics:
    """Counters and histograms the engine updates as it works."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.messages_in = Counter(
            "txnstream_messages_in", "Messages appended.", ["topic"], registry=self.registry
        )
        self.messages_out = Counter(
            "txnstream_messages_out",
            "Messages delivered to consumers.",
            ["topic"],
            registry=self.registry,
        )
        self.txns_committed = Counter(
            "txnstream_transactions_committed", "Transactions committed.", registry=self.registry
        )
        self.txns_aborted = Counter(
            "txnstream_transactions_aborted", "Transactions aborted.", registry=self.registry
        )
        self.txns_timed_out = Counter(
            "txnstream_transactions_timed_out",
            "Transactions aborted by their timeout.",
            registry=self.registry,
        )
        self.fenced_requests = Counter(
            "txnstream_fenced_requests",
            "Requests refused because their transaction was fenced.",
            registry=self.registry,
        )
        self.append_batch_size = Histogram(
            "txnstream_append_batch_size",
            "Entries per group commit.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
            registry=self.registry,
        )
        self.flush_duration = Histogram(
            "txnstream_flush_duration_seconds",
            "Duration of one group-commit flush: the SQLite transaction of every queued"
            " batch, fsync included (durability=full).",
            buckets=FLUSH_BUCKETS,
            registry=self.registry,
        )
        self.commit_latency = Histogram(
            "txnstream_commit_latency_seconds",
            "Time from commit request to durable decision.",
            registry=self.registry,
        )
        self.receive_wait = Histogram(
            "txnstream_receive_wait_seconds",
            "Time a receive waited for its first message.",
            registry=self.registry,
        )
        self.offload_index_fetches = Counter(
            "txnstream_offload_index_fetches",
            "Aborted-index objects (sidecars) of offloaded ledgers read from the object store.",
            registry=self.registry,
        )
        self.offload_data_fetches = Counter(
            "txnstream_offload_data_fetches",
            "Reads of offloaded ledger objects (the row groups of one request count once).",
            registry=self.registry,
        )
        self.offload_corrupt_objects = Counter(
            "txnstream_offload_corrupt_objects",
            "Offloaded objects (ledger objects or aborted-index sidecars) found damaged:"
            " a size, SHA-256, page checksum, decoding or position check failed.",
            registry=self.registry,
        )
        self.engine_up = Gauge(
            "txnstream_engine_up",
            "1 while the engine accepts writes (health ok), else 0.",
            registry=self.registry,
        )
        self.engine_health = Gauge(
            "txnstream_engine_health",
            "The engine's health as a label (ok, degraded, recovering, failed), with the reason.",
            ["status", "reason"],
            registry=self.registry,
        )
        self.active = Gauge(
            "txnstream_active",
            "1 while this server is the active of its store (always, for SQLite), 0 while"
            " a standby.",
            registry=self.registry,
        )
        self.failovers = Counter(
            "txnstream_failovers",
            "Times this server took the store over as a standby (PostgreSQL store).",
            registry=self.registry,
        )
        build = Gauge(
            "txnstream_build_info",
            "The running txnstream: version and Python (always 1).",
            ["version", "python"],
            registry=self.registry,
        )
        build.labels(package_version(), platform.python_version()).set(1)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

        self._counted_in: dict[str, int] = {}
        self._in_children: dict[str, Any] = {}

    def count_in(self, topic: str, count: int) -> None:
        """Count appended messages (a dict update; :meth:`apply_counts` moves them into
        the counter once per flush, so a send pays no counter lock)."""
        counted = self._counted_in
        counted[topic] = counted.get(topic, 0) + count

    def apply_counts(self) -> None:
        """Move the counts of :meth:`count_in` into ``txnstream_messages_in``."""
        if not self._counted_in:
            return
        counted, self._counted_in = self._counted_in, {}
        for topic, count in counted.items():
            child = self._in_children.get(topic)
            if child is None:
                child = self._in_children[topic] = self.messages_in.labels(topic)
            child.inc(count)

    def observe_health(self, health: Any) -> None:
        """Set ``txnstream_engine_up`` (1 while writes are accepted) and the one-hot
        ``txnstream_engine_health{status,reason}`` from an :class:`~txnstream.api.Health`."""
        self.engine_up.set(1 if health.status == "ok" else 0)
        self.active.set(0 if health.status == "standby" else 1)
        self.engine_health.clear()
        self.engine_health.labels(health.status, health.reason or "").set(1)

    def observe_flush(self, entries: int, seconds: float) -> None:
        """The store's ``on_flush`` hook: batch size and flush latency."""
        self.append_batch_size.observe(entries)
        self.flush_duration.observe(seconds)
        self.apply_counts()

    def render(
        self,
        topics: Sequence[TopicStats],
        *,
        open_txns: int,
        database_bytes: int,
        wal_bytes: int,
        now_ms: int | None = None,
        extra: Iterable[CollectorRegistry] = (),
    ) -> tuple[bytes, str]:
        """Prometheus text and its content type for one scrape.

        ``topics`` are the :class:`TopicStats` the caller awaited for this scrape,
        ``open_txns`` the engine's open transactions, the byte counts the sizes of the
        database and WAL files; ``extra`` registries (the HTTP server's) are appended.
        """
        self.apply_counts()
        state = ScrapeCollector(
            topics,
            open_txns=open_txns,
            database_bytes=database_bytes,
            wal_bytes=wal_bytes,
            now_ms=round(time.time() * 1000) if now_ms is None else now_ms,
        )
        scraped = CollectorRegistry(auto_describe=False)
        scraped.register(state)
        parts = [generate_latest(self.registry), generate_latest(scraped)]
        parts.extend(generate_latest(registry) for registry in extra)
        return b"".join(parts), CONTENT_TYPE_LATEST


class ScrapeCollector(Collector):
    """Gauges read at scrape time: per topic, per subscription and engine-wide.

    :meth:`EngineMetrics.render` hands it what the caller awaited; the collector itself
    never touches the engine (the prometheus-client collect() protocol is synchronous).
    """

    def __init__(
        self,
        topics: Sequence[TopicStats],
        *,
        open_txns: int,
        database_bytes: int,
        wal_bytes: int,
        now_ms: int,
    ) -> None:
        self._topics = topics
        self._open_txns = open_txns
        self._database_bytes = database_bytes
        self._wal_bytes = wal_bytes
        self._now_ms = now_ms

    def collect(self) -> Iterator[Metric]:
        """Yield the metric families (prometheus-client collector protocol)."""
        yield GaugeMetricFamily(
            "txnstream_open_transactions",
            "Open transactions of the engine (every topic).",
            value=self._open_txns,
        )
        yield GaugeMetricFamily(
            "txnstream_database_bytes",
            "Size of the SQLite database file.",
            value=self._database_bytes,
        )
        yield GaugeMetricFamily(
            "txnstream_wal_bytes",
            "Size of the SQLite write-ahead log (shrinks at checkpoints).",
            value=self._wal_bytes,
        )
        yield from self._topic_families()

    def _topic_families(self) -> Iterator[Metric]:
        def topic_gauge(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=["topic"])

        def sub_gauge(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=["topic", "subscription"])

        lag = topic_gauge(
            "txnstream_topic_stable_lag_entries",
            "Entries above the stable position up to last confirmed (across ledgers):"
            " what read_committed consumers wait for.",
        )
        open_txns = topic_gauge(
            "txnstream_topic_open_transactions", "Open transactions on the topic."
        )
        aborted = topic_gauge(
            "txnstream_topic_aborted_transactions",
            "Aborted transactions retained in the topic's aborted set.",
        )
        entries = topic_gauge("txnstream_topic_entries", "Entries in the retained ledgers.")
        ledgers = topic_gauge("txnstream_topic_ledgers", "Retained ledgers of the topic.")
        size = topic_gauge(
            "txnstream_topic_bytes", "Payload bytes of the topic's retained ledgers."
        )
        snapshot_age = topic_gauge(
            "txnstream_topic_snapshot_age_seconds",
            "Age of the topic's newest transaction-buffer snapshot.",
        )
        oldest_txn = topic_gauge(
            "txnstream_topic_oldest_open_transaction_age_seconds",
            "Age of the oldest open transaction on the topic.",
        )
        backlog = sub_gauge(
            "txnstream_subscription_backlog_entries", "Deliverable entries not yet acknowledged."
        )
        consumers = sub_gauge(
            "txnstream_subscription_consumers", "Consumers attached to the subscription."
        )
        unacked = sub_gauge(
            "txnstream_subscription_unacked_messages",
            "Messages delivered to a consumer and not yet acknowledged.",
        )
        redeliveries = CounterMetricFamily(
            "txnstream_subscription_redeliveries",
            "Messages released for redelivery (nack, consumer detached, transactional ack"
            " aborted) since the server started.",
            labels=["topic", "subscription"],
        )
        offloaded = GaugeMetricFamily(
            "txnstream_offloaded_ledgers",
            "Ledgers of the topic in the object store.",
            labels=["topic"],
        )
        offloaded_bytes = GaugeMetricFamily(
            "txnstream_offloaded_bytes",
            "Bytes of the topic's ledger objects in the object store.",
            labels=["topic"],
        )
        now = self._now_ms
        for stats in self._topics:
            topic = stats.topic
            lag.add_metric([topic], stats.stable_lag)
            open_txns.add_metric([topic], stats.open_txns)
            aborted.add_metric([topic], stats.aborted_txns)
            entries.add_metric([topic], stats.entries)
            ledgers.add_metric([topic], stats.ledgers)
            size.add_metric([topic], stats.bytes)
            offloaded.add_metric([topic], stats.offloaded_ledgers)
            offloaded_bytes.add_metric([topic], stats.offloaded_bytes)
            if stats.snapshot is not None:
                snapshot_age.add_metric([topic], max(0, now - stats.snapshot.taken_ms) / 1000)
            started = stats.oldest_open_txn_started_ms
            if started is not None:
                oldest_txn.add_metric([topic], max(0, now - started) / 1000)
            for name, sub in stats.subscriptions.items():
                labels = [topic, name]
                backlog.add_metric(labels, sub.backlog)
                consumers.add_metric(labels, len(sub.consumers))
                unacked.add_metric(labels, sub.unacked)
                redeliveries.add_metric(labels, sub.redeliveries)
        yield from (lag, open_txns, aborted, entries, ledgers, size, snapshot_age, oldest_txn)
        yield from (offloaded, offloaded_bytes, backlog, consumers, unacked, redeliveries)
