"""nk_lib's netkit flows against a stand-in of the kernel library: the NIC set-up and its undo
(deferred), the queue lease request, the flow rule, and the exact ncdevmem-rs command lines
(the kernel's nk_devmem.py lines: RX ``-t LEASED -q 1 -n`` in the guest namespace, TX
``-t 0 -q 1 -n``). No kernel is asked: transfers are recorded, not run."""

import contextlib
import types

import pytest

import devmem_lib
import ksft_env
import ksft_proc
import nk_lib


class Skip(Exception):
    pass


class Fail(Exception):
    pass


class StubEthtoolFamily:
    def __init__(self, log, channels=4):
        self.log, self.channels = log, channels

    def channels_get(self, req):
        self.log.append(("channels_get", req))
        return {"combined-count": self.channels}

    def rings_get(self, req):
        self.log.append(("rings_get", req))
        return {"rx": 1024, "hds-thresh": 7}

    def rings_set(self, req):
        self.log.append(("rings_set", req))


def make_ctx(monkeypatch, channels=4):
    log, deferred = [], []
    klib = types.SimpleNamespace(
        EthtoolFamily=lambda: StubEthtoolFamily(log, channels),
        NetdevFamily=lambda: types.SimpleNamespace(
            queue_create=lambda req: (log.append(("queue_create", req)), {"id": 1})[1]),
        NetNSEnter=lambda name: (log.append(("netns_enter", name)), contextlib.nullcontext())[1],
        defer=lambda fn, *a: deferred.append((getattr(fn, "__name__", fn), a)),
        KsftSkipEx=Skip,
    )
    env = types.SimpleNamespace(
        ifname="eth0", ifindex=2, addr_v={"6": "2001:db8:1::1"}, remote_addr_v={"6": "2001:db8:1::2"},
        remote=ksft_env.NetnsRemote("peer"), netns=types.SimpleNamespace(name="nkns"),
        nk_guest_ifname="nk0", nk_guest_ipv6="2001:db8:2::2:2", nk_guest_ifindex=9)
    probes = {0: (0, ""), 16384: (0, "")}
    ctx = nk_lib.NkCtx(klib, env, "/bin/ncdevmem-rs", probes, 60)
    ctx._peer = ("ncdevmem-rs", "/bin/ncdevmem-rs")
    ethtool_calls = []

    def fake_ethtool(*args):
        ethtool_calls.append(args)
        return "Added rule with ID 7\n" if args[0] == "-N" else ""

    transfers = []
    monkeypatch.setattr(nk_lib, "_ethtool", fake_ethtool)
    monkeypatch.setattr(nk_lib, "rx_transfer", lambda c, argv, snd, port, what, **kw: transfers.append(
        ("rx", argv, snd, kw)))
    monkeypatch.setattr(nk_lib, "tx_transfer", lambda c, argv, stdin, port, ipver, **kw: (
        transfers.append(("tx", argv, stdin, ipver)), b"hello\nworld\n")[1])
    monkeypatch.setattr(ksft_proc, "rand_port", lambda *a: 5201)
    monkeypatch.setitem(ksft_proc._EXC, "skip", Skip)  # restored after the test
    monkeypatch.setitem(ksft_proc._EXC, "fail", Fail)
    return ctx, log, deferred, ethtool_calls, transfers


def test_nk_rx_sets_up_leases_once_and_runs_in_the_guest(monkeypatch):
    ctx, log, deferred, ethtool_calls, transfers = make_ctx(monkeypatch)
    nk_lib.run_rx(ctx)
    hdr = {"header": {"dev-index": 2}}
    assert log == [
        ("channels_get", hdr), ("rings_get", hdr),
        ("rings_set", {**hdr, "tcp-data-split": "enabled", "hds-thresh": 0, "rx": 64}),
        ("netns_enter", "nkns"),
        ("queue_create", {"ifindex": 9, "type": "rx",
                          "lease": {"ifindex": 2, "queue": {"id": 3, "type": "rx"}, "netns-id": 0}}),
    ]
    assert ethtool_calls == [("-X", "eth0", "equal", "3"),
                             ("-N", "eth0", "flow-type", "tcp6", "dst-port", "5201", "action", "3")]
    # Undo, in the library's defer order: rings back (HDS to the driver's default), RSS, the rule.
    assert deferred == [
        ("rings_set", ({**hdr, "tcp-data-split": "unknown", "hds-thresh": 7, "rx": 1024},)),
        ("fake_ethtool", ("-X", "eth0", "default")),
        ("fake_ethtool", ("-N", "eth0", "delete", "7")),
    ]
    [(kind, argv, snd, kw)] = transfers
    assert argv == ("ip netns exec nkns /bin/ncdevmem-rs -l -f nk0 -s 2001:db8:2::2:2 -p 5201 -v 7 "
                    "--timeout 60 -t 1 -q 1 -n").split()
    assert snd == "/bin/ncdevmem-rs --send-pattern 1024 -s 2001:db8:2::2:2 -p 5201 -v 7 -c 2001:db8:1::2 --timeout 30"
    assert kw["listen_ns"].name == "nkns"
    # A second case reuses the lease.
    log.clear()
    nk_lib.run_rx(ctx)
    assert [e[0] for e in log] == ["channels_get", "rings_get", "rings_set"]


def test_nk_tx_lines_and_large_niov(monkeypatch):
    ctx, _, _, _, transfers = make_ctx(monkeypatch)
    nk_lib.run_tx(ctx, chunk=3)
    assert transfers[0] == ("tx", ("ip netns exec nkns /bin/ncdevmem-rs -f nk0 -s 2001:db8:1::2 -p 5201 -z 3 "
                                   "-t 0 -q 1 -n").split(), b"hello\nworld\n", "6")
    transfers.clear()
    monkeypatch.setattr(devmem_lib, "HugePages", contextlib.nullcontext)
    nk_lib.run_rx_large_niov(ctx)
    assert [t[1][-11:] for t in transfers] == [
        "-v 7 -b 16384 --timeout 60 -t 1 -q 1 -n".split()] * len(devmem_lib.LARGE_NIOV_SIZES)
    assert [int(t[2].split()[2]) for t in transfers] == list(devmem_lib.LARGE_NIOV_SIZES)


def test_nk_gates(monkeypatch):
    ctx, log, _, _, transfers = make_ctx(monkeypatch, channels=1)
    with pytest.raises(Skip, match="NETIF eth0 has 1 combined channel"):
        nk_lib.run_rx(ctx)
    assert transfers == []
    ctx, log, _, _, transfers = make_ctx(monkeypatch)
    ctx.probes = {0: (0, ""), 16384: (4, "x\nskip: no hugepages\n")}
    with pytest.raises(Skip, match="-b 16384 --verify-restore: no hugepages"):
        nk_lib.run_rx_large_niov(ctx)
    assert log == [] and transfers == []
    ctx.probes = {0: (1, "boom\n"), 16384: (0, "")}
    with pytest.raises(Fail, match="exited 1: boom"):
        nk_lib.run_tx(ctx)
