"""Real --json objects of every mode, validated against docs/summary.schema.json with
python's jsonschema: passes, early failures, a probe skip, a stopped sender, --json -.
Loopback only (::1, lo); no root needed (a probe or report of lo that cannot read
something is still an object the schema must accept)."""

import json
import os
import signal
import subprocess
import tempfile
import time

import pytest
from conftest import REPO

import ksft_proc

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


def listening(port, timeout=10):
    """Waits until something listens on ``port`` (tcp6 or tcp)."""
    want = f":{port:04X} "
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in ("/proc/net/tcp6", "/proc/net/tcp"):
            with open(name) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if (cols[1] + " ").endswith(want) and cols[3] == "0A":
                        return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def test_early_ends_and_skips_match_the_schema(binary, validator):
    port = str(ksft_proc.rand_port())
    cases = [
        (["-f", "lo"], "probe"),
        (["-f", "nosuch0"], "probe"),
        (["--report", "-f", "lo"], "report"),
        (["-l", "-f", "lo", "-s", "::1", "-p", port, "-v", "7", "--timeout", "1"], "devmem"),
        (["-l", "--zcrx", "-f", "lo", "-s", "::1", "-p", port, "-v", "7", "--timeout", "0.5"], "io_uring zcrx"),
        (["-f", "lo", "-s", "::1", "-p", port, "--timeout", "0.3"], "devmem-tx"),
        (["-l", "--plain", "-s", "::1", "-p", port, "-v", "7", "--timeout", "0.3"], "plain TCP"),
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
        port = str(ksft_proc.rand_port())
        with tempfile.TemporaryDirectory() as d:
            rx_json, tx_json = os.path.join(d, "rx.json"), os.path.join(d, "tx.json")
            rx = subprocess.Popen(
                [binary, "-l", "--plain", "-s", "::1", "-p", port, "--timeout", "10", *rx_extra, "--json", rx_json],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            try:
                listening(int(port))
                tx = subprocess.run(
                    [binary, "-s", "::1", "-p", port, *tx_extra, "--json", tx_json],
                    capture_output=True, text=True, timeout=30,
                )
                _, rx_err = rx.communicate(timeout=30)
            finally:
                rx.kill()
            for path, rc, err in ((rx_json, rx.returncode, rx_err), (tx_json, tx.returncode, tx.stderr)):
                with open(path) as f:
                    doc = json.load(f)
                check(validator, doc, f"{path} (exit {rc}: {err.strip()})")
                assert doc["verdict"] == ("pass" if rc == 0 else "fail"), doc
                assert doc["bytes"] > 0, doc

    port = str(ksft_proc.rand_port())
    with tempfile.TemporaryDirectory() as d:
        tx_json = os.path.join(d, "tx.json")
        rx = subprocess.Popen([binary, "-l", "--plain", "-s", "::1", "-p", port, "-v", "7", "--timeout", "10"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            listening(int(port))
            tx = subprocess.Popen([binary, "--send-pattern", "100G", "-s", "::1", "-p", port, "-v", "7", "--json", tx_json],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            tx.send_signal(signal.SIGINT)
            _, err = tx.communicate(timeout=30)
            rx.wait(timeout=30)
        finally:
            rx.kill()
        assert tx.returncode == 1, err
        with open(tx_json) as f:
            doc = json.load(f)
        check(validator, doc, f"stopped sender: {err}")
        assert doc["verdict"] == "fail" and "SIGINT" in doc["error"], doc
        assert doc["bytes"] > 0 and doc["cpu_user_s"] is not None, doc


def test_a_stopped_peer_server_matches_the_schema(binary, validator):
    port = ksft_proc.rand_port()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "peer.json")
        peer = subprocess.Popen([binary, "--peer-server", "-s", "::1", "-p", str(port), "--json", path],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            listening(port)
            peer.send_signal(signal.SIGTERM)
            _, err = peer.communicate(timeout=30)
        finally:
            peer.kill()
        with open(path) as f:
            doc = json.load(f)
        check(validator, doc, f"peer server (exit {peer.returncode}: {err})")
        assert doc["mode"] == "peer-server"
        assert doc["verdict"] == ("pass" if peer.returncode == 0 else "fail"), doc


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
