"""Real --json objects of every mode, validated against docs/summary.schema.json with
python's jsonschema: passes, early failures, a probe skip, a stopped sender, --json -.
Loopback only (::1, lo); no root needed (a probe or report of lo that cannot read
something is still an object the schema must accept)."""

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
from conftest import REPO

jsonschema = pytest.importorskip("jsonschema")

SCHEMA_PATH = os.path.join(REPO, "docs", "summary.schema.json")


@pytest.fixture(scope="module")
def validator():
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def check(validator, doc, what):
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    assert not errors, f"{what}: {errors}\n{json.dumps(doc)[:2000]}"


def run_json(binary, args, timeout=30):
    """Runs ``binary args --json FILE``; returns (exit code, stderr, the object)."""
    fd, path = tempfile.mkstemp(prefix="schema-", suffix=".json")
    os.close(fd)
    os.unlink(path)
    try:
        p = subprocess.run([binary, *args, "--json", path], capture_output=True, text=True, timeout=timeout)
        with open(path) as f:
            return p.returncode, p.stderr, json.load(f)
    finally:
        if os.path.exists(path):
            os.unlink(path)


class Listening:
    """``binary args -p 0`` once it listens: the port the kernel gave it, from its ``listening
    on [ADDR]:PORT`` (``control on [ADDR]:PORT``) line. Loopback is shared with every process
    here, so no port is picked by binding and releasing it (another socket could take it before
    the receiver binds and receive its connections)."""

    def __init__(self, binary, args, timeout=20):
        self.proc = subprocess.Popen([binary, *args, "-p", "0"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        found = threading.Event()
        self.port = None

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"(?:listening|control) on \[[^]]*\]:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    found.set()
            found.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not found.wait(timeout) or self.port is None:
            self.proc.kill()
            raise AssertionError(f"no listening line from {args}: {''.join(self.lines)}")

    def wait(self, timeout=30):
        """Waits for the process, returns (exit code, its whole stderr)."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
        self.reader.join(timeout=10)
        return self.proc.returncode, "".join(self.lines)


class ClosedPort:
    """A ::1 port held bound and not listening: a connect there is refused, and nobody else can
    listen there while the test runs."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.bind(("::1", 0))
        self.port = str(self.sock.getsockname()[1])


def test_early_ends_and_skips_match_the_schema(binary, validator):
    closed = ClosedPort()
    port = closed.port
    cases = [
        (["-f", "lo"], "probe"),
        (["-f", "nosuch0"], "probe"),
        (["--report", "-f", "lo"], "report"),
        (["-l", "-f", "lo", "-s", "::1", "-p", port, "-v", "7", "--timeout", "1"], "devmem"),
        (["-l", "--zcrx", "-f", "lo", "-s", "::1", "-p", port, "-v", "7", "--timeout", "0.5"], "io_uring zcrx"),
        (["-f", "lo", "-s", "::1", "-p", port, "--timeout", "0.3"], "devmem-tx"),
        (["-l", "--plain", "-s", "::1", "-p", "0", "-v", "7", "--timeout", "0.3"], "plain TCP"),
        (["--send-pattern", "1K", "-s", "::1", "-p", port, "-v", "7", "--timeout", "0.3"], "pattern-sender"),
        (["--send-pattern", "1K", "-s", "::1", "-p", port, "-v", "7", "--timeout", "0.3", "--flows", "2"], "pattern-sender"),
        (["-l", "--plain", "-s", "::1", "-p", port, "--peer", "::1", "--peer-port", port, "--runs", "1", "--duration", "1"], "sweep"),
    ]
    for args, mode in cases:
        rc, err, doc = run_json(binary, args)
        check(validator, doc, f"{args} (exit {rc}: {err.strip()})")
        assert doc["mode"] == mode
        assert doc["argv"] == args + ["--json", doc["argv"][-1]]
        assert doc["verdict"] == {0: "pass", 4: "skip"}.get(rc, "fail"), (args, rc, doc)
        if mode == "probe" and rc == 4:
            assert doc["probe"]["verdict"] == "skip"
            assert not doc["probe"]["reason"].startswith("skip: "), doc["probe"]
        if rc != 0:
            assert "bytes" not in doc, f"{args}: an early end has no body: {doc}"


def test_transfers_and_a_stopped_sender_match_the_schema(binary, validator):
    for rx_extra, tx_extra in (
        (["-v", "7"], ["--send-pattern", "1M", "-v", "7"]),
        (["--seed", "4", "--flows", "2"], ["--send-pattern", "1M", "--seed", "4", "--flows", "2"]),
        (["-v", "7", "--expect-bytes", "2M"], ["--send-pattern", "1M", "-v", "7"]),  # a failed receive
    ):
        with tempfile.TemporaryDirectory() as d:
            rx_json, tx_json = os.path.join(d, "rx.json"), os.path.join(d, "tx.json")
            rx = Listening(binary, ["-l", "--plain", "-s", "::1", "--timeout", "10", *rx_extra, "--json", rx_json])
            tx = subprocess.run(
                [binary, "-s", "::1", "-p", str(rx.port), *tx_extra, "--json", tx_json],
                capture_output=True, text=True, timeout=30,
            )
            rx_rc, rx_err = rx.wait()
            for path, rc, err in ((rx_json, rx_rc, rx_err), (tx_json, tx.returncode, tx.stderr)):
                with open(path) as f:
                    doc = json.load(f)
                check(validator, doc, f"{path} (exit {rc}: {err.strip()})")
                assert doc["verdict"] == ("pass" if rc == 0 else "fail"), doc
                assert doc["bytes"] > 0, doc

    # The sender is stopped once the receiver has received (its first progress line), not
    # after a fixed time: under load a sender started 0.5 s before may not have sent yet.
    with tempfile.TemporaryDirectory() as d:
        tx_json = os.path.join(d, "tx.json")
        rx = Listening(binary, ["-l", "--plain", "-s", "::1", "-v", "7", "--timeout", "10", "--progress", "0.1"])
        tx = subprocess.Popen([binary, "--send-pattern", "100G", "-s", "::1", "-p", str(rx.port), "-v", "7",
                               "--json", tx_json],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not any(line.startswith("rx progress") for line in rx.lines):
                assert time.monotonic() < deadline and tx.poll() is None, "".join(rx.lines)
                time.sleep(0.02)
            tx.send_signal(signal.SIGINT)
            _, err = tx.communicate(timeout=30)
        finally:
            tx.kill()
            rx.wait()
        assert tx.returncode == 1, err
        with open(tx_json) as f:
            doc = json.load(f)
        check(validator, doc, f"stopped sender: {err}")
        assert doc["verdict"] == "fail" and "SIGINT" in doc["error"], doc
        assert doc["bytes"] > 0 and doc["cpu_user_s"] is not None, doc


def test_a_stopped_peer_server_matches_the_schema(binary, validator):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "peer.json")
        peer = Listening(binary, ["--peer-server", "-s", "::1", "--json", path])
        peer.proc.send_signal(signal.SIGTERM)
        rc, err = peer.wait()
        with open(path) as f:
            doc = json.load(f)
        check(validator, doc, f"peer server (exit {rc}: {err})")
        assert doc["mode"] == "peer-server"
        assert doc["verdict"] == ("pass" if rc == 0 else "fail"), doc


def test_json_dash_is_one_object_on_stdout(binary, validator):
    p = subprocess.run([binary, "-f", "lo", "--json", "-"], capture_output=True, text=True, timeout=30)
    lines = p.stdout.splitlines()
    assert len(lines) == 1, p.stdout
    doc = json.loads(lines[0])
    check(validator, doc, "probe --json -")
    assert doc["argv"] == ["-f", "lo", "--json", "-"]


def test_the_schema_refuses_what_the_old_objects_were(validator):
    """The schema is not vacuous: the objects before one schema existed fail it."""
    old = [
        {"mode": "plain TCP", "ok": False, "verdict": "fail", "error": "timed out: accept"},
        {"probe": {"checks": [], "verdict": "skip", "reason": "skip: no udmabuf"}, "report": None},
        {"mode": "pattern-sender", "ok": True, "bytes": 1, "crc32": 0, "stream": "period 7", "writes": 1,
         "elapsed_s": 0.1, "gbit_per_s": 0.0},
    ]
    for doc in old:
        assert list(validator.iter_errors(doc)), doc
    envelope = {"version": "0.1.0", "argv": [], "kernel_release": None}
    assert list(validator.iter_errors({**old[1], **envelope, "mode": "probe", "ok": False, "verdict": "skip",
                                       "error": "skip: no udmabuf"})), "a reason repeating 'skip: '"
    assert list(validator.iter_errors({**envelope, "mode": "plain TCP", "ok": True, "verdict": "ok",
                                       "error": None})), "verdict 'ok' is 'pass' now"
    assert list(validator.iter_errors({**old[2], **envelope, "verdict": "pass", "error": None})), \
        "a sender's summary without CPU"
