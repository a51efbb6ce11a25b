"""The ``txnstream`` command: ``serve`` runs the HTTP server; the rest is a client of one.

``serve`` owns uvicorn and the lifespan: the engine opens on lifespan startup and closes
on lifespan shutdown, which uvicorn runs on SIGTERM/SIGINT only after it has stopped
accepting connections and finished the requests in flight (pending long polls are cut
short through :class:`~api._http.Drain`), so every acknowledged write is durable and the
engine closes cleanly.

Client commands talk to ``--url`` (env ``TXNSTREAM_URL``): human-readable output by
default, ``--json`` for scripts; a 4xx prints the server's error and exits 1.

Other modules add command groups with :func:`add_command_group`; list them in
``_EXTENSIONS`` so :func:`main` imports them before parsing the command line.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn
from urllib.parse import quote

import httpx
import typer

if TYPE_CHECKING:
    from api.http import ASGIApp, Drain, Message, Receive, Scope, Send

__all__ = ["add_command_group", "app", "main"]

log = logging.getLogger("txnstream.cli")

app = typer.Typer(
    name="txnstream",
    help="txnstream: transactional topics. `serve` runs the server; the rest are clients.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
topics_app = typer.Typer(help="Create, list, delete and inspect topics.", no_args_is_help=True)
txn_app = typer.Typer(help="Begin, commit, abort and inspect transactions.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")
app.add_typer(txn_app, name="txn")

_EXTENSIONS: tuple[str, ...] = ("api._drills",)
"""Modules imported by :func:`main` that register their own command groups."""


def add_command_group(group: typer.Typer, name: str, help: str | None = None) -> None:
    """Attach another module's typer app as ``txnstream NAME ...`` (e.g. ``drill``)."""
    app.add_typer(group, name=name, help=help)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``txnstream``, ``python -m api``)."""
    for module in _EXTENSIONS:
        importlib.import_module(module)
    app(args=list(argv) if argv is not None else None, prog_name="txnstream")


# ---------------------------------------------------------------------------- serve


class _ServedApp:
    """ASGI app of ``serve``: the engine opens in lifespan startup, closes in shutdown."""

    def __init__(self, data: Path, durability: str) -> None:
        from api.http import Drain

        self.data = data
        self.durability = durability
        self.drain: Drain = Drain()
        self._app: ASGIApp | None = None
        self._engine: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        inner = self._app
        if inner is None:  # uvicorn serves only after startup completed; be safe anyway
            from api.http import send_error

            await send_error(send, 503, "unavailable", "the engine is not open")
            return
        await inner(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        from api import Engine, EngineConfig
        from api.http import create_app

        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    config = EngineConfig(durability=self.durability)  # type: ignore[arg-type]
                    self._engine = await Engine.open(self.data, config=config)
                except Exception as exc:
                    log.exception("cannot open the engine at %s", self.data)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                self._app = create_app(self._engine, drain=self.drain)
                log.info("engine open at %s", self.data)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.drain.start()
                if self._engine is not None:
                    await self._engine.close()
                    log.info("engine closed")
                await send({"type": "lifespan.shutdown.complete"})
                return


def _make_server(
    data: Path,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    durability: str = "full",
) -> Any:
    """A ``uvicorn.Server`` for ``serve`` (also used by the tests to run one in a thread)."""
    import uvicorn

    served = _ServedApp(data, durability)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            served.drain.start()

    config = uvicorn.Config(
        served,
        host=host,
        port=port,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=35,
        timeout_keep_alive=30,
    )
    return _Server(config)


@app.command()
def serve(
    data: Annotated[
        Path, typer.Option("--data", help="Data directory (created if missing).")
    ] = Path("./data"),
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    log_level: Annotated[
        str, typer.Option(help="critical, error, warning, info or debug.")
    ] = "info",
    durability: Annotated[
        str, typer.Option(help="full (survives power loss) or normal (survives kill -9).")
    ] = "full",
) -> None:
    """Serve the HTTP API on HOST:PORT over the engine in DATA (until SIGTERM/SIGINT)."""
    if durability not in ("full", "normal"):
        _fail("--durability must be 'full' or 'normal'")
    level = log_level.lower()
    if level not in ("critical", "error", "warning", "info", "debug"):
        _fail("--log-level must be one of critical, error, warning, info, debug")
    server = _make_server(data, host, port, log_level=level, durability=durability)
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("aiosqlite").setLevel(logging.INFO)
    try:
        server.run()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if not server.started:
        raise typer.Exit(3)


# --------------------------------------------------------------------------- client

UrlOption = Annotated[
    str,
    typer.Option("--url", envvar="TXNSTREAM_URL", help="Server URL.", show_envvar=True),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
DEFAULT_URL = "http://127.0.0.1:8080"


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _seg(name: str) -> str:
    return quote(name, safe="")


class _Client:
    """A small synchronous client of the HTTP API for the commands below."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=httpx.Timeout(60.0, connect=5.0))

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """Send one request; on 4xx/5xx print the server's error and exit 1."""
        try:
            response = self.http.request(method, path, json=body, params=params)
        except httpx.TransportError as exc:
            _fail(f"cannot reach the server at {self.url}: {exc}")
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            error = data.get("error") if isinstance(data, dict) else None
            if isinstance(error, dict):
                _fail(f"{error.get('message')} ({error.get('code')}, HTTP {response.status_code})")
            _fail(f"HTTP {response.status_code}: {response.text[:500]}")
        return response.status_code, data


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False))


def _parse_value(text: str) -> Any:
    """JSON if ``text`` parses as JSON (NaN and Infinity excluded), else the string itself."""

    def reject(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=reject)
    except ValueError:
        return text


def _show_value(message: dict[str, Any]) -> str:
    if "value_b64" in message:
        return f"base64:{message['value_b64']}"
    return json.dumps(message.get("value"), ensure_ascii=False)


# -- topics


@topics_app.command("create")
def topics_create(name: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Create topic NAME (no error if it exists)."""
    with _Client(url) as client:
        status, data = client.call("PUT", f"/v1/topics/{_seg(name)}", body={})
    if as_json:
        _print_json({**data, "created": status == 201})
    else:
        typer.echo(f"created topic {name}" if status == 201 else f"topic {name} already exists")


@topics_app.command("list")
def topics_list(url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """List topics, one per line."""
    with _Client(url) as client:
        _, data = client.call("GET", "/v1/topics")
    if as_json:
        _print_json(data)
    else:
        for name in data["topics"]:
            typer.echo(name)


@topics_app.command("delete")
def topics_delete(name: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Delete topic NAME with its data and subscriptions."""
    with _Client(url) as client:
        _, data = client.call("DELETE", f"/v1/topics/{_seg(name)}")
    if as_json:
        _print_json(data)
    else:
        typer.echo(f"deleted topic {name}")


@topics_app.command("stats")
def topics_stats(name: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Show positions, transaction counts and subscriptions of topic NAME."""
    with _Client(url) as client:
        _, data = client.call("GET", f"/v1/topics/{_seg(name)}/stats")
    if as_json:
        _print_json(data)
        return
    for field in ("topic", "last_confirmed", "stable_position", "open_txns", "aborted_txns"):
        typer.echo(f"{field}: {_dash(data.get(field))}")
    typer.echo(f"ledgers: {data.get('ledgers')}  entries: {data.get('entries')}")
    snapshot = data.get("snapshot")
    if snapshot:
        typer.echo(f"snapshot: {snapshot.get('position')} at {snapshot.get('taken_at')}")
    else:
        typer.echo("snapshot: -")
    subs = data.get("subscriptions") or {}
    typer.echo(f"subscriptions: {len(subs)}")
    for sub_name, sub in sorted(subs.items()):
        consumers = ", ".join(sub.get("consumers") or []) or "-"
        typer.echo(
            f"  {sub_name}: type={sub.get('type')} isolation={sub.get('isolation')} "
            f"backlog={sub.get('backlog')} mark_delete={_dash(sub.get('mark_delete'))} "
            f"consumers={consumers}"
        )


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


# -- produce


def _stdin_values() -> Iterator[str]:
    for line in sys.stdin:
        text = line.rstrip("\r\n")
        if text:
            yield text


def _batches(values: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for value in values:
        batch.append(value)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


@app.command()
def produce(
    topic: str,
    values: Annotated[
        list[str] | None,
        typer.Argument(help="Values (JSON if they parse, else strings); default: stdin lines."),
    ] = None,
    txn: Annotated[str | None, typer.Option(help="Send inside this transaction.")] = None,
    key: Annotated[str | None, typer.Option(help="Key of every message.")] = None,
    prop: Annotated[
        list[str] | None, typer.Option("--property", "-p", help="A property NAME=VALUE.")
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, max=10_000, help="Messages per request (stdin input).")
    ] = 100,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Produce VALUES (or stdin lines) to TOPIC; prints each message's position."""
    properties: dict[str, str] = {}
    for item in prop or []:
        name, sep, text = item.partition("=")
        if not sep:
            _fail(f"--property wants NAME=VALUE, got {item!r}")
        properties[name] = text
    source: Iterable[str] = values if values else _stdin_values()
    size = len(values) if values else batch_size
    positions: list[str] = []
    duplicate = False
    with _Client(url) as client:
        for batch in _batches(source, max(size, 1)):
            body: dict[str, Any] = {
                "messages": [
                    {"value": _parse_value(text), "key": key, "properties": properties}
                    for text in batch
                ]
            }
            if txn is not None:
                body["txn"] = txn
            _, data = client.call("POST", f"/v1/topics/{_seg(topic)}/messages", body=body)
            positions.extend(data["positions"])
            duplicate = duplicate or bool(data.get("duplicate"))
            if not as_json:
                for position in data["positions"]:
                    typer.echo(position)
    if as_json:
        _print_json({"positions": positions, "duplicate": duplicate})


# -- consume


@app.command()
def consume(
    topic: str,
    sub: str,
    sub_type: Annotated[
        str, typer.Option("--type", help="exclusive, failover, shared or key_shared.")
    ] = "exclusive",
    isolation: Annotated[
        str, typer.Option(help="read_committed or read_uncommitted.")
    ] = "read_committed",
    initial_position: Annotated[str, typer.Option(help="earliest or latest.")] = "earliest",
    consumer: Annotated[str, typer.Option(help="Consumer name.")] = "default",
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max", min=1, help="Stop after this many messages (default 100; --follow: no limit)."
        ),
    ] = None,
    wait_ms: Annotated[
        int, typer.Option(min=0, max=30_000, help="Wait this long for the first message.")
    ] = 1000,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep receiving.")] = False,
    no_ack: Annotated[bool, typer.Option("--no-ack", help="Do not acknowledge.")] = False,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Receive from subscription SUB of TOPIC (created if missing) and acknowledge."""
    limit = max_messages if max_messages is not None else (None if follow else 100)
    base = f"/v1/topics/{_seg(topic)}/subscriptions/{_seg(sub)}"
    settings = {"type": sub_type, "initial_position": initial_position, "isolation": isolation}
    received = 0
    try:
        with _Client(url) as client:
            client.call("PUT", base, body=settings)
            while limit is None or received < limit:
                want = 1000 if limit is None else min(1000, limit - received)
                wait = max(wait_ms, 5000) if follow else wait_ms
                params = {"consumer": consumer, "max": want, "wait_ms": wait}
                _, data = client.call("GET", f"{base}/messages", params=params)
                messages = data["messages"]
                for message in messages:
                    if as_json:
                        _print_json(message)
                    else:
                        key = _dash(message.get("key"))
                        typer.echo(f"{message['position']}\t{key}\t{_show_value(message)}")
                received += len(messages)
                if messages and not no_ack:
                    positions = [m["position"] for m in messages]
                    client.call("POST", f"{base}/ack", body={"positions": positions})
                if not follow:
                    break
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# -- transactions


def _show_txn(data: dict[str, Any]) -> None:
    typer.echo(f"txn: {data.get('txn')}")
    typer.echo(f"state: {data.get('state')}")
    typer.echo(f"label: {_dash(data.get('label'))}")
    typer.echo(f"topics: {', '.join(data.get('topics') or []) or '-'}")
    if data.get("fenced"):
        typer.echo("fenced: yes")
    if data.get("timeout_ms") is not None:
        typer.echo(f"timeout_ms: {data.get('timeout_ms')}")


@txn_app.command("begin")
def txn_begin(
    timeout_ms: Annotated[
        int | None, typer.Option(min=1, max=900_000, help="Abort after this long.")
    ] = None,
    label: Annotated[str | None, typer.Option(help="Free text to find it later.")] = None,
    transactional_id: Annotated[
        str | None, typer.Option(help="Fences any open transaction with the same id.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Begin a transaction and print its id."""
    body: dict[str, Any] = {}
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms
    if label is not None:
        body["label"] = label
    if transactional_id is not None:
        body["transactional_id"] = transactional_id
    with _Client(url) as client:
        _, data = client.call("POST", "/v1/transactions", body=body)
    if as_json:
        _print_json(data)
    else:
        typer.echo(data["txn"])


def _end_txn(txn: str, action: str, url: str, as_json: bool) -> None:
    with _Client(url) as client:
        _, data = client.call("POST", f"/v1/transactions/{_seg(txn)}/{action}")
    if as_json:
        _print_json(data)
    else:
        typer.echo(f"{data.get('state')} {data.get('txn')}")


@txn_app.command("commit")
def txn_commit(txn: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Commit transaction TXN (its messages become visible)."""
    _end_txn(txn, "commit", url, as_json)


@txn_app.command("abort")
def txn_abort(txn: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Abort transaction TXN (its messages are dropped)."""
    _end_txn(txn, "abort", url, as_json)


@txn_app.command("show")
def txn_show(txn: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Show transaction TXN."""
    with _Client(url) as client:
        _, data = client.call("GET", f"/v1/transactions/{_seg(txn)}")
    if as_json:
        _print_json(data)
    else:
        _show_txn(data)


@txn_app.command("list")
def txn_list(
    state: Annotated[str | None, typer.Option(help="Only transactions in this state.")] = None,
    label_prefix: Annotated[str | None, typer.Option(help="Only labels with this prefix.")] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """List transactions: id, state, label."""
    params = {k: v for k, v in (("state", state), ("label_prefix", label_prefix)) if v is not None}
    with _Client(url) as client:
        _, data = client.call("GET", "/v1/transactions", params=params)
    if as_json:
        _print_json(data)
        return
    for item in data["transactions"]:
        typer.echo(f"{item['txn']}\t{item['state']}\t{_dash(item.get('label'))}")
