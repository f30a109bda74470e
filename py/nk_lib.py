"""devmem through netkit, mirroring the kernel's nk_devmem.py and
userns_devmem.py (drivers/net/hw, 7.3) with ncdevmem-rs: the run's gates
and the flows.

Only inside a kernel tree: the environment is the kernel library's
``NetDrvContEnv`` (a netkit pair, the guest end in a network namespace --
owned by a user namespace for userns_devmem -- and BPF redirects on NETIF
and the host end), configured by the tree's ``net.config``, which also
needs ``LOCAL_PREFIX_V6``.

Order, as the kernel's devmem_lib (7.3) has it, before anything is set up:

1. the probe for every rx-page-size (devmem_lib.probe_all): a queue leased
   later can fall in the probe's queue range;
2. netkit queue leasing: the netdev family must offer ``queue-create``
   (genl_ops.queue_lease_missing); without it the whole run skips with that
   reason;
3. the environment (ksft_tree.opened_env: a skip or a netlink EOPNOTSUPP
   there -- no netkit -- skips the run, other errors bail out).

Then per case: the probe verdict, the NIC set-up (at least 2 combined
channels; header split on, hds-thresh 0, at most 64 RX descriptors; RSS on
the last queue only; that queue leased to the netkit guest once), each undone
by the kernel library's ``defer``; the flow rule to the leased queue; the
ncdevmem-rs receiver or sender in the guest's namespace on the netkit device
(``-t LEASED -q 1 -n`` for RX, ``-t 0 -q 1 -n`` for TX).
"""

import os
import re
import shlex
import subprocess
import sys

import devmem_lib
import genl_ops
import ksft_env
import ksft_proc
import ksft_tree
from devmem_lib import (
    HDS_SIZES,
    LARGE_NIOV_RX_PAGE_SIZE,
    LARGE_NIOV_SIZES,
    devmem_rx_argv,
    devmem_tx_argv,
    probe_all,
    probe_verdict,
    rx_transfer,
    sender_command,
    tx_transfer,
    zeros_sender_command,
)
from ksft_proc import fail, fail_exception, skip

NK_LIB_NAMES = ksft_tree.KERNEL_LIB_NAMES + ("NetDrvContEnv", "EthtoolFamily", "NetdevFamily", "NetNSEnter", "defer")


class NkCtx(devmem_lib.Ctx):
    """Ctx for the netkit flows: the physical NIC (``ifname``), the netkit
    guest (``nk_ifname`` in namespace ``netns`` with ``nk_addr``), the
    kernel library's environment ``env`` and module ``klib``, the up-front
    probe results, and, once set up, ``src_queue`` and ``nk_queue``."""

    def __init__(self, klib, env, binary, probes, timeout):
        super().__init__(env.ifname, env.addr_v, env.remote_addr_v, "6", env.remote, binary, timeout)
        self.klib = klib
        self.env = env
        self.probes = probes
        self.netns = env.netns.name
        self.nk_ifname = env.nk_guest_ifname
        self.nk_addr = env.nk_guest_ipv6
        self.src_queue = None
        self.nk_queue = None
        self.guest = ksft_env.NetnsRemote(self.netns)  # for the listener wait

    def in_guest(self, argv):
        """``argv`` run in the netkit guest's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


def _ethtool(*args):
    res = subprocess.run(["ethtool", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        fail(f"ethtool {shlex.join(args)} exited {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def configure_nic(ctx):
    """The NIC set-up of the kernel's devmem_lib.configure_nic for netkit, each step undone
    by the library's defer at the case's end; the queue lease is made once per run."""
    k, env = ctx.klib, ctx.env
    hdr = {"header": {"dev-index": env.ifindex}}
    ethnl = k.EthtoolFamily()
    channels = ethnl.channels_get(hdr)["combined-count"]
    if channels < 2:
        skip(f"NETIF {ctx.ifname} has {channels} combined channel(s), the netkit tests need 2")
    rings = ethnl.rings_get(hdr)
    ethnl.rings_set({**hdr, "tcp-data-split": "enabled", "hds-thresh": 0, "rx": min(64, rings["rx"])})
    k.defer(ethnl.rings_set, {**hdr, "tcp-data-split": "unknown", "hds-thresh": rings.get("hds-thresh", 0),
                              "rx": rings["rx"]})
    ctx.src_queue = channels - 1
    _ethtool("-X", ctx.ifname, "equal", str(ctx.src_queue))
    k.defer(_ethtool, "-X", ctx.ifname, "default")
    if ctx.nk_queue is None:
        with k.NetNSEnter(ctx.netns):
            lease = k.NetdevFamily().queue_create({
                "ifindex": env.nk_guest_ifindex,
                "type": "rx",
                "lease": {"ifindex": env.ifindex, "queue": {"id": ctx.src_queue, "type": "rx"}, "netns-id": 0},
            })
        ctx.nk_queue = lease["id"]
        ksft_proc.log(f"queue {ctx.src_queue} of {ctx.ifname} leased to {ctx.nk_ifname} as queue {ctx.nk_queue}")


def steer(ctx, port):
    """An ntuple rule sending TCP/IPv6 to ``port`` to the leased queue, deleted by defer."""
    out = _ethtool("-N", ctx.ifname, "flow-type", "tcp6", "dst-port", str(port), "action", str(ctx.src_queue))
    m = re.search(r"ID (\d+)", out)
    if not m:
        fail(f"ethtool -N printed no rule ID: {out.strip()!r}")
    ctx.klib.defer(_ethtool, "-N", ctx.ifname, "delete", m.group(1))


def _setup(ctx, rx_page_size=None):
    probe_verdict(ctx.probes, ctx.ifname, rx_page_size)
    configure_nic(ctx)
    return ctx.peer()


def _rx(ctx, peer, port, nbytes, what, zeros=False, **rx_kw):
    steer(ctx, port)
    argv = ctx.in_guest(devmem_rx_argv(ctx.bin, ctx.nk_ifname, ctx.nk_addr, port, verify_restore=False,
                                       timeout=ctx.timeout, **rx_kw) + ["-t", str(ctx.nk_queue), "-q", "1", "-n"])
    bind = ctx.remote_addr_v["6"]
    if zeros:
        snd = zeros_sender_command(peer, ctx.nk_addr, port, "6", nbytes, bind=bind)
    else:
        snd = sender_command(peer, ctx.nk_addr, port, "6", nbytes, bind=bind)
    rx_transfer(ctx, argv, snd, port, what, listen_ns=ctx.guest)


def run_rx(ctx):
    """check_nk_rx: 1 KiB of the -v 7 pattern to the netkit guest."""
    peer = _setup(ctx)
    _rx(ctx, peer, ksft_proc.rand_port(), 1024, "netkit devmem RX", validate=7)


def run_tx(ctx, chunk=None):
    """check_nk_tx / _chunks: "hello\\nworld" from the guest through devmem TX (``-t 0 -q 1 -n``)."""
    _setup(ctx)
    port = ksft_proc.rand_port()
    argv = ctx.in_guest(devmem_tx_argv(ctx.bin, ctx.nk_ifname, ctx.remote_addr_v["6"], port, chunk)
                        + ["-t", "0", "-q", "1", "-n"])
    got = tx_transfer(ctx, argv, b"hello\nworld\n", port, "6", what="netkit devmem TX")
    if got.decode(errors="replace").strip() != "hello\nworld":
        fail(f"peer received {got!r}, expected 'hello\\nworld'")


def run_rx_hds(ctx):
    """check_nk_rx_hds: one segment per write at each of HDS_SIZES, with -L."""
    peer = _setup(ctx)
    for size in HDS_SIZES:
        try:
            _rx(ctx, peer, ksft_proc.rand_port(), size, f"netkit devmem RX -L ({size} B)", zeros=True,
                fail_on_linear=True)
        except fail_exception() as exc:
            fail(f"HDS failed for payload size {size}: {exc}")


def run_rx_large_niov(ctx):
    """check_nk_rx_large_niov: ``-b 16384`` with payloads of LARGE_NIOV_SIZES."""
    peer = _setup(ctx, LARGE_NIOV_RX_PAGE_SIZE)
    with devmem_lib.HugePages():
        for size in LARGE_NIOV_SIZES:
            _rx(ctx, peer, ksft_proc.rand_port(), size, f"netkit devmem RX -b 16384 ({size} B)", validate=7,
                rx_page_size=LARGE_NIOV_RX_PAGE_SIZE)


def main(script_file, cases, userns=False, environ=None):
    """The whole run of nk_devmem.py / userns_devmem.py: the gates (module
    docstring), then ``cases`` (callables taking an NkCtx) under the kernel's
    ksft_run.  Returns the exit code (KTAP printed)."""
    environ = os.environ if environ is None else environ
    script_dir = os.path.dirname(os.path.abspath(script_file))
    found = ksft_tree.find_kernel_lib(script_dir, environ, NK_LIB_NAMES)
    if found is None:
        return ksft_env.ktap_skip_all(
            "needs the kernel tree's drv-net library (NetDrvContEnv): put this script in "
            "tools/testing/selftests/drivers/net/hw/ or a directory below it")
    klib, hw_dir = found
    binary = devmem_lib.find_binary(script_dir, environ)
    if binary is None:
        return ksft_env.ktap_bail_out("ncdevmem-rs not found: build it (cargo build --release) or set NCDEVMEM")
    ksft_proc.use_ksft(klib.KsftSkipEx, getattr(klib, "KsftFailEx", AssertionError))
    timeout = 60.0
    try:
        src_path = ksft_tree.src_path_for(script_file, hw_dir, environ)
        config = os.path.join(os.path.dirname(src_path), "net.config")
        ifname = ksft_tree.merged_config(config if os.path.isfile(config) else None, environ)["NETIF"]
        probes = probe_all(binary, ifname, timeout)
        try:
            probe_verdict(probes, ifname)
        except klib.KsftSkipEx as exc:
            raise ksft_tree.TreeSetupError(str(exc), ksft_env.KSFT_SKIP) from None
        except Exception as exc:  # fail() raised KsftFailEx / AssertionError
            raise ksft_tree.TreeSetupError(str(exc), ksft_env.KSFT_FAIL) from None
        missing = genl_ops.queue_lease_missing()
        if missing:
            raise ksft_tree.TreeSetupError(missing, ksft_env.KSFT_SKIP)
        with ksft_tree.opened_env(klib, klib.NetDrvContEnv, src_path, rxqueues=2, primary_rx_redirect=True,
                                  userns=userns) as env:
            klib.ksft_run(cases, args=(NkCtx(klib, env, binary, probes, timeout),))
    except ksft_tree.TreeSetupError as err:
        return ksft_tree.report(err)
    klib.ksft_exit()
    return 0


if __name__ == "__main__":
    sys.exit("run nk_devmem.py or userns_devmem.py")
