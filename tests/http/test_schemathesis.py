"""Schemathesis against the live server's ``/openapi.json``: no 5xx, responses match it.

Each operation is fuzzed three ways: schema-valid requests (random names, mostly 404),
schema-valid requests aimed at a topic, subscription and transaction that exist (so the
bodies reach the engine), and schema-invalid requests (which must get a documented 4xx).
Bounded and deterministic: ``MAX_EXAMPLES`` per run, derandomized, no example database.

(``schemathesis.pytest.from_fixture`` does not work with pytest 9, so the operations are
listed here and looked up in the served document; a test keeps the list complete.)
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

MAX_EXAMPLES = 25
MAX_WAIT_MS = 200
"""Long polls are capped so a generated ``wait_ms=30000`` cannot stall the run."""

OPERATIONS = [
    ("GET", "/v1/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/topics"),
    ("PUT", "/v1/topics/{topic}"),
    ("DELETE", "/v1/topics/{topic}"),
    ("GET", "/v1/topics/{topic}/stats"),
    ("POST", "/v1/topics/{topic}/messages"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/topics/{topic}/fetch"),
    ("PUT", "/v1/topics/{topic}/subscriptions/{sub}"),
    ("DELETE", "/v1/topics/{topic}/subscriptions/{sub}"),
    ("GET", "/v1/topics/{topic}/subscriptions/{sub}/messages"),
    ("POST", "/v1/topics/{topic}/subscriptions/{sub}/ack"),
    ("POST", "/v1/topics/{topic}/subscriptions/{sub}/nack"),
    ("POST", "/v1/topics/{topic}/subscriptions/{sub}/seek"),
    ("GET", "/v1/topics/{topic}/ledgers"),
    ("PUT", "/v1/topics/{topic}/offload"),
    ("POST", "/v1/topics/{topic}/offload/run"),
    ("PUT", "/v1/topics/{topic}/retention"),
    ("PUT", "/v1/topics/{topic}/ttl"),
    ("POST", "/v1/transactions"),
    ("GET", "/v1/transactions"),
    ("POST", "/v1/transactions/finish"),
    ("GET", "/v1/transactions/{txn}"),
    ("POST", "/v1/transactions/{txn}/commit"),
    ("POST", "/v1/transactions/{txn}/abort"),
]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(server_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{server_url}/openapi.json")


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    served = {
        (method.upper(), path)
        for path, item in api_schema.raw_schema["paths"].items()
        for method in item
    }
    assert served == set(OPERATIONS)


def _existing(base_url: str, path: str) -> dict[str, str]:
    """Create the topic / subscription / transaction the path names; their names."""
    params: dict[str, str] = {}
    with httpx.Client(base_url=base_url, timeout=30) as client:
        if "{topic}" in path:
            topic = f"fz{uuid.uuid4().hex[:10]}"
            assert client.put(f"/v1/topics/{topic}").status_code == 201
            client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": 1}]})
            params["topic"] = topic
            if "{sub}" in path:
                assert client.put(f"/v1/topics/{topic}/subscriptions/s").status_code == 201
                params["sub"] = "s"
        if "{txn}" in path:
            params["txn"] = client.post("/v1/transactions", json={}).json()["txn"]
    return params


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variant", ["positive", "positive-existing", "negative"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_openapi_conformance(
    api_schema: Any, server_url: str, method: str, path: str, variant: str
) -> None:
    operation = api_schema[path][method]
    mode = schemathesis.GenerationMode.NEGATIVE
    checks = [*CHECKS, negative_data_rejection]
    path_parameters = None
    if variant.startswith("positive"):
        mode = schemathesis.GenerationMode.POSITIVE
        checks = CHECKS
    if variant == "positive-existing":
        path_parameters = _existing(server_url, path) or None
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        query = case.query
        if isinstance(query, dict):
            wait = query.get("wait_ms")
            if isinstance(wait, int) and not isinstance(wait, bool) and wait > MAX_WAIT_MS:
                query["wait_ms"] = MAX_WAIT_MS
        case.call_and_validate(base_url=server_url, checks=checks, timeout=30)

    try:
        run()
    except Unsatisfiable:
        if mode is not schemathesis.GenerationMode.NEGATIVE:
            raise
        pytest.skip("the schema leaves nothing to get wrong in this operation's request")
