"""Harness logic without namespaces (no root needed): configuration, KTAP
writer, command builders, process-group cleanup, hugepages, NIC-state diff,
and the choice between the kernel's lib.py and the stand-alone environment."""

import io
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import DEVMEM_PY, PY_DIR, ShellRemote, clean_env

import devmem
import devmem_lib
import ksft_env
import ksft_proc

# --------------------------------------------------------------------------- configuration


def test_following_the_readme_leaves_the_checkout_clean():
    """py/README.md writes py/net.config beside the script: git ignores it, so the
    checkout shows nothing untracked."""
    repo = os.path.dirname(PY_DIR)
    if shutil.which("git") is None or not os.path.exists(os.path.join(repo, ".git")):
        pytest.skip("not a git checkout")
    res = subprocess.run(["git", "-C", repo, "check-ignore", "-q", "py/net.config"])
    assert res.returncode == 0, "py/net.config is not ignored by git"


def test_binary_found_under_cargo_target_dir(tmp_path):
    """Without $NCDEVMEM the harness looks where cargo builds: $CARGO_TARGET_DIR first."""
    exe = tmp_path / "release" / "ncdevmem-rs"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    found = devmem_lib.find_binary(str(tmp_path / "nowhere"), {"CARGO_TARGET_DIR": str(tmp_path)})
    assert found == str(exe)


def test_config_text_parsing():
    text = '# comment\n\nNETIF=eth0\nLOCAL_V6 = "2001:db8::1"\nREMOTE_ARGS=\'peer host\'\nEMPTY=\n'
    assert ksft_env.parse_config_text(text) == {
        "NETIF": "eth0",
        "LOCAL_V6": "2001:db8::1",
        "REMOTE_ARGS": "peer host",
        "EMPTY": "",
    }
    with pytest.raises(ksft_env.ConfigError, match="line 2"):
        ksft_env.parse_config_text("NETIF=eth0\nnot a pair\n")


def test_environment_overrides_file(tmp_path):
    cfg = tmp_path / "net.config"
    cfg.write_text("NETIF=eth0\nREMOTE_TYPE=ssh\nREMOTE_ARGS=host1\n")
    merged = ksft_env.load_config(str(cfg), {"NETIF": "eth1", "REMOTE_ARGS": "", "HOME": "/x"})
    assert merged == {"NETIF": "eth1", "REMOTE_TYPE": "ssh", "REMOTE_ARGS": "host1"}
    assert ksft_env.load_config(str(tmp_path / "absent"), {"NETIF": "lo"}) == {"NETIF": "lo"}


def test_netenv_prefers_ipv6_and_checks_the_interface(tmp_path):
    both = {"NETIF": "lo", "LOCAL_V4": "192.0.2.1", "REMOTE_V4": "192.0.2.2", "LOCAL_V6": "2001:db8::1",
            "REMOTE_V6": "2001:db8::2", "REMOTE_TYPE": "netns", "REMOTE_ARGS": "peer"}
    env = ksft_env.NetEnv(None, both)
    assert (env.addr_ipver, env.addr, env.remote_addr) == ("6", "2001:db8::1", "2001:db8::2")
    assert isinstance(env.remote, ksft_env.NetnsRemote) and env.remote.name == "peer"
    v4_only = {k: v for k, v in both.items() if "V6" not in k}
    env = ksft_env.NetEnv(None, v4_only)
    assert (env.addr_ipver, env.addr, env.remote_addr) == ("4", "192.0.2.1", "192.0.2.2")
    ssh = dict(both, REMOTE_TYPE="ssh", REMOTE_ARGS="root@peer")
    assert ksft_env.NetEnv(None, ssh).remote.host == "root@peer"
    with pytest.raises(ksft_env.ConfigMissing, match="NETIF"):
        ksft_env.NetEnv(None, {})
    with pytest.raises(ksft_env.ConfigMissing, match="LOCAL_V4 and REMOTE_V4"):
        ksft_env.NetEnv(None, dict(both, LOCAL_V6="", REMOTE_V4=""))
    with pytest.raises(ksft_env.ConfigError, match="no such interface"):
        ksft_env.NetEnv(None, dict(both, NETIF="nosuch-if0"))
    with pytest.raises(ksft_env.ConfigError, match="REMOTE_TYPE"):
        ksft_env.NetEnv(None, dict(both, REMOTE_TYPE="telnet"))


# --------------------------------------------------------------------------- KTAP writer


def _passes(cfg):
    cfg.append("ran")


def _skips(cfg):
    raise ksft_env.KsftSkipEx("no widget\non this host")


def _fails(cfg):
    raise ksft_env.KsftFailEx("widget count 3, expected 4")


def _crashes(cfg):
    {}["missing"]


def test_ksft_run_output_and_exit_codes():
    out = io.StringIO()
    calls = []
    totals = ksft_env.ksft_run([_passes, _skips, _fails, _crashes], args=(calls,), out=out)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["TAP version 13", "1..4"]
    results = [line for line in lines if not line.startswith("#")][2:]
    assert results == [
        "ok 1 devmem._passes",
        "ok 2 devmem._skips # SKIP no widget on this host",
        "not ok 3 devmem._fails",
        "not ok 4 devmem._crashes",
    ]
    assert "# FAIL: widget count 3, expected 4" in lines
    assert any(line.startswith("# Exception| Traceback") for line in lines)
    assert "# KeyError: 'missing'" in lines
    assert lines[-1] == "# Totals: pass:1 fail:2 xfail:0 xpass:0 skip:1 error:0"
    assert calls == ["ran"]
    assert totals.exit_code() == 1


def test_exit_codes_all_skip_and_pass_with_skip():
    quiet = io.StringIO()
    assert ksft_env.ksft_run([_skips, _skips], args=([],), out=quiet).exit_code() == 4
    assert ksft_env.ksft_run([_passes, _skips], args=([],), out=quiet).exit_code() == 0
    out = io.StringIO()
    assert ksft_env.ktap_skip_all("NETIF is not set", out) == 4
    assert out.getvalue() == "TAP version 13\n1..0 # SKIP NETIF is not set\n"
    out = io.StringIO()
    assert ksft_env.ktap_bail_out("bad config", out) == 1
    assert out.getvalue() == "TAP version 13\nBail out! bad config\n"


def test_case_selection():
    names = [c.__name__ for c in devmem.select_cases({})]
    assert names[:5] == ["check_rx", "check_tx", "check_tx_chunks", "check_rx_hds", "check_rx_large_niov"]
    assert "check_selftest_must_fail" not in names
    assert devmem.select_cases({"DEVMEM_PY_SELFTEST_FAIL": "1"})[-1].__name__ == "check_selftest_must_fail"
    picked = devmem.select_cases({"DEVMEM_PY_CASES": "check_tx, check_rx"})
    assert [c.__name__ for c in picked] == ["check_rx", "check_tx"]  # in suite order
    with pytest.raises(ksft_env.ConfigError, match="check_nope"):
        devmem.select_cases({"DEVMEM_PY_CASES": "check_rx,check_nope"})


# --------------------------------------------------------------------------- command lines


def test_devmem_command_lines_match_the_kernel():
    # check_rx: ncdevmem -l -f IF -s ADDR -p PORT -c REMOTE -v 7
    assert devmem_lib.devmem_rx_argv("nc", "eth0", "2001:db8::1", 5201, client="2001:db8::2", validate=7,
                                     verify_restore=False) == (
        "nc -l -f eth0 -s 2001:db8::1 -p 5201 -c 2001:db8::2 -v 7".split())
    # check_rx_hds: -L, no -c, no -v
    assert devmem_lib.devmem_rx_argv("nc", "eth0", "::1", 1, fail_on_linear=True, verify_restore=False) == (
        "nc -l -f eth0 -s ::1 -p 1 -L".split())
    # ours on top: -b, -A, --verify-restore, --timeout, --json
    assert devmem_lib.devmem_rx_argv("nc", "eth0", "::1", 1, validate=7, rx_page_size=16384, autorelease=False,
                                     timeout=60, json_path="/t.json") == (
        "nc -l -f eth0 -s ::1 -p 1 -v 7 -b 16384 -A 0 --verify-restore --timeout 60 --json /t.json".split())
    assert devmem_lib.devmem_rx_argv("nc", "e", "::1", 1, zcrx=True, rx_buf_len=16384)[-4:] == [
        "--zcrx", "--rx-buf-len", "16384", "--verify-restore"]
    # check_tx / check_tx_chunks
    assert devmem_lib.devmem_tx_argv("nc", "eth0", "2001:db8::2", 5201) == "nc -f eth0 -s 2001:db8::2 -p 5201".split()
    assert devmem_lib.devmem_tx_argv("nc", "eth0", "::2", 5, chunk=3)[-2:] == ["-z", "3"]
    # require_devmem
    assert devmem_lib.probe_argv("nc", "eth0", 16384, verify_restore=False) == "nc -f eth0 -b 16384".split()


def test_addresses_bracketed_for_socat_bare_for_ncdevmem():
    assert devmem_lib.bracket("2001:db8::1", "6") == "[2001:db8::1]"
    assert devmem_lib.bracket("192.0.2.1", "4") == "192.0.2.1"
    assert devmem_lib.socat_connect("2001:db8::1", 80, "6", bind="2001:db8::2", nodelay=True) == (
        "TCP6:[2001:db8::1]:80,bind=[2001:db8::2]:80,nodelay")
    assert devmem_lib.socat_connect("192.0.2.1", 80, "4", bind="192.0.2.2") == "TCP4:192.0.2.1:80,bind=192.0.2.2:80"
    cmd = devmem_lib.sender_command(("ncdevmem-rs", "/b/nc"), "2001:db8::1", 80, "6", 1024, bind="2001:db8::2")
    assert cmd == "/b/nc --send-pattern 1024 -s 2001:db8::1 -p 80 -v 7 -c 2001:db8::2 --timeout 30"
    # the kernel's check_rx_hds sender, and its listener for check_tx
    assert devmem_lib.zeros_sender_command(("socat", None), "2001:db8::1", 80, "6", 64, bind="2001:db8::2") == (
        "dd if=/dev/zero bs=64 count=1 2>/dev/null | "
        "socat -b 64 -u - TCP6:[2001:db8::1]:80,bind=[2001:db8::2]:80,nodelay")
    assert devmem_lib.listener_command(("socat", None), "2001:db8::2", 80, "6") == "socat -U - TCP6-LISTEN:80"
    assert devmem_lib.listener_command(("ncdevmem-rs", "/b/nc"), "192.0.2.2", 80, "4", validate=7) == (
        "/b/nc -l --plain -s 192.0.2.2 -p 80 -v 7 --timeout 30")


def _socat_source(cmd):
    # The byte source of a socat sender, i.e. everything before "| socat".
    return cmd.rsplit(" | socat", 1)[0]


def test_socat_pattern_and_corruption_bytes():
    expected = devmem_lib.pattern_bytes(7, 5000)
    assert expected[:8] == b"\x01\x02\x03\x04\x05\x06\n\x01"
    plain = devmem_lib.sender_command(("socat", None), "::1", 80, "6", 5000)
    assert subprocess.run(["sh", "-c", _socat_source(plain)], capture_output=True).stdout == expected
    bad = devmem_lib.sender_command(("socat", None), "::1", 80, "6", 5000, corrupt_offset=1234)
    got = subprocess.run(["sh", "-c", _socat_source(bad)], capture_output=True).stdout
    assert len(got) == 5000
    assert [i for i in range(5000) if got[i] != expected[i]] == [1234]
    assert got[1234] == expected[1234] ^ 0xFF
    seg = devmem_lib.sender_command(("socat", None), "192.0.2.1", 80, "4", 64, write_size=64)
    assert seg.endswith("| socat -b 64 -u - TCP4:192.0.2.1:80,nodelay")


def test_pattern_unit_limits():
    assert devmem_lib.pattern_unit(2) == b"\x01\n"
    assert len(devmem_lib.pattern_unit(256)) == 256
    for bad in (1, 257):
        with pytest.raises(ValueError):
            devmem_lib.pattern_unit(bad)
    with pytest.raises(ValueError):
        devmem_lib.pattern_shell(11)  # byte 0x0a inside the unit


def test_skip_reason_and_tail():
    err = "ncdevmem-rs: listening\nncdevmem-rs: skip: no udmabuf: cannot open /dev/udmabuf\n"
    assert devmem_lib.skip_reason(err) == "no udmabuf: cannot open /dev/udmabuf"
    assert devmem_lib.skip_reason("a\nlast words\n") == "last words"
    assert ksft_proc.tail("a\n\nb\nc\n", 2) == "b | c"


# --------------------------------------------------------------------------- /proc parsers


def test_listening_ports():
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 00000000:1451 00000000:0000 0A 00000000:00000000\n"  # 5201 LISTEN
        "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000\n"  # 8080 ESTABLISHED
        "   0: 00000000000000000000000000000000:01BB 00000000000000000000000000000000:0000 0A 0\n"  # 443
    )
    assert ksft_proc.listening_ports(text) == {5201, 443}


def test_proc_stat_groups():
    text = (
        "10 (sh) S 1 10 10 0 -1\n"
        "11 (sleep) S 10 10 10 0 -1\n"
        "12 (odd (name) x) S 10 10 10 0 -1\n"  # comm with spaces and parentheses
        "13 (sleep) Z 1 10 10 0 -1\n"  # zombie: not alive
        "20 (other) R 1 20 20 0 -1\n"
    )
    assert ksft_proc.proc_stat_groups(text) == {10: [10, 11, 12], 20: [20]}


# --------------------------------------------------------------------------- processes end


def test_local_group_ends_on_exception_and_timeout():
    with pytest.raises(ZeroDivisionError):
        with ksft_proc.local_proc(["sh", "-c", "sleep 300 & sleep 300"]) as p:
            pgid = p.pgid()
            time.sleep(0.2)
            assert len(ksft_proc.proc_stat_groups(ksft_proc._local_stat_text())[pgid]) >= 2  # sh and the sleeps
            1 / 0
    assert ksft_proc.wait_group_gone(pgid, timeout=5)
    start = time.monotonic()
    with ksft_proc.local_proc(["sleep", "300"]) as p:
        with pytest.raises(ksft_env.KsftFailEx, match="still running after 0.3 s"):
            p.wait(0.3)
    assert time.monotonic() - start < 10
    assert ksft_proc.wait_group_gone(p.pgid(), timeout=5)


def test_remote_group_reports_its_pgid_and_ends():
    remote = ShellRemote()
    with ksft_proc.remote_proc(remote, "echo out; echo err >&2; sleep 300 & sleep 300") as p:
        pgid = p.pgid()
        assert isinstance(pgid, int) and pgid > 1 and pgid != os.getpgrp()  # never our own group
        assert ksft_proc.group_alive(pgid, remote)
        time.sleep(0.2)
    assert ksft_proc.wait_group_gone(pgid, remote, timeout=5)
    assert p.stdout == b"out\n"
    assert p.stderr == "err\n"  # the pgid marker line is not part of stderr
    with ksft_proc.remote_proc(remote, "printf 'a b'; exit 3") as p:
        assert p.wait(10) == 3
    assert p.stdout == b"a b"


def test_stdin_is_fed_and_closed():
    with ksft_proc.local_proc(["cat"], input_bytes=b"hello\nworld\n") as p:
        assert p.wait(10) == 0
    assert p.stdout == b"hello\nworld\n"


# --------------------------------------------------------------------------- hugepages, NIC snapshots


def test_hugepages_raised_and_restored(tmp_path):
    path = tmp_path / "nr_hugepages"
    path.write_text("3\n")
    with devmem_lib.HugePages(64, str(path)):
        assert path.read_text() == "64\n"
    assert path.read_text() == "3\n"
    path.write_text("128\n")
    with devmem_lib.HugePages(64, str(path)):
        assert path.read_text() == "128\n"
    assert path.read_text() == "128\n"


class _FakeProbe:
    """local_proc's stand-in for probe_all: exits with ``rcs[size]``, 0 = the default size."""

    def __init__(self, rcs, log):
        self.rcs, self.log = rcs, log

    def __call__(self, argv, name=None):
        size = int(argv[argv.index("-b") + 1]) if "-b" in argv else 0
        fake = self

        class Proc:
            stderr = "ncdevmem-rs: skip: no udmabuf\n" if fake.rcs[size] == 4 else ""

            def __enter__(self):
                fake.log.append(("probe", size))
                return self

            def __exit__(self, *exc):
                return False

            def wait(self, timeout):
                return fake.rcs[size]

        return Proc()


class _RecordingHugePages:
    """HugePages' stand-in: records when it is entered."""

    def __init__(self, log):
        self.log = log

    def __call__(self, *args, **kw):
        log = self.log

        class Raised:
            def __enter__(self):
                log.append("hugepages raised")
                return self

            def __exit__(self, *exc):
                log.append("hugepages restored")
                return False

        return Raised()


def test_hugepages_raised_only_when_a_case_will_run(monkeypatch):
    """vm.nr_hugepages is host-wide: the probe of a larger rx-page-size raises it only when
    the default probe passed, and check_rx_large_niov only once the probes said it runs."""
    log = []
    monkeypatch.setattr(devmem_lib, "HugePages", _RecordingHugePages(log))
    for default_rc in (4, 1):
        log.clear()
        monkeypatch.setattr(devmem_lib, "local_proc", _FakeProbe({0: default_rc, 16384: 4}, log))
        probes = devmem_lib.probe_all("nc", "eth0", 10)
        assert "hugepages raised" not in log, (default_rc, log)
        assert probes[0][0] == default_rc
    log.clear()
    monkeypatch.setattr(devmem_lib, "local_proc", _FakeProbe({0: 0, 16384: 0}, log))
    devmem_lib.probe_all("nc", "eth0", 10)
    assert log == [("probe", 0), "hugepages raised", ("probe", 16384), "hugepages restored"]
    # check_rx_large_niov whose -b probe skipped: no raise, the probe's skip.
    monkeypatch.setattr(devmem_lib, "nic_snapshot", lambda ifname: {})
    ctx = devmem_lib.Ctx("eth0", {"6": "2001:db8::1"}, {"6": "2001:db8::2"}, 6, None, "nc")
    ctx.probes = {0: (0, ""), 16384: (4, "skip: 1 of 32 hugepages free\n")}
    log.clear()
    with pytest.raises(ksft_env.KsftSkipEx, match="hugepages free"):
        devmem_lib.run_rx_large_niov(ctx)
    assert log == []


def test_hugepages_restored_on_sigterm(tmp_path):
    """A SIGTERM while vm.nr_hugepages is raised (the kselftest runner's timeout) unwinds the
    with block instead of killing the harness, so the value found on entry comes back."""
    import signal

    path = tmp_path / "nr_hugepages"
    path.write_text("3\n")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with devmem_lib.HugePages(64, str(path)):
            assert path.read_text() == "64\n"
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
    assert path.read_text() == "3\n"
    assert signal.getsignal(signal.SIGTERM) == before


def test_snapshot_diff():
    before = {"ethtool -g eth0": "exit 0\nRX: 1024\nTX: 1024\n", "queues": "rx-0 rx-1"}
    assert devmem_lib.snapshot_diff(before, dict(before)) == ""
    after = dict(before, **{"ethtool -g eth0": "exit 0\nRX: 512\nTX: 1024\n"})
    assert devmem_lib.snapshot_diff(before, after) == "ethtool -g eth0: 'RX: 1024' -> 'RX: 512'"
    snap = devmem_lib.nic_snapshot("lo")
    assert snap["ip -d link show dev lo"].startswith("exit 0\n")
    assert devmem_lib.snapshot_diff(snap, devmem_lib.nic_snapshot("lo")) == ""


# --------------------------------------------------------------------------- entry point


def _run_devmem_py(script, env, cwd=None):
    return subprocess.run([sys.executable, script], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_no_config_skips_everything(tmp_path):
    res = _run_devmem_py(DEVMEM_PY, clean_env(DEVMEM_PY_NET_CONFIG=str(tmp_path / "none")))
    assert res.stdout.splitlines() == [
        "TAP version 13",
        f"1..0 # SKIP NETIF is not set (environment or net.config {tmp_path / 'none'})",
    ]
    assert res.returncode == 4


def test_bad_config_bails_out(tmp_path):
    cfg = tmp_path / "net.config"
    cfg.write_text("NETIF=nosuch-if0\nLOCAL_V4=192.0.2.1\nREMOTE_V4=192.0.2.2\nREMOTE_TYPE=netns\nREMOTE_ARGS=x\n")
    res = _run_devmem_py(DEVMEM_PY, clean_env(DEVMEM_PY_NET_CONFIG=str(cfg)))
    assert res.stdout.splitlines()[-1] == "Bail out! NETIF 'nosuch-if0': no such interface in this network namespace"
    assert res.returncode == 1
    res = _run_devmem_py(DEVMEM_PY, clean_env(DEVMEM_PY_CASES="check_nope"))
    assert res.stdout.splitlines()[-1].startswith("Bail out! DEVMEM_PY_CASES: unknown case(s) check_nope")
    assert res.returncode == 1


STUB_LIB = '''
"""A stand-in for tools/testing/selftests/drivers/net/hw/lib/py (test only)."""
import sys


class KsftSkipEx(Exception):
    pass


class KsftFailEx(Exception):
    pass


class NetDrvEpEnv:
    def __init__(self, src_path):
        print("stub env for", src_path)
        mode = __import__("os").environ.get("STUB_ENV_MODE")
        if mode == "skip":
            raise KsftSkipEx("LOCAL_PREFIX_V6 required")
        if mode == "error":
            raise Exception("Invalid environment, missing configuration:", [["REMOTE_TYPE"]])
        self.ifname = "stub0"
        self.addr_v = {"4": "192.0.2.1", "6": "2001:db8::1"}
        self.remote_addr_v = {"4": "192.0.2.2", "6": "2001:db8::2"}
        self.addr_ipver = "6"
        self.remote = "stub-remote"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def ksft_run(cases, args=()):
    ctx = args[0]
    print("stub ksft_run:", len(cases), "cases, first", cases[0].__name__)
    print("stub ctx:", ctx.ifname, ctx.addr, ctx.remote_addr, ctx.remote, ctx.bin)
    import devmem_lib
    try:
        devmem_lib.skip("from our helpers")  # raised through ksft_proc's hook
    except KsftSkipEx as exc:
        print("stub skip type ok:", exc)


def ksft_exit():
    sys.exit(0)
'''


def _stub_tree(tmp_path, placement):
    """A kernel tree with the stub lib.py and our scripts in hw/ or hw/ncdevmem-rs/;
    returns (hw, dest, env with NCDEVMEM set to a stub binary)."""
    hw = tmp_path / "tools" / "testing" / "selftests" / "drivers" / "net" / "hw"
    (hw / "lib" / "py").mkdir(parents=True)
    (hw / "lib" / "py" / "__init__.py").write_text(STUB_LIB)
    dest = hw / "ncdevmem-rs" if placement == "subdir" else hw
    dest.mkdir(exist_ok=True)
    for name in os.listdir(PY_DIR):
        if name.endswith(".py"):
            shutil.copy(os.path.join(PY_DIR, name), dest / name)
    fake_bin = tmp_path / "ncdevmem-rs"
    fake_bin.write_text("#!/bin/sh\nexit 0\n")
    fake_bin.chmod(0o755)
    return hw, dest, clean_env(NCDEVMEM=str(fake_bin))


@pytest.mark.parametrize("placement", ["subdir", "same_dir"])
def test_kernel_lib_is_used_inside_a_kernel_tree(tmp_path, placement):
    hw, dest, env = _stub_tree(tmp_path, placement)
    (hw / "net.config").write_text("NETIF=stub0\n")
    res = _run_devmem_py(str(dest / "devmem.py"), env)
    assert res.returncode == 0, res.stderr
    # The library gets a src_path beside hw/net.config, so it reads the tree's file.
    assert res.stdout.splitlines() == [
        f"stub env for {hw / 'devmem.py'}",
        f"stub ksft_run: {len(devmem.CASES)} cases, first check_rx",
        f"stub ctx: stub0 2001:db8::1 2001:db8::2 stub-remote {env['NCDEVMEM']}",
        "stub skip type ok: from our helpers",
    ]
    # A net.config beside the script comes first, as the kernel library reads it.
    if placement == "subdir":
        (dest / "net.config").write_text("NETIF=stub1\n")
        res = _run_devmem_py(str(dest / "devmem.py"), env)
        assert res.stdout.splitlines()[0] == f"stub env for {dest / 'devmem.py'}", res.stdout
        assert res.returncode == 0, res.stderr
    # DEVMEM_PY_STANDALONE=1 ignores the kernel lib (and finds no config here).
    res = _run_devmem_py(str(dest / "devmem.py"), dict(env, DEVMEM_PY_STANDALONE="1",
                                                        DEVMEM_PY_NET_CONFIG=str(tmp_path / "none")))
    assert res.stdout.startswith("TAP version 13\n1..0 # SKIP NETIF is not set")
    assert res.returncode == 4


@pytest.mark.parametrize("placement", ["subdir", "same_dir"])
def test_kernel_tree_without_netif_skips_instead_of_netdevsim(tmp_path, placement):
    hw, dest, env = _stub_tree(tmp_path, placement)
    res = _run_devmem_py(str(dest / "devmem.py"), env)
    places = f"{dest / 'net.config'}" + (f" or {hw / 'net.config'}" if placement == "subdir" else "")
    assert res.stdout.splitlines() == [
        "TAP version 13",
        f"1..0 # SKIP NETIF is not set (environment, {places}); the kernel library would use netdevsim, "
        "which has no devmem",
    ]
    assert res.stderr == ""
    assert res.returncode == 4
    # NETIF from the environment alone: the library reads it (src_path is the script).
    res = _run_devmem_py(str(dest / "devmem.py"), dict(env, NETIF="stub0"))
    assert res.stdout.splitlines()[0] == f"stub env for {dest / 'devmem.py'}"
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "mode, line, code",
    [
        ("skip", "1..0 # SKIP NetDrvEpEnv: LOCAL_PREFIX_V6 required", 4),
        ("error", "Bail out! NetDrvEpEnv set-up failed: Exception: Invalid environment, missing configuration: "
                  "[['REMOTE_TYPE']]", 1),
    ],
)
def test_kernel_env_setup_errors_are_ktap_not_tracebacks(tmp_path, mode, line, code):
    hw, dest, env = _stub_tree(tmp_path, "subdir")
    (hw / "net.config").write_text("NETIF=stub0\n")
    res = _run_devmem_py(str(dest / "devmem.py"), dict(env, STUB_ENV_MODE=mode))
    assert res.stdout.splitlines() == [f"stub env for {hw / 'devmem.py'}", "TAP version 13", line]
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == code


def test_kernel_tree_without_binary_bails_out(tmp_path):
    hw, dest, env = _stub_tree(tmp_path, "subdir")
    (hw / "net.config").write_text("NETIF=stub0\n")
    res = _run_devmem_py(str(dest / "devmem.py"), dict(env, NCDEVMEM=str(tmp_path / "missing")))
    assert res.stdout.splitlines() == [
        "TAP version 13",
        "Bail out! ncdevmem-rs not found: build it (cargo build --release) or set NCDEVMEM",
    ]
    assert res.returncode == 1


FAKE_SSH = """#!/bin/sh
# test stand-in for ssh: drops the options and the host, runs the command here
while [ $# -gt 1 ]; do
    case "$1" in
        -o) shift 2 ;;
        -*) shift ;;
        *) shift; break ;;
    esac
done
exec sh -c "$1"
"""

FAKE_SCP = """#!/bin/sh
# test stand-in for scp: copies SRC to the path after "host:" in the last argument
for last; do :; done
while [ $# -gt 2 ]; do shift; done
cp "$1" "${last#*:}"
"""


def test_ssh_remote_deploys_runs_and_cleans_up(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("scp", FAKE_SCP)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    tool = tmp_path / "ncdevmem-rs"
    tool.write_text("#!/bin/sh\necho peer-tool \"$@\"\n")
    tool.chmod(0o755)

    remote = ksft_env.SshRemote("root@peer")
    ctx = devmem_lib.Ctx("lo", {"6": "::1"}, {"6": "::1"}, "6", remote, str(tool), environ={})
    kind, path = ctx.peer()
    assert kind == "ncdevmem-rs"
    assert path != str(tool) and path.endswith("/ncdevmem-rs") and os.access(path, os.X_OK)
    rc, out, _ = ksft_proc.remote_run(remote, f"{path} --help")
    assert (rc, out) == (0, "peer-tool --help\n")
    with ksft_proc.remote_proc(remote, "sleep 300 & sleep 300") as p:
        pgid = p.pgid()
        assert ksft_proc.group_alive(pgid, remote)
    assert ksft_proc.wait_group_gone(pgid, remote, timeout=5)
    remote.close()
    assert not os.path.exists(os.path.dirname(path))


def _nla(kind, payload):
    import struct
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def test_genl_ops_parses_op_ids_and_errors():
    import struct

    import genl_ops
    req = genl_ops.getfamily_request("netdev", seq=7)
    assert req == struct.pack("=IHHII", 32, 0x10, 1, 7, 0) + bytes([3, 1, 0, 0]) + _nla(2, b"netdev\0")
    ops = _nla(1, struct.pack("=I", 13) + b"") + _nla(2, struct.pack("=I", 0))
    body = bytes([1, 2, 0, 0]) + _nla(2, b"netdev\0") + _nla(6 | 0x8000, _nla(1, ops) + _nla(2, _nla(1, struct.pack("=I", 16))))
    reply = struct.pack("=IHHII", 16 + len(body), 0x10, 0, 1, 0) + body
    assert genl_ops.parse_ops(reply) == {13, 16}
    err = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -2) + req[:16]
    with pytest.raises(genl_ops.GenlError) as e:
        genl_ops.parse_ops(err)
    assert e.value.errno == 2
    with pytest.raises(genl_ops.GenlError, match="malformed attribute"):
        genl_ops.parse_ops(struct.pack("=IHHII", 24, 0x10, 0, 1, 0) + bytes(4) + struct.pack("=HH", 40, 6))
