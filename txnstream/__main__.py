"""``python -m txnstream``: the ``txnstream`` command."""

from __future__ import annotations

from txnstream.api.cli import main

if __name__ == "__main__":
    main()
