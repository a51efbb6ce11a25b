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


# ----------------------------------------------------- a topic's browser, publish, settings


def fetch_all(http: httpx.Client, topic: str) -> list[dict[str, Any]]:
    r = http.get(f"/v1/topics/{topic}/fetch", params={"isolation": "read_uncommitted"})
    assert r.status_code == 200, r.text
    entries: list[dict[str, Any]] = r.json()["entries"]
    return entries


def next_second(http: httpx.Client) -> int:
    """Wait (bounded) until the wall clock enters a new second; return it in ms: whatever is
    published from now on is at or after it, everything before it earlier."""
    import time

    boundary = (int(time.time()) + 1) * 1000
    deadline = time.monotonic() + 3
    while time.time() * 1000 < boundary:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return boundary


def set_local_time(page: Any, selector: str, ms: int) -> None:
    """Fill a datetime-local input with ``ms`` as the browser's local time."""
    page.locator(selector).evaluate(
        """(input, ms) => {
             const d = new Date(ms), p = (n) => String(n).padStart(2, "0");
             input.value = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}` +
               `T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
           }""",
        ms,
    )


def test_the_message_browser_pages_seeks_finds_keys_and_marks_transactions(
    page: Any, tmp_path: Path
) -> None:
    """Issue 31 item 13: browse by position, time and key, page forward and back, see data
    of an aborted and of a still-open transaction marked, toggle markers, bytes as hex."""
    from playwright.sync_api import expect

    with running_server(tmp_path / "data") as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.put("/v1/topics/orders").status_code == 201
        early = [produce(http, "orders", {"order": i}) for i in range(3)]
        lost_txn = begin(http, "job-lost")
        lost = produce(http, "orders", {"order": "lost"}, txn=lost_txn)
        assert http.post(f"/v1/transactions/{lost_txn}/abort").status_code == 200
        r = http.post(
            "/v1/topics/orders/messages",
            json={
                "messages": [
                    {"value": {"order": 100 + i}, "key": f"cust-{i}", "properties": {"n": str(i)}}
                    for i in range(20)
                ]
            },
        )
        assert r.status_code == 200, r.text
        keyed = r.json()["positions"]
        boundary = next_second(http)
        raw = http.post(
            "/v1/topics/orders/messages", json={"messages": [{"value_b64": "AAEC/w=="}]}
        )
        later = raw.json()["positions"][0]
        open_txn = begin(http, "job-open")
        pending = produce(http, "orders", {"order": "pending"}, txn=open_txn)
        entries = fetch_all(http, "orders")
        positions = [e["position"] for e in entries]
        marker = next(e["position"] for e in entries if e["kind"] == "abort")

        page.goto(f"{url}/ui/topics/orders")
        page.get_by_role("link", name="Messages").click()
        expect(page).to_have_url(f"{url}/ui/topics/orders#messages")
        rows = page.locator("#browse tbody tr")
        form = page.locator("#browse-form")
        expect(rows.first).to_have_attribute("data-position", early[0])  # earliest, at once
        form.get_by_label("Page size").select_option("10")
        page.get_by_role("button", name="Read").click()
        expect(rows).to_have_count(9)  # 10 entries, the abort marker hidden
        aborted = page.locator(f'#browse tr[data-position="{lost}"]')
        expect(aborted).to_have_attribute("data-txn-state", "aborted")
        expect(aborted).to_have_class(re.compile(r"\baborted\b"))
        expect(aborted.locator(".badge")).to_have_text("aborted")
        expect(page.locator(f'#browse tr[data-position="{marker}"]')).to_have_count(0)
        form.get_by_label("Show commit/abort markers").check()
        expect(rows).to_have_count(10)
        expect(page.locator(f'#browse tr[data-position="{marker}"]')).to_have_attribute(
            "data-kind", "abort"
        )
        first_keyed = page.locator(f'#browse tr[data-position="{keyed[0]}"]')
        expect(first_keyed).to_contain_text('"order": 100')  # pretty JSON
        expect(first_keyed).to_contain_text("n=0")
        expect(first_keyed).to_contain_text("cust-0")
        shot(page, "messages")

        # Forward and back: raw entries, ten at a time.
        page.get_by_role("button", name="Next →").click()
        expect(rows.first).to_have_attribute("data-position", positions[10])
        page.get_by_role("button", name="Next →").click()
        expect(rows.first).to_have_attribute("data-position", positions[20])
        page.get_by_role("button", name="← Back").click()
        expect(rows.first).to_have_attribute("data-position", positions[10])
        page.get_by_role("button", name="← Back").click()
        expect(rows.first).to_have_attribute("data-position", early[0])

        # The newest page: the open transaction's data, marked open; Back from a seek.
        form.get_by_label("Start").select_option("newest")
        page.get_by_role("button", name="Read").click()
        expect(rows.last).to_have_attribute("data-position", pending)
        expect(rows.last).to_have_attribute("data-txn-state", "open")
        expect(rows.last.locator(".badge")).to_have_text("open")
        expect(rows.first).to_have_attribute("data-position", positions[-10])
        page.get_by_role("button", name="← Back").click()
        expect(rows.first).to_have_attribute("data-position", positions[-20])

        # By publish time: the first entry published at or after the boundary.
        form.get_by_label("Start").select_option("time")
        set_local_time(page, '#browse-form input[name="time"]', boundary)
        page.get_by_role("button", name="Read").click()
        expect(rows.first).to_have_attribute("data-position", later)
        expect(rows.first.locator("pre")).to_contain_text("bytes (base64)")
        form.get_by_label("Value as").select_option("hex")
        expect(rows.first.locator("pre")).to_have_text("00 01 02 ff")
        form.get_by_label("Value as").select_option("base64")
        expect(rows.first.locator("pre")).to_have_text("AAEC/w==")

        # By key: a bounded scan, said so on the page.
        form.get_by_label("Start").select_option("key")
        expect(page.get_by_text("Key search scans at most 10 000 entries")).to_be_visible()
        form.get_by_label("Key", exact=True).fill("cust-17")
        page.get_by_role("button", name="Read").click()
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-position", keyed[17])
        expect(page.locator("#browse-summary")).to_contain_text("1 found in")
        form.get_by_label("Key", exact=True).fill("nobody")
        page.get_by_role("button", name="Read").click()
        expect(page.locator("#browse-empty")).to_be_visible()
        expect(page.locator("#browse-summary")).to_contain_text("0 found in")


def test_publish_reset_and_delete_a_subscription_and_change_retention(
    page: Any, tmp_path: Path
) -> None:
    """Issue 31 item 13: publish from the console and see it arrive; reset a subscription
    (earliest, a position, a time) and delete it, confirmed; view and edit retention."""
    from playwright.sync_api import expect

    with running_server(tmp_path / "data") as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.put("/v1/topics/orders").status_code == 201
        assert http.put("/v1/topics/orders/subscriptions/billing").status_code == 201
        sent = [produce(http, "orders", {"order": i}) for i in range(3)]
        got = http.get("/v1/topics/orders/subscriptions/billing/messages?max=10").json()
        assert len(got["messages"]) == 3
        ack = {"positions": [sent[-1]], "cumulative": True}
        assert http.post("/v1/topics/orders/subscriptions/billing/ack", json=ack).status_code == 200

        page.goto(f"{url}/ui/topics/orders#publish")
        form = page.locator("#publish-form")
        form.get_by_label("Key").fill("cust-9")
        form.get_by_label("Value", exact=True).fill('{"order": 99, "note": "<b>x</b>"}')
        form.get_by_label("Properties").fill("src=console\ntrace = 7")
        form.get_by_role("button", name="Publish").click()
        expect(page.locator("#notice")).to_contain_text("Published to orders at")
        published = fetch_all(http, "orders")[-1]
        assert published["value"] == {"order": 99, "note": "<b>x</b>"}
        assert published["key"] == "cust-9"
        assert published["properties"] == {"src": "console", "trace": "7"}
        expect(page.locator("#notice")).to_contain_text(published["position"])
        shot(page, "publish")
        page.locator("#published-show").click()
        row = page.locator(f'#browse tr[data-position="{published["position"]}"]')
        expect(row).to_contain_text("src=console")
        expect(row).to_contain_text('"note": "<b>x</b>"')  # as text, not markup
        assert page.locator("#browse b").count() == 0

        # Text values; a value that is not JSON is refused before anything is sent.
        page.get_by_role("link", name="Publish").click()
        form.get_by_label("Value", exact=True).fill("not json")
        form.get_by_role("button", name="Publish").click()
        expect(page.locator("#notice")).to_contain_text("the value is not JSON")
        assert len(fetch_all(http, "orders")) == 4
        form.get_by_label("text").check()
        form.get_by_role("button", name="Publish").click()
        expect(page.locator("#notice")).to_contain_text("Published to orders at")
        assert fetch_all(http, "orders")[-1]["value"] == "not json"

        # Reset: to earliest, to a position, to a time; each confirmed in a dialog.
        page.get_by_role("link", name="Overview").click()
        billing = page.locator('tr[data-subscription="billing"]')
        expect(billing.locator('[data-field="backlog"]')).to_have_text("2")
        billing.get_by_role("button", name="Reset billing").click()
        dialog = page.locator("#reset-dialog")
        expect(dialog).to_be_visible()
        shot(page, "reset-dialog")
        dialog.get_by_role("button", name="Reset").click()
        expect(page.locator("#notice")).to_contain_text("Subscription billing reset to earliest")
        expect(dialog).to_be_hidden()
        expect(billing.locator('[data-field="backlog"]')).to_have_text("5")
        billing.get_by_role("button", name="Reset billing").click()
        dialog.get_by_label("Start at").select_option("position")
        dialog.get_by_label("Position", exact=True).fill(sent[2])
        dialog.get_by_role("button", name="Reset").click()
        expect(billing.locator('[data-field="backlog"]')).to_have_text("3")
        boundary = next_second(http)
        produce(http, "orders", {"order": "after"})
        billing.get_by_role("button", name="Reset billing").click()
        dialog.get_by_label("Start at").select_option("time")
        set_local_time(page, '#reset-form input[name="time"]', boundary)
        dialog.get_by_role("button", name="Reset").click()
        expect(billing.locator('[data-field="backlog"]')).to_have_text("1")
        billing.get_by_role("button", name="Reset billing").click()
        dialog.get_by_label("Start at").select_option("position")
        dialog.get_by_label("Position", exact=True).fill("nope")
        dialog.get_by_role("button", name="Reset").click()  # the browser refuses it
        expect(dialog.locator('input[name="position"]:invalid')).to_have_count(1)
        expect(dialog).to_be_visible()
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_be_hidden()
        expect(billing.locator('[data-field="backlog"]')).to_have_text("1")

        # Delete, after a confirmation.
        asked: list[str] = []
        page.on("dialog", lambda d: asked.append(d.message))  # the fixture accepts it
        billing.get_by_role("button", name="Delete billing").click()
        expect(page.locator("#notice")).to_contain_text("Subscription billing deleted")
        expect(billing).to_have_count(0)
        assert "billing" not in http.get("/v1/topics/orders/stats").json()["subscriptions"]
        assert asked == [
            "Delete subscription billing of orders? Its cursor and acknowledgements are gone."
        ]

        # Settings: retention shown, changed, cleared; offload needs an object store.
        page.get_by_role("link", name="Settings").click()
        expect(page.locator("#retention-now")).to_have_text("keep all")
        retention = page.locator("#retention-form")
        retention.get_by_label("Older than").fill("7")
        retention.get_by_label("Beyond").fill("10")
        retention.get_by_role("button", name="Save retention").click()
        expect(page.locator("#notice")).to_contain_text("Retention of orders saved")
        expect(page.locator("#retention-now")).to_have_text("older than 7 d · beyond 10 GiB")
        got_retention = http.get("/v1/topics/orders/stats").json()["retention"]
        assert got_retention["time_ms"] == 7 * 86_400_000
        assert got_retention["size_bytes"] == 10 * 2**30
        shot(page, "settings")
        retention.get_by_label("Beyond").fill("")
        retention.get_by_role("button", name="Save retention").click()
        expect(page.locator("#retention-now")).to_have_text("older than 7 d")
        assert http.get("/v1/topics/orders/stats").json()["retention"]["size_bytes"] is None
        page.locator("#offload-form").get_by_role("button", name="Save offload policy").click()
        expect(page.locator("#notice")).to_contain_text("Offload: ")
        expect(page.locator("#notice")).to_contain_text("(conflict)")


def test_the_topic_tabs_use_the_api_with_the_token_and_its_rules(page: Any, tmp_path: Path) -> None:
    """Behind ``--auth`` the browser and publish call the API with the tab's token, so
    the API's grants apply: alice may read and publish on a-* but not publish to ro."""
    from playwright.sync_api import expect

    auth_file = write_auth_file(tmp_path / "principals.json")
    ops = {"Authorization": f"Bearer {AUTH_TOKENS['ops']}"}
    with (
        running_server(tmp_path / "data", auth_file=auth_file) as url,
        httpx.Client(base_url=url, timeout=10, headers=ops) as http,
    ):
        assert http.put("/v1/topics/a-orders").status_code == 201
        assert http.put("/v1/topics/ro").status_code == 201
        first = produce(http, "a-orders", {"order": 1})
        page.goto(f"{url}/ui/topics/a-orders#messages")
        expect(page.locator("#notice")).to_contain_text("unauthorized")
        page.locator("#token").fill(AUTH_TOKENS["alice"])
        page.get_by_role("button", name="Use").click()
        page.get_by_role("button", name="Read").click()
        expect(page.locator("#notice")).to_contain_text(
            "principal 'alice' may not read_uncommitted on topic 'a-orders' (forbidden)"
        )
        page.get_by_label("Isolation").select_option("read_committed")
        page.get_by_role("button", name="Read").click()
        expect(page.locator(f'#browse tr[data-position="{first}"]')).to_be_visible()
        page.get_by_role("link", name="Publish").click()
        page.locator("#publish-form").get_by_label("Value", exact=True).fill("2")
        page.locator("#publish-form").get_by_role("button", name="Publish").click()
        expect(page.locator("#notice")).to_contain_text("Published to a-orders at")
        assert [e["value"] for e in fetch_all(http, "a-orders")] == [{"order": 1}, 2]

        page.goto(f"{url}/ui/topics/ro#publish")
        page.locator("#publish-form").get_by_label("Value", exact=True).fill("3")
        page.locator("#publish-form").get_by_role("button", name="Publish").click()
        expect(page.locator("#notice")).to_contain_text("(forbidden)")
        assert fetch_all(http, "ro") == []


def test_offload_settings_run_now_and_paging_back_across_ledgers(page: Any, tmp_path: Path) -> None:
    """The settings tab shows and edits the offload policy and offloads now; the browser
    pages back across ledgers (offloaded ones read like local ones)."""
    from playwright.sync_api import expect

    objects = (tmp_path / "objects").as_uri()
    with (
        running_server(tmp_path / "data", offload_url=objects, ledger_max_entries=4) as url,
        httpx.Client(base_url=url, timeout=10) as http,
    ):
        assert http.put("/v1/topics/orders").status_code == 201
        sent = [produce(http, "orders", {"order": i}) for i in range(14)]
        assert len({p.split(":")[0] for p in sent}) == 4  # four ledgers of at most 4

        page.goto(f"{url}/ui/topics/orders#settings")
        now = page.locator("#offload-now")
        expect(now).to_have_text("no policy · 0 ledger(s) offloaded")
        offload = page.locator("#offload-form")
        offload.get_by_label("Offload a ledger").fill("2")
        offload.get_by_label("Ledgers kept local").fill("2")
        offload.get_by_role("button", name="Save offload policy").click()
        expect(now).to_have_text("after 2 h, 2 kept local · 0 ledger(s) offloaded")
        policy = http.get("/v1/topics/orders/stats").json()["offload"]
        assert policy == {"after_ms": 7_200_000, "min_local_ledgers": 2}
        offload.get_by_role("button", name="Offload now").click()
        expect(page.locator("#notice")).to_contain_text("Offloaded ledger(s) ")
        remote = [
            ledger["ledger"]
            for ledger in http.get("/v1/topics/orders/ledgers").json()["ledgers"]
            if ledger["location"] == "remote"
        ]
        assert len(remote) == 2
        expect(page.locator("#notice")).to_have_text(
            f"Offloaded ledger(s) {', '.join(map(str, remote))}."
        )
        expect(now).to_have_text("after 2 h, 2 kept local · 2 ledger(s) offloaded")

        page.get_by_role("link", name="Messages").click()
        form = page.locator("#browse-form")
        rows = page.locator("#browse tbody tr")
        form.get_by_label("Page size").select_option("10")
        form.get_by_label("Start").select_option("newest")
        form.get_by_role("button", name="Read").click()
        expect(rows).to_have_count(10)
        expect(rows.first).to_have_attribute("data-position", sent[4])
        expect(rows.last).to_have_attribute("data-position", sent[13])
        page.get_by_role("button", name="← Back").click()  # before a seek: from the ledgers
        expect(rows.first).to_have_attribute("data-position", sent[0])
        expect(rows.first).to_contain_text('"order": 0')  # read from the object store
