"""The keyed stream (--seed) against an independent implementation written here from its
definition, the reference sender that docs/validation.md defines it with, and CRC-32 against
zlib, over loopback (no root needed)."""

import json
import os
import re
import socket
import subprocess
import sys
import time
import zlib


MASK = (1 << 64) - 1
VALIDATION_MD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                             "validation.md")


class SplitMix64:
    """SplitMix64 as published: the state advances by the golden-ratio increment, each output
    is the state run through the output function."""

    GAMMA = 0x9E3779B97F4A7C15

    def __init__(self, state):
        self.state = state

    def next(self):
        self.state = (self.state + self.GAMMA) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def keyed_stream(seed, nbytes, flow=0):
    """The --seed stream of flow ``flow`` from its definition: the flow's key and step are
    outputs 2·flow and 2·flow+1 of SplitMix64 started at the state its first output from
    ``seed`` gives, the step with its lowest bit set; bytes 8i..8i+7 are, little-endian,
    key + i·step mod 2^64."""
    gen = SplitMix64(SplitMix64(seed).next())
    for _ in range(2 * flow):
        gen.next()
    key = gen.next()
    step = gen.next() | 1
    words = range((nbytes + 7) // 8)
    return b"".join(((key + i * step) & MASK).to_bytes(8, "little") for i in words)[:nbytes]


def reference_sender():
    """The reference sender's source, as docs/validation.md shows it (its one python block)."""
    with open(VALIDATION_MD, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1, "docs/validation.md should hold exactly one python block"
    return blocks[0]


def period_stream(period, nbytes):
    """The -v N pattern (what the kernel harness's ``yes | socat`` sender produces)."""
    unit = bytes(range(1, period)) + b"\n"
    return (unit * (nbytes // period + 1))[:nbytes]


class Receiver:
    """A ``-l --plain`` receiver on 127.0.0.1 port 0 (``-p 0``: the kernel picks a free port
    and the receiver names it in its ``listening on [ADDR]:PORT`` line, so no port is picked
    by a test and released before the receiver binds it)."""

    LISTENING = re.compile(rb"listening on \[[^\]]*\]:(\d+)$")

    def __init__(self, binary, tmp_path, *stream_args):
        self.jpath = tmp_path / f"rx-{time.monotonic_ns()}.json"
        argv = [binary, "-l", "--plain", "-s", "127.0.0.1", "-p", "0", "--timeout", "30",
                "--json", str(self.jpath), *stream_args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.early = b""
        self.port = None
        # Line by line until that line, or the end of its stderr (it exits within its
        # --timeout): a select on the pipe would miss lines already in the reader's buffer.
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.early += line
            if m := self.LISTENING.search(line.rstrip(b"\n")):
                self.port = int(m.group(1))
        assert self.port is not None, f"the receiver did not listen: {self.early!r}"

    def finish(self):
        """Waits for the receiver: (exit code, its whole stderr, its --json summary)."""
        _, err = self.proc.communicate(timeout=60)
        return (self.proc.returncode, (self.early + err).decode(errors="replace"),
                json.loads(self.jpath.read_text()))


def _send_in_odd_writes(port, data):
    """Sends ``data`` in writes of 1, 2, 3, ... 997 bytes (cycling), with TCP_NODELAY, so the
    receiver's pieces start at every alignment."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        at, n = 0, 1
        while at < len(data):
            s.sendall(data[at:at + n])
            at += n
            n = n % 997 + 1


def test_receiver_accepts_an_independent_keyed_sender(binary, tmp_path):
    data = keyed_stream(42, 3 << 20)
    rx = Receiver(binary, tmp_path, "--seed", "42")
    port = rx.port
    _send_in_odd_writes(port, data)
    rc, err, summary = rx.finish()
    assert rc == 0, err
    assert summary["validated_bytes"] == len(data)
    assert summary["mismatches"] == 0
    assert summary["stream"] == "seed 42"
    # Every byte checked against the keyed stream: none hashed (docs/validation.md, CRC-32).
    assert summary["crc32"] is None and summary["crc32_from"] == len(data), err
    assert "crc32 none (every byte was the keyed stream's, none hashed)" in err, err


def test_sender_matches_the_independent_keyed_stream(binary):
    nbytes = (1 << 20) + 5
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        tx = subprocess.Popen([binary, "--send-pattern", str(nbytes), "-s", "127.0.0.1", "-p", str(port),
                               "--seed", "0xDEADBEEF"], stderr=subprocess.PIPE)
        conn, _ = srv.accept()
        got = bytearray()
        with conn:
            while chunk := conn.recv(1 << 16):
                got += chunk
        _, err = tx.communicate(timeout=30)
    assert tx.returncode == 0, err
    want = keyed_stream(0xDEADBEEF, nbytes)
    assert bytes(got) == want
    # The keyed stream is not hashed by its sender (its receiver checks every byte).
    assert "crc32 none (every byte was the keyed stream's, none hashed)" in err.decode()


def test_misplaced_bytes_are_diagnosed(binary, tmp_path):
    """8 bytes dropped at 1 MiB: under -v 8 the rest would still pass; --seed fails and says
    the bytes belong 8 bytes further on."""
    data = keyed_stream(7, 2 << 20)
    bad = data[:1 << 20] + data[(1 << 20) + 8:]
    rx = Receiver(binary, tmp_path, "--seed", "7")
    port = rx.port
    _send_in_odd_writes(port, bad)
    rc, err, summary = rx.finish()
    assert rc == 1, err
    # The CRC-32 covers the bytes from the first piece with a mismatch on, and says so.
    start = summary["crc32_from"]
    assert 0 < start <= 1 << 20, summary
    assert summary["crc32"] == zlib.crc32(bad[start:])
    assert f"crc32 0x{zlib.crc32(bad[start:]):08x} of stream offsets {start}.." in err, err
    assert re.search(r"holds the bytes of stream offset \d+ \(\+8: shifted", err), err
    assert "validation failed (seed 7)" in err


def test_the_documented_reference_sender_is_the_stream(binary, tmp_path):
    """The reference in docs/validation.md produces the stream of every flow this test's own
    implementation produces, and a receiver given its seed validates what it sends."""
    src = reference_sender()
    for seed, flow, nbytes in [(0, 0, 4099), (42, 0, 1000), (42, 1, 1000), (2**64 - 1, 63, 77)]:
        out = subprocess.run([sys.executable, "-c", src, str(seed), str(flow), str(nbytes)],
                             capture_output=True, check=True, timeout=60).stdout
        assert out == keyed_stream(seed, nbytes, flow), (seed, flow)
    # The flows of one seed differ, and none is another's stream shifted.
    flows = [keyed_stream(42, 4096, f) for f in range(4)]
    for a in flows:
        for b in flows:
            assert a == b or a[8:4096] not in b
    rx = Receiver(binary, tmp_path, "--seed", "0x5eed")
    port = rx.port
    tx = subprocess.run([sys.executable, "-c", src, "0x5eed", "0", str(3 << 20), "127.0.0.1",
                         str(port)], capture_output=True, timeout=120)
    rc, err, summary = rx.finish()
    assert tx.returncode == 0, tx.stderr
    assert rc == 0, err
    assert summary["validated_bytes"] == 3 << 20 and summary["mismatches"] == 0
    assert summary["crc32"] is None and summary["crc32_from"] == 3 << 20


def test_flows_accepted_out_of_order_are_named_by_their_stream(binary, tmp_path):
    """Three reference senders connect in the order flow 2, 1, 0 (the first one's first
    writes of 1..997 bytes): the receiver names each connection's flow from its first 8
    bytes, validates all three, and reports flow k as the connection that carried flow k."""
    src = reference_sender()
    rx = Receiver(binary, tmp_path, "--seed", "9", "--flows", "3")
    port = rx.port
    _send_in_odd_writes(port, keyed_stream(9, 100_000, flow=2))
    for flow in (1, 0):
        tx = subprocess.run([sys.executable, "-c", src, "9", str(flow), "100000", "127.0.0.1",
                             str(port)], capture_output=True, timeout=60)
        assert tx.returncode == 0, tx.stderr
    rc, err, summary = rx.finish()
    assert rc == 0, err
    flows = summary["flows"]
    assert [f["stream"] for f in flows] == [f"seed 9 flow {k} of 3" for k in range(3)], flows
    assert all(f["validated_bytes"] == 100_000 and f["mismatches"] == 0 for f in flows), flows
    assert "accepted connection 0 carries flow 2's stream" in err, err
    assert "accepted connection 2 carries flow 0's stream" in err, err


def test_a_wrong_seed_is_no_stream_of_this_seed(binary, tmp_path):
    """A receiver told --seed 1 of a sender's --seed 0: every piece is bytes of no stream with
    this seed, never a shift or reorder of its own (the old stream said "reordered … stream
    offset 8145851686221800984"); another flow's bytes read the same to a single-flow
    receiver."""
    for stream in (keyed_stream(0, 1 << 20), keyed_stream(1, 1 << 20, flow=1)):
        rx = Receiver(binary, tmp_path, "--seed", "1")
        port = rx.port
        _send_in_odd_writes(port, stream)
        rc, err, summary = rx.finish()
        assert rc == 1, err
        assert summary["mismatches"] > 0
        diagnoses = [line for line in err.splitlines() if line.startswith("validation: ")]
        assert diagnoses, err
        for d in diagnoses:
            assert re.search(r"\(bytes of no stream with this seed \(wrong --seed\?\)", d) or \
                "(corrupt: too few bytes" in d, d
            assert not re.search(r"shifted|reordered|stale|duplicate", d), d


def test_crc_of_the_kernel_harness_pattern_equals_zlib(binary, tmp_path):
    """The CRC-32 a -v 7 receiver reports is zlib's of what was sent (a yes|socat stand-in),
    and a receiver that only prints (no -v) reports it too."""
    data = period_stream(7, (1 << 20) + 3)
    for args in (["-v", "7"], []):
        rx = Receiver(binary, tmp_path, *args)
        port = rx.port
        _send_in_odd_writes(port, data)
        rc, err, summary = rx.finish()
        assert rc == 0, err
        assert summary["bytes"] == len(data)
        assert summary["crc32"] == zlib.crc32(data), (args, err)


def test_one_gib_keyed_over_loopback(binary, tmp_path):
    rx = Receiver(binary, tmp_path, "--seed", "42")
    port = rx.port
    tx = subprocess.run([binary, "--send-pattern", "1G", "-s", "127.0.0.1", "-p", str(port), "--seed", "42"],
                        capture_output=True, timeout=120)
    rc, err, summary = rx.finish()
    assert tx.returncode == 0, tx.stderr
    assert rc == 0, err
    assert summary["validated_bytes"] == 1 << 30 and summary["mismatches"] == 0
    assert summary["crc32"] is None and b"crc32 none" in tx.stderr
