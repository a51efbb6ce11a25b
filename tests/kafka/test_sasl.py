"""SASL/PLAIN with the principals of ``--auth``: the user is the principal's name, the
password its token; the same grants as HTTP apply; transactional ids are per principal."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import (
    FetchResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka_clients import TIMEOUT
from kafka_support import Kafka, KafkaWire, fetch_request

from txnstream.api import Engine
from txnstream.api.http import Authenticator
from txnstream.api.kafka import KafkaListener

pytestmark = pytest.mark.timeout(90)

PRINCIPALS = {
    "principals": [
        {"name": "ops", "token": "ops-token", "admin": True},
        {
            "name": "billing",
            "token": "billing-token",
            "grants": [
                {"topic": "orders", "actions": ["produce", "consume"]},
                {"topic": "audit", "actions": ["consume"]},
            ],
        },
        {
            "name": "reports",
            "token": "reports-token",
            "grants": [{"topic": "orders", "actions": ["consume"], "subscriptions": ["reports-*"]}],
        },
    ]
}


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Kafka]:
    path = tmp_path / "principals.json"
    path.write_text(json.dumps(PRINCIPALS))
    auth = Authenticator.from_file(path)
    async with Engine.open(tmp_path / "data") as engine:
        for topic in ("orders", "audit", "secret"):
            await engine.create_topic(topic)
        listener = KafkaListener(
            engine, "127.0.0.1", 0, authenticate=lambda _user, token: auth.identify(token)
        )
        await listener.start()
        try:
            yield Kafka(engine, listener)
        finally:
            await listener.stop()


def _sasl(user: str, token: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": token,
    }


async def _authenticate(wire: KafkaWire, user: str, token: str) -> int:
    shake = await wire.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
    assert (shake.error_code, shake.mechanisms) == (0, ["PLAIN"])
    answer = await wire.call(
        SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{token}".encode()),
        SaslAuthenticateResponse,
        1,
    )
    return int(answer.error_code)


async def test_a_wrong_token_is_refused_and_the_connection_closed(secured: Kafka) -> None:
    wire = await KafkaWire.open(secured.listener.port)
    assert await _authenticate(wire, "billing", "not-the-token") == 58
    assert await wire.closed()
    await wire.close()
    wire = await KafkaWire.open(secured.listener.port)
    assert await _authenticate(wire, "ops", "billing-token") == 58  # another's token
    assert await wire.closed()
    await wire.close()


async def test_nothing_but_the_handshake_before_authentication(secured: Kafka) -> None:
    wire = await KafkaWire.open(secured.listener.port)
    request = MetadataRequest(topics=None)
    request.API_VERSION = 8
    request.with_header(correlation_id=1, client_id="early")
    await wire.send_raw(bytes(request.encode(header=True, framed=True)))
    assert await wire.closed()
    await wire.close()


async def test_metadata_shows_only_the_topics_a_principal_has_grants_on(secured: Kafka) -> None:
    wire = await KafkaWire.open(secured.listener.port)
    assert await _authenticate(wire, "billing", "billing-token") == 0
    everything = await wire.call(MetadataRequest(topics=None), MetadataResponse, 8)
    assert sorted(t.name for t in everything.topics) == ["audit", "orders"]
    named = await wire.call(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="secret")]),
        MetadataResponse,
        8,
    )
    assert named.topics[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    await wire.close()


async def test_grants_apply_to_produce_and_transactions_belong_to_the_principal(
    secured: Kafka,
) -> None:
    from confluent_kafka import KafkaError, Producer

    def produce() -> dict[str, Any]:
        outcomes: dict[str, Any] = {}

        def report(error: Any, message: Any) -> None:
            outcomes[message.topic()] = None if error is None else error.code()

        plain = Producer(
            {"bootstrap.servers": secured.bootstrap, **_sasl("billing", "billing-token")}
        )
        plain.produce("orders", value=b"ok", on_delivery=report)
        plain.produce("audit", value=b"refused", on_delivery=report)  # consume only
        plain.flush(TIMEOUT)
        txn = Producer(
            {
                "bootstrap.servers": secured.bootstrap,
                "transactional.id": "writer",
                **_sasl("billing", "billing-token"),
            }
        )
        txn.init_transactions(TIMEOUT)
        txn.begin_transaction()
        txn.produce("orders", value=b"in a transaction")
        assert txn.flush(TIMEOUT) == 0
        outcomes["open"] = True
        return {"outcomes": outcomes, "producer": txn}

    done = await asyncio.to_thread(produce)
    assert done["outcomes"]["orders"] is None
    assert done["outcomes"]["audit"] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    [open_txn] = await secured.engine.transactions(state="open")
    assert open_txn.owner == "billing"  # the engine's owner: HTTP's rules apply to it
    await asyncio.to_thread(done["producer"].commit_transaction, TIMEOUT)
    result = await secured.engine.fetch("orders", "earliest")
    assert [e.value for e in result.entries if e.kind == "data"] == [b"ok", b"in a transaction"]


async def test_a_consumer_reads_only_what_it_may(secured: Kafka) -> None:
    from confluent_kafka import Consumer, TopicPartition

    await secured.engine.send("audit", b"for billing")
    await secured.engine.send("secret", b"not for billing")

    def read() -> Any:
        consumer = Consumer(
            {
                "bootstrap.servers": secured.bootstrap,
                "group.id": "unused",
                **_sasl("billing", "billing-token"),
            }
        )
        try:
            consumer.assign([TopicPartition("audit", 0, 0)])
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None:
                    assert message.error() is None, message.error()
                    return message.value()
            raise AssertionError("nothing came")
        finally:
            consumer.close()

    assert await asyncio.to_thread(read) == b"for billing"
    wire = await KafkaWire.open(secured.listener.port)
    assert await _authenticate(wire, "billing", "billing-token") == 0
    answer = await wire.call(
        fetch_request("secret", 0, committed=True, max_wait_ms=0), FetchResponse, 11
    )
    [part] = answer.responses[0].partitions
    assert (part.error_code, part.records) == (29, b"")  # TOPIC_AUTHORIZATION_FAILED
    await wire.close()


async def test_a_group_is_a_subscription_with_its_own_rights(secured: Kafka) -> None:
    """A grant limited to subscriptions ``reports-*`` may commit and fetch the offsets of
    group ``reports-daily`` only: another group on the same topic is
    GROUP_AUTHORIZATION_FAILED (30), and nothing is committed for it."""
    await secured.engine.send_many("orders", [b"a", b"b"])
    wire = await KafkaWire.open(secured.listener.port)
    assert await _authenticate(wire, "reports", "reports-token") == 0
    commit_topic = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = commit_topic.OffsetCommitRequestPartition
    fetch_topic = OffsetFetchRequest.OffsetFetchRequestTopic
    answers = {}
    for group in ("reports-daily", "billing"):
        committed = await wire.call(
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[commit_topic(name="orders", partitions=[partition(0, 2, None)])],
            ),
            OffsetCommitResponse,
            2,
        )
        fetched = await wire.call(
            OffsetFetchRequest(
                group_id=group, topics=[fetch_topic(name="orders", partition_indexes=[0])]
            ),
            OffsetFetchResponse,
            5,
        )
        [part] = fetched.topics[0].partitions
        answers[group] = (
            committed.topics[0].partitions[0].error_code,
            part.error_code,
            part.committed_offset,
        )
    await wire.close()
    assert answers == {"reports-daily": (0, 0, 2), "billing": (30, 30, -1)}
    assert "billing" not in (await secured.engine.stats("orders"))["subscriptions"]
