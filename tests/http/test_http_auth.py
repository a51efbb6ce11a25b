"""Authentication, per-topic authorization and transaction ownership over HTTP (issue 11),
against a real ``txnstream serve --auth FILE`` process.

The principals (``support.write_auth_file``): ``ops`` is an admin; ``alice`` may do
everything on ``a-*``, produce and consume on ``shared`` and consume on ``ro``; ``bob``
may do everything on ``b-*`` and produce and consume on ``shared``. Every endpoint is
called as {no token, a wrong token, bob (no permission: not his topic or transaction),
alice (the owner), ops (admin)}.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from support import AUTH_TOKENS, ServeSubprocess, bearer, wait_for, write_auth_file

CALLERS = ("none", "wrong", "other", "owner", "admin")
HEADERS: dict[str, dict[str, str]] = {
    "none": {},
    "wrong": {"Authorization": "Bearer not-a-known-token"},
    "other": bearer("bob"),
    "owner": bearer("alice"),
    "admin": bearer("ops"),
}
CORS_ORIGIN = "https://ui.example"


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSubprocess]:
    root = tmp_path_factory.mktemp("auth-server")
    auth_file = write_auth_file(root / "principals.json")
    args = ("--auth", str(auth_file), "--allowed-host", "myname.test")
    with ServeSubprocess(
        root / "data", root / "server.log", *args, "--cors-origin", CORS_ORIGIN
    ) as s:
        yield s


@pytest.fixture(scope="module")
def http(auth_server: ServeSubprocess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=auth_server.url, timeout=30) as client:
        yield client


def _hex() -> str:
    return uuid.uuid4().hex[:10]


# -- the permission matrix ----------------------------------------------------------


@dataclass
class Row:
    """One endpoint: its request (templates filled from the setup) and the status each
    caller gets (``none`` and ``wrong`` get 401 unless the route is open)."""

    name: str
    method: str
    path: str
    body: Any = None
    other: int = 403
    owner: int = 200
    admin: int = 200
    public: bool = False
    setup: Callable[[httpx.Client], dict[str, str]] = field(default=lambda http: {})

    def expected(self, caller: str) -> int:
        if caller in ("none", "wrong"):
            return 200 if self.public else 401
        return {"other": self.other, "owner": self.owner, "admin": self.admin}[caller]


def _topic(http: httpx.Client, messages: int = 1, sub: bool = False) -> dict[str, str]:
    topic = f"a-{_hex()}"
    assert http.put(f"/v1/topics/{topic}", headers=bearer("ops")).status_code == 201
    fields = {"topic": topic, "new": f"a-{_hex()}", "newsub": f"s{_hex()}"}
    if messages:
        r = http.post(
            f"/v1/topics/{topic}/messages",
            json={"messages": [{"value": i} for i in range(messages)]},
            headers=bearer("ops"),
        )
        fields["pos"] = r.json()["positions"][0]
    if sub:
        r = http.put(f"/v1/topics/{topic}/subscriptions/s", headers=bearer("ops"))
        assert r.status_code == 201
    return fields


def _with_sub(http: httpx.Client) -> dict[str, str]:
    return _topic(http, sub=True)


def _alice_txn(http: httpx.Client) -> dict[str, str]:
    txn = http.post("/v1/transactions", json={}, headers=bearer("alice")).json()["txn"]
    return {"txn": txn}


def _shared(http: httpx.Client) -> dict[str, str]:
    """Alice's open transaction, a message on ``shared`` and a fresh subscription to it."""
    http.put("/v1/topics/shared", headers=bearer("ops"))
    sub = f"s{_hex()}"
    assert http.put(f"/v1/topics/shared/subscriptions/{sub}", headers=bearer("ops")).is_success
    r = http.post(
        "/v1/topics/shared/messages", json={"messages": [{"value": 1}]}, headers=bearer("ops")
    )
    return {"sub": sub, "pos": r.json()["positions"][0], **_alice_txn(http)}


SUB = "/v1/topics/{topic}/subscriptions/s"
ROWS = [
    Row("health", "GET", "/v1/health", public=True, other=200),
    Row("metrics", "GET", "/metrics", owner=403),
    Row("openapi", "GET", "/openapi.json", public=True, other=200),
    Row("docs", "GET", "/docs", public=True, other=200),
    Row("redoc", "GET", "/redoc", public=True, other=200),
    Row("docs assets", "GET", "/static-offline-docs/swagger-ui.css", public=True, other=200),
    Row("list topics", "GET", "/v1/topics", other=200),
    Row("create topic", "PUT", "/v1/topics/{new}", other=403, owner=201, admin=201, setup=_topic),
    Row("delete topic", "DELETE", "/v1/topics/{topic}", setup=_topic),
    Row("stats", "GET", "/v1/topics/{topic}/stats", setup=_topic),
    Row(
        "produce", "POST", "/v1/topics/{topic}/messages", {"messages": [{"value": 2}]}, setup=_topic
    ),
    Row("fetch", "GET", "/v1/topics/{topic}/fetch", setup=_topic),
    Row(
        "create sub",
        "PUT",
        "/v1/topics/{topic}/subscriptions/{newsub}",
        owner=201,
        admin=201,
        setup=_topic,
    ),
    Row("delete sub", "DELETE", SUB, setup=_with_sub),
    Row("receive", "GET", SUB + "/messages", setup=_with_sub),
    Row("ack", "POST", SUB + "/ack", {"positions": ["{pos}"]}, setup=_with_sub),
    Row("nack", "POST", SUB + "/nack", {"positions": ["{pos}"]}, setup=_with_sub),
    Row("seek", "POST", SUB + "/seek", {"position": "earliest"}, setup=_with_sub),
    Row("begin", "POST", "/v1/transactions", {}, other=201, owner=201, admin=201),
    Row("list txns", "GET", "/v1/transactions", other=200),
    Row("get txn", "GET", "/v1/transactions/{txn}", setup=_alice_txn),
    Row("commit", "POST", "/v1/transactions/{txn}/commit", setup=_alice_txn),
    Row("abort", "POST", "/v1/transactions/{txn}/abort", setup=_alice_txn),
    Row("finish", "POST", "/v1/transactions/finish", {"commit": ["{txn}"]}, setup=_alice_txn),
    Row(
        "send in txn",
        "POST",
        "/v1/topics/shared/messages",
        {"messages": [{"value": "x"}], "txn": "{txn}"},
        setup=_shared,
    ),
    Row(
        "ack in txn",
        "POST",
        "/v1/topics/shared/subscriptions/{sub}/ack",
        {"positions": ["{pos}"], "txn": "{txn}"},
        setup=_shared,
    ),
]


def _fill(template: Any, fields: dict[str, str]) -> Any:
    if isinstance(template, str):
        return template.format(**fields) if "{" in template else template
    if isinstance(template, list):
        return [_fill(item, fields) for item in template]
    if isinstance(template, dict):
        return {key: _fill(value, fields) for key, value in template.items()}
    return template


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_every_endpoint_for_every_kind_of_caller(http: httpx.Client, row: Row) -> None:
    for caller in CALLERS:
        fields = row.setup(http)
        kwargs: dict[str, Any] = {"headers": HEADERS[caller]}
        if row.body is not None:
            kwargs["json"] = _fill(row.body, fields)
        response = http.request(row.method, _fill(row.path, fields), **kwargs)
        expected = row.expected(caller)
        assert response.status_code == expected, (caller, response.text)
        if expected == 401:
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
        elif expected == 403:
            assert response.json()["error"]["code"] == "forbidden"


def test_a_refused_request_changes_nothing(http: httpx.Client) -> None:
    fields = _topic(http, messages=3, sub=True)
    topic = fields["topic"]
    stats = http.get(f"/v1/topics/{topic}/stats", headers=bearer("ops")).json()
    for headers in (HEADERS["none"], HEADERS["wrong"], bearer("bob")):
        http.post(
            f"/v1/topics/{topic}/messages", json={"messages": [{"value": 0}]}, headers=headers
        )
        http.post(
            f"{SUB.format(topic=topic)}/ack",
            json={"positions": [fields["pos"]], "cumulative": True},
            headers=headers,
        )
        http.delete(f"/v1/topics/{topic}", headers=headers)
    assert http.get(f"/v1/topics/{topic}/stats", headers=bearer("ops")).json() == stats


def test_grants_by_action_and_prefix(http: httpx.Client) -> None:
    http.put("/v1/topics/ro", headers=bearer("ops"))
    alice = bearer("alice")
    assert (
        http.post(
            "/v1/topics/ro/messages", json={"messages": [{"value": 1}]}, headers=alice
        ).status_code
        == 403
    )
    assert http.get("/v1/topics/ro/fetch", headers=alice).status_code == 200
    assert http.put("/v1/topics/ro/subscriptions/mine", headers=alice).status_code in (200, 201)
    assert http.delete("/v1/topics/ro/subscriptions/mine", headers=alice).status_code == 403
    assert http.delete("/v1/topics/ro", headers=alice).status_code == 403
    assert http.put("/v1/topics/ab-not-a-prefix-match", headers=alice).status_code == 403
    assert http.put(f"/v1/topics/b-{_hex()}", headers=alice).status_code == 403
    assert http.put(f"/v1/topics/b-{_hex()}", headers=bearer("bob")).status_code == 201


def test_the_topic_list_shows_what_the_caller_has_a_grant_on(http: httpx.Client) -> None:
    mine, bobs = f"a-{_hex()}", f"b-{_hex()}"
    for topic in (mine, bobs):
        assert http.put(f"/v1/topics/{topic}", headers=bearer("ops")).status_code == 201
    seen = {
        name: set(http.get("/v1/topics", headers=bearer(name)).json()["topics"])
        for name in ("alice", "bob", "ops")
    }
    assert {mine, bobs} & seen["alice"] == {mine}
    assert {mine, bobs} & seen["bob"] == {bobs}
    assert {mine, bobs} <= seen["ops"]


# -- ownership across two principals ----------------------------------------------------


def test_transactions_belong_to_their_principal(http: httpx.Client) -> None:
    alice, bob = bearer("alice"), bearer("bob")
    http.put("/v1/topics/shared", headers=bearer("ops"))
    label = f"job-{_hex()}:"
    txn = http.post("/v1/transactions", json={"label": label + "a"}, headers=alice).json()["txn"]
    theirs = http.post("/v1/transactions", json={"label": label + "b"}, headers=bob).json()["txn"]
    r = http.post(
        "/v1/topics/shared/messages",
        json={"messages": [{"value": "mine"}], "txn": txn},
        headers=alice,
    )
    assert r.status_code == 200
    injected = http.post(
        "/v1/topics/shared/messages",
        json={"messages": [{"value": "evil"}], "txn": txn},
        headers=bob,
    )
    assert injected.status_code == 403
    assert http.post(f"/v1/transactions/{txn}/commit", headers=bob).status_code == 403
    body = http.get(f"/v1/transactions/{txn}", headers=alice).json()
    assert (body["state"], body["topics"], body["owner"]) == ("open", ["shared"], "alice")

    listed = {
        t["txn"]
        for t in http.get("/v1/transactions", params={"label_prefix": label}, headers=alice).json()[
            "transactions"
        ]
    }
    assert listed == {txn}
    everyone = http.get(
        "/v1/transactions", params={"label_prefix": label}, headers=bearer("ops")
    ).json()
    assert {t["txn"] for t in everyone["transactions"]} == {txn, theirs}
    assert (
        http.post(
            "/v1/transactions/finish", json={"commit": [txn], "abort": [theirs]}, headers=alice
        ).status_code
        == 403
    )
    assert http.get(f"/v1/transactions/{theirs}", headers=bob).json()["state"] == "open"
    assert http.post(f"/v1/transactions/{theirs}/abort", headers=bearer("ops")).status_code == 200
    assert http.post(f"/v1/transactions/{txn}/commit", headers=alice).json()["state"] == "committed"


def test_transactional_ids_finish_keys_and_producers_are_per_principal(http: httpx.Client) -> None:
    alice, bob = bearer("alice"), bearer("bob")
    http.put("/v1/topics/shared", headers=bearer("ops"))
    tid, key, producer = f"w-{_hex()}", f"k-{_hex()}", f"p-{_hex()}"
    a1 = http.post("/v1/transactions", json={"transactional_id": tid}, headers=alice).json()["txn"]
    b1 = http.post("/v1/transactions", json={"transactional_id": tid}, headers=bob).json()["txn"]
    assert http.get(f"/v1/transactions/{a1}", headers=alice).json()["fenced"] is False
    a2 = http.post("/v1/transactions", json={"transactional_id": tid}, headers=alice).json()["txn"]
    assert (
        http.post(f"/v1/transactions/{a1}/commit", headers=alice).json()["error"]["code"]
        == "fenced"
    )
    assert http.get(f"/v1/transactions/{b1}", headers=bob).json()["state"] == "open"

    first = http.post(
        "/v1/transactions/finish", json={"commit": [a2], "idempotence_key": key}, headers=alice
    ).json()
    other = http.post(
        "/v1/transactions/finish", json={"commit": [b1], "idempotence_key": key}, headers=bob
    ).json()
    assert (first["duplicate"], other["duplicate"], other["committed"]) == (False, False, [b1])
    again = http.post("/v1/transactions", json={}, headers=alice).json()["txn"]
    replay = http.post(
        "/v1/transactions/finish", json={"commit": [again], "idempotence_key": key}, headers=alice
    ).json()
    assert (replay["duplicate"], replay["aborted"]) == (True, [again])

    def send(headers: dict[str, str]) -> dict[str, Any]:
        body = {"messages": [{"value": 1}], "producer": producer, "sequence": 0}
        return http.post("/v1/topics/shared/messages", json=body, headers=headers).json()

    assert send(alice)["duplicate"] is False
    assert send(bob)["duplicate"] is False
    assert send(alice)["duplicate"] is True


# -- the Host and Origin rules ----------------------------------------------------------


def _get(url: str, path: str = "/v1/health", **headers: str) -> httpx.Response:
    return httpx.get(f"{url}{path}", headers=headers, timeout=10)


@pytest.mark.parametrize("with_auth", [True, False], ids=["auth", "no-auth"])
def test_foreign_host_on_a_loopback_bind_is_refused(
    auth_server: ServeSubprocess, server_url: str, with_auth: bool
) -> None:
    url = auth_server.url if with_auth else server_url
    port = url.rsplit(":", 1)[1]
    refused = _get(url, host=f"attacker.example:{port}")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_request"
    assert _get(url, "/v1/topics", host=f"evil.test:{port}", **bearer("ops")).status_code == 400
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        assert _get(url, host=host).status_code == 200
    assert _get(url, host=f"myname.test:{port}").status_code == (200 if with_auth else 400)


@pytest.mark.parametrize("with_auth", [True, False], ids=["auth", "no-auth"])
def test_cross_site_requests_are_refused(
    auth_server: ServeSubprocess, server_url: str, with_auth: bool
) -> None:
    url = auth_server.url if with_auth else server_url
    port = url.rsplit(":", 1)[1]
    token = bearer("ops") if with_auth else {}
    for origin in ("http://attacker.example", f"http://attacker.example:{port}", "null"):
        r = httpx.post(f"{url}/v1/transactions", headers={"Origin": origin, **token}, timeout=10)
        assert r.status_code == 403, origin
        assert r.json()["error"]["code"] == "forbidden"
    own = {"Origin": f"http://127.0.0.1:{port}", **token}
    assert httpx.get(f"{url}/v1/transactions", headers=own, timeout=10).status_code == 200
    local = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}", **token}
    assert httpx.get(f"{url}/v1/topics", headers=local, timeout=10).status_code == 200


def test_a_cross_site_image_get_attaches_no_consumer(server_url: str, name: str) -> None:
    """``<img src=".../messages?consumer=evil">`` on another site: the browser sends no
    ``Origin``, only ``Sec-Fetch-Site: cross-site``; refused before the route, so the
    exclusive subscription keeps its messages for its own consumer (issue 30, item 7)."""
    url, sub = server_url, f"/v1/topics/{name}/subscriptions/s"
    assert httpx.put(f"{url}/v1/topics/{name}", timeout=10).status_code == 201
    assert httpx.put(f"{url}{sub}", json={"type": "exclusive"}, timeout=10).status_code == 201
    body = {"messages": [{"value": 1}]}
    assert httpx.post(f"{url}/v1/topics/{name}/messages", json=body, timeout=10).is_success
    image = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
    for site in ("cross-site", "same-site", "Cross-Site"):
        stolen = _get(url, f"{sub}/messages?consumer=evil", **{**image, "Sec-Fetch-Site": site})
        assert stolen.status_code == 403, site
        assert stolen.json()["error"]["code"] == "forbidden"
        assert "Sec-Fetch-Site" in stolen.json()["error"]["message"]
    assert _get(url, "/v1/health", **image).status_code == 200  # health stays open
    # the page itself (same-origin) and a typed URL (none) are the server's own
    for site in ("same-origin", "none"):
        assert _get(url, "/v1/topics", **{"Sec-Fetch-Site": site}).status_code == 200
    mine = _get(url, f"{sub}/messages?consumer=mine")
    assert mine.status_code == 200  # no 409: evil never attached
    assert [m["value"] for m in mine.json()["messages"]] == [1]


def test_a_cors_origin_may_call_cross_site(auth_server: ServeSubprocess) -> None:
    """A page of an allowed ``--cors-origin`` calls with ``Origin`` and
    ``Sec-Fetch-Site: cross-site`` (or ``same-site``): served; the same without its
    ``Origin`` (a plain link or image from it) is not."""
    url = auth_server.url
    for site in ("cross-site", "same-site"):
        fetched = {"Origin": CORS_ORIGIN, "Sec-Fetch-Site": site, **bearer("alice")}
        assert _get(url, "/v1/topics", **fetched).status_code == 200
        assert _get(url, "/v1/topics", **{"Sec-Fetch-Site": site}).status_code == 403


def test_a_cors_origin_may_call_and_preflight(auth_server: ServeSubprocess) -> None:
    url = auth_server.url
    preflight = httpx.options(
        f"{url}/v1/topics",
        headers={
            "Origin": CORS_ORIGIN,
            "Sec-Fetch-Site": "cross-site",  # what a browser's preflight carries
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
        timeout=10,
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == CORS_ORIGIN
    r = httpx.get(
        f"{url}/v1/topics", headers={"Origin": CORS_ORIGIN, **bearer("alice")}, timeout=10
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == CORS_ORIGIN
    assert (
        httpx.get(f"{url}/v1/topics", headers={"Origin": CORS_ORIGIN}, timeout=10).status_code
        == 401
    )


# -- logging and counting refusals ---------------------------------------------------------


def test_refusals_are_logged_and_counted_never_the_token(
    http: httpx.Client, auth_server: ServeSubprocess
) -> None:
    path = f"/v1/topics/b-{_hex()}"
    http.put(path, headers=bearer("alice"))
    refused = http.get("/v1/topics", headers={"Authorization": "Bearer a-guessed-token"})
    assert refused.status_code == 401
    assert refused.headers["x-request-id"]  # (refusals carry one too, for the logs)
    metrics = http.get("/metrics", headers=bearer("ops")).text
    assert re.search(
        r'txnstream_http_refused_requests_total\{reason="no_grant",status="403"\} [1-9]', metrics
    )
    assert re.search(
        r'txnstream_http_refused_requests_total\{reason="unknown_token",status="401"\} [1-9]',
        metrics,
    )
    log = wait_for(lambda: (text := auth_server.log()) and path in text and text, 10, "the log")
    assert f"principal=alice method=PUT path={path}" in log
    assert "principal=anonymous method=GET path=/v1/topics" in log
    for secret in (*AUTH_TOKENS.values(), "a-guessed-token"):
        assert secret not in log


# -- schemathesis with auth on --------------------------------------------------------------


@pytest.mark.timeout(180)
def test_schemathesis_finds_no_server_error_with_auth(auth_server: ServeSubprocess) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import status_code_conformance

    url = auth_server.url
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=bearer("ops"))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE)

        @given(case=strategy)
        @settings(
            max_examples=4,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            if isinstance(case.query, dict) and isinstance(case.query.get("wait_ms"), int):
                case.query["wait_ms"] = 0
            for caller in ("admin", "owner", "wrong"):
                case.call_and_validate(
                    base_url=url,
                    headers=HEADERS[caller],
                    checks=[not_a_server_error, status_code_conformance],
                    timeout=30,
                )

        run()


def test_authorization_comes_before_reading_a_large_body(http: httpx.Client) -> None:
    body = b'{"messages": [{"value": "' + b"x" * (40 * 1024 * 1024) + b'"}]}'
    headers = {"content-type": "application/json"}
    refused = http.post("/v1/topics/a-big/messages", content=body, headers=headers)
    assert refused.status_code == 401  # not 413: nothing of the body was looked at
    too_large = http.post(
        "/v1/topics/a-big/messages", content=body, headers={**headers, **bearer("alice")}
    )
    assert too_large.status_code == 413


# -- the principals file --------------------------------------------------------------------

BAD_FILES = [
    ([], "expected an object"),
    ({"principals": {}}, "expected an object"),
    ({"principals": [], "extra": 1}, "unknown field"),
    ({"principals": [{"name": "a b", "token": "t"}]}, "name must be"),
    ({"principals": [{"name": "a", "token": ""}]}, "token must be"),
    ({"principals": [{"name": "a", "token": "sha256:12"}]}, "64 hex digits"),
    ({"principals": [{"name": "a", "token": "t", "admin": "yes"}]}, "admin must be"),
    ({"principals": [{"name": "a", "token": "t", "admn": True}]}, "unknown field"),
    ({"principals": [{"name": "a", "token": "t", "grants": [{"topic": "x"}]}]}, "actions must be"),
    (
        {
            "principals": [
                {"name": "a", "token": "t", "grants": [{"topic": "x", "actions": ["read"]}]}
            ]
        },
        "unknown action 'read'",
    ),
    (
        {
            "principals": [
                {"name": "a", "token": "t", "grants": [{"topic": "x*y", "actions": ["consume"]}]}
            ]
        },
        "prefix ending in '*'",
    ),
    ({"principals": [{"name": "a", "token": "t"}, {"name": "a", "token": "u"}]}, "appears twice"),
    ({"principals": [{"name": "a", "token": "t"}, {"name": "b", "token": "t"}]}, "same token"),
]


@pytest.mark.parametrize(("document", "problem"), BAD_FILES, ids=[p for _, p in BAD_FILES])
def test_a_malformed_principals_file_is_named_precisely(document: Any, problem: str) -> None:
    from txnstream.api.http import AuthFileError
    from txnstream.api.http._auth import parse_principals

    with pytest.raises(AuthFileError, match=re.escape(problem)):
        parse_principals(document)


def test_tokens_plain_or_as_digests_and_grants_by_prefix() -> None:
    from txnstream.api.http import Authenticator, token_digest
    from txnstream.api.http._auth import parse_principals

    document = {
        "principals": [
            {"name": "ops", "token": "sha256:" + token_digest("s3cret").hex(), "admin": True},
            {"name": "dev", "token": "plain", "grants": [{"topic": "*", "actions": ["consume"]}]},
        ]
    }
    auth = Authenticator(parse_principals(document))
    ops, dev = auth.identify("s3cret"), auth.identify("plain")
    assert ops is not None
    assert dev is not None
    assert (ops.name, ops.admin, dev.name, dev.admin) == ("ops", True, "dev", False)
    assert auth.identify("sha256:" + token_digest("s3cret").hex()) is None  # not the secret
    assert auth.identify("Plain") is None
    assert dev.may_do("receive", "anything", "any-subscription")
    assert not dev.may_do("produce", "anything")
    assert not dev.may_do("delete_subscription", "anything", "any-subscription")


AUTHENTICATED_ROUTES = {
    ("GET", "/v1/topics"),
    ("POST", "/v1/batches"),  # the route checks produce on every topic of the body
    ("POST", "/v1/transactions"),
    ("GET", "/v1/transactions"),
    ("POST", "/v1/transactions/finish"),
    ("GET", "/v1/transactions/{txn}"),
    ("POST", "/v1/transactions/{txn}/commit"),
    ("POST", "/v1/transactions/{txn}/abort"),
}
"""Routes any known token may call (their objects are checked by owner, or filtered)."""


async def test_every_route_has_its_rule(engine: Any) -> None:
    from txnstream.api import OPERATIONS
    from txnstream.api.http import create_app
    from txnstream.api.http._auth import ADMIN, AUTHENTICATED, OPEN, need_of

    app = create_app(engine)
    for route in app.routes:
        template = getattr(route, "path", "")
        path = template.replace("{topic}", "t").replace("{sub}", "s").replace("{txn}", "txn-1")
        for method in sorted(getattr(route, "methods", None) or ()):
            if method == "HEAD":
                continue
            need, topic, sub = need_of(method, path)
            if template.startswith("/ui/") and need == OPEN:  # console shells: no data
                assert "fragments" not in template, template
            elif "{topic}" in template:  # a topic in the path: an operation on it, or admin
                assert need in OPERATIONS or need == ADMIN, (method, template)
                assert topic == "t" or need == ADMIN, (method, template)
                assert sub == ("s" if "{sub}" in template else None), (method, template)
            elif need == AUTHENTICATED:
                assert (method, template) in AUTHENTICATED_ROUTES, (method, template)
            else:
                assert need in (OPEN, ADMIN), (method, template)


def _raw(port: int, head: bytes) -> bytes:
    """Send ``head`` (a request's head) over a socket; the status line of the answer."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while b"\r\n" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


def test_repeated_and_userinfo_hosts_are_refused(server_url: str) -> None:
    """Two ``Host`` headers (a proxy in front might route by the other one) or
    ``user@host`` (read as the host after the @) are 400, on any bind (issue 30, item 9)."""
    port = int(server_url.rsplit(":", 1)[1])
    here = f"127.0.0.1:{port}".encode()
    for hosts in (
        [here, here],
        [here, b"attacker.example"],
        [b"attacker.example@" + here],
        [b"u:p@" + here],
    ):
        head = b"GET /v1/topics HTTP/1.1\r\n" + b"".join(b"Host: %s\r\n" % h for h in hosts)
        assert _raw(port, head + b"connection: close\r\n\r\n").startswith(b"HTTP/1.1 400"), hosts
    one = b"GET /v1/topics HTTP/1.1\r\nHost: %s\r\nconnection: close\r\n\r\n" % here
    assert _raw(port, one).startswith(b"HTTP/1.1 200")


def test_consumer_names_follow_the_name_rules(server_url: str, name: str) -> None:
    url = f"{server_url}/v1/topics/{name}"
    assert httpx.put(url, timeout=10).status_code == 201
    assert httpx.put(f"{url}/subscriptions/s", timeout=10).status_code == 201
    for bad in ("a b", "<script>", "..", "__x", "x/y", "é"):
        r = httpx.get(f"{url}/subscriptions/s/messages", params={"consumer": bad}, timeout=10)
        assert r.status_code == 400, bad
        assert r.json()["error"]["code"] == "invalid_request"
    ok = httpx.get(f"{url}/subscriptions/s/messages", params={"consumer": "w-1.a"}, timeout=10)
    assert ok.status_code == 200
