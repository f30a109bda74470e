"""The exact ncdevmem command lines the kernel's devmem_lib.py (and the netkit
variant nk_devmem.py) build, run against ncdevmem-rs.

There is no parse-only flag, so each line runs in the "local" namespace where
the interface exists: a parser that accepted the line gets as far as the
missing capability (exit 4, naming udmabuf on a host without it) instead of
exit 2 (usage).  For the RX lines, "the same meanings" is checked too: the
line rerun with ``--plain`` (devmem-only options are accepted and ignored
there) receives a pattern stream from the remote, validating it when the line
has ``-v 7`` (a corrupted stream exits 1) and printing it when it has no
``-v``.
"""

import os
import subprocess

import pytest
from conftest import LOCAL_IF, LOCAL_V4, LOCAL_V6, REMOTE_V4, REMOTE_V6

import devmem_lib
import ksft_proc

PORT = 5201

# (id, argv after the binary, kind, -v period or None).
# Source: docs/kernel-interface.md#devmempy-command-lines.
KERNEL_LINES = [
    # devmem.py check_rx: 5-tuple flow rule (-c REMOTE), validate -v 7; IPv6 and IPv4
    ("check_rx_v6", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -c {REMOTE_V6} -v 7", "rx", 7),
    ("check_rx_v4", f"-l -f {LOCAL_IF} -s {LOCAL_V4} -p {PORT} -c {REMOTE_V4} -v 7", "rx", 7),
    # RX without -c (3-tuple rule)
    ("rx_no_c", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -v 7", "rx", 7),
    # check_rx_hds: -L, no -v (payload to stdout), no -c
    ("check_rx_hds", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -L", "rx", None),
    # check_rx_large_niov: -b 16384
    ("check_rx_large_niov", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -c {REMOTE_V6} -v 7 -b 16384", "rx", 7),
    # nk_devmem.py RX in the netkit guest: queue lease -t Q -q 1, NIC configured by the host (-n)
    ("nk_check_rx", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -t 1 -q 1 -n -v 7", "rx", 7),
    ("nk_check_rx_hds", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -t 1 -q 1 -n -L", "rx", None),
    ("nk_check_rx_large_niov", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -t 1 -q 1 -n -v 7 -b 16384", "rx", 7),
    # check_tx / check_tx_chunks
    ("check_tx", f"-f {LOCAL_IF} -s {REMOTE_V6} -p {PORT}", "tx", None),
    ("check_tx_chunks", f"-f {LOCAL_IF} -s {REMOTE_V6} -p {PORT} -z 3", "tx", None),
    ("check_tx_v4", f"-f {LOCAL_IF} -s {REMOTE_V4} -p {PORT}", "tx", None),
    # nk_devmem.py TX in the guest: -t 0 -q 1 -n
    ("nk_check_tx", f"-f {LOCAL_IF} -s {REMOTE_V6} -p {PORT} -t 0 -q 1 -n", "tx", None),
    ("nk_check_tx_chunks", f"-f {LOCAL_IF} -s {REMOTE_V6} -p {PORT} -t 0 -q 1 -n -z 3", "tx", None),
    # require_devmem: the probe, for rx-page-size 0 and 16384
    ("require_devmem", f"-f {LOCAL_IF}", "probe", None),
    ("require_devmem_large_niov", f"-f {LOCAL_IF} -b 16384", "probe", None),
]


def _run(ns, argv, timeout=20, input_bytes=None):
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv],
        input=input_bytes if input_bytes is not None else b"hello\nworld\n",
        capture_output=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("line_id,args,kind,period", KERNEL_LINES, ids=[row[0] for row in KERNEL_LINES])
def test_kernel_line_is_accepted(ns_pair, binary, line_id, args, kind, period):
    try:
        res = _run(ns_pair.local, [binary, *args.split()])
    except subprocess.TimeoutExpired:
        # Only possible on a devmem-capable host, where the server waits for a
        # peer: the parser accepted the line.
        assert os.path.exists("/dev/udmabuf")
        return
    stderr = res.stderr.decode(errors="replace")
    assert res.returncode != devmem_lib.EXIT_USAGE, f"parser refused {args!r}: {stderr}"
    if not os.path.exists("/dev/udmabuf"):
        assert res.returncode == devmem_lib.EXIT_SKIP, stderr
        # The skip names the first missing capability: udmabuf, or (for -b on a kernel
        # whose bind-rx lacks it) rx-page-size.
        assert "skip:" in stderr, stderr
        assert "udmabuf" in stderr or "rx-page-size" in stderr, stderr


def test_usage_errors_are_told_apart(ns_pair, binary):
    """Control for the table: a line the parser must refuse exits 2, not 4."""
    for args in (f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p {PORT} -v 300", f"-l -f {LOCAL_IF} -s {LOCAL_V6} -p 0"):
        res = _run(ns_pair.local, [binary, *args.split()])
        assert res.returncode == devmem_lib.EXIT_USAGE, (args, res.stderr)


RX_LINES = [row for row in KERNEL_LINES if row[2] == "rx"]


@pytest.mark.parametrize("line_id,args,kind,period", RX_LINES, ids=[row[0] for row in RX_LINES])
def test_kernel_rx_line_meaning_in_plain_mode(ns_pair, binary, line_id, args, kind, period):
    """-s/-p pick the listener, -v 7 validates the 01..06 0A pattern (a flipped
    byte exits 1), no -v prints the payload to stdout."""
    server = args.split()[args.split().index("-s") + 1]
    nbytes = 64 * 1024
    outcomes = [None] if period is None else [None, 4099]
    for corrupt in outcomes:
        port = ksft_proc.rand_port()
        argv = [binary, *args.replace(f"-p {PORT}", f"-p {port}").split(), "--plain", "--timeout", "15"]
        rx = subprocess.Popen(
            ["ip", "netns", "exec", ns_pair.local, *argv],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            sender = [binary, "--send-pattern", str(nbytes), "-s", server, "-p", str(port), "-v", "7",
                      "--timeout", "15"]
            if corrupt is not None:
                sender += ["--corrupt-offset", str(corrupt)]
            tx = _run(ns_pair.remote, sender, input_bytes=b"")
            out, err = rx.communicate(timeout=30)
        finally:
            if rx.poll() is None:
                rx.kill()
                rx.wait()
        assert tx.returncode == 0, tx.stderr
        err = err.decode(errors="replace")
        if period is None:
            assert rx.returncode == 0, err
            assert out == devmem_lib.pattern_bytes(7, nbytes)
        elif corrupt is None:
            assert rx.returncode == 0, err
            assert out == b""
        else:
            assert rx.returncode == devmem_lib.EXIT_FAIL, err
            assert f"offset {corrupt}" in err, err
