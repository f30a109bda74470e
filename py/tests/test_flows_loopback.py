"""The plain-mode flows and rx_transfer's verdicts over loopback, with a
"remote" that is this host's shell (no namespaces, no root)."""

import shutil
import time

import pytest
from conftest import ShellRemote

import devmem_lib
import ksft_env
import ksft_proc


@pytest.fixture
def ctx(binary):
    loopback = {"4": "127.0.0.1", "6": "::1"}
    return devmem_lib.Ctx("lo", loopback, loopback, "6", ShellRemote(), binary, timeout=30, environ={})


def test_plain_flows_pass_over_loopback(ctx, binary):
    devmem_lib.run_plain_rx(ctx)  # both families
    devmem_lib.run_plain_rx_corrupted(ctx)
    devmem_lib.run_plain_tx(ctx)
    assert ctx.peer() == ("ncdevmem-rs", binary)


def test_undetected_corruption_is_a_failure(ctx):
    with pytest.raises(ksft_env.KsftFailEx, match=r"plain RX \(corrupted sender\) exited 1"):
        devmem_lib.run_plain_rx_corrupted(ctx, expect_detection=False)


def test_failed_sender_fails_fast_with_its_error(ctx, binary):
    port = ksft_proc.rand_port()
    argv = devmem_lib.plain_rx_argv(binary, "::1", port, validate=7, timeout=30)
    start = time.monotonic()
    with pytest.raises(ksft_env.KsftFailEx, match="remote sender exited 3: no route to peer"):
        devmem_lib.rx_transfer(ctx, argv, "echo 'no route to peer' >&2; exit 3", port, "plain RX")
    assert time.monotonic() - start < 20  # not the receiver's 30 s accept timeout


@pytest.mark.skipif(shutil.which("socat") is None, reason="socat is not installed")
def test_socat_peer_when_forced(ctx):
    ctx.tool_pref = "socat"
    devmem_lib.run_plain_rx_segments(ctx)
    devmem_lib.run_plain_rx_corrupted(ctx)
    assert ctx.peer() == ("socat", None)


def test_no_peer_tool_skips_with_the_reasons(ctx):
    ctx.tool_pref = "nothing"
    with pytest.raises(ksft_env.KsftSkipEx, match="no remote peer tool: .*expected auto, socat or ncdevmem-rs"):
        devmem_lib.run_plain_tx(ctx)
