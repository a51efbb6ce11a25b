"""``txnstream serve``: uvicorn over the HTTP app, the engine opened in the lifespan.

The engine opens on lifespan startup and closes on lifespan shutdown, which uvicorn runs
on SIGTERM/SIGINT only after it has stopped accepting connections and finished the
requests in flight (pending long polls are cut short through the app's ``Drain``), so
every acknowledged write is durable and the engine closes cleanly.

The HTTP app and uvicorn are imported when a server is made, not with the command line:
the client commands start faster without them.

Access (issue 11): ``--auth FILE`` turns tokens on (the file is re-read on SIGHUP);
without it a non-loopback ``--host`` is refused unless ``--insecure``. The Host rule
(loopback binds), the Origin rule (``--cors-origin``) and HTTPS (``--tls-cert``,
``--tls-key``) are in :func:`make_server`'s options.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import stat
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from txnstream.api import DB_FILE, Engine, EngineConfig, EngineError

from ._common import fail
from ._config_flags import SERVE_DEFAULTS, with_config_flags
from ._connections import bounded_protocol, raise_file_limit
from ._logging import log_config, startup_banner

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from txnstream.api.http import AccessPolicy

__all__ = ["make_server", "serve"]

log = logging.getLogger("txnstream.cli")


class _ServedApp:
    """ASGI app of ``serve``: the engine opens in lifespan startup, closes in shutdown."""

    def __init__(
        self, data: Path, config: EngineConfig, access: AccessPolicy | None = None, url: str = ""
    ) -> None:
        from txnstream.api.http import Drain

        self.data = data
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

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        from txnstream.api.http import create_app

        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self._engine = await Engine.open(self.data, config=self.config)
                except (OSError, EngineError) as exc:  # a known cause: one line says it all
                    log.error("cannot open the engine at %s: %s", self.data, exc)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                except Exception as exc:
                    log.exception("cannot open the engine at %s", self.data)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                self._app = create_app(
                    self._engine, drain=self.drain, access=self.access, **self.app_options
                )
                self._watch_sighup(True)
                banner, fields = startup_banner(self._engine, self.url)
                log.info("%s", banner, extra=fields)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._watch_sighup(False)
                await asyncio.gather(*self._reloads, return_exceptions=True)
                self.drain.start()
                if self._engine is not None:
                    await self._engine.close()
                    log.info("engine closed")
                await send({"type": "lifespan.shutdown.complete"})
                return

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
    data: Path,
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
) -> Any:
    """A ``uvicorn.Server`` for ``serve`` (the tests also run one in a thread).

    ``access`` defaults to :func:`access_policy` of ``host`` (no tokens); ``tls_cert``
    and ``tls_key`` (PEM files) serve HTTPS. ``log_config`` (see :func:`log_config`)
    replaces uvicorn's own logging setup; without it the process's logging is left as
    it is. ``header_timeout`` is the seconds a request's head may take, and the grace
    before a body must arrive at its minimum rate (see ``_connections``). Raises
    ``ValueError`` for settings :class:`~txnstream.api.EngineConfig` refuses.
    """
    import uvicorn

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
    served = _ServedApp(data, EngineConfig(**settings), access, f"{scheme}://{shown_host}:{port}")
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


def serve(
    data: Annotated[
        Path, typer.Option("--data", help="Data directory (created if missing).")
    ] = Path("./data"),
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    log_level: Annotated[
        str, typer.Option(help="critical, error, warning, info or debug.")
    ] = "info",
    auth: Annotated[
        Path | None,
        typer.Option(
            "--auth",
            envvar="TXNSTREAM_AUTH_FILE",
            show_envvar=True,
            help="Principals file (JSON): require bearer tokens. Re-read on SIGHUP.",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(help="Allow a non-loopback --host without --auth (anyone may do anything)."),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="Another Host name to answer on a loopback bind (repeatable)."),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(help="An Origin allowed to call from a browser, e.g. https://ui.example."),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve HTTPS (with --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log one line per HTTP request.")
    ] = False,
    log_format: Annotated[
        str, typer.Option("--log-format", help="text, or json (one object per line).")
    ] = "text",
    limit_concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="TXNSTREAM_LIMIT_CONCURRENCY",
            help="Open connections at most: past it a new connection gets 503 and is closed"
            " at once while the open ones keep being served.",
        ),
    ] = 1000,
    timeout_keep_alive: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="TXNSTREAM_TIMEOUT_KEEP_ALIVE",
            help="Seconds a connection may stay idle (before its first request too).",
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
    engine_settings: dict[str, Any] | None = None,
) -> None:
    """Serve the HTTP API on HOST:PORT over the engine in DATA (until SIGTERM/SIGINT).

    Every engine setting is an option too (`--min-free-bytes`, `--snapshot-every`, ...)
    and an environment variable (`TXNSTREAM_MIN_FREE_BYTES`, ...).
    """
    if data.exists() and not data.is_dir():
        fail(f"--data {data}: not a directory")
    level = log_level.lower()
    if level not in ("critical", "error", "warning", "info", "debug"):
        fail("--log-level must be one of critical, error, warning, info, debug")
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
    if log_format not in ("text", "json"):
        fail("--log-format must be 'text' or 'json'")
    logs = log_config(level, "json" if log_format == "json" else "text", access_log)
    files = raise_file_limit()
    asked = limit_concurrency
    if limit_concurrency > files - 64:  # leave room for the database, logs and pipes
        limit_concurrency = max(1, files - 64)
    try:
        server = make_server(
            data,
            host,
            port,
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
        )
    except ValueError as exc:
        fail(str(exc))
    if (problem := unwritable(data)) is not None:  # after every setting was checked
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
        server.run()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if not server.started:
        raise typer.Exit(3)


serve = with_config_flags(serve)
