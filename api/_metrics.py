"""Engine metrics: hooks the engine calls, recorded with prometheus-client.

Each :class:`Engine` owns one :class:`EngineMetrics` with its own ``CollectorRegistry``,
so several engines in one process (tests) never share counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


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
        self.commit_latency = Histogram(
            "txnstream_commit_latency_seconds",
            "Time from commit request to durable decision.",
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
        self.receive_wait = Histogram(
            "txnstream_receive_wait_seconds",
            "Time a receive waited for its first message.",
            registry=self.registry,
        )

    def render(self, topic_stats: list[dict[str, Any]], now: float) -> tuple[bytes, str]:
        """Prometheus text and content type: these counters, then per-topic gauges.

        ``topic_stats`` are the ``engine.stats()`` bodies the caller awaited for this
        scrape (the HTTP ``/metrics`` route); ``now`` is the scrape's wall-clock time.
        """
        topics = TopicStatsCollector()
        topics.update(topic_stats, now)
        extra = CollectorRegistry(auto_describe=False)
        extra.register(topics)
        return generate_latest(self.registry) + generate_latest(extra), CONTENT_TYPE_LATEST


class TopicStatsCollector(Collector):
    """Per-topic gauges computed from ``engine.stats()`` snapshots at scrape time.

    :meth:`EngineMetrics.render` hands it the stats the caller awaited; the collector
    itself never touches the engine (the prometheus-client collect() protocol is
    synchronous).
    """

    def __init__(self) -> None:
        self._stats: list[dict[str, Any]] = []
        self._now = 0.0

    def update(self, stats: list[dict[str, Any]], now: float) -> None:
        """Replace the snapshot; ``now`` is the wall-clock time of the scrape."""
        self._stats = stats
        self._now = now

    def collect(self) -> Iterator[Metric]:
        """Yield the gauge families (prometheus-client collector protocol)."""
        lag = GaugeMetricFamily(
            "txnstream_topic_stable_lag_entries",
            "Entries between the stable position and last confirmed "
            "(counted within the newest ledger).",
            labels=["topic"],
        )
        open_txns = GaugeMetricFamily(
            "txnstream_topic_open_transactions", "Open transactions on the topic.", labels=["topic"]
        )
        aborted = GaugeMetricFamily(
            "txnstream_topic_aborted_transactions",
            "Aborted transactions retained in the topic's aborted set.",
            labels=["topic"],
        )
        entries = GaugeMetricFamily(
            "txnstream_topic_entries", "Entries in the retained ledgers.", labels=["topic"]
        )
        ledgers = GaugeMetricFamily(
            "txnstream_topic_ledgers", "Retained ledgers of the topic.", labels=["topic"]
        )
        snapshot_age = GaugeMetricFamily(
            "txnstream_topic_snapshot_age_seconds",
            "Age of the topic's newest transaction-buffer snapshot.",
            labels=["topic"],
        )
        oldest_txn = GaugeMetricFamily(
            "txnstream_topic_oldest_open_transaction_age_seconds",
            "Age of the oldest open transaction on the topic (when the engine reports it).",
            labels=["topic"],
        )
        backlog = GaugeMetricFamily(
            "txnstream_subscription_backlog_entries",
            "Deliverable entries not yet acknowledged.",
            labels=["topic", "subscription"],
        )
        consumers = GaugeMetricFamily(
            "txnstream_subscription_consumers",
            "Consumers attached to the subscription.",
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
        for stats in self._stats:
            topic = str(stats.get("topic", ""))
            lag.add_metric([topic], _lag(stats.get("last_confirmed"), stats.get("stable_position")))
            open_txns.add_metric([topic], float(stats.get("open_txns") or 0))
            aborted.add_metric([topic], float(stats.get("aborted_txns") or 0))
            entries.add_metric([topic], float(stats.get("entries") or 0))
            ledgers.add_metric([topic], float(stats.get("ledgers") or 0))
            offloaded.add_metric([topic], float(stats.get("offloaded_ledgers") or 0))
            offloaded_bytes.add_metric([topic], float(stats.get("offloaded_bytes") or 0))
            snapshot = stats.get("snapshot")
            if isinstance(snapshot, dict):
                taken = _epoch(snapshot.get("taken_at"))
                if taken is not None:
                    snapshot_age.add_metric([topic], max(0.0, self._now - taken))
            started = _epoch(stats.get("oldest_open_txn_started_at"))
            if started is not None:
                oldest_txn.add_metric([topic], max(0.0, self._now - started))
            subs = stats.get("subscriptions") or {}
            for name, sub in subs.items():
                backlog.add_metric([topic, str(name)], float(sub.get("backlog") or 0))
                consumers.add_metric([topic, str(name)], float(len(sub.get("consumers") or ())))
        yield from (lag, open_txns, aborted, entries, ledgers, snapshot_age, oldest_txn)
        yield from (offloaded, offloaded_bytes, backlog, consumers)


def _split(position: object) -> tuple[int, int] | None:
    if not isinstance(position, str) or ":" not in position:
        return None
    ledger, _, entry = position.partition(":")
    try:
        return int(ledger), int(entry)
    except ValueError:
        return None


def _lag(last_confirmed: object, stable: object) -> float:
    """Entries between two ``"L:E"`` positions; across ledgers, those of the newest one."""
    last = _split(last_confirmed)
    if last is None:
        return 0.0
    low = _split(stable)
    if low is None or low[0] != last[0]:
        return float(last[1] + 1)
    return float(max(0, last[1] - low[1]))


def _epoch(value: object) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
