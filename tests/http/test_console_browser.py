"""The web console in a real browser: Debian's Chromium driven by Playwright.

The browser is the system one (``/usr/bin/chromium``, installed by ``.ci/run``); Playwright
never downloads its own. Screenshots go to ``artifacts/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import AUTH_TOKENS, running_server, write_auth_file

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.timeout(180)


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "Chromium is not installed (apt-get install -y chromium; .ci/run does it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def page() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    executable = chromium()
    expect.set_options(timeout=15_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 860})
            tab.set_default_timeout(15_000)
            tab.on("dialog", lambda dialog: dialog.accept())  # the abort confirmation
            yield tab
        finally:
            browser.close()


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)


def produce(http: httpx.Client, topic: str, value: Any, txn: str | None = None) -> str:
    body: dict[str, Any] = {"messages": [{"value": value}]}
    if txn is not None:
        body["txn"] = txn
    r = http.post(f"/v1/topics/{topic}/messages", json=body)
    assert r.status_code == 200, r.text
    position: str = r.json()["positions"][0]
    return position


def begin(http: httpx.Client, label: str) -> str:
    r = http.post("/v1/transactions", json={"label": label, "timeout_ms": 600_000})
    assert r.status_code == 201, r.text
    txn: str = r.json()["txn"]
    return txn


def test_an_operator_finds_the_blocking_transaction_and_aborts_it(
    page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    with running_server(tmp_path / "data") as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.put("/v1/topics/orders").status_code == 201
        assert http.put("/v1/topics/payments").status_code == 201
        assert http.put("/v1/topics/orders/subscriptions/billing").status_code == 201
        first = produce(http, "orders", {"order": 1})
        got = http.get("/v1/topics/orders/subscriptions/billing/messages?consumer=c1").json()
        assert [m["value"] for m in got["messages"]] == [{"order": 1}]  # delivered, unacked
        nightly = begin(http, "job-7:nightly")
        produce(http, "orders", {"order": 2}, txn=nightly)
        waiting = produce(http, "orders", {"order": 3})  # committed, behind the open txn
        other = begin(http, "job-8:backfill")
        produce(http, "payments", {"payment": 1}, txn=other)

        # The overview shows the topic held back by an open transaction.
        page.goto(f"{url}/ui")
        row = page.locator('tr[data-topic="orders"]')
        expect(row.locator('[data-field="open_txns"]')).to_have_text("1")
        expect(row.locator('[data-field="stable_lag"]')).to_have_text("2")
        expect(row.locator('[data-field="stable_position"]')).to_have_text(first)
        expect(row).to_have_class(re.compile(r"\bblocked\b"))
        shot(page, "topics")

        # The transactions page lists both, oldest first, and filters by label prefix.
        page.get_by_role("link", name="Transactions").click()
        expect(page.locator("#transactions tbody tr")).to_have_count(2)
        expect(page.locator("#transactions tbody tr").first).to_have_attribute("data-txn", nightly)
        page.get_by_label("Label prefix").fill("job-8")
        expect(page.locator("#transactions tbody tr")).to_have_count(1)
        expect(page.locator(f'tr[data-txn="{other}"] [data-field="label"]')).to_have_text(
            "job-8:backfill"
        )
        shot(page, "transactions")
        page.locator(f'tr[data-txn="{other}"] button[data-abort]').click()
        expect(page.locator("#notice")).to_contain_text(f"Transaction {other} aborted")
        expect(page.locator("#no-txns")).to_be_visible()
        assert http.get(f"/v1/transactions/{other}").json()["state"] == "aborted"
        page.get_by_label("Label prefix").fill("job-7")
        expect(page.locator(f'tr[data-txn="{nightly}"]')).to_be_visible()

        # The topic page names the transaction holding the stable position.
        page.locator(f'tr[data-txn="{nightly}"]').get_by_role("link", name="orders").click()
        expect(page).to_have_url(f"{url}/ui/topics/orders")
        expect(page.locator('#blocking [data-field="blocking_txn"]')).to_have_text(nightly)
        expect(page.locator("#blocking")).to_contain_text("job-7:nightly")
        summary = page.locator("#summary")
        expect(summary.locator('[data-field="stable_position"]')).to_have_text(first)
        expect(summary.locator('[data-field="stable_lag"]')).to_have_text("2")
        billing = page.locator('tr[data-subscription="billing"]')
        expect(billing.locator('[data-field="unacked"]')).to_have_text("1")
        expect(billing.locator('[data-field="backlog"]')).to_have_text("1")
        tail = page.locator("#tail tbody tr")
        expect(tail).to_have_count(1)
        expect(tail.first).to_contain_text(json.dumps({"order": 1}, separators=(",", ":")))
        shot(page, "topic-blocked")

        # Abort it from the page: the same page (no reload) shows the stable position
        # move to the abort marker and the committed message behind it in the tail.
        page.evaluate("window.__sameDocument = true")
        page.locator("#blocking").get_by_role("button", name=f"Abort {nightly}").click()
        expect(page.locator("#notice")).to_contain_text(f"Transaction {nightly} aborted")
        expect(page.locator('#blocking [data-field="blocking_txn"]')).to_contain_text("Not held")
        expect(summary.locator('[data-field="stable_lag"]')).to_have_text("0")
        stats = http.get("/v1/topics/orders/stats").json()
        assert stats["stable_position"] == stats["last_confirmed"] != first
        expect(summary.locator('[data-field="stable_position"]')).to_have_text(
            stats["stable_position"]
        )
        expect(page.locator(f'#tail tr[data-position="{waiting}"]')).to_be_visible()
        expect(tail).to_have_count(2)  # order 3 and order 1; order 2 was aborted
        expect(page.locator("#tail")).not_to_contain_text('"order":2')
        expect(billing.locator('[data-field="backlog"]')).to_have_text("2")

        # Live: a message produced now shows up without a reload.
        latest = produce(http, "orders", {"order": 4})
        expect(page.locator(f'#tail tr[data-position="{latest}"]')).to_be_visible()
        assert page.evaluate("window.__sameDocument") is True
        shot(page, "topic-after-abort")


def test_the_console_sends_the_operators_token_and_asks_for_one_when_refused(
    page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    seen: list[dict[str, str]] = []
    refuse = {"on": True}

    def fragments(route: Any) -> None:
        seen.append(route.request.headers)
        if refuse["on"] and "authorization" not in route.request.headers:
            body = {"error": {"code": "unauthorized", "message": "a bearer token is required"}}
            route.fulfill(status=401, content_type="application/json", body=json.dumps(body))
        else:
            route.continue_()

    with running_server(tmp_path / "data") as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.put("/v1/topics/orders").status_code == 201
        # Stand in for `serve --auth`: refuse the fragment requests that carry no token.
        page.route("**/ui/fragments/**", fragments)
        page.goto(f"{url}/ui")
        expect(page.locator("#status")).to_have_text("token needed")
        expect(page.locator("#notice")).to_contain_text("a bearer token is required")
        page.locator("#token").fill("s3cret-token")
        page.get_by_role("button", name="Use").click()
        expect(page.locator('tr[data-topic="orders"]')).to_be_visible()
        assert seen[-1]["authorization"] == "Bearer s3cret-token"
        assert page.evaluate("sessionStorage.getItem('txnstream.console.token')") == "s3cret-token"
        assert page.locator("#token").input_value() == ""  # never shown back

        # The force-abort goes to the API with the same header.
        txn = begin(http, "job-9")
        produce(http, "orders", 1, txn=txn)
        aborts: list[dict[str, str]] = []
        page.route(
            "**/v1/transactions/*/abort",
            lambda r: (aborts.append(r.request.headers), r.continue_()),
        )
        page.get_by_role("link", name="Transactions").click()
        page.locator(f'tr[data-txn="{txn}"] button[data-abort]').click()
        expect(page.locator("#notice")).to_contain_text(f"Transaction {txn} aborted")
        assert aborts[0]["authorization"] == "Bearer s3cret-token"

        page.get_by_role("button", name="Forget").click()
        expect(page.locator("#status")).to_have_text("token needed")


def test_api_docs_render_without_internet(page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    elsewhere: list[str] = []

    def only_this_server(route: Any) -> None:
        if route.request.url.startswith(base):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    with running_server(tmp_path / "data") as base:
        page.route("**/*", only_this_server)
        page.goto(f"{base}/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("txnstream")
        expect(page.locator(".opblock-summary-path").first).to_be_visible()
        expect(page.get_by_text("/v1/topics/{topic}/messages").first).to_be_visible()
        shot(page, "docs")
    assert elsewhere == []


def test_with_auth_the_docs_and_metrics_links_work(page: Any, tmp_path: Path) -> None:
    """Issue 31 item 11: behind ``--auth``, "API docs" opens the docs (which ask for the
    token) and "Metrics" shows the metrics, where both were 401 JSON pages."""
    from playwright.sync_api import expect

    auth_file = write_auth_file(tmp_path / "principals.json")
    with running_server(tmp_path / "data", auth_file=auth_file) as url:
        page.goto(f"{url}/")  # GET / leads to the console
        expect(page).to_have_url(f"{url}/ui")
        page.locator("#token").fill(AUTH_TOKENS["ops"])
        page.get_by_role("button", name="Use").click()
        with page.context.expect_page() as opened:
            page.get_by_role("link", name="Metrics").click()
        metrics = opened.value
        expect(metrics.locator("body")).to_contain_text("txnstream_build_info")
        metrics.close()
        page.get_by_role("link", name="API docs").click()
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("txnstream")
        expect(page.get_by_role("button", name="Authorize")).to_be_visible()
        shot(page, "docs-auth")
