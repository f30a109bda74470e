"""Helpers for devmem.py: ncdevmem-rs and peer command lines, the support
probe, hugepages, NIC snapshots, and the test flows (``run_*``) that
devmem.py's cases wrap.  Processes and ports are ksft_proc's.

The flows mirror the kernel's devmem_lib.py (drivers/net/hw): the same
ncdevmem command lines, the same peer commands when the peer uses socat, the
same pass conditions.  Standard library only.

Exceptions: a flow raises the skip exception with the reason when the host
lacks a capability, and the fail exception when a check fails.  Both default
to ksft_env's; inside a kernel tree devmem.py swaps in the kernel lib's with
use_ksft().
"""

import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from ksft_proc import (
    _local_stat_text,
    fail,
    fail_exception,
    group_alive,
    local_proc,
    log,
    proc_stat_groups,
    rand_port,
    remote_proc,
    remote_run,
    skip,
    skip_exception,
    tail,
    wait_group_gone,
    wait_port_listen,
)

# Exit codes of ncdevmem-rs.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 0, 1, 2, 4

# The kernel's HDS sweep and large-niov payload sizes, in bytes.
HDS_SIZES = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
LARGE_NIOV_SIZES = (1024, 4096, 8192, 16384, 32768, 65536)
LARGE_NIOV_RX_PAGE_SIZE = 16384  # bytes (rx-page-size / niov size)
HUGEPAGES_WANTED = 64  # 2 MiB pages the large-niov test makes sure exist

# --------------------------------------------------------------------------- ncdevmem-rs


def find_binary(script_dir, environ=None):
    """The ncdevmem-rs binary: $NCDEVMEM, else ``ncdevmem-rs`` beside this
    script, else the crate's ``release/ncdevmem-rs`` under $CARGO_TARGET_DIR
    or ``target/``, else $PATH. Returns None when there is none."""
    environ = os.environ if environ is None else environ
    if environ.get("NCDEVMEM"):
        path = environ["NCDEVMEM"]
        return os.path.abspath(path) if os.access(path, os.X_OK) else None
    target = environ.get("CARGO_TARGET_DIR") or os.path.join(script_dir, "..", "target")
    for path in (
        os.path.join(script_dir, "ncdevmem-rs"),
        os.path.join(target, "release", "ncdevmem-rs"),
    ):
        if os.access(path, os.X_OK):
            return os.path.abspath(path)
    return shutil.which("ncdevmem-rs")


def skip_reason(stderr):
    """The reason from ncdevmem-rs's ``skip:`` line (the last one), else the
    last stderr line."""
    for line in reversed(stderr.splitlines()):
        if "skip:" in line:
            return line.split("skip:", 1)[1].strip()
    return tail(stderr, 1)


def devmem_rx_argv(
    binary,
    ifname,
    addr,
    port,
    client=None,
    validate=None,
    fail_on_linear=False,
    rx_page_size=None,
    autorelease=None,
    zcrx=False,
    rx_buf_len=None,
    verify_restore=True,
    timeout=None,
    json_path=None,
    seed=None,
):
    """The devmem RX server line: the kernel's ``-l -f IF -s ADDR -p PORT
    [-c REMOTE] [-v N] [-L] [-b BYTES]`` plus ours (-A, --zcrx, --rx-buf-len,
    --verify-restore, --timeout SECS, --json FILE, --seed SEED instead of -v)."""
    argv = [binary, "-l", "-f", ifname, "-s", addr, "-p", str(port)]
    if client:
        argv += ["-c", client]
    if seed is not None:
        argv += ["--seed", str(seed)]
    elif validate:
        argv += ["-v", str(validate)]
    if fail_on_linear:
        argv.append("-L")
    if rx_page_size:
        argv += ["-b", str(rx_page_size)]
    if autorelease is not None:
        argv += ["-A", "1" if autorelease else "0"]
    if zcrx:
        argv.append("--zcrx")
        if rx_buf_len:
            argv += ["--rx-buf-len", str(rx_buf_len)]
    if verify_restore:
        argv.append("--verify-restore")
    if timeout:
        argv += ["--timeout", f"{timeout:g}"]
    if json_path:
        argv += ["--json", json_path]
    return argv


def devmem_tx_argv(binary, ifname, server, port, chunk=None):
    """The devmem TX client line: ``-f IF -s REMOTE -p PORT [-z N]`` (sends stdin)."""
    argv = [binary, "-f", ifname, "-s", server, "-p", str(port)]
    if chunk:
        argv += ["-z", str(chunk)]
    return argv


def probe_argv(binary, ifname, rx_page_size=None, verify_restore=True):
    """The probe line: ``-f IF [-b BYTES] [--verify-restore]`` (exit 0: devmem works on IF)."""
    argv = [binary, "-f", ifname]
    if rx_page_size:
        argv += ["-b", str(rx_page_size)]
    if verify_restore:
        argv.append("--verify-restore")
    return argv


def plain_rx_argv(binary, addr, port, validate=None, timeout=None, json_path=None, seed=None):
    """The plain-TCP receiver line: ``-l --plain -s ADDR -p PORT [-v N | --seed SEED]``."""
    argv = [binary, "-l", "--plain", "-s", addr, "-p", str(port)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    elif validate:
        argv += ["-v", str(validate)]
    if timeout:
        argv += ["--timeout", f"{timeout:g}"]
    if json_path:
        argv += ["--json", json_path]
    return argv


def pattern_sender_argv(
    binary, addr, port, nbytes, period=7, bind=None, write_size=None, corrupt_offset=None, timeout=None,
    seed=None,
):
    """The built-in pattern sender line: ``--send-pattern BYTES -s ADDR -p PORT -v N``
    (``--seed SEED`` instead of ``-v N`` when ``seed`` is given)."""
    stream = ["--seed", str(seed)] if seed is not None else ["-v", str(period)]
    argv = [binary, "--send-pattern", str(nbytes), "-s", addr, "-p", str(port), *stream]
    if bind:
        argv += ["-c", bind]
    if write_size:
        argv += ["--write-size", str(write_size)]
    if corrupt_offset is not None:
        argv += ["--corrupt-offset", str(corrupt_offset)]
    if timeout:
        argv += ["--timeout", f"{timeout:g}"]
    return argv


# --------------------------------------------------------------------------- patterns and socat


def pattern_unit(period):
    """One period of the ``-v N`` pattern: bytes 1 .. N-1, then 0x0A."""
    if not 2 <= period <= 256:
        raise ValueError(f"period {period}: expected 2..=256")
    return bytes(range(1, period)) + b"\n"


def pattern_bytes(period, nbytes):
    """The first ``nbytes`` bytes of the ``-v period`` stream."""
    unit = pattern_unit(period)
    reps = nbytes // len(unit) + 1
    return (unit * reps)[:nbytes]


def pattern_shell(period):
    """A shell pipeline printing the ``-v period`` pattern forever (``yes``
    adds the 0x0A), as the kernel's ``yes $(echo -e \\x01...\\x06)`` does."""
    if not 2 <= period <= 10:
        # bytes 1..N-1 must not contain 0x0A, or $(...) and yes would reorder it
        raise ValueError(f"period {period}: the shell pattern supports 2..=10")
    octal = "".join(f"\\{b:03o}" for b in range(1, period))
    return f"yes \"$(printf '{octal}')\""


def bracket(addr, ipver):
    """``[addr]`` for IPv6 (socat's syntax), the bare address for IPv4."""
    return f"[{addr}]" if str(ipver) == "6" else addr


def socat_connect(addr, port, ipver, bind=None, nodelay=False):
    """socat's connect address: ``TCP6:[ADDR]:PORT[,bind=[LOCAL]:PORT][,nodelay]``."""
    spec = f"TCP{ipver}:{bracket(addr, ipver)}:{port}"
    if bind:
        spec += f",bind={bracket(bind, ipver)}:{port}"
    if nodelay:
        spec += ",nodelay"
    return spec


def sender_command(peer, addr, port, ipver, nbytes, period=7, bind=None, write_size=None, corrupt_offset=None,
                   seed=None):
    """The remote shell command that sends ``nbytes`` of the ``-v period``
    pattern to ADDR:PORT.  ``peer`` is ("ncdevmem-rs", path) or ("socat", None).
    ``write_size``: one write per that many bytes, TCP_NODELAY.
    ``corrupt_offset``: the byte at that stream offset is flipped.
    ``seed``: the keyed stream instead (ncdevmem-rs only; see ``own_stream``)."""
    tool, path = peer
    if tool == "ncdevmem-rs":
        return shlex.join(
            pattern_sender_argv(path, addr, port, nbytes, period, bind, write_size, corrupt_offset, timeout=30,
                                seed=seed)
        )
    if seed is not None:
        raise ValueError("only ncdevmem-rs sends the keyed stream")
    pat = pattern_shell(period)
    if corrupt_offset is None:
        source = f"{pat} | head -c {nbytes}"
    else:
        bad = pattern_bytes(period, corrupt_offset + 1)[-1] ^ 0xFF
        source = (
            f"{{ {pat} | head -c {corrupt_offset}; printf '\\{bad:03o}'; "
            f"{pat} | head -c {nbytes} | tail -c +{corrupt_offset + 2}; }}"
        )
    opts = f"-b {write_size} " if write_size else ""
    return f"{source} | socat {opts}-u - {socat_connect(addr, port, ipver, bind, nodelay=bool(write_size))}"


def zeros_sender_command(peer, addr, port, ipver, size, bind=None):
    """The kernel HDS sender: one ``size``-byte write (socat: ``dd`` zeros with
    ``-b SIZE`` and ``nodelay``; ncdevmem-rs: the pattern with --write-size)."""
    tool, path = peer
    if tool == "ncdevmem-rs":
        return sender_command(peer, addr, port, ipver, size, bind=bind, write_size=size)
    return (
        f"dd if=/dev/zero bs={size} count=1 2>/dev/null | "
        f"socat -b {size} -u - {socat_connect(addr, port, ipver, bind, nodelay=True)}"
    )


def listener_command(peer, addr, port, ipver, validate=None):
    """The remote shell command that accepts one connection on PORT and
    prints what it receives (ncdevmem-rs with ``validate``: checks the
    pattern instead, printing nothing)."""
    tool, path = peer
    if tool == "ncdevmem-rs":
        return shlex.join(plain_rx_argv(path, addr, port, validate=validate, timeout=30))
    return f"socat -U - TCP{ipver}-LISTEN:{port}"


# --------------------------------------------------------------------------- context


class Ctx:
    """What the flows need: the device, the addresses, the remote, the binary.

    ``peer()`` picks the remote tool on first use: the ncdevmem-rs binary
    deployed to the remote (netns: same path; ssh: copied) when it runs
    there, else socat, else the case skips.  ``DEVMEM_PY_REMOTE_TOOL`` =
    ``socat`` or ``ncdevmem-rs`` forces one.
    """

    def __init__(self, ifname, addr_v, remote_addr_v, ipver, remote, binary, timeout=60, environ=None):
        environ = os.environ if environ is None else environ
        self.ifname = ifname
        self.addr_v = {k: v for k, v in addr_v.items() if v}
        self.remote_addr_v = {k: v for k, v in remote_addr_v.items() if v}
        self.ipver = str(ipver)
        self.addr = self.addr_v[self.ipver]
        self.remote_addr = self.remote_addr_v[self.ipver]
        self.remote = remote
        self.bin = binary
        self.timeout = timeout
        self.probes = {}
        self.tool_pref = environ.get("DEVMEM_PY_REMOTE_TOOL", "auto")
        self._peer = None
        self._peer_why = None

    def families(self):
        """IP versions configured on both ends, preferred first."""
        return [v for v in ("6", "4") if v in self.addr_v and v in self.remote_addr_v]

    def peer(self):
        """("ncdevmem-rs", remote path) or ("socat", None); skips when neither runs."""
        if self._peer is None and self._peer_why is None:
            self._peer, self._peer_why = self._pick_peer()
        if self._peer is None:
            skip(self._peer_why)
        return self._peer

    def _pick_peer(self):
        why = []
        if self.tool_pref in ("auto", "ncdevmem-rs"):
            try:
                path = self.remote.deploy(self.bin)
                rc, _, err = remote_run(self.remote, f"{shlex.quote(path)} --help >/dev/null")
                if rc == 0:
                    log(f"remote peer: ncdevmem-rs at {path}")
                    return ("ncdevmem-rs", path), None
                why.append(f"ncdevmem-rs does not run on the remote ({tail(err, 1)})")
            except Exception as exc:  # deploy errors come in the kernel lib's types too
                why.append(f"cannot deploy ncdevmem-rs to the remote ({exc})")
        if self.tool_pref in ("auto", "socat"):
            rc, _, _ = remote_run(self.remote, "command -v socat >/dev/null")
            if rc == 0:
                log("remote peer: socat")
                return ("socat", None), None
            why.append("socat is not installed on the remote")
        if self.tool_pref not in ("auto", "socat", "ncdevmem-rs"):
            why.append(f"DEVMEM_PY_REMOTE_TOOL={self.tool_pref!r}: expected auto, socat or ncdevmem-rs")
        return None, "no remote peer tool: " + "; ".join(why)


def check_exit(proc, rc, what):
    """0: returns; 4: skips with the binary's reason; anything else fails."""
    if rc == EXIT_OK:
        return
    if rc == EXIT_SKIP:
        skip(f"{what}: {skip_reason(proc.stderr)}")
    fail(f"{what} exited {rc}: {tail(proc.stderr)}")


# rx-page-sizes the probe runs with, all at once before anything changes the NIC (0: the
# default). The kernel's devmem_lib.require_devmem (7.3) probes every size up front because in
# the netkit tests a leased queue can fall in the probe's queue range and fail a later probe.
PROBE_RX_PAGE_SIZES = (0, LARGE_NIOV_RX_PAGE_SIZE)


def probe_all(binary, ifname, timeout):
    """Runs the probe (``-f IF [-b BYTES] --verify-restore``) for each of PROBE_RX_PAGE_SIZES, the
    larger ones with ``vm.nr_hugepages`` raised (HugePages; restored after) only when the
    default size passed: otherwise no case runs (probe_verdict looks at the default first), and
    the host-wide setting is left alone.
    Returns ``{size: (exit code, stderr)}``; a size whose hugepages cannot be
    raised gets ``(EXIT_SKIP, "skip: <why>")``."""
    out = {}
    for size in PROBE_RX_PAGE_SIZES:
        argv = probe_argv(binary, ifname, size or None)
        try:
            with contextlib.ExitStack() as stack:
                if size and out.get(0, (EXIT_OK,))[0] == EXIT_OK:
                    stack.enter_context(HugePages())
                with local_proc(argv, name="probe") as p:
                    rc = p.wait(timeout)
                out[size] = (rc, p.stderr)
        except skip_exception() as exc:
            out[size] = (EXIT_SKIP, f"skip: {exc}")
    return out


def probe_verdict(probes, ifname, rx_page_size=None):
    """Skips or fails by the probe results of ``probe_all``: the default size
    first, then ``rx_page_size``.  Exit 0: returns; 4: skips with the probe's
    reason; 1 (the kernel broke the devmem contract) or anything else: fails."""
    for size in dict.fromkeys((0, rx_page_size or 0)):
        rc, stderr = probes[size]
        what = "probe " + shlex.join(probe_argv("ncdevmem-rs", ifname, size or None))
        if rc == EXIT_SKIP:
            skip(f"{what}: {skip_reason(stderr)}")
        if rc != EXIT_OK:
            fail(f"{what} exited {rc}: {tail(stderr)}")


def require_devmem(ctx, rx_page_size=None):
    """The probe verdict for ``rx_page_size`` (probe_verdict); the first call
    probes every size (probe_all), later calls reuse the results."""
    if not ctx.probes:
        ctx.probes = probe_all(ctx.bin, ctx.ifname, ctx.timeout)
    probe_verdict(ctx.probes, ctx.ifname, rx_page_size)


def _interrupted(signum, _frame):
    """A SIGTERM or SIGHUP while HugePages holds the setting raised: unwind as Ctrl-C does."""
    raise KeyboardInterrupt(f"signal {signum}")


class HugePages:
    """Makes sure ``vm.nr_hugepages`` is at least ``want`` while in the
    ``with`` block and restores the value found on entry, on every way out:
    an exception, Ctrl-C, and SIGTERM or SIGHUP (the kselftest runner's
    timeout), which unwind like Ctrl-C while the setting is raised unless
    someone else handles them (the kernel's ksft_run does).  Skips when it
    cannot be raised."""

    STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self, want=HUGEPAGES_WANTED, path="/proc/sys/vm/nr_hugepages"):
        self.want = want
        self.path = path
        self.orig = None
        self.handlers = {}

    def __enter__(self):
        with open(self.path, encoding="ascii") as f:
            orig = int(f.read().strip())
        if orig < self.want:
            # Handlers first: a signal between the write and the with block must not leave
            # the value raised.
            self._catch_stop_signals()
            try:
                with open(self.path, "w", encoding="ascii") as f:
                    f.write(f"{self.want}\n")
            except OSError as exc:
                self._release_stop_signals()
                skip(f"cannot raise vm.nr_hugepages from {orig} to {self.want}: {exc}")
            except BaseException:
                self.orig = orig
                self.__exit__()
                raise
            self.orig = orig
            log(f"vm.nr_hugepages: {orig} -> {self.want}")
        return self

    def __exit__(self, *exc):
        try:
            if self.orig is not None:
                with open(self.path, "w", encoding="ascii") as f:
                    f.write(f"{self.orig}\n")
                log(f"vm.nr_hugepages restored to {self.orig}")
                self.orig = None
        finally:
            self._release_stop_signals()
        return False

    def _catch_stop_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers
        for sig in self.STOP_SIGNALS:
            if signal.getsignal(sig) == signal.SIG_DFL:
                self.handlers[sig] = signal.signal(sig, _interrupted)

    def _release_stop_signals(self):
        while self.handlers:
            sig, old = self.handlers.popitem()
            signal.signal(sig, old)


def nic_snapshot(ifname):
    """What the devmem cases must leave as they found it: ``ip -d link``, the
    queue list, and (when ethtool is installed) rings, channels, RSS table,
    ntuple rules and features.  A dict of name -> text."""
    snap = {}
    cmds = [["ip", "-d", "link", "show", "dev", ifname]]
    if shutil.which("ethtool"):
        cmds += [["ethtool", opt, ifname] for opt in ("-g", "-l", "-x", "-n", "-k")]
    for argv in cmds:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        snap[shlex.join(argv)] = f"exit {res.returncode}\n" + res.stdout.decode(errors="replace")
    qdir = f"/sys/class/net/{ifname}/queues"
    snap["queues"] = " ".join(sorted(os.listdir(qdir))) if os.path.isdir(qdir) else "(none)"
    return snap


def snapshot_diff(before, after):
    """A one-line description of how two snapshots differ ('' when equal)."""
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key, ""), after.get(key, "")
        if a == b:
            continue
        la, lb = a.splitlines(), b.splitlines()
        for i in range(max(len(la), len(lb))):
            x = la[i] if i < len(la) else "(missing)"
            y = lb[i] if i < len(lb) else "(missing)"
            if x != y:
                out.append(f"{key}: {x.strip()!r} -> {y.strip()!r}")
                break
    return "; ".join(out)


class NicUnchanged:
    """Compares the NIC snapshot on entry and exit; a difference fails the
    case, also when the case skipped or failed for another reason."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.before = None

    def __enter__(self):
        self.before = nic_snapshot(self.ctx.ifname)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is KeyboardInterrupt:
            return False
        diff = snapshot_diff(self.before, nic_snapshot(self.ctx.ifname))
        if diff:
            msg = f"NIC state of {self.ctx.ifname} changed: {diff}"
            if exc is not None:
                msg += f" (case ended with: {exc})"
            fail(msg)
        return False


@contextlib.contextmanager
def json_file():
    """A temporary path for ``--json``; yields the path, removes it after."""
    fd, path = tempfile.mkstemp(prefix="devmem-py-", suffix=".json")
    os.close(fd)
    os.unlink(path)
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def read_summary(path):
    """The receiver's ``--json`` summary as a dict (fails when missing or bad)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        fail(f"receiver summary {path}: {exc}")


def check_summary(summary, nbytes, seed=None):
    """The summary counts ``nbytes`` received, all validated, none mismatched
    (against the keyed stream of ``seed`` when given)."""
    got = {k: summary.get(k) for k in ("bytes", "validated_bytes", "mismatches")}
    want = {"bytes": nbytes, "validated_bytes": nbytes, "mismatches": 0}
    if seed is not None:
        got["stream"] = summary.get("stream")
        want["stream"] = f"seed {seed}"
    if got != want:
        fail(f"receiver summary {got}, expected {want}")


def own_stream(peer):
    """The stream of the project's own long transfers: the keyed stream (a random seed,
    logged for a replay) when the peer is ncdevmem-rs, which no misplaced byte passes;
    the -v 7 pattern with socat, which cannot produce it.  The flows that mirror the
    kernel's tests keep -v 7."""
    if peer[0] != "ncdevmem-rs":
        return None
    seed = random.getrandbits(64)
    log(f"keyed stream: --seed {seed}")
    return seed


# --------------------------------------------------------------------------- transfers


def rx_transfer(ctx, rx_argv, sender, port, what, expect_rc=EXIT_OK, check_sender=True, listen_ns=None):
    """Starts the local receiver ``rx_argv``, waits for its listener (in this
    network namespace, or in ``listen_ns``: a remote object of the namespace the
    receiver runs in), runs the remote ``sender`` command, and checks the exits:
    the receiver's must be ``expect_rc`` (4 skips), the sender's 0 (if
    ``check_sender``).  Returns the receiver's Proc (for stdout/stderr)."""
    with local_proc(rx_argv, name=what) as rx:
        if not wait_port_listen(port, remote=listen_ns, proc=rx, timeout=ctx.timeout):
            check_exit(rx, rx.wait(ctx.timeout), what)
            fail(f"{what} exited 0 before listening: {tail(rx.stderr)}")
        with remote_proc(ctx.remote, sender, name="sender") as tx:
            tx_rc = tx.wait(ctx.timeout)
        if check_sender and tx_rc != 0:
            # The receiver's verdict explains a sender error best (a reset after a
            # failed check, say); a receiver still waiting means the sender failed.
            try:
                rx.popen.wait(5)
            except subprocess.TimeoutExpired:
                fail(f"remote sender exited {tx_rc}: {tail(tx.stderr)}")
        rx_rc = rx.wait(ctx.timeout)
    if rx_rc == EXIT_SKIP or (rx_rc != expect_rc and expect_rc == EXIT_OK):
        check_exit(rx, rx_rc, what)
    if rx_rc != expect_rc:
        fail(f"{what} exited {rx_rc}, expected {expect_rc}: {tail(rx.stderr)}")
    if check_sender and tx_rc != 0:
        fail(f"remote sender exited {tx_rc}: {tail(tx.stderr)}")
    summary = [line for line in rx.stderr.splitlines() if "summary" in line]
    if summary:
        log(summary[-1])
    return rx


def tx_transfer(ctx, argv, stdin, port, ipver, validate=None, what="devmem TX"):
    """Starts a remote listener on PORT (validating ``validate`` with
    ncdevmem-rs, or printing), runs the local sender ``argv`` with ``stdin``,
    checks both exits.  Returns the listener's stdout (bytes)."""
    peer = ctx.peer()
    listener = listener_command(peer, ctx.remote_addr_v[ipver], port, ipver, validate=validate)
    with remote_proc(ctx.remote, listener, name="remote listener") as lp:
        if not wait_port_listen(port, remote=ctx.remote, proc=lp, timeout=ctx.timeout):
            fail(f"remote listener exited {lp.wait(5)} before listening: {tail(lp.stderr)}")
        with local_proc(argv, name=what, input_bytes=stdin) as tx:
            rc = tx.wait(ctx.timeout)
        check_exit(tx, rc, what)
        lrc = lp.wait(ctx.timeout)
    if lrc != 0:
        fail(f"remote listener exited {lrc}: {tail(lp.stderr)}")
    return lp.stdout


# --------------------------------------------------------------------------- the kernel's flows


def run_rx(ctx):
    """check_rx: 1 KiB of the -v 7 pattern from the remote, 5-tuple rule (-c)."""
    with NicUnchanged(ctx):
        require_devmem(ctx)
        peer = ctx.peer()
        port = rand_port()
        argv = devmem_rx_argv(ctx.bin, ctx.ifname, ctx.addr, port, client=ctx.remote_addr, validate=7,
                              timeout=ctx.timeout)
        snd = sender_command(peer, ctx.addr, port, ctx.ipver, 1024, bind=ctx.remote_addr)
        rx_transfer(ctx, argv, snd, port, "devmem RX")


def run_tx(ctx, chunk=None):
    """check_tx / check_tx_chunks: "hello\\nworld" through devmem TX (``-z chunk``);
    the peer's output, stripped, must equal it."""
    with NicUnchanged(ctx):
        require_devmem(ctx)
        port = rand_port()
        argv = devmem_tx_argv(ctx.bin, ctx.ifname, ctx.remote_addr, port, chunk)
        out = tx_transfer(ctx, argv, b"hello\nworld\n", port, ctx.ipver)
        got = out.decode(errors="replace").strip()
        if got != "hello\nworld":
            fail(f"peer received {got!r}, expected 'hello\\nworld'")


def run_rx_hds(ctx):
    """check_rx_hds: one segment per write at each of HDS_SIZES, with -L
    (any SCM_DEVMEM_LINEAR data fails: header split must hold)."""
    with NicUnchanged(ctx):
        require_devmem(ctx)
        peer = ctx.peer()
        for size in HDS_SIZES:
            port = rand_port()
            argv = devmem_rx_argv(ctx.bin, ctx.ifname, ctx.addr, port, fail_on_linear=True,
                                  timeout=ctx.timeout)
            snd = zeros_sender_command(peer, ctx.addr, port, ctx.ipver, size, bind=ctx.remote_addr)
            try:
                rx_transfer(ctx, argv, snd, port, f"devmem RX -L ({size} B)")
            except fail_exception() as exc:
                fail(f"HDS failed for payload size {size}: {exc}")


def run_rx_large_niov(ctx):
    """check_rx_large_niov: ``-b 16384`` with payloads of LARGE_NIOV_SIZES,
    with vm.nr_hugepages raised to 64 (restored after)."""
    with NicUnchanged(ctx):
        require_devmem(ctx, LARGE_NIOV_RX_PAGE_SIZE)
        peer = ctx.peer()
        with HugePages():
            for size in LARGE_NIOV_SIZES:
                port = rand_port()
                argv = devmem_rx_argv(ctx.bin, ctx.ifname, ctx.addr, port, client=ctx.remote_addr,
                                      validate=7, rx_page_size=LARGE_NIOV_RX_PAGE_SIZE, timeout=ctx.timeout)
                snd = sender_command(peer, ctx.addr, port, ctx.ipver, size, bind=ctx.remote_addr)
                rx_transfer(ctx, argv, snd, port, f"devmem RX -b {LARGE_NIOV_RX_PAGE_SIZE} ({size} B)")


# --------------------------------------------------------------------------- our devmem flows

MULTI_MB = 64 << 20  # bytes
TX_RX_BYTES = 1 << 20
TX_RX_PERIOD = 250  # 250-byte lines: the TX client sends one line per sendmsg


def _validated_rx(ctx, nbytes, what, **rx_kw):
    peer = ctx.peer()
    port = rand_port()
    seed = own_stream(peer)
    with json_file() as jpath:
        argv = devmem_rx_argv(ctx.bin, ctx.ifname, ctx.addr, port, client=ctx.remote_addr, validate=7,
                              timeout=ctx.timeout, json_path=jpath, seed=seed, **rx_kw)
        snd = sender_command(peer, ctx.addr, port, ctx.ipver, nbytes, bind=ctx.remote_addr, seed=seed)
        rx_transfer(ctx, argv, snd, port, what)
        check_summary(read_summary(jpath), nbytes, seed)


def run_rx_multi_mb(ctx):
    """64 MiB of the -v 7 pattern, validated in the dma-buf; the summary must
    count every byte validated."""
    with NicUnchanged(ctx):
        require_devmem(ctx)
        _validated_rx(ctx, MULTI_MB, "devmem RX 64 MiB")


def run_tx_rx(ctx):
    """Devmem TX of 1 MiB of the -v 250 pattern; the peer validates it
    (ncdevmem-rs -v 250, or socat's output compared here)."""
    with NicUnchanged(ctx):
        require_devmem(ctx)
        port = rand_port()
        data = pattern_bytes(TX_RX_PERIOD, TX_RX_BYTES)
        argv = devmem_tx_argv(ctx.bin, ctx.ifname, ctx.remote_addr, port)
        out = tx_transfer(ctx, argv, data, port, ctx.ipver, validate=TX_RX_PERIOD)
        if ctx.peer()[0] == "socat" and out != data:
            fail(f"peer received {len(out)} bytes differing from the {len(data)} sent")


def run_rx_autorelease(ctx, on):
    """1 MiB validated with SO_DEVMEM_AUTORELEASE set to ``on`` (-A 0|1)."""
    with NicUnchanged(ctx):
        require_devmem(ctx)
        _validated_rx(ctx, 1 << 20, f"devmem RX -A {int(on)}", autorelease=on)


def run_zcrx(ctx, rx_buf_len=None):
    """1 MiB validated through io_uring zcrx (``--zcrx [--rx-buf-len N]``).
    Not devmem TCP, so no udmabuf probe: the binary's own skip decides.  When
    it skips for lack of hugepages, vm.nr_hugepages is raised and it retries."""
    what = "zcrx RX" + (f" --rx-buf-len {rx_buf_len}" if rx_buf_len else "")
    with NicUnchanged(ctx):
        try:
            _validated_rx(ctx, 1 << 20, what, zcrx=True, rx_buf_len=rx_buf_len)
        except skip_exception() as exc:
            if not rx_buf_len or "hugepage" not in str(exc).lower():
                raise
            with HugePages():
                _validated_rx(ctx, 1 << 20, what, zcrx=True, rx_buf_len=rx_buf_len)


# --------------------------------------------------------------------------- plain-mode flows

PLAIN_BYTES = 16 << 20


def run_plain_rx(ctx):
    """Plain-TCP receiver + pattern sender, 16 MiB validated, over every IP
    version both ends have."""
    peer = ctx.peer()
    for v in ctx.families():
        port = rand_port()
        seed = own_stream(peer)
        with json_file() as jpath:
            argv = plain_rx_argv(ctx.bin, ctx.addr_v[v], port, validate=7, timeout=ctx.timeout, json_path=jpath,
                                 seed=seed)
            snd = sender_command(peer, ctx.addr_v[v], port, v, PLAIN_BYTES, seed=seed)
            rx_transfer(ctx, argv, snd, port, f"plain RX (IPv{v})")
            check_summary(read_summary(jpath), PLAIN_BYTES, seed)


CORRUPT_OFFSET = (1 << 20) + 3


def run_plain_rx_corrupted(ctx, expect_detection=True):
    """A sender that flips the byte at CORRUPT_OFFSET: the receiver must exit 1
    naming that offset.  ``expect_detection=False`` is the deliberately
    failing self-test (it expects a clean run)."""
    peer = ctx.peer()
    port = rand_port()
    argv = plain_rx_argv(ctx.bin, ctx.addr, port, validate=7, timeout=ctx.timeout)
    snd = sender_command(peer, ctx.addr, port, ctx.ipver, PLAIN_BYTES, corrupt_offset=CORRUPT_OFFSET)
    if not expect_detection:
        rx_transfer(ctx, argv, snd, port, "plain RX (corrupted sender)", check_sender=False)
        return
    rx = rx_transfer(ctx, argv, snd, port, "plain RX (corrupted sender)", expect_rc=EXIT_FAIL,
                     check_sender=False)
    if f"offset {CORRUPT_OFFSET}" not in rx.stderr:
        fail(f"receiver did not name offset {CORRUPT_OFFSET}: {tail(rx.stderr)}")


def run_plain_rx_segments(ctx):
    """The HDS sweep's traffic shape over plain TCP: one write of each of
    HDS_SIZES per connection, each validated and counted exactly."""
    peer = ctx.peer()
    for size in HDS_SIZES:
        port = rand_port()
        with json_file() as jpath:
            argv = plain_rx_argv(ctx.bin, ctx.addr, port, validate=7, timeout=ctx.timeout, json_path=jpath)
            snd = sender_command(peer, ctx.addr, port, ctx.ipver, size, write_size=size)
            rx_transfer(ctx, argv, snd, port, f"plain RX ({size} B write)")
            check_summary(read_summary(jpath), size)


def run_plain_tx(ctx):
    """The TX flow's shape over plain TCP: the local pattern sender sends
    1 MiB of -v 7 to a remote listener that validates it (ncdevmem-rs) or
    whose output is compared here (socat)."""
    nbytes = 1 << 20
    port = rand_port()
    argv = pattern_sender_argv(ctx.bin, ctx.remote_addr, port, nbytes, timeout=ctx.timeout)
    out = tx_transfer(ctx, argv, None, port, ctx.ipver, validate=7, what="pattern sender")
    if ctx.peer()[0] == "socat" and out != pattern_bytes(7, nbytes):
        fail(f"peer received {len(out)} bytes that differ from the {nbytes} sent")


# --------------------------------------------------------------------------- harness self-checks


class _Boom(Exception):
    pass


def run_harness_cleanup(ctx):
    """Background processes end: a remote group (with a backgrounded child)
    when an exception leaves its block, a remote group whose wait timed out,
    and a local group (with a backgrounded child) at the block's end."""
    pgid = None
    try:
        with remote_proc(ctx.remote, "sleep 300 & sleep 300", name="remote sleeper") as p:
            pgid = p.pgid()
            if pgid is None or not group_alive(pgid, ctx.remote):
                fail(f"remote sleeper group {pgid} not seen running")
            raise _Boom()
    except _Boom:
        pass
    if not wait_group_gone(pgid, ctx.remote):
        fail(f"remote group {pgid} still alive after an exception left its block")

    with remote_proc(ctx.remote, "sleep 300", name="remote sleeper") as p:
        pgid = p.pgid()
        try:
            p.wait(0.5)
        except fail_exception() as exc:
            if "still running" not in str(exc):
                raise
        else:
            fail("wait(0.5) on 'sleep 300' returned instead of timing out")
    if not wait_group_gone(pgid, ctx.remote):
        fail(f"remote group {pgid} still alive after its wait timed out")

    with local_proc(["sh", "-c", "sleep 300 & sleep 300"], name="local sleeper") as p:
        pgid = p.pgid()
        time.sleep(0.2)
        members = proc_stat_groups(_local_stat_text()).get(pgid, [])
        if len(members) < 2:
            fail(f"local sleeper group {pgid} has {len(members)} live members, expected 2")
    if not wait_group_gone(pgid):
        fail(f"local group {pgid} still alive after its block ended")
