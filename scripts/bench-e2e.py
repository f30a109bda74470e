#!/usr/bin/env python3
"""End to end against iperf3: ncdevmem-rs' plain-TCP receiver and built-in pattern sender
beside iperf3's server and client, over a veth pair between two network namespaces.

Rows: one flow (iperf3 -n BYTES against ncdevmem-rs with --seed 42, with -v 7, without
validation, the payload to /dev/null, and with --seed 42 --rcvlowat 512K), and four flows
(iperf3 -P 4 -n BYTES against ncdevmem-rs --flows 4 with --seed 42, with -v 7 and with --seed
42 --rcvlowat 512K, BYTES/4 a flow). Every round runs every row once, in that order
(interleaved), so a busy neighbour weighs on all of them alike; each ncdevmem-rs row is
compared with the iperf3 row of its own round.

Figures of a run: Gbit/s as the receiver reports it (ncdevmem-rs: `gbit_per_s` of its --json,
first byte to the end; iperf3: the client's end.sum_received); CPU per GiB: the receiver's
plus the sender's user + system time (wait4(2) of each process, start to exit) per GiB moved;
the 1-minute load average when the run started; context switches per GiB of each process
(wait4's voluntary ones: it slept; involuntary: it was preempted). Prints Markdown tables: min /
median / max of each figure over the rounds, and of the per-round ratios to iperf3.

The two namespaces and the veth pair are created here and always removed.
docs/benchmarks.md has the figures of a run.

usage: scripts/bench-e2e.py [--bin PATH] [--bytes 4G] [--rounds 5] [--rows NAME,...]
                           [--also LABEL=PATH]...   (every ncdevmem-rs row with another build)
(root required; iperf3 must be installed: `make bench` installs it when missing)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ADDR_RX, ADDR_TX, PORT = "198.51.100.1", "198.51.100.2", 5301
GIB = 1 << 30


def sh(*args):
    subprocess.run(args, check=True)


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def load1():
    with open("/proc/loadavg", encoding="ascii") as f:
        return float(f.read().split()[0])


def wait_listening(ns, port, proc, timeout=10.0):
    """Until something in `ns` listens on `port` (iperf3's client does not retry)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"],
                             capture_output=True, text=True).stdout
        if out.strip():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    sys.exit(f"bench-e2e: nothing listens on port {port} in {ns}")


def cpu_of(usage):
    """(user s, system s, voluntary switches, involuntary switches) of a waited-for process."""
    return usage.ru_utime, usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw


class Run:
    """One run's figures."""

    def __init__(self, gbit, nbytes, rx_cpu, tx_cpu, load):
        self.gbit = gbit
        self.nbytes = nbytes
        self.rx_user, self.rx_sys, self.rx_vol, self.rx_invol = rx_cpu
        self.tx_user, self.tx_sys, self.tx_vol, self.tx_invol = tx_cpu
        self.load = load

    def cpu_per_gib(self):
        return (self.rx_user + self.rx_sys + self.tx_user + self.tx_sys) * GIB / self.nbytes


def run_measured(a, ns_rx, ns_tx, receiver, sender, wait_port, rx_stdout=False):
    """Starts `receiver` in ns_rx and then `sender` in ns_tx, waits for both; returns
    ({"rx"/"tx": (stdout, stderr)}, receiver and sender (user s, sys s, voluntary switches,
    involuntary switches)), each process's from wait4. Output goes through files (a pipe left
    unread would stall a tool); the receiver's stdout (the payload, when not validated) is
    dropped unless `rx_stdout`."""
    files = {n: (open(os.path.join(a.tmp, f"{n}.out"), "w+b"),
                 open(os.path.join(a.tmp, f"{n}.err"), "w+b")) for n in ("rx", "tx")}
    rx = subprocess.Popen(["ip", "netns", "exec", ns_rx] + receiver,
                          stdout=files["rx"][0] if rx_stdout else subprocess.DEVNULL,
                          stderr=files["rx"][1])
    if wait_port:
        wait_listening(ns_rx, PORT, rx)
    tx = subprocess.Popen(["ip", "netns", "exec", ns_tx] + sender,
                          stdout=files["tx"][0], stderr=files["tx"][1])
    _, tx_status, tx_usage = os.wait4(tx.pid, 0)
    _, rx_status, rx_usage = os.wait4(rx.pid, 0)
    tx.returncode = os.waitstatus_to_exitcode(tx_status)
    rx.returncode = os.waitstatus_to_exitcode(rx_status)
    outs = {}
    for n, (out, err) in files.items():
        out.seek(0)
        err.seek(0)
        outs[n] = (out.read(), err.read())
        out.close()
        err.close()
    if tx.returncode != 0 or rx.returncode != 0:
        sys.exit(f"bench-e2e: sender {' '.join(sender)} exit {tx.returncode}, receiver "
                 f"{' '.join(receiver)} exit {rx.returncode}:\n"
                 f"{outs['rx'][1].decode(errors='replace').strip()}\n"
                 f"{outs['tx'][1].decode(errors='replace').strip()}")
    return outs, cpu_of(rx_usage), cpu_of(tx_usage)


def iperf3_row(flows):
    def run(a, ns_rx, ns_tx, nbytes):
        receiver = ["iperf3", "-s", "-1", "-B", ADDR_RX, "-p", str(PORT)]
        sender = ["iperf3", "-c", ADDR_RX, "-p", str(PORT), "-n", str(nbytes), "--json"]
        if flows > 1:
            sender += ["-P", str(flows)]
        load = load1()
        outs, rx_cpu, tx_cpu = run_measured(a, ns_rx, ns_tx, receiver, sender, True)
        end = json.loads(outs["tx"][0])["end"]["sum_received"]
        return Run(end["bits_per_second"] / 1e9, end["bytes"], rx_cpu, tx_cpu, load)
    return run


def ours_row(flows, stream, validate=True, binary=None, rx_extra=()):
    """An ncdevmem-rs row: the plain receiver (with `rx_extra` too) and the pattern sender."""
    def run(a, ns_rx, ns_tx, nbytes):
        bin_ = binary or a.bin
        js = os.path.join(a.tmp, "rx.json")
        per_flow = nbytes // flows
        receiver = [bin_, "-l", "--plain", "-s", ADDR_RX, "-p", str(PORT), "--expect-bytes",
                    str(per_flow), "--timeout", "60", "--json", js]
        sender = [bin_, "--send-pattern", str(per_flow), "-s", ADDR_RX, "-p", str(PORT),
                  "--timeout", "60"] + stream
        if validate:
            receiver += stream
        receiver += list(rx_extra)
        if flows > 1:
            receiver += ["--flows", str(flows)]
            sender += ["--flows", str(flows)]
        load = load1()
        _, rx_cpu, tx_cpu = run_measured(a, ns_rx, ns_tx, receiver, sender, False)
        with open(js, encoding="utf-8") as f:
            summary = json.load(f)
        os.unlink(js)
        return Run(summary["gbit_per_s"], summary["bytes"], rx_cpu, tx_cpu, load)
    return run


def rows_for(also):
    """[(name, reference row or None, runner)]; `also` = [(label, binary)]: every ncdevmem-rs
    row once more with that binary, named "row [label]" (two builds side by side)."""
    lowat = ["--rcvlowat", "512K"]
    ours = [
        ("ncdevmem-rs --seed 42", "iperf3", (1, ["--seed", "42"], True, [])),
        ("ncdevmem-rs -v 7", "iperf3", (1, ["-v", "7"], True, [])),
        ("ncdevmem-rs, not validated (payload to /dev/null)", "iperf3",
         (1, ["-v", "7"], False, [])),
        ("ncdevmem-rs --seed 42 --rcvlowat 512K", "iperf3", (1, ["--seed", "42"], True, lowat)),
        ("ncdevmem-rs --flows 4 --seed 42", "iperf3 -P 4", (4, ["--seed", "42"], True, [])),
        ("ncdevmem-rs --flows 4 -v 7", "iperf3 -P 4", (4, ["-v", "7"], True, [])),
        ("ncdevmem-rs --flows 4 --seed 42 --rcvlowat 512K", "iperf3 -P 4",
         (4, ["--seed", "42"], True, lowat)),
    ]
    rows = []
    for name, ref, (flows, stream, validate, extra) in ours:
        if not any(r[0] == ref for r in rows):
            rows.append((ref, None, iperf3_row(1 if ref == "iperf3" else 4)))
        rows.append((name, ref, ours_row(flows, stream, validate, rx_extra=extra)))
        for label, binary in also:
            rows.append((f"{name} [{label}]", ref,
                         ours_row(flows, stream, validate, binary, rx_extra=extra)))
    return rows


ROWS = rows_for([])


def mmm(values, fmt):
    lo, med, hi = min(values), statistics.median(values), max(values)
    return f"{lo:{fmt}} / **{med:{fmt}}** / {hi:{fmt}}"


def report(results, rounds, nbytes):
    print(f"\n## End to end against iperf3 (scripts/bench-e2e.py: {nbytes / GIB:g} GiB a run over "
          f"veth, {rounds} interleaved rounds)\n")
    print("min / **median** / max over the rounds; ratios are taken within a round.\n")
    print("| row | Gbit/s | vs iperf3 | CPU s per GiB (receiver + sender) | vs iperf3 "
          "| receiver user + sys, sender user + sys (median s/GiB) "
          "| switches per GiB, voluntary / involuntary: receiver, sender (median) |")
    print("|---|---|---|---|---|---|---|")
    for name, ref, _ in ROWS:
        runs = results.get(name)
        if not runs:
            continue
        gbit = [r.gbit for r in runs]
        cpu = [r.cpu_per_gib() for r in runs]
        if ref and results.get(ref):
            base = results[ref]
            vs_gbit = mmm([a.gbit / b.gbit for a, b in zip(runs, base)], ".2f") + "×"
            vs_cpu = mmm([a.cpu_per_gib() / b.cpu_per_gib() for a, b in zip(runs, base)],
                         ".2f") + "×"
        else:
            vs_gbit = vs_cpu = "—"
        def per_gib(*fields):
            """The median over the rounds of each of `fields` per GiB moved."""
            return [statistics.median(getattr(r, f) * GIB / r.nbytes for r in runs)
                    for f in fields]
        parts = per_gib("rx_user", "rx_sys", "tx_user", "tx_sys")
        split = f"{parts[0]:.3f} + {parts[1]:.3f}, {parts[2]:.3f} + {parts[3]:.3f}"
        sw = per_gib("rx_vol", "rx_invol", "tx_vol", "tx_invol")
        switches = f"{sw[0]:,.0f} / {sw[1]:,.0f}, {sw[2]:,.0f} / {sw[3]:,.0f}"
        print(f"| {name} | {mmm(gbit, '.1f')} | {vs_gbit} | {mmm(cpu, '.3f')} | {vs_cpu} "
              f"| {split} | {switches} |")
    print("\nLoad average (1 min) at the start of each run, round by round:\n")
    for name, _, _ in ROWS:
        if results.get(name):
            print(f"- {name}: " + ", ".join(f"{r.load:.2f}" for r in results[name]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    target = subprocess.run([os.path.join(here, "target-dir.sh")], capture_output=True,
                            text=True).stdout.strip() or "target"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(target, "release", "ncdevmem-rs"))
    ap.add_argument("--bytes", default="4G", help="bytes a run moves (all flows together)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default="",
                    help="comma-separated row names to run (default: all)")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PATH",
                    help="run every ncdevmem-rs row with this binary too (another build)")
    a = ap.parse_args()
    global ROWS
    ROWS = rows_for([tuple(x.split("=", 1)) for x in a.also])
    if os.geteuid() != 0:
        sys.exit("bench-e2e: needs root (creates network namespaces)")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"bench-e2e: {a.bin} not built; run 'make build'")
    if not shutil.which("iperf3"):
        sys.exit("bench-e2e: iperf3 not found (make bench installs it: apt-get install iperf3)")
    nbytes = parse_bytes(a.bytes)
    wanted = [r for r in a.rows.split(",") if r]
    rows = [r for r in ROWS if not wanted or r[0] in wanted]
    ns_rx, ns_tx = f"ncdevmem-bench-a-{os.getpid()}", f"ncdevmem-bench-b-{os.getpid()}"
    a.tmp = tempfile.mkdtemp(prefix="ncdevmem-bench-")
    results = {}
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
        for rnd in range(a.rounds):
            for name, _, run in rows:
                r = run(a, ns_rx, ns_tx, nbytes)
                results.setdefault(name, []).append(r)
                print(f"bench-e2e: round {rnd + 1}/{a.rounds}: {name}: {r.gbit:.1f} Gbit/s, "
                      f"{r.cpu_per_gib():.3f} CPU s/GiB, load {r.load:.2f}", file=sys.stderr)
        report(results, a.rounds, nbytes)
    finally:
        for ns in (ns_rx, ns_tx):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        shutil.rmtree(a.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
