"""The keyed stream (--seed) against an independent implementation written here from its
definition, and CRC-32 against zlib, over loopback (no root needed)."""

import json
import re
import socket
import subprocess
import time
import zlib

import ksft_proc

MASK = (1 << 64) - 1


def keyed_stream(seed, nbytes):
    """The --seed stream from its definition: bytes 8k..8k+7 are, little-endian, output k
    of SplitMix64 started at state ``seed``."""
    out = bytearray()
    state = seed
    while len(out) < nbytes:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        out += z.to_bytes(8, "little")
    return bytes(out[:nbytes])


def period_stream(period, nbytes):
    """The -v N pattern (what the kernel harness's ``yes | socat`` sender produces)."""
    unit = bytes(range(1, period)) + b"\n"
    return (unit * (nbytes // period + 1))[:nbytes]


def _tcp_tables():
    """The listeners' tables (the receiver's socket is AF_INET6, IPv4 v4-mapped)."""
    text = ""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path, encoding="ascii") as f:
            text += f.read()
    return text


def _receiver(binary, port, tmp_path, *stream_args):
    jpath = tmp_path / f"rx-{port}.json"
    argv = [binary, "-l", "--plain", "-s", "127.0.0.1", "-p", str(port), "--timeout", "30",
            "--json", str(jpath), *stream_args]
    rx = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while port not in ksft_proc.listening_ports(_tcp_tables()) and time.monotonic() < deadline:
        if rx.poll() is not None:
            break
        time.sleep(0.02)
    return rx, jpath


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


def _finish(rx, jpath):
    out, err = rx.communicate(timeout=60)
    return rx.returncode, err.decode(errors="replace"), json.loads(jpath.read_text())


def test_receiver_accepts_an_independent_keyed_sender(binary, tmp_path):
    data = keyed_stream(42, 3 << 20)
    port = ksft_proc.rand_port()
    rx, jpath = _receiver(binary, port, tmp_path, "--seed", "42")
    _send_in_odd_writes(port, data)
    rc, err, summary = _finish(rx, jpath)
    assert rc == 0, err
    assert summary["validated_bytes"] == len(data)
    assert summary["mismatches"] == 0
    assert summary["stream"] == "seed 42"
    assert summary["crc32"] == zlib.crc32(data), err


def test_sender_matches_the_independent_keyed_stream(binary):
    nbytes = (1 << 20) + 5
    port = ksft_proc.rand_port()
    with socket.create_server(("127.0.0.1", port)) as srv:
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
    assert f"crc32 0x{zlib.crc32(want):08x}" in err.decode()


def test_misplaced_bytes_are_diagnosed(binary, tmp_path):
    """8 bytes dropped at 1 MiB: under -v 8 the rest would still pass; --seed fails and says
    the bytes belong 8 bytes further on."""
    data = keyed_stream(7, 2 << 20)
    bad = data[:1 << 20] + data[(1 << 20) + 8:]
    port = ksft_proc.rand_port()
    rx, jpath = _receiver(binary, port, tmp_path, "--seed", "7")
    _send_in_odd_writes(port, bad)
    rc, err, summary = _finish(rx, jpath)
    assert rc == 1, err
    assert summary["crc32"] == zlib.crc32(bad)
    assert re.search(r"holds the bytes of stream offset \d+ \(\+8: shifted", err), err
    assert "validation failed (seed 7)" in err


def test_crc_of_the_kernel_harness_pattern_equals_zlib(binary, tmp_path):
    """The CRC-32 a -v 7 receiver reports is zlib's of what was sent (a yes|socat stand-in),
    and a receiver that only prints (no -v) reports it too."""
    data = period_stream(7, (1 << 20) + 3)
    for args in (["-v", "7"], []):
        port = ksft_proc.rand_port()
        rx, jpath = _receiver(binary, port, tmp_path, *args)
        _send_in_odd_writes(port, data)
        rc, err, summary = _finish(rx, jpath)
        assert rc == 0, err
        assert summary["bytes"] == len(data)
        assert summary["crc32"] == zlib.crc32(data), (args, err)


def test_one_gib_keyed_over_loopback(binary, tmp_path):
    port = ksft_proc.rand_port()
    rx, jpath = _receiver(binary, port, tmp_path, "--seed", "42")
    tx = subprocess.run([binary, "--send-pattern", "1G", "-s", "127.0.0.1", "-p", str(port), "--seed", "42"],
                        capture_output=True, timeout=120)
    rc, err, summary = _finish(rx, jpath)
    assert tx.returncode == 0, tx.stderr
    assert rc == 0, err
    assert summary["validated_bytes"] == 1 << 30 and summary["mismatches"] == 0
    sent_crc = re.search(rb"crc32 0x([0-9a-f]{8})", tx.stderr)
    assert sent_crc and int(sent_crc.group(1), 16) == summary["crc32"]
