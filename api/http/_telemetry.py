"""HTTP request metrics: ``txnstream_http_requests_total{method,route,status}`` and a
latency histogram, labelled by route template (``/v1/topics/{topic}/stats``), never by
raw path, so a scrape stays small however many topics there are.

The outermost middleware (``_edge.EdgeMiddleware``) counts every answer here, also what
the inner middlewares answer themselves (413 from the body limit, 401/403 from auth).
Those never reach the router, so their route is found by matching the app's routes
afterwards (:func:`route_label`); a path no route matches is ``unmatched``.

It also writes the access log (:func:`log_access`): one line per request on the
``txnstream.access`` logger (at INFO; ``serve --access-log`` turns it on), with the
client, request line, status, duration and request id, which the JSON log format
carries as fields too.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match

access_log = logging.getLogger("txnstream.access")

UNMATCHED = "unmatched"

LATENCY_BUCKETS = (
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
    10.0,
    30.0,
)
"""Up to 30 s: a long-poll receive waits up to ``wait_ms`` = 30000."""


class HttpMetrics(Collector):
    """The HTTP server's own registry: request counts and latencies.

    Plain counters kept on the event loop (every request is counted there), exposed as
    prometheus-client metric families at scrape time: cheaper per request than
    prometheus-client's locked metric objects (about 1 us instead of 9).
    """

    def __init__(self) -> None:
        self._requests: dict[tuple[str, str, int], int] = {}
        self._latency: dict[tuple[str, str], list[float]] = {}
        """Per (method, route): a count per bucket (the last one is +Inf), then the sum."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request (an unusual method counts as ``other``)."""
        if method not in _METHODS:
            method = "other"
        key = (method, route, status)
        self._requests[key] = self._requests.get(key, 0) + 1
        latency = self._latency.get((method, route))
        if latency is None:
            latency = self._latency[(method, route)] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        latency[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        """Yield the two families (prometheus-client collector protocol)."""
        requests = CounterMetricFamily(
            "txnstream_http_requests",
            "HTTP requests answered, by method, route template and status.",
            labels=["method", "route", "status"],
        )
        for (method, route, status), count in self._requests.items():
            requests.add_metric([method, route, str(status)], count)
        duration = HistogramMetricFamily(
            "txnstream_http_request_duration_seconds",
            "Time from request to the end of the response, by method and route template"
            " (long polls included: see the route).",
            labels=["method", "route"],
        )
        bounds = [repr(float(b)) for b in LATENCY_BUCKETS] + ["+Inf"]  # 0.005, 1.0, ...
        for (method, route), latency in self._latency.items():
            cumulative, buckets = 0.0, []
            for bound, hits in zip(bounds, latency[:-1], strict=True):
                cumulative += hits
                buckets.append((bound, cumulative))
            duration.add_metric([method, route], buckets, latency[-1])
        yield requests
        yield duration


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_label(scope: MutableMapping[str, Any], routes: Sequence[BaseRoute]) -> str:
    """The route template a request is counted under: its route's, if the router (or the
    direct routes) found one; else the first route that matches it at all; else unmatched."""
    route = scope.get("route")
    if route is not None:
        path: str = getattr(route, "path", UNMATCHED)
        return path
    for candidate in routes:
        match, _ = candidate.matches(scope)
        if match is not Match.NONE:
            return str(getattr(candidate, "path", UNMATCHED))
    return UNMATCHED


def log_access(
    scope: MutableMapping[str, Any], route: str, status: int, seconds: float, request_id: str
) -> None:
    """One access-log line (``txnstream.access`` at INFO), with the fields as extras."""
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else "-"
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    line = target.decode("latin-1")
    access_log.info(
        '%s "%s %s HTTP/%s" %d %.2fms id=%s',
        peer,
        scope["method"],
        line,
        scope.get("http_version", "1.1"),
        status,
        seconds * 1000,
        request_id,
        extra={
            "client": peer,
            "method": scope["method"],
            "path": line,
            "route": route,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "request_id": request_id,
        },
    )
