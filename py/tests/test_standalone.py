"""devmem.py run stand-alone in a namespace pair: KTAP, exit codes, verdicts.

On this kind of machine (no udmabuf, veth only) every devmem case must SKIP
with a reason naming the missing capability, zcrx must SKIP as not
implemented, and the plain-TCP and harness cases must PASS.
"""

import os
import shutil

import pytest
from conftest import LOCAL_V4, LOCAL_V6, parse_ktap, run_devmem_py

KERNEL_CASES = ["check_rx", "check_tx", "check_tx_chunks", "check_rx_hds", "check_rx_large_niov"]
OUR_DEVMEM_CASES = ["check_rx_multi_mb", "check_tx_rx", "check_rx_autorelease_off", "check_rx_autorelease_on"]
ZCRX_CASES = ["check_zcrx", "check_zcrx_large_buf"]
PLAIN_CASES = ["check_plain_rx", "check_plain_rx_corrupted", "check_plain_rx_segments", "check_plain_tx"]
HARNESS_CASES = ["check_harness_cleanup"]
ALL_CASES = KERNEL_CASES + OUR_DEVMEM_CASES + ZCRX_CASES + PLAIN_CASES + HARNESS_CASES


def _missing_capability_named(reason):
    # Without /dev/udmabuf the binary must say so; with it (a veth cannot do
    # devmem), any reason from the probe is a capability the host lacks.
    if not os.path.exists("/dev/udmabuf"):
        return "udmabuf" in reason
    return bool(reason.strip())


def test_full_run_verdicts(ns_pair, binary):
    res = run_devmem_py(ns_pair, binary)
    ktap = parse_ktap(res.stdout)
    assert list(ktap.results) == ALL_CASES, res.stdout
    for name in KERNEL_CASES + OUR_DEVMEM_CASES:
        _, status, reason = ktap.results[name]
        assert status == "ok" and reason is not None, f"{name} should SKIP:\n{res.stdout}"
        assert reason.startswith("probe ncdevmem-rs -f"), reason
        assert _missing_capability_named(reason), reason
    for name in ZCRX_CASES:
        _, status, reason = ktap.results[name]
        assert status == "ok" and reason is not None and "zcrx" in reason, reason
    for name in PLAIN_CASES + HARNESS_CASES:
        _, status, reason = ktap.results[name]
        assert (status, reason) == ("ok", None), f"{name} should PASS:\n{res.stdout}\n{res.stderr}"
    assert ktap.totals == {"pass": 5, "fail": 0, "skip": 11}
    assert res.returncode == 0, res.stderr
    # Both rx-page-sizes are probed once, up front, before any case changes the NIC (the
    # kernel's require_devmem since 7.3), and the results are reused by every case.
    assert sum("local: " in line and " -f dvpy0 --verify-restore" in line for line in ktap.lines) == 1
    assert sum("local: " in line and " -f dvpy0 -b 16384 --verify-restore" in line for line in ktap.lines) == 1
    locals_before_first_result = []
    for line in ktap.lines:
        if line.startswith(("ok ", "not ok ")):
            break
        if line.startswith("# local: "):
            locals_before_first_result.append(line)
    assert [line.split(" -f ", 1)[1] for line in locals_before_first_result] == [
        "dvpy0 --verify-restore", "dvpy0 -b 16384 --verify-restore"], locals_before_first_result
    # Background processes always end: nothing is left in either namespace.
    assert ns_pair.pids(ns_pair.local) == []
    assert ns_pair.pids(ns_pair.remote) == []


def test_remote_peer_is_deployed_binary_with_bare_addresses(ns_pair, binary):
    res = run_devmem_py(ns_pair, binary, DEVMEM_PY_CASES="check_plain_rx,check_plain_tx")
    ktap = parse_ktap(res.stdout)
    assert all(status == "ok" and reason is None for _, status, reason in ktap.results.values()), res.stdout
    assert f"# remote peer: ncdevmem-rs at {binary}" in ktap.lines  # netns: same path
    remote_cmds = [line for line in ktap.lines if line.startswith("# remote: ")]
    assert any(f"--send-pattern 16777216 -s {LOCAL_V6} " in c for c in remote_cmds), remote_cmds
    assert any(f"--send-pattern 16777216 -s {LOCAL_V4} " in c for c in remote_cmds), remote_cmds
    assert not any("[" in c for c in remote_cmds), remote_cmds
    assert res.returncode == 0


@pytest.mark.skipif(shutil.which("socat") is None, reason="socat is not installed")
def test_socat_peer_with_bracketed_ipv6(ns_pair, binary):
    res = run_devmem_py(
        ns_pair, binary, DEVMEM_PY_REMOTE_TOOL="socat",
        DEVMEM_PY_CASES=",".join(PLAIN_CASES),
    )
    ktap = parse_ktap(res.stdout)
    assert list(ktap.results) == PLAIN_CASES
    assert all(status == "ok" and reason is None for _, status, reason in ktap.results.values()), (
        res.stdout + res.stderr
    )
    assert "# remote peer: socat" in ktap.lines
    remote_cmds = [line for line in ktap.lines if line.startswith("# remote: ")]
    assert any(f"socat -u - TCP6:[{LOCAL_V6}]:" in c for c in remote_cmds), remote_cmds
    assert any(f"socat -u - TCP4:{LOCAL_V4}:" in c for c in remote_cmds), remote_cmds
    assert any("socat -U - TCP6-LISTEN:" in c for c in remote_cmds), remote_cmds
    assert res.returncode == 0


def test_must_fail_case_is_not_ok_and_exit_1(ns_pair, binary):
    res = run_devmem_py(
        ns_pair, binary, DEVMEM_PY_SELFTEST_FAIL=1,
        DEVMEM_PY_CASES="check_rx,check_plain_rx_corrupted,check_selftest_must_fail",
    )
    ktap = parse_ktap(res.stdout)
    assert ktap.results["check_rx"][1:] != ("ok", None)  # skipped
    assert ktap.results["check_plain_rx_corrupted"][1:] == ("ok", None)  # detection works
    assert ktap.results["check_selftest_must_fail"][1:] == ("not ok", None)
    assert any(line.startswith("# FAIL: plain RX (corrupted sender) exited 1") for line in ktap.lines), res.stdout
    assert ktap.totals == {"pass": 1, "fail": 1, "skip": 1}
    assert res.returncode == 1


def test_all_skipped_exits_4(ns_pair, binary):
    res = run_devmem_py(ns_pair, binary, DEVMEM_PY_CASES="check_rx,check_tx,check_zcrx")
    ktap = parse_ktap(res.stdout)
    assert ktap.totals == {"pass": 0, "fail": 0, "skip": 3}
    assert res.returncode == 4
