"""Fixtures for the server tests: `cera serve` started on a free loopback port, waited for
until /health says ok, stopped at the end. CERA_BIN points at the binary (scripts/test.sh
builds it); the default model comes from the project's own fetch step."""
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("CERA_BIN", os.path.join(ROOT, "target", "release", "cera"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args, model="smollm2"):
        if not os.path.exists(BIN):
            raise RuntimeError(f"{BIN} does not exist: build it with cargo build --release -p cera-cli")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(ROOT, "target", f"serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen(
            [BIN, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-t", "2", *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cera serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                r = requests.get(self.url + "/health", timeout=2)
                if r.status_code == 200 and r.json()["status"] == "ok":
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("cera serve did not become ready in 120 s")

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def metrics(self) -> dict:
        out = {}
        for line in requests.get(self.url + "/metrics", timeout=5).text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def server():
    s = Server("-np", "4", "-c", "8192")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
