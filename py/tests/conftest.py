"""Fixtures for the py/ harness tests: the binary, a two-namespace veth "remote",
running devmem.py and parsing its KTAP.

Namespace tests need root and iproute2; without them they skip with the reason.
Every namespace is created with a unique name and always deleted.
"""

import itertools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

PY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PY_DIR)
DEVMEM_PY = os.path.join(PY_DIR, "devmem.py")
sys.path.insert(0, PY_DIR)

# The veth "remote" network (TEST-NET-2 and the IPv6 documentation prefix).
LOCAL_IF, REMOTE_IF = "dvpy0", "dvpy1"
LOCAL_V4, REMOTE_V4 = "198.51.100.1", "198.51.100.2"
LOCAL_V6, REMOTE_V6 = "2001:db8::1", "2001:db8::2"

_counter = itertools.count()


def root_skip_reason():
    """Why namespace tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates network namespaces and veth pairs)"
    if shutil.which("ip") is None:
        return "iproute2 'ip' is not installed"
    return None


def _ip(*args):
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


@pytest.fixture(scope="session")
def binary():
    """The ncdevmem-rs binary: $NCDEVMEM or release/ncdevmem-rs under $CARGO_TARGET_DIR or
    target/ (make pytest builds it and sets $NCDEVMEM)."""
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    path = os.environ.get("NCDEVMEM") or os.path.join(target, "release", "ncdevmem-rs")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built: run 'make build' (or set NCDEVMEM)")
    return os.path.abspath(path)


class ShellRemote:
    """A 'remote' that is this host: cmd(comm) runs ``sh -c comm`` (the remote
    interface of NetnsRemote/SshRemote without a namespace)."""

    def cmd(self, comm):
        return subprocess.Popen(["sh", "-c", comm], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def deploy(self, what):
        return what


@dataclass
class NsPair:
    """Two namespaces joined by a veth pair; ``config`` is the net.config path."""

    local: str
    remote: str
    config: str
    extra: dict = field(default_factory=dict)

    def pids(self, ns):
        return _ip("netns", "pids", ns).split()


@pytest.fixture
def ns_pair(tmp_path):
    """Fresh "local" and "remote" namespaces, veth LOCAL_IF <-> REMOTE_IF with
    4 queues each, 198.51.100.0/24 and 2001:db8::/64 (nodad), lo up, and a
    net.config describing them.  Always deleted."""
    reason = root_skip_reason()
    if reason:
        pytest.skip(reason)
    n = next(_counter)
    local, remote = f"dvpy-{os.getpid()}-{n}-l", f"dvpy-{os.getpid()}-{n}-r"
    made = []
    try:
        for ns in (local, remote):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # stale, same pid
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", LOCAL_IF, "numtxqueues", "4", "numrxqueues", "4", "netns", local,
            "type", "veth", "peer", "name", REMOTE_IF, "numtxqueues", "4", "numrxqueues", "4", "netns", remote)
        for ns, dev, v4, v6 in ((local, LOCAL_IF, LOCAL_V4, LOCAL_V6), (remote, REMOTE_IF, REMOTE_V4, REMOTE_V6)):
            _ip("-n", ns, "addr", "add", f"{v4}/24", "dev", dev)
            _ip("-n", ns, "addr", "add", f"{v6}/64", "dev", dev, "nodad")
            _ip("-n", ns, "link", "set", dev, "up")
        config = tmp_path / "net.config"
        config.write_text(
            "# written by py/tests/conftest.py\n"
            f"NETIF={LOCAL_IF}\n"
            f"LOCAL_V4={LOCAL_V4}\nLOCAL_V6={LOCAL_V6}\n"
            f"REMOTE_V4={REMOTE_V4}\nREMOTE_V6={REMOTE_V6}\n"
            f"REMOTE_TYPE=netns\nREMOTE_ARGS={remote}\n"
        )
        yield NsPair(local, remote, str(config))
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def clean_env(**extra):
    """os.environ without the harness's own knobs and config keys, plus ``extra``."""
    drop = {"NETIF", "LOCAL_V4", "LOCAL_V6", "REMOTE_V4", "REMOTE_V6", "REMOTE_TYPE", "REMOTE_ARGS", "NCDEVMEM"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("DEVMEM_PY_")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_devmem_py(pair, binary, timeout=600, **extra):
    """Runs devmem.py stand-alone inside ``pair.local``; returns CompletedProcess (text)."""
    env = clean_env(DEVMEM_PY_NET_CONFIG=pair.config, NCDEVMEM=binary, **extra)
    return subprocess.run(
        ["ip", "netns", "exec", pair.local, sys.executable, DEVMEM_PY],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Ktap:
    plan: int
    results: dict  # name -> (number, "ok" | "not ok", skip reason or None)
    totals: dict  # pass, fail, skip
    lines: list


_RESULT = re.compile(r"(ok|not ok) (\d+) (\S+)(?: # SKIP (.*))?")
_TOTALS = re.compile(r"# Totals: pass:(\d+) fail:(\d+) xfail:0 xpass:0 skip:(\d+) error:0")


def parse_ktap(text):
    """Parses devmem.py's KTAP (independently of ksft_env's writer) and checks
    its framing: version line first, plan, consecutive numbers, one totals
    line that agrees with the results."""
    lines = text.splitlines()
    body = [line for line in lines if not line.startswith("# ")]
    assert body[0] == "TAP version 13", text
    m = re.fullmatch(r"1\.\.(\d+)", body[1])
    assert m, f"no plan line: {body[1]!r}"
    plan = int(m.group(1))
    results = {}
    for line in body[2:]:
        r = _RESULT.fullmatch(line)
        assert r, f"unexpected KTAP line {line!r}"
        status, num, name, reason = r.group(1), int(r.group(2)), r.group(3), r.group(4)
        assert num == len(results) + 1, f"result number {num} out of order"
        assert name.startswith("devmem."), name
        results[name[len("devmem."):]] = (num, status, reason)
    assert len(results) == plan, f"plan 1..{plan} but {len(results)} results"
    totals_lines = [line for line in lines if line.startswith("# Totals:")]
    assert len(totals_lines) == 1, totals_lines
    t = _TOTALS.fullmatch(totals_lines[0])
    assert t, totals_lines[0]
    totals = {"pass": int(t.group(1)), "fail": int(t.group(2)), "skip": int(t.group(3))}
    counted = {
        "pass": sum(1 for _, s, r in results.values() if s == "ok" and r is None),
        "fail": sum(1 for _, s, _ in results.values() if s == "not ok"),
        "skip": sum(1 for _, s, r in results.values() if s == "ok" and r is not None),
    }
    assert totals == counted, f"totals {totals} disagree with the results {counted}"
    return Ktap(plan, results, totals, lines)
