"""What a standby's listener answers to the requests only the active serves: every one,
at every version served, encodes to a response carrying the error that sends the client
to the active (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR, NOT_CONTROLLER), or the
"not available yet" ones while no active is known."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from txnstream.api.kafka import APIS
from txnstream.api.kafka._standby import REFUSED, node_id_of, refusal, refused

pytestmark = pytest.mark.timeout(30)

_TOPICS = [
    NS(name="t", topic="t", partitions=[NS(partition=0, partition_index=0)], partition_indexes=[0])
]
REQUEST = NS(
    acks=-1,
    topic_data=[NS(name="t", partition_data=[NS(index=0)])],
    topics=_TOPICS,
    member_id="m",
    v3_and_below_topics=[NS(name="t", partitions=[0])],
    topic_names=["t"],
)
"""One request object with the fields every refused API's answer reads."""


def _codes(value: Any) -> set[int]:
    """Every ``*error_code`` in a decoded response, however nested."""
    found: set[int] = set()
    if isinstance(value, list | tuple):
        for item in value:
            found |= _codes(item)
    elif hasattr(value, "to_dict"):
        found |= _codes(value.to_dict())
    elif isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("error_code") and item != 0:
                found.add(item)
            else:
                found |= _codes(item)
    return found


# NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE, NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE
PARTITION_KEYS = {0, 1, 2}  # Produce, Fetch, ListOffsets
CONTROLLER_KEYS = {19, 20}  # CreateTopics, DeleteTopics


@pytest.mark.parametrize("key", sorted(REFUSED))
@pytest.mark.parametrize("known", [True, False])
def test_every_refused_request_gets_the_error_that_sends_it_to_the_active(
    key: int, known: bool
) -> None:
    api = APIS[key]
    if key in PARTITION_KEYS:
        expected = {6} if known else {5}
    elif key in CONTROLLER_KEYS:
        expected = {41}
    else:
        expected = {16} if known else {15}
    for version in range(api.min_version, api.max_version + 1):
        answer = refusal(key, REQUEST, version, known)
        answer.API_VERSION = version
        encoded = bytes(answer.encode())
        decoded = api.response.decode(encoded, version=version)
        assert _codes(decoded) == expected, (key, version, decoded)


def test_a_produce_without_acks_gets_no_answer() -> None:
    assert refusal(0, NS(**{**vars(REQUEST), "acks": 0}), 8, True) is None


def test_node_ids_are_stable_per_address_and_differ_between_servers() -> None:
    assert node_id_of("10.0.0.1:9092") == node_id_of("10.0.0.1:9092")
    ids = {node_id_of(f"10.0.0.{i}:9092") for i in range(1, 50)}
    assert len(ids) == 49
    assert all(0 <= i < 2**31 for i in ids)


def test_a_standby_gives_an_idempotent_producer_its_id_and_refuses_a_transactional_one() -> None:
    """librdkafka asks any broker it is connected to for an idempotent producer's id (a
    standby too, now that Metadata lists every server): refused, it would ask the same
    standby again and again."""
    init = 22  # InitProducerId
    assert not refused(init, NS(transactional_id=None))
    assert refused(init, NS(transactional_id="t"))
    assert all(refused(key, REQUEST) for key in REFUSED - {init})
