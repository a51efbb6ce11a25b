"""The console's routes without a browser: shells, fragments, assets, and nothing from
elsewhere (the browser test, ``test_console_browser.py``, clicks through them)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from txnstream.api import Engine, EngineConfig
from txnstream.api.http import create_app

UI = Path(__file__).resolve().parents[2] / "api" / "http" / "ui"


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with Engine.open(tmp_path / "data", EngineConfig(min_free_bytes=0)) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@pytest.mark.parametrize("path", ["/ui", "/ui/topics/orders", "/ui/transactions"])
async def test_pages_are_shells_with_a_strict_policy(http: httpx.AsyncClient, path: str) -> None:
    r = await http.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert 'data-live="/ui/fragments/' in r.text
    assert '<script src="/ui/static/console.js" defer>' in r.text
    assert "<script>" not in r.text  # no inline script (the policy forbids it)


async def test_a_topics_page_has_its_tabs_and_their_script(http: httpx.AsyncClient) -> None:
    r = await http.get("/ui/topics/orders")
    for tab in ("overview", "messages", "publish", "settings"):
        assert f'data-panel="{tab}"' in r.text
    assert '<script src="/ui/static/topic.js" defer>' in r.text
    assert 'data-topic="orders" data-key-scan-limit="10000"' in r.text
    assert "Key search scans at most 10\u202f000 entries" in r.text


async def test_ui_with_a_slash_is_the_overview(http: httpx.AsyncClient) -> None:
    r = await http.get("/ui/")
    assert r.status_code == 307
    assert r.headers["location"] == "/ui"


async def test_the_assets_come_from_the_package_and_nothing_from_elsewhere(
    http: httpx.AsyncClient,
) -> None:
    for name, kind in [
        ("console.js", "text/javascript"),
        ("topic.js", "text/javascript"),
        ("console.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ]:
        r = await http.get(f"/ui/static/{name}")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(kind)
    for name in ["../_ui.py", "..%2F_ui.py", "nope.js", ".hidden.css", "base.html"]:
        assert (await http.get(f"/ui/static/{name}")).status_code == 404
    for path in [*UI.glob("templates/*.html"), *UI.glob("static/*")]:
        text = path.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")  # a name
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text), path  # no CDN


async def test_fragments_show_positions_the_blocking_transaction_and_the_tail(
    http: httpx.AsyncClient,
) -> None:
    assert (await http.put("/v1/topics/orders")).status_code == 201
    await http.post("/v1/topics/orders/messages", json={"messages": [{"value": "<b>1</b>"}]})
    txn = (await http.post("/v1/transactions", json={"label": "job-1:<x>"})).json()["txn"]
    await http.post("/v1/topics/orders/messages", json={"messages": [{"value": 2}], "txn": txn})

    overview = (await http.get("/ui/fragments/topics")).text
    assert 'data-topic="orders" class="blocked"' in overview
    assert (await http.get("/ui/fragments/topics", params={"prefix": "zzz"})).text.count(
        "No topic starts with"
    ) == 1

    topic = await http.get("/ui/fragments/topics/orders")
    assert topic.status_code == 200
    assert f'<code data-field="blocking_txn">{txn}</code>' in topic.text
    assert "job-1:&lt;x&gt;" in topic.text  # labels and values are escaped
    assert "&lt;b&gt;1&lt;/b&gt;" in topic.text
    assert "<b>1</b>" not in topic.text
    assert '<span class="value" data-field="retention">keep all</span>' in topic.text
    await http.put("/v1/topics/orders/retention", json={"time_ms": 7 * 86_400_000})
    topic = await http.get("/ui/fragments/topics/orders")
    assert 'data-field="retention">7 d 0 h</span>' in topic.text

    txns = (await http.get("/ui/fragments/transactions", params={"label_prefix": "job-1"})).text
    assert f'data-abort="{txn}"' in txns
    none = (await http.get("/ui/fragments/transactions", params={"label_prefix": "job-2"})).text
    assert "No open transaction has a label" in none

    missing = await http.get("/ui/fragments/topics/nope")
    assert missing.status_code == 404
    assert "does not exist" in missing.text
    assert (await http.get("/ui/fragments/topics/__bad")).status_code == 400
