"""``txnstream serve``: uvicorn over the HTTP app, the engine opened in the lifespan.

The engine opens on lifespan startup and closes on lifespan shutdown, which uvicorn runs
on SIGTERM/SIGINT only after it has stopped accepting connections and finished the
requests in flight (pending long polls are cut short through the app's ``Drain``), so
every acknowledged write is durable and the engine closes cleanly.

The HTTP app and uvicorn are imported when a server is made, not with the command line:
the client commands start faster without them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from api import Engine, EngineConfig

from ._common import fail

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["make_server", "serve"]

log = logging.getLogger("txnstream.cli")


class _ServedApp:
    """ASGI app of ``serve``: the engine opens in lifespan startup, closes in shutdown."""

    def __init__(self, data: Path, config: EngineConfig) -> None:
        from api.http import Drain

        self.data = data
        self.config = config
        self.drain = Drain()
        self._app: ASGIApp | None = None
        self._engine: Engine | None = None

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
        from api.http import create_app

        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self._engine = await Engine.open(self.data, config=self.config)
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


def make_server(
    data: Path,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    durability: str = "full",
    offload_url: str | None = None,
    ledger_max_entries: int | None = None,
) -> Any:
    """A ``uvicorn.Server`` for ``serve`` (the tests also run one in a thread).

    Raises ``ValueError`` for settings :class:`~api.EngineConfig` refuses.
    """
    import uvicorn

    settings: dict[str, Any] = {"durability": durability, "offload_url": offload_url}
    if ledger_max_entries is not None:
        settings["ledger_max_entries"] = ledger_max_entries
    served = _ServedApp(data, EngineConfig(**settings))

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
    offload_url: Annotated[
        str | None,
        typer.Option(
            "--offload-url",
            help="Object store for offloaded ledgers: a directory (file:///dir or a path)"
            " or s3://bucket/prefix (credentials and endpoint from AWS_* variables).",
        ),
    ] = None,
    ledger_max_entries: Annotated[
        int | None,
        typer.Option(
            "--ledger-max-entries", min=1, help="Entries per ledger before a new one starts."
        ),
    ] = None,
) -> None:
    """Serve the HTTP API on HOST:PORT over the engine in DATA (until SIGTERM/SIGINT)."""
    if durability not in ("full", "normal"):
        fail("--durability must be 'full' or 'normal'")
    level = log_level.lower()
    if level not in ("critical", "error", "warning", "info", "debug"):
        fail("--log-level must be one of critical, error, warning, info, debug")
    try:
        server = make_server(
            data,
            host,
            port,
            log_level=level,
            durability=durability,
            offload_url=offload_url,
            ledger_max_entries=ledger_max_entries,
        )
    except ValueError as exc:
        fail(str(exc))
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
