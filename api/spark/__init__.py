"""txnstream as a PySpark data source (the ``spark`` extra), format ``"txnstream"``.

Importing this package imports pyspark and pyarrow; ``import api`` never does. Usage and
options: :mod:`txnstream.api.spark._source`.
"""

from txnstream.api import TxnStreamSourceError

from ._source import TxnStreamDataSource

__all__ = ["TxnStreamDataSource", "TxnStreamSourceError"]
