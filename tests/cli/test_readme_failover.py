"""The README's "Running several servers" block runs as printed against a test cluster:
only the store URL and the two ports are changed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import REPO
from support import free_ports

pytestmark = pytest.mark.timeout(120)


def test_readme_several_servers_block_runs_as_printed(pg_url: str) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n## Running several servers\n")
    found = re.search(r"```sh\n(.*?)```", readme[start:], re.S)
    assert found is not None
    block = found.group(1)
    first, second, kafka_first, kafka_second = map(str, free_ports(4))
    block = re.sub(r"^STORE=.*$", f"STORE='{pg_url}'", block, count=1, flags=re.M)
    block = block.replace("8080", first).replace("8081", second)
    block = block.replace("9092", kafka_first).replace("9093", kafka_second)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    with subprocess.Popen(
        ["bash", "-c", "set -euo pipefail\n" + block],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as shell:
        try:
            out, err = shell.communicate(timeout=90)
        finally:
            if shell.poll() is None:
                os.killpg(shell.pid, signal.SIGKILL)  # the group this test started
                shell.wait(timeout=10)
    assert shell.returncode == 0, (out, err)
    assert f'{{"status":"standby","active":"http://127.0.0.1:{first}"}}' in out
    assert '"value":"kept"' in out  # acknowledged on the first, read on the second
    assert "unsent: 0" in out  # a Kafka client given both addresses produced to the second
    assert '"value_b64":"b3ZlciBLYWZrYQ=="' in out  # "over Kafka", read over HTTP
    assert "Traceback" not in err
