"""The API's own documentation: ``/docs`` and ``/redoc`` with local assets only, and an
OpenAPI document that describes every field and shows an example of every body."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from txnstream.api import Engine, EngineConfig
from txnstream.api.http import create_app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with Engine.open(tmp_path / "data", EngineConfig(min_free_bytes=0)) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_doc_pages_load_their_assets_from_this_server(
    http: httpx.AsyncClient, page: str
) -> None:
    r = await http.get(page)
    assert r.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert sources
    for source in sources:
        assert source.startswith("/"), f"{page} loads {source} from elsewhere"
        if source != "/openapi.json":
            asset = await http.get(source)
            assert asset.status_code == 200, source
            assert len(asset.content) > 1000 or source.endswith(".png"), source


async def test_openapi_describes_every_field_and_shows_every_body(
    http: httpx.AsyncClient,
) -> None:
    doc = (await http.get("/openapi.json")).json()
    assert "docs/http-api.md" in doc["info"]["description"]
    assert "shared/" not in str(doc)
    undescribed = [
        f"{name}.{field}"
        for name, schema in doc["components"]["schemas"].items()
        for field, prop in schema.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert undescribed == []
    bodies: list[tuple[str, dict[str, Any]]] = []
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                assert parameter.get("description"), (method, path, parameter["name"])
            if "requestBody" in operation:
                bodies.append((f"{method} {path} request", operation["requestBody"]))
            for status, response in operation.get("responses", {}).items():
                bodies.append((f"{method} {path} {status}", response))
    without = [
        where
        for where, body in bodies
        for media in body.get("content", {}).values()
        if "example" not in media and "examples" not in media
    ]
    assert without == []
    assert len(bodies) > 80


def test_the_contract_the_api_cites_is_in_the_repository() -> None:
    text = (REPO / "docs" / "http-api.md").read_text()
    for heading in ["## Errors", "## Producing", "## Transactions", "## Range fetch"]:
        assert heading in text


async def test_openapi_states_the_limits_and_input_rules(http: httpx.AsyncClient) -> None:
    """Issue 10's rules are in the document a client generator or a reader sees."""
    doc = (await http.get("/openapi.json")).json()
    text = doc["info"]["description"]
    for rule in (
        "10,000 messages",
        "32 MiB",
        "`max_bytes`",
        "NaN",
        "lone surrogates",
        "`latest`",
        "507 `insufficient_storage`",
        "`degraded`",
        "--limit-concurrency",
    ):
        assert rule in text, rule
    for path in ("/v1/topics/{topic}/messages", "/v1/batches"):
        operation = doc["paths"][path]["post"]
        assert {"400", "413", "507"} <= set(operation["responses"]), path
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.rsplit("/", 1)[1] in doc["components"]["schemas"]
    receive = doc["paths"]["/v1/topics/{topic}/subscriptions/{sub}/messages"]["get"]
    fetch = doc["paths"]["/v1/topics/{topic}/fetch"]["get"]
    for operation in (receive, fetch):
        (max_bytes,) = [p for p in operation["parameters"] if p["name"] == "max_bytes"]
        assert max_bytes["schema"]["maximum"] == 64 * 1024 * 1024
        assert max_bytes["schema"]["default"] == 8 * 1024 * 1024
