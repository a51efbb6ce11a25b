"""``/openapi.json`` matches what the server does, route by route and status by status.

Real requests go to real uvicorn servers: the session's (``server_url``), one with
``--auth`` (for 401) and one whose disk counts as full (for 507 and a degraded health).
Every answer must have a documented status, and its body must validate against the
document's schema of that status, made strict here (an object may hold no field the
document does not name). Every JSON body sent must validate against the operation's
request schema when the server accepts it, and a body the schema refuses must be
refused (400 ``invalid_request``). At the end every documented (operation, status) must
have been seen, but 503 ``unavailable`` on the routes that are not health (the engine
closed or failed under a running server: ``test_http_errors`` answers those in process).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from support import bearer, running_server, write_auth_file

pytestmark = pytest.mark.timeout(300)

FOREIGN_HOST = {"Host": "attacker.example"}
FOREIGN_ORIGIN = {"Origin": "https://attacker.example"}
UNSEEN = {"503"}
"""Statuses not produced here on routes other than health (see the module docstring)."""


def _strict(node: Any) -> Any:
    """``node`` with every object schema that lists properties closed to others."""
    if isinstance(node, dict):
        node = {key: _strict(value) for key, value in node.items()}
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(item) for item in node]
    return node


class Conformance:
    """Sends requests, checks each answer and body against the document, and records
    which (method, path, status) were seen."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.components = _strict(copy.deepcopy(doc["components"]))
        self.seen: set[tuple[str, str, str]] = set()

    def validator(self, schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
        return jsonschema.Draft202012Validator({**schema, "components": self.components})

    def call(
        self,
        http: httpx.Client,
        method: str,
        template: str,
        expect: int,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content: bytes | None = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send ``method template`` (its ``{names}`` filled from ``params``), check the
        answer is ``expect`` and as documented; its JSON body."""
        operation = self.doc["paths"][template][method.lower()]
        url = template.format(**(params or {}))
        if body is not None:
            self.check_request(operation, body, accepted=expect < 300)
        response = http.request(
            method, url, json=body, content=content, params=query, headers=headers
        )
        where = f"{method} {url} -> {response.status_code} {response.text[:300]}"
        assert response.status_code == expect, where
        status = str(response.status_code)
        assert status in operation["responses"], f"undocumented status: {where}"
        documented = operation["responses"][status].get("content", {})
        media_type = response.headers["content-type"].split(";")[0]
        assert media_type in documented, f"undocumented {media_type}: {where}"
        self.seen.add((method, template, status))
        if media_type != "application/json":
            return response.text
        answer = response.json()
        errors = list(self.validator(documented[media_type]["schema"]).iter_errors(answer))
        assert not errors, f"{where}: {[e.message for e in errors][:3]}"
        if response.status_code >= 400 and (template, status) != ("/v1/health", "503"):
            assert set(answer) == {"error"}
            assert set(answer["error"]) == {"code", "message"}
        return answer

    def check_request(self, operation: dict[str, Any], body: Any, *, accepted: bool) -> None:
        """A body the server accepts is valid by the request schema."""
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        errors = list(self.validator(schema).iter_errors(body))
        if accepted:
            assert not errors, f"the server accepts {body}, the schema not: {errors[0].message}"

    def refused_by_schema(self, method: str, template: str, body: Any) -> bool:
        operation = self.doc["paths"][template][method.lower()]
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        return not self.validator(schema).is_valid(body)

    def documented(self) -> set[tuple[str, str, str]]:
        return {
            (method.upper(), path, status)
            for path, item in self.doc["paths"].items()
            for method, operation in item.items()
            for status in operation["responses"]
        }


def _name() -> str:
    return f"oc{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def doc(server_url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server_url}/openapi.json", timeout=60).json())


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("conformance-auth")
    with running_server(root / "data", auth_file=write_auth_file(root / "principals.json")) as url:
        yield url


@pytest.fixture(scope="module")
def tiered_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with an offload store, its ledgers sealed every 2 entries."""
    root = tmp_path_factory.mktemp("conformance-tiered")
    objects = (root / "objects").as_uri()
    with running_server(root / "data", offload_url=objects, ledger_max_entries=2) as url:
        yield url


@pytest.fixture(scope="module")
def full_disk_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose disk counts as full, over data holding the topic ``t``."""
    data = tmp_path_factory.mktemp("conformance-full") / "data"
    with running_server(data) as url:
        assert httpx.put(f"{url}/v1/topics/t", timeout=30).status_code == 201
    with running_server(data, engine_settings={"min_free_bytes": 2**62}) as url:
        yield url


def test_every_route_answers_as_its_document_says(
    doc: dict[str, Any], server_url: str, auth_url: str, tiered_url: str, full_disk_url: str
) -> None:
    check = Conformance(doc)
    with httpx.Client(base_url=server_url, timeout=60) as http:
        _successes(check, http)
        _refusals(check, http)
        _everywhere(check, http)
    with httpx.Client(base_url=auth_url, timeout=60) as http:
        for method, path in sorted({(m, p) for m, p, _ in check.documented()}):
            if path != "/v1/health":
                check.call(http, method, path, 401, params=_dummy(path))
        check.call(http, "GET", "/metrics", 403, headers=bearer("alice"))  # not an admin
    with httpx.Client(base_url=tiered_url, timeout=60) as http:
        t = {"topic": "tiered"}
        check.call(http, "PUT", "/v1/topics/{topic}", 201, params=t)
        policy = {"after_ms": None, "min_local_ledgers": 1}
        check.call(http, "PUT", "/v1/topics/{topic}/offload", 200, params=t, body=policy)
        five = {"messages": [{"value": i} for i in range(5)]}
        check.call(http, "POST", "/v1/topics/{topic}/messages", 200, params=t, body=five)
        run = check.call(http, "POST", "/v1/topics/{topic}/offload/run", 200, params=t)
        assert run["offloaded"]
        ledgers = check.call(http, "GET", "/v1/topics/{topic}/ledgers", 200, params=t)["ledgers"]
        assert {ledger["location"] for ledger in ledgers} == {"local", "remote"}
        assert check.call(http, "GET", "/v1/topics/{topic}/stats", 200, params=t)["offload"]
    with httpx.Client(base_url=full_disk_url, timeout=60) as http:
        health = check.call(http, "GET", "/v1/health", 503)
        assert health["status"] == "degraded"
        check.call(http, "PUT", "/v1/topics/{topic}", 507, params={"topic": "new"})
        one = {"messages": [{"value": 1}]}
        check.call(
            http, "POST", "/v1/topics/{topic}/messages", 507, params={"topic": "t"}, body=one
        )
        batch = {"messages": [{"topic": "t", "value": 1}]}
        check.call(http, "POST", "/v1/batches", 507, body=batch)
    missing = {
        (method, path, status)
        for method, path, status in check.documented() - check.seen
        if path == "/v1/health" or status not in UNSEEN
    }
    assert not missing, sorted(missing)


def _dummy(path: str) -> dict[str, str]:
    return {"topic": "x", "sub": "s", "txn": "t"} if "{" in path else {}


def _everywhere(check: Conformance, http: httpx.Client) -> None:
    """400 for a foreign Host and 403 for a foreign Origin, on every route."""
    for method, path in sorted({(m, p) for m, p, _ in check.documented()}):
        params = _dummy(path)
        check.call(http, method, path, 400, params=params, headers=FOREIGN_HOST)
        check.call(http, method, path, 403, params=params, headers=FOREIGN_ORIGIN)


def _successes(check: Conformance, http: httpx.Client) -> None:
    topic, sub = _name(), "s"
    t, tp, ts = {"topic": topic}, {"topic": topic + "-p"}, {"topic": topic, "sub": sub}
    call = check.call
    assert call(http, "GET", "/v1/health", 200) == {"status": "ok"}
    assert "txnstream" in call(http, "GET", "/metrics", 200)
    retention = {"time_ms": 604800000, "size_bytes": 10**9}
    call(http, "PUT", "/v1/topics/{topic}", 201, params=t, body={**retention, "ttl_ms": 60_000})
    call(http, "PUT", "/v1/topics/{topic}", 200, params=t)
    call(http, "PUT", "/v1/topics/{topic}", 201, params=tp, body={"partitions": 2})
    call(http, "GET", "/v1/topics", 200)
    call(http, "PUT", "/v1/topics/{topic}/retention", 200, params=t, body=retention)
    call(http, "PUT", "/v1/topics/{topic}/ttl", 200, params=t, body={"ttl_ms": None})
    subscription = {"type": "shared", "max_redeliveries": 3, "nack_delay_ms": 10}
    call(http, "PUT", "/v1/topics/{topic}/subscriptions/{sub}", 201, params=ts, body=subscription)
    call(http, "PUT", "/v1/topics/{topic}/subscriptions/{sub}", 200, params=ts, body=subscription)
    call(http, "PUT", "/v1/topics/{topic}/subscriptions/{sub}", 201, params={**tp, "sub": sub})
    txn = call(http, "POST", "/v1/transactions", 201, body={"label": "conformance"})["txn"]
    messages = [
        {"value": {"order": 1}, "key": "k", "properties": {"a": "b"}},
        {"value_b64": "AAEC"},
        {"value": None, "deliver_after_ms": 0},
    ]
    produce = "/v1/topics/{topic}/messages"
    call(http, "POST", produce, 200, params=t, body={"messages": messages})
    call(http, "POST", produce, 200, params=t, body={"messages": [{"value": 2}], "txn": txn})
    idempotent = {"messages": [{"value": 3}], "producer": "p", "sequence": 7}
    assert not call(http, "POST", produce, 200, params=t, body=idempotent)["duplicate"]
    assert call(http, "POST", produce, 200, params=t, body=idempotent)["duplicate"]
    call(http, "POST", produce, 200, params=tp, body={"messages": [{"value": 1, "key": "a"}]})
    batch = {"messages": [{"topic": topic, "value": 1}, {"topic": topic, "value_b64": "AA=="}]}
    call(http, "POST", "/v1/batches", 200, body=batch)
    call(http, "GET", "/v1/transactions/{txn}", 200, params={"txn": txn})
    call(http, "GET", "/v1/transactions", 200, query={"state": "open"})
    call(http, "POST", "/v1/transactions/{txn}/commit", 200, params={"txn": txn})
    other = call(http, "POST", "/v1/transactions", 201)["txn"]
    call(http, "POST", "/v1/transactions/{txn}/abort", 200, params={"txn": other})
    finish = {"commit": [], "abort": [call(http, "POST", "/v1/transactions", 201)["txn"]]}
    call(http, "POST", "/v1/transactions/finish", 200, body={**finish, "idempotence_key": topic})
    stats = call(http, "GET", "/v1/topics/{topic}/stats", 200, params=t)
    assert stats["subscriptions"][sub]["backlog"] > 0
    partitioned = call(http, "GET", "/v1/topics/{topic}/stats", 200, params=tp)
    assert partitioned["partitioned"]
    assert len(partitioned["partitions"]) == 2
    partition = {"topic": topic + "-p-partition-0"}
    assert call(http, "GET", "/v1/topics/{topic}/stats", 200, params=partition)["partition_of"]
    receive = "/v1/topics/{topic}/subscriptions/{sub}/messages"
    got = call(http, "GET", receive, 200, params=ts, query={"max": 10})["messages"]
    assert {"value", "value_b64"} <= {key for m in got for key in m}
    got_p = call(http, "GET", receive, 200, params={**tp, "sub": sub}, query={"wait_ms": 1000})
    assert got_p["messages"][0]["topic"].startswith(topic + "-p-partition-")
    ack, nack = f"{receive[:-9]}/ack", f"{receive[:-9]}/nack"
    call(http, "POST", ack, 200, params=ts, body={"positions": [got[0]["position"]]})
    call(http, "POST", nack, 200, params=ts, body={"positions": [got[1]["position"]]})
    seek = receive[:-9] + "/seek"
    call(http, "POST", seek, 200, params=ts, body={"position": "earliest"})
    call(http, "POST", seek, 200, params=ts, body={"timestamp": "2000-01-01T00:00:00Z"})
    fetched = call(http, "GET", "/v1/topics/{topic}/fetch", 200, params=t, query={"max": 50})
    assert {"data", "commit", "abort"} >= {e["kind"] for e in fetched["entries"]}
    call(http, "GET", "/v1/topics/{topic}/ledgers", 200, params=t)
    call(http, "DELETE", "/v1/topics/{topic}/subscriptions/{sub}", 200, params=ts)
    call(http, "DELETE", "/v1/topics/{topic}", 200, params=t)


def _refusals(check: Conformance, http: httpx.Client) -> None:
    topic = _name()
    t, ts = {"topic": topic}, {"topic": topic, "sub": "s"}
    nobody = {"topic": _name(), "sub": "s", "txn": "no-such-txn"}
    call = check.call
    call(http, "PUT", "/v1/topics/{topic}", 201, params=t)
    call(http, "PUT", "/v1/topics/{topic}/subscriptions/{sub}", 201, params=ts)
    # 404: an unknown topic, subscription or transaction, on every route that names one
    for method, path, status in sorted(check.documented()):
        if status == "404":
            body = _valid_body(method, path, nobody["topic"])
            if body is not None:  # (the 404 is for the name, not the body)
                assert not check.refused_by_schema(method, path, body), (method, path)
            call(http, method, path, 404, params=nobody, body=body)
    # 400: bodies the request schema refuses, on every route that takes one
    for method, path, body in _invalid_bodies(topic):
        assert check.refused_by_schema(method, path, body), (method, path, body)
        answer = call(http, method, path, 400, params=ts, body=body)
        assert answer["error"]["code"] == "invalid_request"
    # 409s
    aborted = call(http, "POST", "/v1/transactions", 201)["txn"]
    call(http, "POST", "/v1/transactions/{txn}/abort", 200, params={"txn": aborted})
    committed = call(http, "POST", "/v1/transactions", 201)["txn"]
    call(http, "POST", "/v1/transactions/{txn}/commit", 200, params={"txn": committed})
    produce = "/v1/topics/{topic}/messages"
    in_aborted = {"messages": [{"value": 1}], "txn": aborted}
    assert call(http, "POST", produce, 409, params=t, body=in_aborted)["error"]["code"] == (
        "txn_not_open"
    )
    call(http, "POST", "/v1/transactions/{txn}/commit", 409, params={"txn": aborted})
    call(http, "POST", "/v1/transactions/{txn}/abort", 409, params={"txn": committed})
    call(http, "POST", "/v1/transactions/finish", 409, body={"commit": [aborted]})
    call(http, "PUT", "/v1/topics/{topic}", 409, params=t, body={"partitions": 2})
    parted = topic + "-p"
    call(http, "PUT", "/v1/topics/{topic}", 201, params={"topic": parted}, body={"partitions": 2})
    call(http, "DELETE", "/v1/topics/{topic}", 409, params={"topic": parted + "-partition-0"})
    call(
        http,
        "PUT",
        "/v1/topics/{topic}/subscriptions/{sub}",
        409,
        params=ts,
        body={"type": "shared"},
    )
    receive = "/v1/topics/{topic}/subscriptions/{sub}/messages"
    call(http, "GET", receive, 200, params=ts, query={"consumer": "c1"})
    call(http, "GET", receive, 409, params=ts, query={"consumer": "c2"})
    ack = "/v1/topics/{topic}/subscriptions/{sub}/ack"
    call(http, "POST", ack, 409, params=ts, body={"positions": ["0:0"], "txn": aborted})
    call(http, "PUT", "/v1/topics/{topic}/offload", 409, params=t)  # no offload URL
    call(http, "POST", "/v1/topics/{topic}/offload/run", 409, params=t)
    # 413: more messages than a request may hold
    many = [{"value": 0}] * 10_001
    call(http, "POST", produce, 413, params=t, body={"messages": many})
    call(
        http, "POST", "/v1/batches", 413, body={"messages": [{"topic": topic, "value": 0}] * 10_001}
    )


def _valid_body(method: str, path: str, topic: str) -> Any:
    """A body the schema accepts for the routes that need one (None for the others)."""
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/v1/topics/{topic}/messages"): {"messages": [{"value": 1}]},
        ("POST", "/v1/batches"): {"messages": [{"topic": topic, "value": 1}]},
        ("POST", "/v1/transactions/finish"): {"commit": ["no-such-txn"]},
        ("POST", "/v1/topics/{topic}/subscriptions/{sub}/ack"): {"positions": ["0:0"]},
        ("POST", "/v1/topics/{topic}/subscriptions/{sub}/nack"): {"positions": ["0:0"]},
        ("POST", "/v1/topics/{topic}/subscriptions/{sub}/seek"): {"position": "earliest"},
        ("PUT", "/v1/topics/{topic}/retention"): {"time_ms": 1000},
        ("PUT", "/v1/topics/{topic}/ttl"): {"ttl_ms": 1000},
    }
    return bodies.get((method, path))


def _invalid_bodies(topic: str) -> list[tuple[str, str, Any]]:
    """A body the schema refuses, for every route that reads one."""
    sub = "/v1/topics/{topic}/subscriptions/{sub}"
    return [
        ("PUT", "/v1/topics/{topic}", {"partitions": 0}),
        ("PUT", "/v1/topics/{topic}/retention", {"time_ms": "1"}),
        ("PUT", "/v1/topics/{topic}/ttl", {}),
        ("PUT", "/v1/topics/{topic}/offload", {"after_ms": -1}),
        ("POST", "/v1/topics/{topic}/messages", {"messages": [{"value": 1, "value_b64": "AA=="}]}),
        ("POST", "/v1/topics/{topic}/messages", {"messages": []}),
        ("POST", "/v1/batches", {"messages": [{"topic": "__system", "value": 1}]}),
        ("POST", "/v1/transactions", {"timeout_ms": 0}),
        ("POST", "/v1/transactions/finish", {"commit": "txn-1"}),
        ("PUT", sub, {"type": "round_robin"}),
        ("POST", f"{sub}/ack", {"positions": ["0-1"]}),
        ("POST", f"{sub}/ack", {"positions": ["0:1"], "cumulative": 1}),
        ("POST", f"{sub}/nack", {"positions": ["0:1"], "delay_ms": -5}),
        ("POST", f"{sub}/seek", {"position": "middle"}),
        ("POST", f"{sub}/seek", {"position": "0:1", "unknown": True}),
    ]
