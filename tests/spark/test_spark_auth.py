"""The Spark ``url`` mode against a server run with ``--auth``: ``.option("token", ...)``
reads and writes (exactly once, through its own transactions); without a token, or with
one that has no grant on the topic, a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support import AUTH_TOKENS, running_server, write_auth_file

from txnstream.api.client import Client, wire_message

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("spark-auth")
    with running_server(root / "data", write_auth_file(root / "principals.json")) as url:
        yield url


def _read(spark: SparkSession, url: str, topic: str, token: str | None) -> list[bytes]:
    reader = spark.read.format("txnstream").option("url", url).option("topic", topic)
    if token is not None:
        reader = reader.option("token", token)
    return sorted(row["value"] for row in reader.load().collect())


def test_read_and_write_with_a_token(spark: SparkSession, auth_url: str) -> None:
    alice = AUTH_TOKENS["alice"]
    with Client(auth_url, token=alice) as client:
        client.create_topic("a-spark-in")
        client.create_topic("a-spark-out")
        txn = client.begin()["txn"]
        client.produce("a-spark-in", [wire_message(b"committed")], txn=txn)
        client.commit(txn)
        txn = client.begin()["txn"]
        client.produce("a-spark-in", [wire_message(b"aborted")], txn=txn)
        client.abort(txn)

    assert _read(spark, auth_url, "a-spark-in", alice) == [b"committed"]
    with pytest.raises(Exception, match=r"401 unauthorized.*option\('token'"):
        _read(spark, auth_url, "a-spark-in", None)
    with pytest.raises(Exception, match="403 forbidden"):
        _read(spark, auth_url, "a-spark-in", AUTH_TOKENS["bob"])

    rows = spark.range(5).select(F.col("id").cast("string").alias("value"))
    rows.write.format("txnstream").option("url", auth_url).option("topic", "a-spark-out").option(
        "token", alice
    ).mode("append").save()
    assert _read(spark, auth_url, "a-spark-out", alice) == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(Exception, match="403 forbidden"):
        rows.write.format("txnstream").option("url", auth_url).option(
            "topic", "a-spark-out"
        ).option("token", AUTH_TOKENS["bob"]).mode("append").save()
    with Client(auth_url, token=alice) as client:  # the job's transactions were alice's
        assert client.list_transactions(state="open") == []
