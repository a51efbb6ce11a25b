"""HTTP request metrics: ``txnstream_http_requests_total{method,route,status}`` and a
latency histogram, labelled by route template (``/v1/topics/{topic}/stats``), never by
raw path, so a scrape stays small however many topics there are.

``HttpMetricsMiddleware`` is the outermost middleware: it also counts what the inner
middlewares answer themselves (413 from the edge, 401/403 from auth). Those answers never
reach the router, so the route is found by matching the app's routes afterwards; a path
no route matches is ``unmatched``.

It also writes the access log: one line per request on the ``txnstream.access`` logger
(at INFO; ``serve --access-log`` turns it on), with the client, request line, status,
duration and request id, which the JSON log format carries as fields too.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute, Match

from ._edge import REQUEST_ID_KEY, ASGIApp, Message, Receive, Scope, Send

access_log = logging.getLogger("txnstream.access")

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
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
        """Count one answered request."""
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


class HttpMetricsMiddleware:
    """Times and counts every HTTP request (pure ASGI, a few microseconds)."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - started
            method = scope["method"] if scope["method"] in _METHODS else "other"
            route = self._route(scope)
            self.metrics.observe(method, route, status or 500, seconds)
            if access_log.isEnabledFor(logging.INFO):
                _log_access(scope, route, status, seconds)

    def _route(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is not None:
            path: str = getattr(route, "path", UNMATCHED)
            return path
        for candidate in self.routes:
            match, _ = candidate.matches(scope)
            if match is not Match.NONE:
                return str(getattr(candidate, "path", UNMATCHED))
        return UNMATCHED


def _log_access(scope: Scope, route: str, status: int, seconds: float) -> None:
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else "-"
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    line = target.decode("latin-1")
    request_id = scope.get(REQUEST_ID_KEY, "-")
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
