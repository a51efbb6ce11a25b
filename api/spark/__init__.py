"""txnstream as a PySpark data source (the ``spark`` extra), format ``"txnstream"``.

``TxnStreamDataSource`` imports pyspark and pyarrow on first use; ``import txnstream.api``
never does, nor does naming :class:`TxnStreamSourceError` (defined here, re-exported by
``txnstream.api``). Usage and options: :mod:`txnstream.api.spark._source`.
"""

import typing

from ._errors import TxnStreamSourceError

if typing.TYPE_CHECKING:
    from ._source import TxnStreamDataSource

__all__ = ["TxnStreamDataSource", "TxnStreamSourceError"]


def __getattr__(name: str) -> typing.Any:
    # PEP 562: pyspark loads with the data source, not with the error.
    if name == "TxnStreamDataSource":
        from ._source import TxnStreamDataSource

        globals()[name] = TxnStreamDataSource
        return TxnStreamDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
