"""httpx's default transports, with TLS set up on the first ``https://`` request.

httpx builds a client's TLS context when the client is made, loading the whole CA bundle
(certifi): ~240 M instructions, over a quarter of a ``txnstream topics list`` against
an ``http://`` server, which never uses it (issue 31, item 3). These transports send
``http://`` requests through a pool made without it and make httpx's own default
transport (``verify=True``, the client's ``trust_env``) for the first ``https://`` one:
TLS is verified exactly as before, only later. (The plain pool is made with
``verify=False`` because that is httpx's way to a context that loads nothing; it never
carries a TLS connection.)
"""

from __future__ import annotations

import threading

import httpx


class TransportTlsOnDemand(httpx.BaseTransport):
    """The blocking client's transport (its client may be shared by threads)."""

    def __init__(self, *, trust_env: bool) -> None:
        self._trust_env = trust_env
        self._plain = httpx.HTTPTransport(verify=False)  # http:// only, never TLS: see above
        self._tls: httpx.HTTPTransport | None = None
        self._making = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return self._plain.handle_request(request)
        if self._tls is None:
            with self._making:  # one pool, not one per thread that got here first
                if self._tls is None:
                    self._tls = httpx.HTTPTransport(trust_env=self._trust_env)
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


class AsyncTransportTlsOnDemand(httpx.AsyncBaseTransport):
    """The asyncio client's transport."""

    def __init__(self, *, trust_env: bool) -> None:
        self._trust_env = trust_env
        self._plain = httpx.AsyncHTTPTransport(verify=False)  # http:// only, never TLS: see above
        self._tls: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return await self._plain.handle_async_request(request)
        if self._tls is None:
            self._tls = httpx.AsyncHTTPTransport(trust_env=self._trust_env)
        return await self._tls.handle_async_request(request)

    async def aclose(self) -> None:
        await self._plain.aclose()
        if self._tls is not None:
            await self._tls.aclose()
