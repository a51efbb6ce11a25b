"""The direct routes (``api/http/_direct.py``) serve a request only as the router would: the
same route, path parameters the route's own validation accepts, and the app's own error
answers; everything else reaches the router unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from hypothesis import example, given
from hypothesis import strategies as st
from starlette.routing import BaseRoute, Match

from txnstream.api import Engine
from txnstream.api.http import create_app
from txnstream.api.http._direct import DirectRoutes, _served

pytestmark = pytest.mark.timeout(120)

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
WORDS = [
    *("v1", "topics", "messages", "batches", "transactions", "commit", "abort", "finish"),
    *("subscriptions", "ack", "stats", "ledgers", "offload", "run", "fetch", "health"),
    *("metrics", "ui", "fragments", "static", "docs", "redoc", "openapi.json", "orders"),
    *("__hidden", "_x", ".", "..", "a.b-c_d", "x" * 200, "x" * 201, "é", "a\nb", "a\n", ""),
]
segments = st.sampled_from(WORDS) | st.text(alphabet="ab._-\n_é%", max_size=4)
paths = st.lists(segments, min_size=0, max_size=7).map(lambda parts: "/" + "/".join(parts))
# paths that match a route's shape, so the interesting cases are not left to chance
shaped = st.sampled_from(
    [
        "/v1/topics/{}/messages",
        "/v1/topics/{}",
        "/v1/topics/{}/stats",
        "/v1/transactions/{}",
        "/v1/transactions/{}/commit",
        "/v1/transactions/{}/abort",
        "/v1/topics/{}/subscriptions/{}",
        "/ui/topics/{}",
    ]
).flatmap(lambda shape: st.lists(segments, min_size=2, max_size=2).map(lambda n: shape.format(*n)))


@pytest.fixture(scope="module")
def app_routes(tmp_path_factory: pytest.TempPathFactory) -> Any:
    async def build() -> Any:
        async with Engine.open(tmp_path_factory.mktemp("direct") / "data") as engine:
            return create_app(engine)

    return asyncio.run(build())


def _router_pick(routes: list[BaseRoute], method: str, path: str) -> BaseRoute | None:
    """The route Starlette's router serves: the first that matches fully."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    return next((r for r in routes if r.matches(scope)[0] is Match.FULL), None)


def _valid_params(route: APIRoute, params: dict[str, str]) -> bool:
    """Whether FastAPI's validation of the path parameters accepts them all."""
    return all(
        not param.validate(params[param.name], loc=("path", param.name))[1]
        for param in route.dependant.path_params
    )


@given(path=paths | shaped)
@example(path="/v1/topics/orders/messages")
@example(path="/v1/topics/__hidden/messages")
@example(path="/v1/topics/orders\n/messages")
@example(path="/v1/topics/" + "x" * 201)
@example(path="/v1/transactions/finish")
@example(path="/v1/transactions/finish/commit")
@example(path="/v1/topics/t/subscriptions/s/messages")
def test_direct_routes_take_exactly_the_requests_the_router_would_give_its_routes(
    app_routes: Any, path: str
) -> None:
    routes = app_routes.routes
    direct = DirectRoutes(app_routes, app_routes.router, app_routes.exception_handlers)
    for method in METHODS:
        found = direct._find(method, path)
        pick = _router_pick(routes, method, path)
        if found is not None:
            route, params = found
            assert route is pick
            assert _valid_params(route, params)
        elif isinstance(pick, APIRoute) and _served(pick) is not None:
            # a route served directly, left to the router: only for a refused parameter
            params = pick.matches({"type": "http", "method": method, "path": path})[1]
            assert not _valid_params(pick, params["path_params"])


@pytest.fixture
async def engine(tmp_path: Path) -> Any:
    async with Engine.open(tmp_path / "data") as eng:
        await eng.create_topic("t")
        yield eng


async def test_served_routes_answer_errors_and_label_metrics_as_the_router_did(
    engine: Any,
) -> None:
    app = create_app(engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://txnstream") as http:
        ok = await http.post("/v1/topics/t/messages", json={"messages": [{"value": 1}]})
        assert ok.status_code == 200
        assert ok.json() == {"positions": ["0:0"], "duplicate": False}
        assert ok.headers["x-request-id"]
        missing = await http.post("/v1/topics/nope/messages", json={"messages": [{"value": 1}]})
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        assert missing.headers["x-request-id"]
        bad_name = await http.post("/v1/topics/__t/messages", json={"messages": [{"value": 1}]})
        assert bad_name.status_code == 400
        assert "invalid topic name" in bad_name.json()["error"]["message"]
        unknown_txn = await http.post("/v1/transactions/txn-999/commit")
        assert unknown_txn.status_code == 404
        bad_begin = await http.post("/v1/transactions", json={"timeout_ms": "1000"})
        assert bad_begin.status_code == 400
        assert bad_begin.json()["error"]["code"] == "invalid_request"
        begun = await http.post("/v1/transactions", content=b"")
        assert begun.status_code == 201
        form = {"content-type": "application/x-www-form-urlencoded"}  # curl -d ''
        assert (await http.post("/v1/transactions", content=b"", headers=form)).status_code == 201
        metrics = (await http.get("/metrics")).text
    produced = 'route="/v1/topics/{topic}/messages",status="200"'
    assert any(produced in line and "requests_total" in line for line in metrics.splitlines())
    assert any('route="/v1/transactions",status="201"' in line for line in metrics.splitlines())


async def test_an_unexpected_failure_is_the_edges_json_500_on_either_side_of_the_direct_routes(
    engine: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """FastAPI's own layers sit inside the direct routes and its plain-text 500 page is left out:
    a failure in a route served directly and in one it leaves to the router is the
    edge's logged JSON 500 with the request id, nothing else."""

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    async def broken_pages(*args: Any, **kwargs: Any) -> AsyncIterator[list[Any]]:
        raise RuntimeError("disk on fire")
        yield []  # an async generator, as the engine's

    monkeypatch.setattr(engine, "get_transaction", broken)  # GET /v1/transactions/{txn}
    monkeypatch.setattr(engine, "iter_transactions", broken_pages)  # GET /v1/transactions
    app = create_app(engine)
    layer = app.build_middleware_stack()
    layers = []
    while layer is not None:
        layers.append(type(layer).__name__)
        layer = getattr(layer, "app", None)
    assert layers[0] == "EdgeMiddleware"
    assert "ServerErrorMiddleware" not in layers
    assert layers.index("DirectRoutes") < layers.index("ExceptionMiddleware")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://txnstream") as http:
        served = await http.get("/v1/transactions/txn-1")
        routed = await http.get("/v1/transactions", params={"state": "open"})
    for response in (served, routed):
        assert response.status_code == 500
        assert response.headers["content-type"] == "application/json"
        request_id = response.headers["x-request-id"]
        error = response.json()["error"]
        assert error["code"] == "internal"
        assert request_id in error["message"]
        assert "disk on fire" not in response.text
        assert any(request_id in r.getMessage() and r.exc_info for r in caplog.records)
