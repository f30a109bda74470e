#!/usr/bin/env python3
"""The argv corpus: record what the binary does on a large set of command lines, and compare
two recordings. The safety net of a refactor that must not change behaviour (issue 34): record
with the binary from before the change, record again with the one after, diff; every
difference is either a bug or a change to list and justify.

  scripts/argv-corpus.py record --bin PATH --out FILE.jsonl [--corpus FILE] [--only REGEX]
                                [--jobs N] [--runner CMD]
  scripts/argv-corpus.py diff A.jsonl B.jsonl [--only REGEX] [--corpus FILE]
  scripts/argv-corpus.py show FILE.jsonl [--only REGEX]     (the normalized entries)
  scripts/argv-corpus.py list [--corpus FILE]              (entries per category)

(root required for record: every entry runs in a network namespace of its own; --jobs entries
at once, default 2; about 2 minutes on a loaded 2-core machine.) Record both sides on the same
machine: what the probe and the report print, the skips and the CPU list are its facts.

A refactor:
  git stash / checkout the commit before; make build
  scripts/argv-corpus.py record --bin target/release/ncdevmem-rs --out before.jsonl
  ... the change ...; make build
  scripts/argv-corpus.py record --bin target/release/ncdevmem-rs --out after.jsonl
  scripts/argv-corpus.py diff before.jsonl after.jsonl      (exit 1 when any entry differs)

The corpus (tests/fixtures/argv-corpus.txt, one entry a line, `#` comments):

  ID [TAG ...] -- PROG ARG ... [|| PROG ARG ...]

PROG is `ncdevmem-rs` or `iou-zcrx` (the same binary through a link of that name). The ID's
part before the first `.` is its category. Tokens are split as a shell would (shlex), so ''
is an empty argument. Several processes separated by `||` run in that order in the entry's
namespace: each but the last is started and waited for until it listens on a TCP port (its own
socket in /proc/PID/net/tcp{,6}) or exits; the last runs to its end; then the earlier ones are
waited for in reverse order (or, with `stop`, sent SIGINT first). Placeholders in arguments:
@TMP the entry's own temporary directory, @JSON a file in it for this process's --json,
@PORT the TCP port the previous process listens on. Tags:

  veth        a veth pair inside the namespace: cv0 (192.0.2.1/24, 2001:db8::1/64) and cv1
              (192.0.2.2/24, 2001:db8::2/64), both up (lo is always up)
  json        every ncdevmem-rs process of the entry gets `--json @JSON` appended
  timed       a timed transfer: byte counts, CRC-32s, mismatch and call counts are
              run-to-run values and are normalized too
  racy        the outcome's details are a race by design (several flows failing at once:
              which one fails first, and whether the sender sees the reset): only the
              first process's exit code and its --json ok/verdict are compared
  stop        the processes still running when the last one ends get SIGINT (a single
              process: once it listens); their exit is recorded
  timeout=S   each process is killed after S seconds (default 10), recorded as "killed"
  stdin=TEXT  the last process's stdin (Python escapes: hello\\nworld\\n); default empty

Recorded per process: the argv as written in the corpus, the exit code ("killed" when the time
bound ended it, "signal N"), stdout, stderr, the --json object (the file, or stdout for
`--json -`), and the files the entry left in @TMP (CSV rows, SVG). The raw text is recorded;
`diff` and `show` normalize both sides when comparing (so the normalization can be improved
without recording again): run-to-run values (seconds, rates, CPU figures, TCP_INFO, ephemeral
ports, temp paths, the kernel release, the commit, ETA, retry counts; with `timed`, byte counts,
CRC-32s and call counts) become placeholders, in text and in the JSON (by key). Everything
else is behaviour and is compared: exit codes, messages, skip reasons, byte counts of
fixed-size transfers, mismatches, verdicts, the set and order of JSON keys, flow numbering.
Tags of the corpus file (`diff --corpus`, default the one beside this script) apply on top of
those recorded, so an entry found racy can be marked after the "before" recording. Two
recordings of the same binary diff to zero (check it when the corpus or the normalization
changes: record twice, once on a busy machine).
"""

import argparse
import concurrent.futures
import csv
import difflib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CORPUS = os.path.join(HERE, "..", "tests", "fixtures", "argv-corpus.txt")
PROGS = ("ncdevmem-rs", "iou-zcrx")
DEFAULT_TIMEOUT = 10.0
# Larger stdout/stderr is recorded as its length, SHA-256 and head.
MAX_TEXT = 64 << 10
VETH = [
    ("cv0", "192.0.2.1/24", "2001:db8::1/64"),
    ("cv1", "192.0.2.2/24", "2001:db8::2/64"),
]


# --------------------------------------------------------------------------------- corpus


class Entry:
    """One corpus line: id, tags, and the processes' argv (PROG first)."""

    def __init__(self, eid, tags, procs, line):
        self.id = eid
        self.tags = tags
        self.procs = procs
        self.line = line

    @property
    def category(self):
        return self.id.split(".", 1)[0]

    def timeout(self):
        return float(self.tags.get("timeout", DEFAULT_TIMEOUT))


def parse_corpus(path):
    entries, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{n}"
            try:
                toks = shlex.split(line)
            except ValueError as e:
                sys.exit(f"argv-corpus: {where}: {e}")
            if "--" not in toks:
                sys.exit(f"argv-corpus: {where}: no ' -- ' between the id and tags and the argv")
            cut = toks.index("--")
            head, rest = toks[:cut], toks[cut + 1:]
            if not head:
                sys.exit(f"argv-corpus: {where}: no id")
            eid, tags = head[0], {}
            for t in head[1:]:
                k, _, v = t.partition("=")
                if k not in ("veth", "json", "timed", "racy", "stop", "timeout", "stdin"):
                    sys.exit(f"argv-corpus: {where}: unknown tag {t!r}")
                tags[k] = v if "=" in t else True
            if eid in seen:
                sys.exit(f"argv-corpus: {where}: id {eid} twice")
            seen.add(eid)
            procs, cur = [], []
            for t in rest:
                if t == "||":
                    procs.append(cur)
                    cur = []
                else:
                    cur.append(t)
            procs.append(cur)
            for p in procs:
                if not p or p[0] not in PROGS:
                    sys.exit(f"argv-corpus: {where}: each process starts with one of {PROGS}")
            entries.append(Entry(eid, tags, procs, line))
    return entries


# --------------------------------------------------------------------------------- record


def sh(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def tcp_sockets(pid):
    """The TCP sockets of process `pid`: (ports it listens on, sorted; how many of its other
    TCP sockets exist), from its fds' inodes matched with the rows of its namespace's
    /proc/PID/net/tcp and tcp6."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return [], 0
    ports, others = set(), 0
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as f:
                next(f)
                for row in f:
                    cols = row.split()
                    if len(cols) <= 9 or cols[9] not in inodes:
                        continue
                    if cols[3] == "0A":
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
                    else:
                        others += 1
        except OSError:
            pass
    return sorted(ports), others


def wait_veth_ready(ns, timeout=5.0):
    """Until both veth ends have carrier and their IPv6 addresses have local routes (the
    carrier comes through the kernel's link watch, later than `ip link set up` returns;
    before it, a connect between the two IPv6 addresses fails with EHOSTUNREACH)."""
    want = [v6.split("/")[0] for _, _, v6 in VETH]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        links = subprocess.run(["ip", "-n", ns, "-o", "link", "show"], capture_output=True,
                               text=True).stdout
        local = subprocess.run(["ip", "-n", ns, "-6", "route", "show", "table", "local"],
                               capture_output=True, text=True).stdout.split()
        up = all(re.search(rf"\b{name}@\S+: <[^>]*LOWER_UP", links) for name, _, _ in VETH)
        if up and all(addr in local for addr in want):
            return
        time.sleep(0.01)
    sys.exit(f"argv-corpus: the veth pair in {ns} did not come up within {timeout} s")


def wait_listening(proc, deadline):
    """The first port `proc` listens on, or None once it exited or at `deadline`."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        ports, _ = tcp_sockets(proc.pid)
        if ports:
            return ports[0]
        time.sleep(0.005)
    return None


def wait_connections_closed(proc, deadline):
    """Until `proc` holds no TCP socket but its listeners (a server done with its clients:
    a `stop` then does not race its last client's handling), it exited, or `deadline`."""
    while time.monotonic() < deadline and proc.poll() is None:
        if tcp_sockets(proc.pid)[1] == 0:
            return
        time.sleep(0.01)


def wait_bounded(proc, deadline):
    """Waits for `proc` until `deadline` (monotonic); kills it then. Its exit as recorded."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait()
        return "killed"
    rc = proc.returncode
    return rc if rc >= 0 else f"signal {-rc}"


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="backslashreplace")
    if len(data) <= MAX_TEXT:
        return text
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "head": text[:2048]}


class Recorder:
    def __init__(self, binary, links, runner):
        self.binary = binary
        self.links = links  # PROG -> path of a link of that name to the binary
        self.runner = runner  # argv before the link's path (an emulator), or []

    def run(self, idx, entry):
        ns = f"argvc{os.getpid()}-{idx}"
        tmp = tempfile.mkdtemp(prefix="argv-corpus-")
        io_dir = tempfile.mkdtemp(prefix="argv-corpus-io-")
        procs, started = [], time.monotonic()
        result = {"id": entry.id, "tags": entry.tags, "procs": [],
                  "ctx": {"tmp": tmp, "ports": []}}
        try:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            if "veth" in entry.tags:
                sh("ip", "-n", ns, "link", "add", VETH[0][0], "type", "veth", "peer", "name",
                   VETH[1][0])
                for name, v4, v6 in VETH:
                    sh("ip", "-n", ns, "addr", "add", v4, "dev", name)
                    sh("ip", "-n", ns, "addr", "add", v6, "dev", name, "nodad")
                    sh("ip", "-n", ns, "link", "set", name, "up")
                wait_veth_ready(ns)
            port = None
            bound = entry.timeout()
            for i, argv in enumerate(entry.procs):
                last = i == len(entry.procs) - 1
                args = list(argv[1:])
                if "json" in entry.tags and argv[0] == "ncdevmem-rs":
                    args += ["--json", "@JSON"]
                json_path = os.path.join(tmp, f"{i}.json")
                args = [a.replace("@JSON", json_path).replace("@TMP", tmp)
                        .replace("@PORT", str(port)) for a in args]
                out = os.path.join(io_dir, f"{i}.out")
                err = os.path.join(io_dir, f"{i}.err")
                stdin = subprocess.DEVNULL
                if last and "stdin" in entry.tags:
                    stdin_path = os.path.join(io_dir, "stdin")
                    with open(stdin_path, "wb") as f:
                        f.write(entry.tags["stdin"].encode("latin-1").decode("unicode_escape")
                                .encode("latin-1"))
                    stdin = open(stdin_path, "rb")
                with open(out, "wb") as fo, open(err, "wb") as fe:
                    p = subprocess.Popen(["ip", "netns", "exec", ns, *self.runner,
                                          self.links[argv[0]], *args],
                                         stdin=stdin, stdout=fo, stderr=fe, cwd=tmp,
                                         start_new_session=True)
                if stdin is not subprocess.DEVNULL:
                    stdin.close()
                deadline = time.monotonic() + bound
                procs.append({"p": p, "deadline": deadline, "out": out, "err": err,
                              "json": json_path, "argv": argv, "args": args})
                if not last or ("stop" in entry.tags and len(entry.procs) == 1):
                    port = wait_listening(p, deadline)
                    result["ctx"]["ports"].append(port)
            # The last process runs to its end; a lone `stop` process has listened by now.
            exits = [None] * len(procs)
            if "stop" in entry.tags and len(procs) == 1:
                stop(procs[0]["p"])
                exits[0] = wait_bounded(procs[0]["p"], procs[0]["deadline"])
            else:
                exits[-1] = wait_bounded(procs[-1]["p"], procs[-1]["deadline"])
                for i in range(len(procs) - 2, -1, -1):
                    if "stop" in entry.tags:
                        wait_connections_closed(procs[i]["p"], procs[i]["deadline"])
                        stop(procs[i]["p"])
                    exits[i] = wait_bounded(procs[i]["p"], procs[i]["deadline"])
            for pr, code in zip(procs, exits):
                rec = {"argv": pr["argv"], "exit": code, "stdout": read_text(pr["out"]),
                       "stderr": read_text(pr["err"]), "json": None}
                if os.path.exists(pr["json"]):
                    with open(pr["json"], "rb") as f:
                        rec["json"] = f.read().decode("utf-8", errors="backslashreplace")
                elif "-" in pr["args"] and "--json" in pr["args"]:
                    rec["json"] = "stdout"
                result["procs"].append(rec)
            files = {}
            for name in sorted(os.listdir(tmp)):
                path = os.path.join(tmp, name)
                if re.fullmatch(r"\d+\.json", name) or not os.path.isfile(path):
                    continue
                files[name] = read_text(path)
            result["files"] = files
        finally:
            for pr in procs:
                if pr["p"].poll() is None:
                    kill_group(pr["p"])
                    pr["p"].wait()
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(io_dir, ignore_errors=True)
        result["seconds"] = round(time.monotonic() - started, 3)
        return result


def stop(proc):
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass


def load1():
    with open("/proc/loadavg", encoding="ascii") as f:
        return float(f.read().split()[0])


def cmd_record(a):
    if os.geteuid() != 0:
        sys.exit("argv-corpus: record needs root (a network namespace per entry)")
    binary = os.path.abspath(a.bin)
    if not os.access(binary, os.X_OK):
        sys.exit(f"argv-corpus: {binary}: not an executable")
    entries = parse_corpus(a.corpus)
    if a.only:
        entries = [e for e in entries if re.search(a.only, e.id)]
    bindir = tempfile.mkdtemp(prefix="argv-corpus-bin-")
    # SIGTERM unwinds like SIGINT, so every namespace and directory is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("argv-corpus: terminated"))
    try:
        links = {}
        for prog in PROGS:
            links[prog] = os.path.join(bindir, prog)
            os.symlink(binary, links[prog])
        runner = shlex.split(a.runner or "")
        version = subprocess.run([*runner, links["ncdevmem-rs"], "--version"],
                                 capture_output=True, text=True).stdout.strip()
        header = {"type": "header", "bin": binary, "bindir": bindir, "version": version,
                  "runner": runner,
                  "kernel_release": os.uname().release, "corpus": os.path.abspath(a.corpus),
                  "entries": len(entries), "load_at_start": load1(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        rec = Recorder(binary, links, runner)
        started = time.monotonic()
        results = [None] * len(entries)
        done = 0
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs)
        try:
            futs = {pool.submit(rec.run, i, e): i for i, e in enumerate(entries)}
            for fut in concurrent.futures.as_completed(futs):
                i = futs[fut]
                results[i] = fut.result()
                done += 1
                if a.verbose:
                    r = results[i]
                    print(f"[{done}/{len(entries)}] {r['id']}: "
                          f"{[p['exit'] for p in r['procs']]} {r['seconds']} s", file=sys.stderr)
        finally:
            # On SIGINT/SIGTERM: the entries not started are dropped; the running ones end
            # within their bound and remove their namespaces.
            pool.shutdown(wait=True, cancel_futures=True)
        header["seconds"] = round(time.monotonic() - started, 1)
        header["load_at_end"] = load1()
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(json.dumps(header) + "\n")
            for r in results:
                f.write(json.dumps(r) + "\n")
        print(f"argv-corpus: {len(results)} entries recorded in {header['seconds']} s "
              f"(load {header['load_at_start']} -> {header['load_at_end']}) to {a.out}; "
              f"{version}", file=sys.stderr)
    finally:
        shutil.rmtree(bindir, ignore_errors=True)


# --------------------------------------------------------------------------------- normalize

# JSON keys whose value is a run-to-run figure: replaced by "<v>" whatever it is (a figure
# may be null in one run and a number in the next: "no CPU ticks in the interval").
VOLATILE_KEYS = {
    "elapsed_s", "measured_s", "gbit_per_s", "flow_avg_gbit_per_s", "flow_sd_gbit_per_s",
    "cpu", "cpu_sys_s", "cpu_user_s", "cpu_utilisation", "worker_sys_s", "worker_user_s",
    "recvmsg_calls", "poll_calls", "eagain_retries", "eintr_retries", "control_only_recvmsgs",
    "napi_id", "kernel_release", "mean", "sd", "mb_per_s", "tries", "connect_tries",
    "pid", "tcp_info", "cpus", "app_cpus", "net_cpus", "per_cpu", "worker_began_s",
    "worker_ended_s",
}
# Also volatile in a `timed` entry (how much a timed transfer moved).
TIMED_KEYS = {
    "bytes", "measured_bytes", "validated_bytes", "plain_bytes", "crc32", "writes",
    "linear_bytes", "dmabuf_bytes", "flow_bytes", "mismatches", "crc32_from",
}
# Keys that name a figure by their unit (the sweep's columns and runs).
VOLATILE_KEY_RE = re.compile(r"(_pct|_gbps|gbit_per_s|_per_s|_per_gib)$")
# CSV columns that are figures (a sweep's --csv).
CSV_VOLATILE = re.compile(r"(gbps|_pct|per_s|per_gib|^bytes)$")


def text_rules(ctx):
    """The ordered (regex, replacement) list for stdout, stderr and JSON strings."""
    rules = []
    for path, name in ((ctx.get("tmp"), "@TMP"), (ctx.get("bindir"), "@BINDIR")):
        if path:
            rules.append((re.escape(path), name))
    for port in ctx.get("ports") or []:
        # -p 0's port, as it appears in the next process's argv (@PORT).
        if port and port >= 32768:
            rules.append((rf"(?<![\d.]){port}(?![\d.])", "<eport>"))
    if ctx.get("kernel_release"):
        rules.append((re.escape(ctx["kernel_release"]), "<kernel-release>"))
    rules += [
        (r"\(commit [0-9a-f]{7,40}(-dirty)?,", "(commit <commit>,"),
        (r"/tmp/argv-corpus-[\w-]+", "@TMP"),
        # Ephemeral ports (the default ip_local_port_range, 32768-60999; the corpus's fixed
        # ports are outside it): accepted-from ports, -p 0's port.
        (r"(\]:|port )(\d{5})\b", ephemeral_port),
        # Rates, times, percentages.
        (r"\b\d+(\.\d+)? ?(Gbit/s|Gbps|MB/s|MiB/s)", r"<rate> \2"),
        (r"\b\d+\.\d{3,} s\b", "<secs> s"),
        (r"\b\d+\.\d{3,}s\b", "<secs>s"),
        (r"\b(after|at) \d+ ms\b", r"\1 <t> ms"),
        (r"\(\d+(\.\d+)?% of one CPU over the [a-z ]+\)|\(CPU share not measured: [^)]*\)",
         "(<cpu share>)"),
        # Means and standard deviations (flow averages, the sweep's table); a '-' (no sd,
        # one run) stays.
        (r"\b\d+(\.\d+)? \+/- ", "<mean> +/- "),
        (r"\+/- \d+(\.\d+)?\b", "+/- <sd>"),
        (r"\b\d+(\.\d+)?%", "<pct>%"),
        (r"\(ETA [^)]*\)", "(ETA <eta>)"),
        # Connect retries: how many tries fit the window depends on the machine.
        (r"\b\d+ tries\b", "<n> tries"),
        # TCP_INFO and the receive loop's call counts.
        (r"rtt \d+ us \(var \d+\)", "rtt <n> us (var <n>)"),
        (r"\b\d+ retransmits\b", "<n> retransmits"),
        (r"reordering \d+", "reordering <n>"),
        (r"rcv_space \d+", "rcv_space <n>"),
        (r"\b\d+ recvmsg calls\b", "<n> recvmsg calls"),
        (r"recvmsg calls: \d+ \(\d+ spurious EAGAIN, \d+ EINTR retries\), poll calls: \d+",
         "recvmsg calls: <n> (<n> spurious EAGAIN, <n> EINTR retries), poll calls: <n>"),
        (r"\(per GiB: [^)]*\)", "(per GiB: <figures>)"),
        # --seed random: the drawn seed.
        (r"seed \d+ \(replay with --seed \d+\)", "seed <drawn> (replay with --seed <drawn>)"),
        (r"\bpid \d+", "pid <pid>"),
        # Where the receive's chunks begin and end follows how recvmsg split the stream.
        (r"chunk at stream offset \d+ \(\d+ bytes\): \d+ byte\(s\) differ in stream offsets "
         r"\d+\.\.=\d+", "chunk at stream offset <n> (<n> bytes): <n> byte(s) differ in stream "
         "offsets <n>..=<n>"),
        (r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?", "<timestamp>"),
        # The per-CPU table (mpstat's columns) and its %steal line: the machine's figures.
        (r"^(\s*\|?\s*)(all|\d+)((\s+\d+\.\d+){7})", r"\1<cpu> <cpu figures>"),
        (r"%steal: .*", "%steal: <figures>"),
        (r"<cpu figures>\s+(net,app|net|app)\b", "<cpu figures>  <role>"),
        # Which CPUs ran NET_RX follows the scheduler.
        (r"net CPUs \(NET_RX softirqs, /proc/softirqs\): [\d,]+|app CPUs: [\d,]+|both: [\d,]+",
         "<cpus>"),
    ]
    if ctx.get("timed"):
        rules += [
            (r"\b\d+ bytes\b", "<n> bytes"),
            (r"\(\d+ in all\)", "(<n> in all)"),
            (r"\b\d+ bytes measured\b", "<n> bytes measured"),
            (r"crc32 0x[0-9a-f]+", "crc32 <crc>"),
            (r"\bin \d+ writes\b", "in <n> writes"),
            (r"\b\d+ bytes validated\b", "<n> bytes validated"),
            (r"\b\d+ mismatched byte\(s\)", "<n> mismatched byte(s)"),
            (r", \d+ mismatched\b", ", <n> mismatched"),
            (r"\[\d+(, \d+)*\] bytes", "[<n>] bytes"),
        ]
    return [(re.compile(p), r) for p, r in rules]


def ephemeral_port(m):
    return m.group(1) + ("<eport>" if 32768 <= int(m.group(2)) <= 60999 else m.group(2))


def norm_line(line, rules):
    new = line
    for rx, repl in rules:
        new = rx.sub(repl, new)
    if line.startswith("cpu: "):
        # The receivers' CPU line: figures, or no figures when the interval had no tick.
        new = "cpu: <cpu figures>"
    elif re.match(r"(ncdevmem-rs: )?(tx )?progress\b", new):
        new = re.sub(r"\d+(\.\d+)?", "<n>", new)
    if new != line or len(re.findall(r"\S {2,}(?=\S)", new)) >= 3:
        # Column widths follow the figures (a normalized line, a table's rows and header):
        # collapse inner runs of spaces.
        lead = len(new) - len(new.lstrip(" "))
        new = new[:lead] + re.sub(r" {2,}", "  ", new[lead:])
    return new


def norm_text(text, rules):
    if not isinstance(text, str):
        return text
    out, prev = [], None
    for line in text.split("\n"):
        n = norm_line(line, rules)
        # Progress lines: how many depends on the machine; keep one of each shape in a row.
        if n == prev and ("progress" in n or "validation: chunk" in n):
            continue
        # Printed only when the machine had them: steal time, other tasks on the app CPUs.
        if "%steal: <figures>" in n or "other tasks took <pct>% of the app CPUs" in n:
            continue
        out.append(n)
        prev = n
    return "\n".join(out)


def norm_json(v, rules, timed, key=None):
    if key is not None and (key in VOLATILE_KEYS or (timed and key in TIMED_KEYS)):
        return "<v>"
    if key is not None and VOLATILE_KEY_RE.search(key) and not isinstance(v, (dict, list)):
        # A figure named by its unit; null (not measured in this mode) stays.
        return v if v is None else "<v>"
    if isinstance(v, dict):
        return {k: norm_json(x, rules, timed, k) for k, x in v.items()}
    if isinstance(v, list):
        return [norm_json(x, rules, timed, key) for x in v]
    if isinstance(v, str):
        return norm_text(v, rules)
    return v


def norm_csv(text, timed):
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    head = rows[0]
    out = [head]
    for row in rows[1:]:
        out.append([("<v>" if c and i < len(head) and CSV_VOLATILE.search(head[i]) else c)
                    for i, c in enumerate(row)])
    return "\n".join(",".join(r) for r in out)


def normalize(entry, header):
    if "racy" in entry.get("tags", {}):
        return normalize_racy(entry)
    ctx = dict(entry.get("ctx", {}))
    ctx["bindir"] = header.get("bindir")
    ctx["kernel_release"] = header.get("kernel_release")
    ctx["timed"] = "timed" in entry.get("tags", {})
    rules = text_rules(ctx)
    procs = []
    for p in entry["procs"]:
        n = {"argv": p["argv"], "exit": p["exit"]}
        for k in ("stdout", "stderr"):
            n[k] = norm_text(p[k], rules) if isinstance(p[k], str) else p[k]
            if isinstance(p[k], str) and (re.search(r"[\x00-\x08\x0b-\x1f\x7f]", p[k]) or
                                          any(len(line) > 2000 for line in p[k].split("\n"))):
                # A payload (a receiver without -v): its length and digest.
                raw = p[k].encode("utf-8", errors="surrogateescape")
                n[k] = {"payload bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
        js = p.get("json")
        if js == "stdout":
            js = p["stdout"] if isinstance(p["stdout"], str) else None
            try:
                js = json.loads(js)
                # --json - prints the object as its stdout: keep it only once, as JSON.
                n["stdout"] = "<the --json object>"
            except (TypeError, ValueError):
                js = None
        elif js is not None:
            try:
                js = json.loads(js)
            except ValueError:
                js = {"<not JSON>": norm_text(js, rules)}
        n["json"] = norm_json(js, rules, ctx["timed"]) if js is not None else None
        procs.append(n)
    files = {}
    for name, content in sorted(entry.get("files", {}).items()):
        if not isinstance(content, str):
            files[name] = {"bytes": "<n>", "sha256": "<v>"}
        elif name.endswith(".csv"):
            files[name] = norm_csv(content, ctx["timed"])
        elif name.endswith(".json"):
            try:
                files[name] = norm_json(json.loads(content), rules, ctx["timed"])
            except ValueError:
                files[name] = {"<not JSON>": norm_text(content, rules)}
        elif name.endswith(".svg"):
            files[name] = "<svg>" if content.lstrip().startswith("<svg") else "<not svg>"
        else:
            files[name] = norm_text(content, rules)
    return {"id": entry["id"], "procs": procs, "files": files}


def normalize_racy(entry):
    """A `racy` entry: only the first process's exit code and its --json verdict."""
    first = entry["procs"][0]
    verdict = None
    if first.get("json") not in (None, "stdout"):
        try:
            doc = json.loads(first["json"])
            verdict = {k: doc.get(k) for k in ("ok", "verdict")}
        except ValueError:
            verdict = "<not JSON>"
    procs = [{"argv": p["argv"], "exit": "<racy>", "stdout": "<racy>", "stderr": "<racy>",
              "json": None} for p in entry["procs"]]
    procs[0]["exit"] = first["exit"]
    procs[0]["json"] = verdict
    return {"id": entry["id"], "procs": procs, "files": {}}


def load(path):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or lines[0].get("type") != "header":
        sys.exit(f"argv-corpus: {path}: not a recording (no header line)")
    return lines[0], {e["id"]: e for e in lines[1:]}


def pretty(n):
    return json.dumps(n, indent=1, ensure_ascii=False).splitlines()


def expand(n):
    """The normalized entry as lines, with multi-line strings split so a diff shows lines."""
    out = []
    for i, p in enumerate(n["procs"]):
        out.append(f"proc {i}: {shlex.join(p['argv'])}")
        out.append(f"  exit: {p['exit']}")
        for k in ("stdout", "stderr"):
            v = p[k]
            if isinstance(v, str):
                out.append(f"  {k}:")
                out += [f"    | {line}" for line in v.split("\n")]
            else:
                out.append(f"  {k}: {json.dumps(v)}")
        if p["json"] is None:
            out.append("  json: none")
        else:
            out.append("  json:")
            out += [f"    {line}" for line in pretty(p["json"])]
    for name, content in n["files"].items():
        out.append(f"file {name}:")
        if isinstance(content, str):
            out += [f"    | {line}" for line in content.split("\n")]
        else:
            out += [f"    {line}" for line in pretty(content)]
    return out


def cmd_diff(a):
    ha, ea = load(a.a)
    hb, eb = load(a.b)
    corpus_tags = {}
    if os.path.exists(a.corpus):
        corpus_tags = {e.id: e.tags for e in parse_corpus(a.corpus)}
    ids = list(ea) + [i for i in eb if i not in ea]
    if a.only:
        ids = [i for i in ids if re.search(a.only, i)]
    differ = 0
    for eid in ids:
        if eid not in ea or eid not in eb:
            differ += 1
            print(f"=== {eid}: only in {a.a if eid in ea else a.b}")
            continue
        # A tag either side or the corpus has (say `racy`, added to the corpus after the
        # first recording) normalizes both.
        tags = {**ea[eid].get("tags", {}), **eb[eid].get("tags", {}), **corpus_tags.get(eid, {})}
        la = expand(normalize({**ea[eid], "tags": tags}, ha))
        lb = expand(normalize({**eb[eid], "tags": tags}, hb))
        if la != lb:
            differ += 1
            print(f"=== {eid}")
            for line in difflib.unified_diff(la, lb, a.a, a.b, n=2, lineterm=""):
                print(line)
    print(f"argv-corpus: {differ} of {len(ids)} entries differ ({a.a}: {ha.get('version')}; "
          f"{a.b}: {hb.get('version')})")
    return 1 if differ else 0


def cmd_show(a):
    h, es = load(a.file)
    for eid, e in es.items():
        if a.only and not re.search(a.only, eid):
            continue
        print(f"=== {eid} ({e.get('seconds')} s)")
        for line in expand(normalize(e, h)):
            print(line)
    return 0


def cmd_list(a):
    entries = parse_corpus(a.corpus)
    counts = {}
    for e in entries:
        counts[e.category] = counts.get(e.category, 0) + 1
    for cat, n in counts.items():
        print(f"{cat:12} {n}")
    print(f"{'total':12} {len(entries)}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run the corpus against --bin, write FILE.jsonl")
    r.add_argument("--bin", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--corpus", default=DEFAULT_CORPUS)
    r.add_argument("--only", help="only the entries whose id matches this regex")
    r.add_argument("--jobs", type=int, default=2, help="entries run at once (default 2)")
    r.add_argument("-v", "--verbose", action="store_true", help="a line per entry on stderr")
    r.add_argument("--runner", help="a command the binary runs under, its path (the link of "
                   "the entry's PROG name) and arguments appended: an emulator such as "
                   "qemu-aarch64-static for another architecture's binary (make dist-test)")
    d = sub.add_parser("diff", help="compare two recordings, normalized; exit 1 if any differ")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--only")
    d.add_argument("--corpus", default=DEFAULT_CORPUS,
                   help="its tags (timed, racy) also apply, when it exists")
    s = sub.add_parser("show", help="print a recording's entries, normalized")
    s.add_argument("file")
    s.add_argument("--only")
    li = sub.add_parser("list", help="the corpus's entries per category")
    li.add_argument("--corpus", default=DEFAULT_CORPUS)
    a = ap.parse_args()
    if a.cmd == "record":
        return cmd_record(a) or 0
    return {"diff": cmd_diff, "show": cmd_show, "list": cmd_list}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
