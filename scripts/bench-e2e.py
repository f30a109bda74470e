#!/usr/bin/env python3
"""End-to-end receive cost over a veth pair: CPU time per GiB of the plain receiver validating
the `-v 7` pattern, validating the `--seed` keyed stream, not validating (payload to
/dev/null), and of a bare sink (socat into /dev/null with the same 819200-byte reads).

Two network namespaces joined by a veth pair, created here and always removed. The sender is
ncdevmem-rs' built-in pattern sender in the other namespace. Each receiver's user and system
time come from wait4(2) (the whole process, start to exit); the receiver's own `--json` adds its
syscall counts. Prints a Markdown table; docs/benchmarks.md has the figures of a run.

usage: scripts/bench-e2e.py [--bin PATH] [--bytes 1G] [--runs 3]   (root required)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ADDR_RX, ADDR_TX, PORT = "198.51.100.1", "198.51.100.2", 5301
GIB = 1 << 30


def sh(*args):
    subprocess.run(args, check=True)


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def run_one(ns_rx, ns_tx, binary, receiver, stream, nbytes, json_path):
    """Starts `receiver` in ns_rx, the sender in ns_tx; returns (user_s, sys_s, json or None)."""
    rx = subprocess.Popen(
        ["ip", "netns", "exec", ns_rx] + receiver,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    tx = subprocess.run(
        ["ip", "netns", "exec", ns_tx, binary, "--send-pattern", str(nbytes), "-s", ADDR_RX,
         "-p", str(PORT), "--timeout", "30"] + stream,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(rx.pid, 0)
    rx.returncode = os.waitstatus_to_exitcode(status)
    err = rx.stderr.read().decode(errors="replace")
    if tx.returncode != 0 or rx.returncode != 0:
        sys.exit(f"bench-e2e: sender exit {tx.returncode}, receiver exit {rx.returncode}: "
                 f"{err.strip()} {tx.stderr.decode(errors='replace').strip()}")
    summary = None
    if json_path and os.path.exists(json_path):
        with open(json_path) as f:
            summary = json.load(f)
        os.unlink(json_path)
    return usage.ru_utime, usage.ru_stime, summary


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    target = subprocess.run([os.path.join(here, "target-dir.sh")], capture_output=True,
                            text=True).stdout.strip() or "target"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(target, "release", "ncdevmem-rs"))
    ap.add_argument("--bytes", default="1G")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench-e2e: needs root (creates network namespaces)")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"bench-e2e: {a.bin} not built; run 'make build'")
    socat = shutil.which("socat")
    nbytes = parse_bytes(a.bytes)
    ns_rx, ns_tx = f"ncdevmem-bench-a-{os.getpid()}", f"ncdevmem-bench-b-{os.getpid()}"
    tmp = tempfile.mkdtemp(prefix="ncdevmem-bench-")
    js = os.path.join(tmp, "rx.json")
    base = [a.bin, "-l", "--plain", "-s", ADDR_RX, "-p", str(PORT), "--expect-bytes",
            str(nbytes), "--timeout", "30", "--json", js]
    variants = [
        ("validated, `-v 7`", base + ["-v", "7"], ["-v", "7"], js),
        ("validated, `--seed 42`", base + ["--seed", "42"], ["--seed", "42"], js),
        ("not validated (payload to /dev/null)", base, ["-v", "7"], js),
    ]
    if socat:
        variants.append(("bare sink: socat -b 819200 to /dev/null",
                         [socat, "-u", "-b", "819200", f"TCP-LISTEN:{PORT},reuseaddr",
                          "OPEN:/dev/null"], ["-v", "7"], None))
    try:
        sh("ip", "netns", "add", ns_rx)
        sh("ip", "netns", "add", ns_tx)
        sh("ip", "link", "add", "va", "netns", ns_rx, "type", "veth", "peer", "name", "vb",
           "netns", ns_tx)
        sh("ip", "-n", ns_rx, "addr", "add", f"{ADDR_RX}/24", "dev", "va")
        sh("ip", "-n", ns_tx, "addr", "add", f"{ADDR_TX}/24", "dev", "vb")
        for ns, dev in ((ns_rx, "va"), (ns_tx, "vb")):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        print(f"| receiver ({a.bytes} over veth, best of {a.runs}) | CPU s per GiB (user + sys) "
              f"| vs not validated | recvmsg / poll per GiB |")
        print("|---|---|---|---|")
        rows = []
        for name, receiver, stream, json_path in variants:
            best = None
            for _ in range(a.runs):
                user, sys_, summary = run_one(ns_rx, ns_tx, a.bin, receiver, stream, nbytes,
                                              json_path)
                cpu = (user + sys_) * GIB / nbytes
                if best is None or cpu < best[0]:
                    best = (cpu, user * GIB / nbytes, sys_ * GIB / nbytes, summary)
            rows.append((name, best))
        plain = next(b for n, b in rows if n.startswith("not validated"))[0]
        for name, (cpu, user, sys_, summary) in rows:
            calls = "—"
            if summary:
                per = GIB / summary["bytes"]
                calls = f"{summary['recvmsg_calls'] * per:.0f} / {summary['poll_calls'] * per:.0f}"
            print(f"| {name} | {cpu:.3f} ({user:.3f} + {sys_:.3f}) | {cpu / plain:.2f}× | {calls} |")
    finally:
        for ns in (ns_rx, ns_tx):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
