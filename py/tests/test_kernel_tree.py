"""The kernel's own harness files, and ours placed in a kernel tree, on a veth pair here.

The tree is the one the VM suite unpacks from the VM kernel's source package
(tests/vm/run.sh: ``<VM cache>/chroot-<ABI>/opt/kselftest``; $NCDEVMEM_KSELFTEST_TREE
names another). Each test copies it (about 3.5 MB), links ``hw/ncdevmem`` and
``hw/iou-zcrx`` to the binary under test, writes ``hw/net.config`` for the
namespace pair of conftest.ns_pair (always deleted) and runs the scripts in the
"local" namespace. Without the tree every test here skips, naming the path; the
VM suite runs this file again once it has made the tree (tests/vm/run.sh).

On this machine kind (6.18: no udmabuf, veth, no netkit, no queue leasing) the
outcomes are exact, and asserted line by line.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import LOCAL_IF, LOCAL_V6, PY_DIR, REMOTE_V6, clean_env

import genl_ops

HW = os.path.join("tools", "testing", "selftests", "drivers", "net", "hw")
KERNEL_DEVMEM_CASES = ["check_rx", "check_tx", "check_tx_chunks", "check_rx_hds", "check_rx_large_niov"]
IOU_ZCRX_CASES = ["test_zcrx.single", "test_zcrx.rss", "test_zcrx_oneshot.single", "test_zcrx_oneshot.rss",
                  "test_zcrx_large_chunks"]
NO_UDMABUF = ("no udmabuf: cannot open /dev/udmabuf (ENOENT (No such file or directory)); the kernel needs "
              "CONFIG_UDMABUF (built in, or the udmabuf module loaded)")
# The probe's skip on the veth here: the blocker no configuration fixes first, then every other.
PROBE_SKIP = (f"{LOCAL_IF}: the driver has no queue management ops (bind-rx answered EOPNOTSUPP (Operation not "
              "supported); at NETDEV_A_DMABUF_IFINDEX); devmem needs a driver that implements them, which no "
              f"configuration changes; and: {NO_UDMABUF}")


def tree_source():
    """The kernel selftest tree the VM suite made, or why there is none (str)."""
    if os.environ.get("NCDEVMEM_KSELFTEST_TREE"):
        path = os.environ["NCDEVMEM_KSELFTEST_TREE"]
    else:
        cache = os.environ.get("NCDEVMEM_VM_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ncdevmem-rs", "vm")
        abi = None
        try:
            with open(os.path.join(cache, "kernel.env"), encoding="utf-8") as f:
                m = re.search(r"^ABI=(\S+)$", f.read(), re.M)
                abi = m.group(1) if m else None
        except OSError:
            pass
        if abi is None:
            return None, f"no VM kernel recorded in {cache}/kernel.env (make vm-test makes the kernel tree)"
        path = os.path.join(cache, f"chroot-{abi}", "opt", "kselftest")
    if not os.path.isfile(os.path.join(path, HW, "devmem.py")):
        return None, f"no kernel selftest tree at {path} (make vm-test unpacks it; or set NCDEVMEM_KSELFTEST_TREE)"
    return path, None


@pytest.fixture
def tree(tmp_path, ns_pair, binary):
    """A copy of the kernel tree with hw/ncdevmem and hw/iou-zcrx linked to the binary,
    our py/ scripts in hw/ncdevmem-rs/, and hw/net.config for ns_pair. Yields hw/."""
    src, why = tree_source()
    if src is None:
        pytest.skip(why)
    dest = tmp_path / "kernel"
    dest.mkdir()
    for part in ("tools", "Documentation"):
        shutil.copytree(os.path.join(src, part), dest / part, symlinks=True)
    hw = dest / HW
    for name in ("ncdevmem", "iou-zcrx"):
        (hw / name).unlink(missing_ok=True)
        (hw / name).symlink_to(binary)
    ours = hw / "ncdevmem-rs"
    # A tree a VM run has used may already hold our scripts there: this test's copy is ours.
    shutil.rmtree(ours, ignore_errors=True)
    ours.mkdir()
    for name in os.listdir(PY_DIR):
        if name.endswith(".py"):
            shutil.copy(os.path.join(PY_DIR, name), ours / name)
    (hw / "net.config").write_text(
        f"NETIF={LOCAL_IF}\nLOCAL_V6={LOCAL_V6}\nREMOTE_V6={REMOTE_V6}\n"
        f"REMOTE_TYPE=netns\nREMOTE_ARGS={ns_pair.remote}\nLOCAL_PREFIX_V6=2001:db8:2::/64\n")
    yield hw
    assert ns_pair.pids(ns_pair.local) == [] and ns_pair.pids(ns_pair.remote) == []


def run(ns_pair, script, timeout=300, **extra):
    """``script`` run with python3 in the local namespace; CompletedProcess (text)."""
    return subprocess.run(["ip", "netns", "exec", ns_pair.local, sys.executable, str(script)],
                          env=clean_env(**extra), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def results(stdout):
    """The KTAP result lines of a run."""
    return [line for line in stdout.splitlines() if re.match(r"(not )?ok \d+ ", line)]


def netkit_available(ns_pair):
    """Whether this kernel creates netkit devices (asked in the local namespace)."""
    res = subprocess.run(["ip", "-n", ns_pair.local, "link", "add", "nkprobe0", "type", "netkit"],
                         capture_output=True, text=True)
    if res.returncode == 0:
        subprocess.run(["ip", "-n", ns_pair.local, "link", "del", "nkprobe0"], capture_output=True)
    return res.returncode == 0


def test_kernel_devmem_py_skips_every_case_with_our_binary(tree, ns_pair):
    res = run(ns_pair, tree / "devmem.py")
    assert results(res.stdout) == [f"ok {n} devmem.{c} # SKIP Test requires devmem support"
                                   for n, c in enumerate(KERNEL_DEVMEM_CASES, 1)], res.stdout + res.stderr
    assert "# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:5 error:0" in res.stdout.splitlines()
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0


def test_kernel_iou_zcrx_py_skips_on_veth(tree, ns_pair):
    if shutil.which("ethtool") is None:
        pytest.skip("ethtool is not installed (make test-tools installs it); iou-zcrx.py calls it first")
    res = run(ns_pair, tree / "iou-zcrx.py")
    # veth's ntuple-filters are "off [fixed]": every case stops there, before iou-zcrx runs.
    assert results(res.stdout) == [f"ok {n} iou-zcrx.{c} # SKIP Device does not support ntuple-filters"
                                   for n, c in enumerate(IOU_ZCRX_CASES, 1)], res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0


@pytest.mark.parametrize("script", ["nk_devmem.py", "userns_devmem.py"])
def test_kernel_netkit_scripts_without_netkit(tree, ns_pair, script):
    if netkit_available(ns_pair):
        pytest.skip("this kernel has netkit: the kernel's own outcome here is not recorded (docs/kernel-harness.md)")
    res = run(ns_pair, tree / script)
    # The kernel's NetDrvContEnv creates the netkit pair before any case; its error escapes
    # the script's `with`: a traceback and exit 1 from the kernel's file, not from us.
    assert res.stderr.rstrip().splitlines()[-1] == (
        "net.ynl.pyynl.lib.ynl.NlError: Netlink error: Unknown device type: Operation not supported"), res.stderr
    assert results(res.stdout) == []
    assert res.returncode == 1
    links = subprocess.run(["ip", "-n", ns_pair.local, "-o", "link"], capture_output=True, text=True).stdout
    assert "netkit" not in links


def test_our_devmem_py_in_the_tree_uses_its_net_config(tree, ns_pair, binary):
    res = run(ns_pair, tree / "ncdevmem-rs" / "devmem.py", NCDEVMEM=binary,
              DEVMEM_PY_CASES="check_rx,check_rx_large_niov,check_plain_rx,check_plain_tx")
    why = f"probe ncdevmem-rs -f {LOCAL_IF} --verify-restore: {PROBE_SKIP}"
    assert results(res.stdout) == [
        f"ok 1 devmem.check_rx # SKIP {why}",
        f"ok 2 devmem.check_rx_large_niov # SKIP {why}",
        "ok 3 devmem.check_plain_rx",
        "ok 4 devmem.check_plain_tx",
    ], res.stdout + res.stderr
    assert f"# Interface: {LOCAL_IF}, driver: veth" in res.stdout.splitlines()  # the kernel library's env
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0
    # Without the tree's net.config: a skip of the whole run, not netdevsim and a traceback.
    (tree / "net.config").unlink()
    res = run(ns_pair, tree / "ncdevmem-rs" / "devmem.py", NCDEVMEM=binary)
    assert res.stdout.splitlines() == [
        "TAP version 13",
        f"1..0 # SKIP NETIF is not set (environment, {tree / 'ncdevmem-rs' / 'net.config'} or "
        f"{tree / 'net.config'}); the kernel library would use netdevsim, which has no devmem",
    ]
    assert res.stderr == ""
    assert res.returncode == 4


@pytest.mark.parametrize("script", ["nk_devmem.py", "userns_devmem.py"])
def test_our_netkit_mirrors_in_the_tree(tree, ns_pair, binary, tmp_path, script):
    res = run(ns_pair, tree / "ncdevmem-rs" / script, NCDEVMEM=binary)
    assert res.stdout.splitlines()[-2:] == [
        "TAP version 13", f"1..0 # SKIP probe ncdevmem-rs -f {LOCAL_IF} --verify-restore: {PROBE_SKIP}"]
    probes = [line for line in res.stdout.splitlines() if line.startswith("# local: ")]
    assert [p.split(" -f ", 1)[1] for p in probes] == [
        f"{LOCAL_IF} --verify-restore", f"{LOCAL_IF} -b 16384 --verify-restore"]
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 4
    # With a binary whose probes pass, the next gate is this kernel's netdev family.
    fake = tmp_path / "probe-ok"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    res = run(ns_pair, tree / "ncdevmem-rs" / script, NCDEVMEM=str(fake))
    missing = genl_ops.queue_lease_missing()
    if missing is None:
        pytest.skip("this kernel has netkit queue leasing: the gate is passed (the VM suite goes further)")
    assert res.stdout.splitlines()[-2:] == ["TAP version 13", f"1..0 # SKIP {missing}"], res.stdout
    assert missing.startswith("netkit queue leasing is missing: the kernel's netdev family has no queue-create")
    assert res.returncode == 4
