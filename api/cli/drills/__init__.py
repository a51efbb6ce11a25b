"""``txnstream drill ...``: operator drills that prove recovery works on real data.

- ``drill replay --data DIR``: per topic, recover the transaction buffer from the newest
  valid snapshot (plus tail) and by a full replay of the retained log, compare the two,
  and report entries replayed, time each way and the speed-up.
- ``drill snapshot --data DIR --topic T``: take a snapshot now and show what it holds.
- ``drill crash --data DIR``: run a real ``txnstream serve`` child, drive a
  transactional workload over HTTP, SIGKILL and restart the child at random moments, and
  check the recorded history (nothing committed lost, nothing aborted delivered, no
  redelivery after a successful ack, order kept).

``replay`` and ``snapshot`` open the data directory themselves: run them on a directory
no server is using (stop the server first). ``crash`` owns its server child and kills it
on the way out, whatever happens.
"""

from ._errors import DrillError
from ._group import drill_app

__all__ = ["DrillError", "drill_app"]
