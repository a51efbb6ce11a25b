"""The Kafka listener: an asyncio TCP server that frames, decodes and answers requests.

Each connection reads size-prefixed frames (at most ``max_frame_bytes``, the HTTP body
limit) and answers them one at a time in order, as a Kafka broker does. A frame that is
too large or does not decode closes that connection only. An ApiVersions request of a
version not served is answered as Kafka does: UNSUPPORTED_VERSION in the v0 layout with
the served versions, the connection kept, so the client retries with one it finds there.
Any other request of an unknown key or version closes the connection.

:meth:`KafkaListener.stop` stops accepting, lets requests being answered finish (long
polls answer at once), closes idle connections, and waits for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from typing import Any

from txnstream.api import Engine

from ._address import format_address, parse_address
from ._apis import APIS
from ._broker import API_VERSIONS_KEY, PRE_AUTH_KEYS, Broker, api_versions_response
from ._codes import ErrorCode
from ._session import SESSION, Authenticate, Session

__all__ = ["KafkaListener", "format_address", "parse_address"]

log = logging.getLogger("txnstream.kafka")

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
_STOP_GRACE = 10.0  # seconds requests in flight get to finish at stop
_PIPELINE = 16  # requests of one connection started and not yet answered, at most


class _Connection:
    """One client connection: its reading task (None once it stopped reading)."""

    __slots__ = ("reading",)

    def __init__(self) -> None:
        self.reading: asyncio.Task[None] | None = None


class KafkaListener:
    """Serves the Kafka protocol on ``host:port`` over ``engine``.

    ``advertise`` is the ``(host, port)`` Metadata and FindCoordinator return (default:
    the engine's ``kafka_advertise``, else the bound address). With ``authenticate``
    (``(user, password)`` -> a principal or None), a connection must authenticate with
    SASL/PLAIN first and the principal's grants apply; with ``tls`` (a server context)
    connections are TLS (SASL_SSL, or SSL without ``authenticate``); ``sock``: a socket
    already bound to ``host:port`` to listen on. Start with :meth:`start`, stop with
    :meth:`stop`.
    """

    def __init__(
        self,
        engine: Engine,
        host: str,
        port: int,
        *,
        advertise: tuple[str, int] | None = None,
        max_frame_bytes: int | None = None,
        authenticate: Authenticate | None = None,
        tls: ssl.SSLContext | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.engine = engine
        self._sock = sock
        self._authenticate = authenticate
        self._tls = tls
        self.host = host
        self.port = port
        self._advertise = advertise
        self.max_frame_bytes = max_frame_bytes or engine.config.max_request_bytes
        self._drain = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # one per connection
        self.broker: Broker | None = None
        self._upkeep: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Bind and start accepting (port 0: a free port, then in :attr:`port`)."""
        if self._sock is not None:  # bound by the caller already (serve binds it early)
            server = await asyncio.start_server(self._serve, sock=self._sock, ssl=self._tls)
        else:
            server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self._tls)
        self._server = server
        self.port = server.sockets[0].getsockname()[1]
        configured = self.engine.config.kafka_advertise  # (what the lease row says)
        host, port = self._advertise or (
            parse_address(configured, "kafka_advertise") if configured else (self.host, self.port)
        )
        self.broker = Broker(self.engine, host, port, self._drain, self._authenticate)
        self._upkeep = asyncio.create_task(self.broker.upkeep(), name="kafka-upkeep")
        log.info(
            "Kafka listener on %s:%d (advertised as %s:%d; %s)",
            self.host,
            self.port,
            host,
            port,
            ("SASL_SSL" if self._tls else "SASL_PLAINTEXT")
            if self._authenticate
            else ("SSL" if self._tls else "PLAINTEXT"),
        )

    async def stop(self) -> None:
        """Stop accepting, finish the requests in flight, close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self._drain.set()
        if self._upkeep is not None:
            self._upkeep.cancel()
            await asyncio.gather(self._upkeep, return_exceptions=True)
        if self.broker is not None:
            await self.broker.groups.close()  # joins and syncs waiting answer now
        for connection in list(self._connections):
            if connection.reading is not None:
                connection.reading.cancel()  # no new requests; those started finish
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_STOP_GRACE)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        log.info("Kafka listener stopped")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests are read and started in order, and answered in order
        by a writer that awaits each response in turn (see :meth:`_read`)."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        connection = _Connection()
        self._connections.add(connection)
        peer = writer.get_extra_info("peername")
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(_PIPELINE)
        reading = connection.reading = asyncio.create_task(
            self._read(reader, answers), name="kafka-reader"
        )
        writing = asyncio.create_task(self._write(answers, writer), name="kafka-writer")
        writing.add_done_callback(lambda _: reading.cancel())  # a failed answer ends reading
        try:
            try:
                await reading
            except (asyncio.IncompleteReadError, ConnectionError):
                pass  # the client went away
            except _Refused as exc:
                log.info("closing Kafka connection from %s: %s", peer, exc)
            except asyncio.CancelledError:
                if not reading.cancelled():
                    raise  # this task itself was cancelled (stop() past its grace)
            connection.reading = None
            if not writing.done():
                await answers.put(None)  # the requests started are answered, then the end
            await writing
        except (ConnectionError, _Refused) as exc:
            log.info("closing Kafka connection from %s: %s", peer, exc)
        except Exception:
            log.exception("Kafka connection from %s failed; closing it", peer)
        finally:
            connection.reading = None
            self._connections.discard(connection)
            self._tasks.discard(task)
            for pending in (reading, writing):
                pending.cancel()
            await asyncio.gather(reading, writing, return_exceptions=True)
            while not answers.empty():  # requests never answered (stop() past its grace)
                if (answer := answers.get_nowait()) is not None:
                    answer.cancel()
                    await asyncio.gather(answer, return_exceptions=True)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read(
        self,
        reader: asyncio.StreamReader,
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
    ) -> None:
        """Read frames and start each request, the next one once the previous allows it
        (a Produce as soon as its records have offsets, anything else once answered).

        Cancelling it (stop()) stops reading; the requests started go on to be answered.
        """
        session = Session()
        SESSION.set(session)  # this task's requests inherit it
        while not self._drain.is_set() and not session.failed:
            (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
            if not _HEAD.size <= size <= self.max_frame_bytes:
                raise _Refused(f"a frame of {size} bytes (the limit is {self.max_frame_bytes})")
            frame = await reader.readexactly(size)
            started = asyncio.Event()
            answer = asyncio.create_task(self._answer(frame, started), name="kafka-request")
            await answers.put(answer)
            gate = asyncio.ensure_future(started.wait())
            try:  # (asyncio.wait never cancels what it waits for)
                await asyncio.wait((answer, gate), return_when=asyncio.FIRST_COMPLETED)
            finally:
                gate.cancel()
            if answer.done() and (answer.cancelled() or answer.exception() is not None):
                return  # the writer reports it and closes the connection

    async def _write(
        self,
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
        writer: asyncio.StreamWriter,
    ) -> None:
        """Write each response in request order until the end mark (None)."""
        while (answer := await answers.get()) is not None:
            response = await answer
            if response is not None:
                if writer.is_closing():  # (uvloop raises RuntimeError on such a write)
                    raise ConnectionResetError("the client closed the connection")
                writer.write(response)
                await writer.drain()

    async def _answer(self, frame: bytes, started: asyncio.Event) -> bytes | None:
        """The framed response to one request frame (None: none expected); ``started``
        is set once the connection's next request may start."""
        api_key, version, correlation_id = _HEAD.unpack_from(frame)
        api = APIS.get(api_key)
        if api is None:
            started.set()
            raise _Refused(f"API key {api_key} is not served")
        if (
            self._authenticate is not None
            and SESSION.get().identity is None
            and api_key not in PRE_AUTH_KEYS
        ):
            started.set()
            raise _Refused(f"API key {api_key} before SASL authentication")
        if not api.min_version <= version <= api.max_version:
            started.set()
            if api_key != API_VERSIONS_KEY:
                raise _Refused(f"API key {api_key} version {version} is not served")
            return _encode(api_versions_response(ErrorCode.UNSUPPORTED_VERSION), 0, correlation_id)
        try:
            request = api.request.decode(frame, version=version, header=True)
        except Exception as exc:  # noqa: BLE001 - any decoding failure: a malformed frame
            started.set()
            raise _Refused(f"a malformed request (key {api_key} v{version}): {exc}") from None
        assert self.broker is not None
        response = await self.broker.handle(api_key, request, version, started)
        if response is None:
            return None
        return _encode(response, version, correlation_id)


def _encode(response: Any, version: int, correlation_id: int) -> bytes:
    response.API_VERSION = version  # before the header: the codec's setter expects none
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


class _Refused(Exception):
    """Why a connection is closed (logged, never sent)."""
