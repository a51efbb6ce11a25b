"""``txnstream serve``: uvicorn over the HTTP app, the engine opened in the lifespan.

The engine opens on lifespan startup and closes on lifespan shutdown, which uvicorn runs
on SIGTERM/SIGINT only after it has stopped accepting connections and finished the
requests in flight (pending long polls are cut short through the app's ``Drain``), so
every acknowledged write is durable and the engine closes cleanly.

``serve`` binds its port and opens the engine before uvicorn starts, so a port in use or
a data directory locked by another server is one line and exit 3, before any "serving"
line. The engine, the HTTP app and uvicorn are imported when a server is made, not with
the command line: the client commands start faster without them.

Access (issue 11): ``--auth FILE`` turns tokens on (the file is re-read on SIGHUP);
without it a non-loopback ``--host`` is refused unless ``--insecure``. The Host rule
(loopback binds), the Origin rule (``--cors-origin``) and HTTPS (``--tls-cert``,
``--tls-key``) are in :func:`make_server`'s options.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import socket
import ssl
import stat
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from txnstream.api import EngineError

from ._common import fail
from ._config_flags import SERVE_DEFAULTS, serve_options

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from txnstream.api import Engine, EngineConfig
    from txnstream.api.http import AccessPolicy
    from txnstream.api.kafka import KafkaListener

KafkaAddresses = tuple[tuple[str, int], tuple[str, int] | None]
"""The Kafka listener's bind address and the address it advertises (None: the bind)."""

__all__ = ["make_server", "serve"]

log = logging.getLogger("txnstream.cli")


class _ServedApp:
    """ASGI app of ``serve``: the engine opens in lifespan startup, closes in shutdown."""

    def __init__(
        self,
        data: Path | str,
        config: EngineConfig,
        access: AccessPolicy | None = None,
        url: str = "",
        kafka: KafkaAddresses | None = None,
        kafka_tls: ssl.SSLContext | None = None,
    ) -> None:
        from txnstream.api.http import Drain

        self.kafka = kafka
        self.kafka_tls = kafka_tls
        self.kafka_socket: socket.socket | None = None
        """The Kafka listener's socket, bound before the engine opened (None: bind it at
        start)."""
        self._kafka: KafkaListener | None = None
        self.data = data
        # what logs and errors name: a store URL without its password
        self.shown = (
            str(data)
            if isinstance(data, Path)
            else re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", data)
        )
        self.config = config
        self.access = access
        self.url = url
        self.drain = Drain()
        self.app_options: dict[str, Any] = {}
        self._reloads: set[asyncio.Task[bool]] = set()
        self._app: ASGIApp | None = None
        self._engine: Engine | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        inner = self._app
        if inner is None:  # uvicorn serves only after startup completed; be safe anyway
            from txnstream.api.http import send_error

            await send_error(send, 503, "unavailable", "the engine is not open")
            return
        await inner(scope, receive, send)

    async def open_engine(self) -> Engine:
        """Open the engine (once; ``serve`` does it before uvicorn starts)."""
        from txnstream.api import Engine

        if self._engine is None:
            # A PostgreSQL store another server holds: wait as its standby.
            self._engine = await Engine.open(self.data, config=self.config, standby=True)
        return self._engine

    async def close_engine(self) -> None:
        """Close the engine if it is open."""
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.close()
            log.info("engine closed")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        from txnstream.api.http import create_app

        from ._logging import startup_banner

        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    engine = await self.open_engine()
                except Exception as exc:
                    log.exception("cannot open the engine at %s", self.shown)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                self._app = create_app(
                    engine, drain=self.drain, access=self.access, **self.app_options
                )
                if not await self._start_kafka(engine, send):
                    return
                self._watch_sighup(True)
                banner, fields = startup_banner(engine, self.url)
                log.info("%s", banner, extra=fields)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._watch_sighup(False)
                await asyncio.gather(*self._reloads, return_exceptions=True)
                self.drain.start()
                if self._kafka is not None:
                    await self._kafka.stop()  # before the engine: its requests finish first
                await self.close_engine()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start_kafka(self, engine: Engine, send: Send) -> bool:
        """Start the Kafka listener if asked (False: it cannot bind; startup failed)."""
        if self.kafka is None:
            return True
        from txnstream.api.kafka import KafkaListener

        (host, port), advertise = self.kafka
        auth = None if self.access is None else self.access.auth
        listener = KafkaListener(
            engine,
            host,
            port,
            advertise=advertise,
            sock=self.kafka_socket,
            # SASL/PLAIN: the user is the principal's name, the password its token
            authenticate=None if auth is None else (lambda _user, token: auth.identify(token)),
            tls=self.kafka_tls,
        )
        try:
            await listener.start()
        except OSError as exc:
            log.error("cannot listen for Kafka clients on %s:%d: %s", host, port, exc)
            await engine.close()
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return False
        self._kafka = listener
        return True

    def _watch_sighup(self, on: bool) -> None:
        """Re-read the auth file on SIGHUP (signals reach only the main thread's loop)."""
        auth = None if self.access is None else self.access.auth
        if auth is None or threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        if on:
            loop.add_signal_handler(signal.SIGHUP, self._reload)
        else:
            loop.remove_signal_handler(signal.SIGHUP)

    def _reload(self) -> None:
        auth = None if self.access is None else self.access.auth
        assert auth is not None
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(auth.reload), name="txnstream-auth-reload"
        )
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)


def unwritable(data: Path) -> str | None:
    """Why ``serve`` could not write to the data directory (None if it can): probed by
    writing, since a read-only mount or another owner's files refuse root too."""
    from txnstream.api.support import DB_FILE

    try:
        data.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=data):
            pass
        if (data / DB_FILE).exists():
            with (data / DB_FILE).open("ab"):
                pass
    except OSError as exc:
        return f"--data {data}: cannot write there: {exc.strerror or exc}"
    return None


def world_readable(paths: Sequence[Path | None]) -> list[Path]:
    """The secret files among ``paths`` (auth file, TLS key) that any local user may read."""
    return [p for p in paths if p is not None and p.stat().st_mode & stat.S_IROTH]


def check_bind(host: str, *, auth: bool, insecure: bool) -> str | None:
    """Why ``serve`` must not listen on ``host`` (None if it may): a non-loopback address
    needs ``--auth``, or ``--insecure`` to serve anyone who can reach the port."""
    from txnstream.api.http import is_loopback

    if auth or insecure or is_loopback(host):
        return None
    return (
        f"refusing to listen on {host} without authentication: anyone who can reach the port"
        " could read, write and delete everything. Pass --auth FILE (make tokens with"
        " `txnstream auth token`), or --insecure to serve without authentication anyway"
    )


def access_policy(
    host: str,
    *,
    auth_file: Path | None = None,
    allowed_hosts: Sequence[str] = (),
    cors_origins: Sequence[str] = (),
) -> AccessPolicy:
    """The access policy of a server on ``host``; raises ``ValueError`` for a bad file."""
    from txnstream.api.http import AccessPolicy, Authenticator

    auth = None if auth_file is None else Authenticator.from_file(auth_file)
    return AccessPolicy.for_bind(
        host, auth=auth, allowed_hosts=allowed_hosts, cors_origins=cors_origins
    )


def make_server(
    data: Path | str,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    durability: str = "full",
    access: AccessPolicy | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    log_config: dict[str, Any] | None = None,
    offload_url: str | None = None,
    ledger_max_entries: int | None = None,
    engine_settings: dict[str, Any] | None = None,
    limit_concurrency: int | None = None,
    timeout_keep_alive: int = 30,
    header_timeout: float = 10.0,
    max_inflight_body_bytes: int | None = None,
    kafka: KafkaAddresses | None = None,
    kafka_socket: socket.socket | None = None,
) -> Any:
    """A ``uvicorn.Server`` for ``serve`` (the tests also run one in a thread).

    ``access`` defaults to :func:`access_policy` of ``host`` (no tokens); ``tls_cert``
    and ``tls_key`` (PEM files) serve HTTPS. ``log_config`` (see :func:`log_config`)
    replaces uvicorn's own logging setup; without it the process's logging is left as
    it is. ``header_timeout`` is the seconds a request's head may take, and the grace
    before a body must arrive at its minimum rate (see ``_connections``). ``kafka`` (the
    Kafka listener's bind and advertised addresses) serves Kafka clients too, on
    ``kafka_socket`` if given (bound already). Raises
    ``ValueError`` for settings :class:`~txnstream.api.EngineConfig` refuses.
    """
    import uvicorn

    from txnstream.api import EngineConfig

    from ._connections import bounded_protocol

    if access is None:
        access = access_policy(host)
    shown_host = f"[{host}]" if ":" in host else host
    scheme = "https" if tls_cert is not None else "http"
    settings: dict[str, Any] = {
        **SERVE_DEFAULTS,
        "durability": durability,
        "offload_url": offload_url,
    }
    if ledger_max_entries is not None:
        settings["ledger_max_entries"] = ledger_max_entries
    settings.update(engine_settings or {})
    url = f"{scheme}://{shown_host}:{port}"
    if settings.get("advertise_url") is None:  # where standbys send clients
        settings["advertise_url"] = url
    if kafka is not None:  # where standbys send Kafka clients (the lease row says it)
        from txnstream.api.kafka import format_address

        bind, shown = kafka
        if kafka_socket is not None:
            bind = bind[0], kafka_socket.getsockname()[1]
        kafka = bind, shown or bind
        settings["kafka_advertise"] = format_address(*(shown or bind))
    else:
        settings["kafka_advertise"] = None  # no listener: nothing to send Kafka clients to
    kafka_tls = None
    if kafka is not None and tls_cert is not None and tls_key is not None:
        kafka_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # the same pair
        try:
            kafka_tls.load_cert_chain(tls_cert, tls_key)
        except OSError as exc:  # ssl.SSLError included
            raise ValueError(f"--tls-cert/--tls-key cannot be loaded: {exc}") from None
    served = _ServedApp(data, EngineConfig(**settings), access, url, kafka, kafka_tls)
    served.kafka_socket = kafka_socket
    if max_inflight_body_bytes is not None:
        served.app_options["max_inflight_body_bytes"] = max_inflight_body_bytes

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
        log_config=log_config,
        access_log=False,  # the app's own access log (txnstream.access) has more to say
        timeout_graceful_shutdown=35,
        timeout_keep_alive=timeout_keep_alive,
        # our own bounds (see _connections): refuses new connections, not the open ones,
        # and times out slow heads
        http=bounded_protocol(limit_concurrency, header_timeout),
        ssl_certfile=None if tls_cert is None else str(tls_cert),
        ssl_keyfile=None if tls_key is None else str(tls_key),
    )
    return _Server(config)


LogLevel = Literal["critical", "error", "warning", "info", "debug"]


def serve(
    data: Annotated[
        Path | None,
        typer.Option(
            "--data", metavar="DIR", help="Data directory (created if missing). [default: ./data]"
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="URL",
            help="A PostgreSQL store (postgresql://user@host:port/db) instead of --data:"
            " several servers may serve it, one active, the others standbys taking over.",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on; one that is not loopback needs --auth or --insecure."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free one).")] = 8080,
    log_level: Annotated[
        LogLevel, typer.Option(case_sensitive=False, help="The least severe level logged.")
    ] = "info",
    auth: Annotated[
        Path | None,
        typer.Option(
            "--auth",
            metavar="FILE",
            envvar="TXNSTREAM_AUTH_FILE",
            help="Principals file (JSON): require bearer tokens. Re-read on SIGHUP.",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Allow a non-loopback --host without --auth (anyone may do anything).",
        ),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="HOST",
            help="Another Host name to answer on a loopback bind (repeatable; the variable"
            " takes several, space-separated).",
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ORIGIN",
            help="An Origin allowed to call from a browser, e.g. https://ui.example"
            " (repeatable; the variable takes several, space-separated).",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="PEM certificate: serve HTTPS (with --tls-key)."),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(metavar="FILE", help="PEM private key of --tls-cert.")
    ] = None,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log one line per HTTP request.")
    ] = False,
    log_format: Annotated[
        Literal["text", "json"],
        typer.Option("--log-format", help="text, or json (one object per line)."),
    ] = "text",
    limit_concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            help="Open connections at most: past it a new connection gets 503 and is closed"
            " at once while the open ones keep being served.",
        ),
    ] = 1000,
    timeout_keep_alive: Annotated[
        int,
        typer.Option(
            min=1, help="Seconds a connection may stay idle (before its first request too)."
        ),
    ] = 30,
    header_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            envvar="TXNSTREAM_HEADER_TIMEOUT",
            help="Seconds a request's headers may take to arrive (else 408 and closed); also"
            " the grace after which a body must arrive at 64 KiB/s on average (else 408).",
        ),
    ] = 10.0,
    max_inflight_body_bytes: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="TXNSTREAM_MAX_INFLIGHT_BODY_BYTES",
            help="Request body bytes all requests in progress may hold together: past it a"
            " request with a body gets 503 before it is read.",
        ),
    ] = 256 * 1024 * 1024,
    kafka_listen: Annotated[
        str | None,
        typer.Option(
            "--kafka-listen",
            envvar="TXNSTREAM_KAFKA_LISTEN",
            show_envvar=True,
            help="HOST:PORT: also serve Kafka clients there (off when absent).",
        ),
    ] = None,
    engine_settings: dict[str, Any] | None = None,
) -> None:
    """Serve the HTTP API on HOST:PORT over the engine in DATA (until SIGTERM/SIGINT).

    Every option is also an environment variable (`TXNSTREAM_PORT`, ...) and a key of
    the `--config` file; every engine setting is an option too (`--min-free-bytes`,
    `--snapshot-every`, ...). A start that fails (the port in use, the data directory
    locked by another server) prints one line and exits 3.
    """
    from ._connections import raise_file_limit
    from ._logging import log_config

    if data is not None and store is not None:
        fail("--data and --store are exclusive: give a data directory or a store URL", 2)
    location: Path | str
    if store is not None:
        if not store.startswith(("postgresql://", "postgres://")):
            fail(f"--store {store}: not a postgresql:// URL", 2)
        location = store
    else:
        location = data = data if data is not None else Path("./data")
        if data.exists() and not data.is_dir():
            fail(f"--data {data}: not a directory")
    level = log_level.lower()
    refused = check_bind(host, auth=auth is not None, insecure=insecure)
    if refused is not None:
        fail(refused, 2)
    if (tls_cert is None) != (tls_key is None):
        fail("--tls-cert and --tls-key go together", 2)
    for pem in (tls_cert, tls_key):
        if pem is not None and not pem.is_file():
            fail(f"no such file: {pem}", 2)
    try:
        access = access_policy(
            host, auth_file=auth, allowed_hosts=allowed_host or (), cors_origins=cors_origin or ()
        )
    except ValueError as exc:
        fail(str(exc), 2)
    kafka_advertise = (engine_settings or {}).get("kafka_advertise")
    kafka = _kafka_addresses(kafka_listen, kafka_advertise, insecure or auth is not None)
    logs = log_config(level, log_format, access_log)
    files = raise_file_limit()
    asked = limit_concurrency
    if limit_concurrency > files - 64:  # leave room for the database, logs and pipes
        limit_concurrency = max(1, files - 64)
    listener = listen_socket(host, port)
    kafka_socket = None
    if kafka is not None:  # bound now too: its port is in the lease before the engine opens
        (kafka_host, kafka_port), shown = kafka
        kafka_socket = listen_socket(kafka_host, kafka_port)
        kafka = (kafka_host, kafka_socket.getsockname()[1]), shown
    try:
        server = make_server(
            location,
            host,
            listener.getsockname()[1],
            log_level=level,
            access=access,
            tls_cert=tls_cert,
            tls_key=tls_key,
            log_config=logs,
            engine_settings=engine_settings,
            limit_concurrency=limit_concurrency,
            timeout_keep_alive=timeout_keep_alive,
            header_timeout=header_timeout,
            max_inflight_body_bytes=max_inflight_body_bytes,
            kafka=kafka,
            kafka_socket=kafka_socket,
        )
    except ValueError as exc:
        listener.close()
        if kafka_socket is not None:
            kafka_socket.close()
        fail(str(exc))
    if data is not None and (problem := unwritable(data)) is not None:  # after every check
        fail(problem)
    if limit_concurrency < asked:
        log.warning(
            "--limit-concurrency %d needs more open files than this process may have (%d):"
            " serving at most %d connections (raise the limit with ulimit -n)",
            asked,
            files,
            limit_concurrency,
        )
    for secret in world_readable((auth, tls_key)):
        log.warning("%s is readable by every local user: chmod o-r %s", secret, secret)
    if access.auth is None and check_bind(host, auth=False, insecure=False) is not None:
        log.warning("serving %s without authentication (--insecure)", host)
    elif access.auth is not None:
        log.info("authentication on: %d principal(s) from %s", len(access.auth.names), auth)
    try:
        with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
            runner.run(_run(server, listener))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if not server.started:
        raise typer.Exit(START_FAILED)


START_FAILED = 3
"""``serve``'s exit code when it cannot start (uvicorn's too)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds one), or one line and exit 3.

    Bound before the engine opens, so that a port in use is said at once, before any
    recovery or "serving" line; it listens once the server starts (until then a
    connection is refused, as before).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        shown = f"[{host}]" if ":" in host else host
        fail(f"cannot listen on {shown}:{port}: {exc.strerror or exc}", START_FAILED)
    return sock


async def _run(server: Any, listener: socket.socket) -> None:
    """Open the engine, then serve on ``listener``; an engine that cannot open (another
    server holds the directory, a damaged file) is one line and exit 3."""
    served: _ServedApp = server.config.app
    try:
        await served.open_engine()
    except EngineError as exc:
        listener.close()
        fail(f"cannot open {served.shown}: {exc}", START_FAILED)
    try:
        await server.serve(sockets=[listener])
    finally:
        await served.close_engine()  # if the server stopped before its lifespan's end


serve = serve_options(serve)


def _kafka_addresses(
    listen: str | None, advertise: str | None, allowed_anywhere: bool
) -> KafkaAddresses | None:
    """The checked ``--kafka-listen``/``--kafka-advertise`` pair (exits 2 when bad). As
    for HTTP, a non-loopback bind needs ``--auth`` (then SASL/PLAIN) or ``--insecure``."""
    from txnstream.api.http import is_loopback
    from txnstream.api.kafka import parse_address

    if listen is None:
        if advertise is not None:
            fail("--kafka-advertise needs --kafka-listen", 2)
        return None
    try:
        bind = parse_address(listen, "--kafka-listen")
        shown = None if advertise is None else parse_address(advertise, "--kafka-advertise")
    except ValueError as exc:
        fail(str(exc), 2)
    if not allowed_anywhere and not is_loopback(bind[0]):
        fail(
            f"refusing to serve Kafka clients on {bind[0]} without authentication: pass"
            " --auth FILE (clients then use SASL/PLAIN), or --insecure",
            2,
        )
    return bind, shown
