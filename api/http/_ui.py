"""The web console at ``/ui``: topics, one topic, open transactions; live, no build step.

Pages are server-rendered with Jinja2 in two layers. A *page* (``/ui``,
``/ui/topics/{topic}``, ``/ui/transactions``) is a shell that holds no data: layout,
navigation and an empty live region. Its *fragment* (``/ui/fragments/...``) is the HTML
of that region, rendered from the engine; ``console.js`` fetches it at once and then
every second (short polling: unlike server-sent events, a ``fetch`` can carry an
``Authorization`` header). So with auth on, a page loads without a token and each
fragment request carries the token the operator typed (kept in ``sessionStorage``);
the routes are plain routes under the same middleware as the API. The force-abort
button calls the API itself (``POST /v1/transactions/{txn}/abort``), so it is allowed
exactly when the API allows it.

A topic's page adds tabs that ``topic.js`` builds from the API alone, with the same
token: the message browser reads ``GET /v1/topics/{topic}/fetch`` (raw entries and the
aborted list; ``timestamp`` for a start by publish time; ``/ledgers`` to page back past
the start; ``GET /v1/transactions/{txn}`` for the state of a transaction above the
stable position), publishing posts to ``.../messages``, a subscription is reset with
``.../seek`` and deleted with ``DELETE``, and the settings tab reads the stats and puts
``.../retention`` and ``.../offload`` (and posts ``.../offload/run``). Everything it shows
goes into the page as text (``textContent``), never as markup.

Every asset is package data under ``api/http/ui`` (templates and ``static``); nothing
comes from a CDN. The console only reads through ``from api import ...``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import jinja2
from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from txnstream.api import Engine, NotFoundError, Position, TopicNotFoundError, TopicStats, TxnInfo

from ._params import TopicName, engine_of

UI_DIR = Path(__file__).parent / "ui"
STATIC_DIR = UI_DIR / "static"
POLL_MS = 1000
"""How often a page refreshes its live region."""
MAX_TOPIC_ROWS = 200
"""The overview shows at most this many topics (filter by prefix for the rest)."""
TAIL_MESSAGES = 20
"""Committed messages shown in a topic's tail, newest first."""
TAIL_WINDOW = 64
"""Entries read below the stable position to find them (markers and aborted data skip)."""
VALUE_PREVIEW = 300
"""Characters of a message value shown in the tail."""
KEY_SCAN_LIMIT = 10_000
"""Entries the message browser's key search reads per step (it scans in the browser)."""

_STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
_HEADERS = {
    # No inline script or style, nothing from elsewhere: the console needs nothing else.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none';"
        " form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(include_in_schema=False)


# ------------------------------------------------------------------------- formatting


def _duration(ms: float | None) -> str:
    """A short human duration: ``850 ms``, ``12.4 s``, ``3 min 12 s``, ``2 h 5 min``."""
    if ms is None:
        return "-"
    ms = max(0.0, ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def _size(count: int) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``3.2 MiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns at GiB


def _number(value: int) -> str:
    return f"{value:,}".replace(",", "\u202f")  # a narrow no-break space between thousands


def _iso_ms(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


def _preview(value: Any) -> str:
    """A message value for the tail: compact JSON, or a note for bytes; cut to a preview."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        text = f"<{len(data)} bytes> " + data[:48].hex(" ")
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= VALUE_PREVIEW else text[: VALUE_PREVIEW - 1] + "\u2026"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(UI_DIR / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(duration=_duration, size=_size, number=_number, iso_ms=_iso_ms)
    return env


_templates = _environment()


def _render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    body = _templates.get_template(template).render(root=root, **context)
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


# ------------------------------------------------------------------------------ pages


def _page(request: Request, template: str, live: str, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return _render(request, template, live=f"{root}{live}", poll_ms=POLL_MS, **context)


@router.get("/ui")
async def topics_page(
    request: Request, prefix: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """The topics overview (a shell: the table is the live fragment)."""
    return _page(request, "topics.html", "/ui/fragments/topics", page="topics", prefix=prefix)


@router.get("/", include_in_schema=False)
async def root_page(request: Request) -> Response:
    """``/`` is the console (a browser pointed at the server lands somewhere useful)."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}/ui", status_code=307)


@router.get("/ui/")
async def topics_page_slash(request: Request) -> Response:
    """``/ui/`` is ``/ui`` (the app does not redirect slashes by itself)."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}/ui", status_code=307)


@router.get("/ui/topics/{topic}")
async def topic_page(topic: TopicName, request: Request) -> Response:
    """One topic: an overview (positions, what holds the stable position, subscriptions
    with reset and delete, tail), a message browser, publishing, and its settings."""
    return _page(
        request,
        "topic.html",
        f"/ui/fragments/topics/{topic}",
        page="topic",
        topic=topic,
        key_scan_limit=KEY_SCAN_LIMIT,
    )


@router.get("/ui/transactions")
async def transactions_page(
    request: Request, label_prefix: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """Open transactions, oldest first, with a label filter and a force-abort button."""
    return _page(
        request,
        "transactions.html",
        "/ui/fragments/transactions",
        page="transactions",
        label_prefix=label_prefix,
    )


@router.get("/ui/static/{name}")
async def static_asset(name: str) -> Response:
    """The console's own CSS and JavaScript (package data)."""
    path = STATIC_DIR / name
    kind = _STATIC_TYPES.get(path.suffix)
    if kind is None or "/" in name or name.startswith(".") or not path.is_file():
        return HTMLResponse("not found", status_code=404)
    return FileResponse(path, media_type=kind, headers={"Cache-Control": "no-cache"})


# -------------------------------------------------------------------------- fragments


@dataclass(frozen=True, slots=True)
class TailMessage:
    """One committed message of a topic's tail."""

    position: str
    key: str | None
    txn: str | None
    published: str
    value: str


@router.get("/ui/fragments/topics")
async def topics_fragment(
    request: Request, prefix: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """The overview table: positions, lag, open and aborted transactions, sizes."""
    engine = engine_of(request)
    names = [name for name in await engine.list_topics() if name.startswith(prefix)]
    rows: list[TopicStats] = []
    for name in sorted(names)[:MAX_TOPIC_ROWS]:
        try:
            rows.append(await engine.topic_stats(name))
        except TopicNotFoundError:
            continue  # deleted meanwhile
    return _render(
        request,
        "fragment_topics.html",
        topics=rows,
        total=len(names),
        shown=len(rows),
        prefix=prefix,
        now_ms=_now_ms(),
    )


@router.get("/ui/fragments/topics/{topic}")
async def topic_fragment(topic: TopicName, request: Request) -> Response:
    """A topic's live region: summary, blocking transaction, subscriptions, tail."""
    engine = engine_of(request)
    try:
        stats = await engine.topic_stats(topic)
    except TopicNotFoundError:
        return _render(request, "fragment_missing.html", 404, topic=topic)
    blocking: TxnInfo | None = None
    if stats.blocking_txn is not None:
        try:
            blocking = await engine.get_transaction(stats.blocking_txn.txn)
        except NotFoundError:
            blocking = None
    return _render(
        request,
        "fragment_topic.html",
        stats=stats,
        blocking=blocking,
        tail=await _tail(engine, topic, stats.stable_position),
        now_ms=_now_ms(),
    )


@router.get("/ui/fragments/transactions")
async def transactions_fragment(
    request: Request, label_prefix: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """Open transactions, oldest first, filtered by label prefix."""
    engine = engine_of(request)
    infos = await engine.transactions(state="open", label_prefix=label_prefix or None)
    infos.sort(key=lambda info: (info.created_at, info.txn))
    return _render(
        request,
        "fragment_transactions.html",
        txns=infos,
        label_prefix=label_prefix,
        now_ms=_now_ms(),
        ms=_epoch_ms,
    )


async def _tail(engine: Engine, topic: str, stable: Position | None) -> list[TailMessage]:
    """The newest committed messages at or below the stable position, newest first.

    Reads a window of the stable position's ledger: markers and aborted data are
    dropped, as a read_committed range reader does with the fetch's aborted list.
    """
    if stable is None:
        return []
    start = Position(stable.ledger_id, max(0, stable.entry_id - TAIL_WINDOW + 1))
    try:
        fetched = await engine.fetch(topic, start, max=TAIL_WINDOW, isolation="read_committed")
    except TopicNotFoundError:
        return []
    aborted = {a.txn for a in fetched.aborted}
    tail = [
        TailMessage(
            str(entry.position),
            entry.key,
            entry.txn,
            entry.publish_time.astimezone().isoformat(timespec="milliseconds"),
            _preview(entry.value),
        )
        for entry in fetched.entries
        if entry.kind == "data" and entry.txn not in aborted
    ]
    return tail[::-1][:TAIL_MESSAGES]


def _now_ms() -> int:
    return round(time.time() * 1000)


def _epoch_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)
