"""The Kafka listener: unmodified Kafka clients produce, fetch and run transactions.

A front door beside ``txnstream.api.http`` over the same public engine
(``from txnstream.api import ...`` only): ``serve --kafka-listen HOST:PORT`` starts a
:class:`KafkaListener` with the HTTP server. The wire format: kafka-python's request and
response structs (``kafka.protocol``) and aiokafka's compiled record batch codec
(``aiokafka.record``).
"""

from ._apis import APIS
from ._server import KafkaListener, format_address, parse_address

__all__ = ["APIS", "KafkaListener", "format_address", "parse_address"]
