"""The listener's wire behaviour: version negotiation, bad frames, limits (raw requests)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka_support import Kafka, KafkaWire

from txnstream.api.kafka import APIS

pytestmark = pytest.mark.timeout(30)


async def test_api_versions_lists_exactly_the_served_versions(kafka: Kafka) -> None:
    wire = await KafkaWire.open(kafka.listener.port)
    answer = await wire.call(ApiVersionsRequest(), ApiVersionsResponse, 2)
    assert answer.error_code == 0
    served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert served == {key: (api.min_version, api.max_version) for key, api in APIS.items()}
    assert served[0] == (3, 8)  # Produce: record batches v2 only
    # every advertised version is non-flexible (what every client negotiates down to),
    # but InitProducerId v3 (KIP-360: librdkafka's epoch bump after an abortable error)
    assert served[22] == (0, 3)
    for key, (_, high) in served.items():
        assert not APIS[key].request.flexible_version_q(high if key != 22 else 1)
    await wire.close()


async def test_an_unsupported_api_versions_version_gets_the_v0_answer_and_keeps_the_connection(
    kafka: Kafka,
) -> None:
    wire = await KafkaWire.open(kafka.listener.port)
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    request.API_VERSION = 4  # what kafka-python 3 opens with
    request.with_header(correlation_id=41, client_id="wire-test")
    await wire.send_raw(bytes(request.encode(header=True, framed=True)))
    frame = await wire.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 41
    answer = ApiVersionsResponse.decode(frame[4:], version=0)  # the v0 layout
    assert answer.error_code == 35  # UNSUPPORTED_VERSION
    assert {k.api_key for k in answer.api_keys} == set(APIS)
    # the same connection goes on with a version it found there
    again = await wire.call(ApiVersionsRequest(), ApiVersionsResponse, 2)
    assert again.error_code == 0
    await wire.close()


async def test_metadata_names_one_partition_led_by_the_advertised_broker(kafka: Kafka) -> None:
    await kafka.engine.create_topic("orders")
    wire = await KafkaWire.open(kafka.listener.port)
    request = MetadataRequest(
        topics=[
            MetadataRequest.MetadataRequestTopic(name="orders"),
            MetadataRequest.MetadataRequestTopic(name="nope"),
        ]
    )
    answer = await wire.call(request, MetadataResponse, 8)
    assert kafka.listener.broker is not None
    node = kafka.listener.broker.node_id  # this server's, from its advertised address
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
        (node, "127.0.0.1", kafka.listener.port)
    ]
    assert answer.controller_id == node
    topics = {t.name: t for t in answer.topics}
    assert topics["orders"].error_code == 0
    assert [(p.partition_index, p.leader_id) for p in topics["orders"].partitions] == [(0, node)]
    assert topics["nope"].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    everything = await wire.call(MetadataRequest(topics=None), MetadataResponse, 8)
    assert [t.name for t in everything.topics] == ["orders"]
    await wire.close()


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(struct.pack(">i", 1 << 30), id="over-the-size-limit"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">ihhi", 8, 3, 8, 1) + b"", id="truncated-metadata"),
        pytest.param(struct.pack(">ihhi", 8, 999, 0, 1), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhi", 8, 3, 99, 1), id="unserved-version"),
    ],
)
async def test_a_bad_frame_closes_that_connection_only(kafka: Kafka, frame: bytes) -> None:
    bystander = await KafkaWire.open(kafka.listener.port)
    await bystander.call(ApiVersionsRequest(), ApiVersionsResponse, 2)
    wire = await KafkaWire.open(kafka.listener.port)
    await wire.send_raw(frame)
    assert await wire.closed()  # no response bytes, no traceback: just closed
    answer = await bystander.call(ApiVersionsRequest(), ApiVersionsResponse, 2)
    assert answer.error_code == 0
    await bystander.close()
    await wire.close()
