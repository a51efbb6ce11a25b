"""Transaction-buffer snapshots and snapshot + tail-replay recovery (not implemented yet)."""

__all__: list[str] = []
