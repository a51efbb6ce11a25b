"""Subscription rights, as Kafka's group ACLs (issue 30, item 6), against a real
``txnstream serve --auth FILE``: a grant's ``subscriptions`` patterns bound which
subscriptions its actions reach, a grant that names none (the file format before) reaches
all of the topic's, and reading uncommitted data needs ``read_uncommitted``.

The principals: ``ops`` (admin); ``app`` consumes subscriptions ``app-*`` of ``orders``
and produces to it; ``legacy`` consumes ``orders`` with an old-style grant (no
``subscriptions``); ``dirty`` consumes and reads uncommitted on ``dirty-*``; ``mgr``
manages ``app-*``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import ServeSubprocess

TOPIC = "orders"
SUBS = f"/v1/topics/{TOPIC}/subscriptions"
PRINCIPALS: list[dict[str, Any]] = [
    {"name": "ops", "token": "ops-token", "admin": True},
    {
        "name": "app",
        "token": "app-token",
        "grants": [
            {"topic": TOPIC, "actions": ["consume"], "subscriptions": ["app-*"]},
            {"topic": TOPIC, "actions": ["produce"]},
        ],
    },
    {
        "name": "legacy",
        "token": "legacy-token",
        "grants": [{"topic": TOPIC, "actions": ["consume"]}],
    },
    {
        "name": "dirty",
        "token": "dirty-token",
        "grants": [
            {
                "topic": TOPIC,
                "actions": ["consume", "read_uncommitted"],
                "subscriptions": ["dirty-*"],
            }
        ],
    },
    {
        "name": "mgr",
        "token": "mgr-token",
        "grants": [{"topic": TOPIC, "actions": ["manage"], "subscriptions": ["app-*"]}],
    },
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSubprocess]:
    root = tmp_path_factory.mktemp("rights")
    (root / "principals.json").write_text(json.dumps({"principals": PRINCIPALS}))
    args = ("--auth", str(root / "principals.json"))
    with ServeSubprocess(root / "data", root / "server.log", *args) as s:
        yield s


def _as(server: ServeSubprocess, who: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {who}-token"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def _refused(response: httpx.Response) -> bool:
    return response.status_code == 403 and response.json()["error"]["code"] == "forbidden"


@pytest.mark.timeout(120)
def test_subscription_patterns_bound_what_a_consumer_may_touch(server: ServeSubprocess) -> None:
    with _as(server, "ops") as ops, _as(server, "app") as app, _as(server, "mgr") as mgr:
        assert ops.put(f"/v1/topics/{TOPIC}").status_code == 201
        assert ops.put(f"{SUBS}/billing", json={"type": "exclusive"}).status_code == 201
        body = {"messages": [{"value": i} for i in range(3)]}
        assert app.post(f"/v1/topics/{TOPIC}/messages", json=body).status_code == 200

        # another application's subscription: no seek to latest (its backlog stays),
        # no receive, ack, nack, re-create or delete
        assert _refused(app.post(f"{SUBS}/billing/seek", json={"position": "latest"}))
        assert _refused(app.get(f"{SUBS}/billing/messages", params={"consumer": "x"}))
        assert _refused(app.post(f"{SUBS}/billing/ack", json={"positions": ["0:0"]}))
        assert _refused(app.post(f"{SUBS}/billing/nack", json={"positions": ["0:0"]}))
        assert _refused(app.put(f"{SUBS}/billing"))
        assert _refused(mgr.delete(f"{SUBS}/billing"))
        refusal = app.post(f"{SUBS}/billing/seek", json={"position": "latest"})
        assert "subscription 'billing'" in refusal.json()["error"]["message"]

        # its own: everything, and a topic-level read needs no subscription pattern
        assert app.put(f"{SUBS}/app-1").status_code == 201
        got = app.get(f"{SUBS}/app-1/messages", params={"max": 10}).json()["messages"]
        assert [m["value"] for m in got] == [0, 1, 2]
        acked = app.post(f"{SUBS}/app-1/ack", json={"positions": [got[0]["position"]]})
        assert acked.status_code == 200
        assert app.post(f"{SUBS}/app-1/seek", json={"position": "earliest"}).status_code == 200
        assert app.get(f"/v1/topics/{TOPIC}/fetch").status_code == 200
        assert mgr.delete(f"{SUBS}/app-1").status_code == 200

        # billing lost nothing to the attempts above
        billing = ops.get(f"{SUBS}/billing/messages", params={"max": 10}).json()["messages"]
        assert [m["value"] for m in billing] == [0, 1, 2]


@pytest.mark.timeout(120)
def test_reading_uncommitted_data_needs_its_own_permission(server: ServeSubprocess) -> None:
    with (
        _as(server, "ops") as ops,
        _as(server, "app") as app,
        _as(server, "legacy") as legacy,
        _as(server, "dirty") as dirty,
    ):
        ops.put(f"/v1/topics/{TOPIC}")
        txn = ops.post("/v1/transactions", json={"timeout_ms": 60000}).json()["txn"]
        open_data = {"txn": txn, "messages": [{"value": "secret"}]}
        assert ops.post(f"/v1/topics/{TOPIC}/messages", json=open_data).status_code == 200
        uncommitted = {"isolation": "read_uncommitted"}
        assert ops.put(f"{SUBS}/peek", json=uncommitted).status_code == 201

        for who in (app, legacy):  # consume alone, on a pattern or on every subscription
            assert _refused(who.put(f"{SUBS}/app-dirty", json=uncommitted))
            fetch = who.get(f"/v1/topics/{TOPIC}/fetch", params={"isolation": "read_uncommitted"})
            assert _refused(fetch)
            assert "read_uncommitted" in fetch.json()["error"]["message"]
        # an old-style grant reaches every subscription, but not uncommitted data through one
        assert legacy.put(f"{SUBS}/legacy-own").status_code == 201
        assert legacy.get(f"{SUBS}/legacy-own/messages").status_code == 200
        assert _refused(legacy.get(f"{SUBS}/peek/messages"))
        assert ops.delete(f"{SUBS}/app-dirty").status_code == 404  # never created
        assert _refused(dirty.get(f"{SUBS}/peek/messages"))  # not one of its patterns

        # with read_uncommitted: its own read_uncommitted subscription and the fetch
        assert dirty.put(f"{SUBS}/dirty-1", json=uncommitted).status_code == 201
        got = dirty.get(f"{SUBS}/dirty-1/messages", params={"max": 10}).json()["messages"]
        assert "secret" in [m["value"] for m in got]
        fetched = dirty.get(f"/v1/topics/{TOPIC}/fetch", params={"isolation": "read_uncommitted"})
        assert fetched.status_code == 200
        assert ops.post(f"/v1/transactions/{txn}/abort").status_code == 200
    assert "refused 403 no_grant: principal=legacy" in server.log()


@pytest.mark.parametrize(
    "subscriptions",
    [[], "app-*", ["bad/name"], [""], [1]],
    ids=["empty", "not-a-list", "slash", "blank", "number"],
)
def test_bad_subscription_patterns_are_refused_at_load(subscriptions: Any) -> None:
    from txnstream.api.http import AuthFileError
    from txnstream.api.http._auth import parse_principals

    grant = {"topic": TOPIC, "actions": ["consume"], "subscriptions": subscriptions}
    document = {"principals": [{"name": "p", "token": "t", "grants": [grant]}]}
    with pytest.raises(AuthFileError, match="subscriptions must be"):
        parse_principals(document)
    document["principals"][0]["grants"] = [{"topic": TOPIC, "actions": ["read"]}]
    with pytest.raises(AuthFileError, match="read_uncommitted"):
        parse_principals(document)


def test_an_old_style_file_loads_with_every_subscription(tmp_path: Path) -> None:
    from txnstream.api.http._auth import parse_principals

    [(_, legacy)] = parse_principals({"principals": [PRINCIPALS[2]]})
    assert legacy.may_do("seek", TOPIC, "anyone's")
    assert not legacy.may("read_uncommitted", TOPIC)
    assert not legacy.may_do("receive", "other-topic", "anyone's")
