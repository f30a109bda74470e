"""Processes that always end, and TCP ports, for the devmem.py harness.

A started command is a Proc: its output is collected by threads, and leaving
its ``with`` block (normally, on an exception, or after a timeout) ends its
whole process group -- a local group by ``killpg``, a remote one through the
group id the remote shell reports first (``setsid -w``), so netns and ssh
remotes behave alike.  Also: waiting for a TCP listener (``/proc/net/tcp*``,
here or on the remote) and picking a free port.

Failures and skips are raised through use_ksft()'s exception types
(ksft_env's by default; the kernel lib's inside a kernel tree).  Standard
library only.
"""

import contextlib
import os
import random
import shlex
import signal
import socket
import subprocess
import threading
import time

import ksft_env

_EXC = {"skip": ksft_env.KsftSkipEx, "fail": ksft_env.KsftFailEx}


def use_ksft(skip_ex, fail_ex):
    """Makes the flows raise ``skip_ex(reason)`` to skip and ``fail_ex(msg)`` to fail."""
    _EXC["skip"] = skip_ex
    _EXC["fail"] = fail_ex


def skip_exception():
    """The exception type skip() raises."""
    return _EXC["skip"]


def fail_exception():
    """The exception type fail() raises."""
    return _EXC["fail"]


def skip(reason):
    raise _EXC["skip"](reason)


def fail(msg):
    raise _EXC["fail"](msg)


def log(msg):
    """One KTAP diagnostic line per line of ``msg``."""
    ksft_env.ktap_comment(msg)


# --------------------------------------------------------------------------- processes

PGID_MARK = b"@@devmem-py-pgid"


def wrap_remote(comm):
    """Wraps a remote shell command so that it runs as its own process group
    (``setsid -w``) whose id it reports first on stderr (``PGID_MARK pgid``).
    The harness ends the whole group through that id, on netns and ssh
    remotes alike."""
    script = f'echo "{PGID_MARK.decode()} $$" >&2; exec sh -c "$1"'
    return f"exec setsid -w sh -c {shlex.quote(script)} devmem-py {shlex.quote(comm)}"


def proc_stat_groups(stat_text):
    """Parses concatenated ``/proc/PID/stat`` lines into ``{pgid: [pids of
    live (non-zombie) processes]}``."""
    groups = {}
    for line in stat_text.splitlines():
        close = line.rfind(")")
        if close < 0:
            continue
        pid = line.split(" ", 1)[0]
        rest = line[close + 2 :].split()
        if len(rest) < 3 or not pid.isdigit() or not rest[2].lstrip("-").isdigit():
            continue
        state, pgrp = rest[0], int(rest[2])
        if state in ("Z", "X"):
            continue
        groups.setdefault(pgrp, []).append(int(pid))
    return groups


def _local_stat_text():
    parts = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                    parts.append(f.read().strip())
            except OSError:
                pass
    return "\n".join(parts)


def group_alive(pgid, remote=None):
    """True when a live (non-zombie) process of group ``pgid`` exists, locally
    or on ``remote``."""
    if remote is None:
        text = _local_stat_text()
    else:
        _, text, _ = remote_run(remote, "cat /proc/[0-9]*/stat 2>/dev/null; true", timeout=30)
    return pgid in proc_stat_groups(text)


def wait_group_gone(pgid, remote=None, timeout=10.0):
    """Waits until group ``pgid`` has no live process; returns False on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if not group_alive(pgid, remote):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


class Proc:
    """A started command whose stdout and stderr are collected by threads.

    Leaving the ``with`` block (normally, on an exception or after a timeout)
    ends the command's whole process group: SIGTERM (ncdevmem-rs unwinds its
    NIC changes on it), then SIGKILL after ``grace`` seconds.  Build with
    local_proc() or remote_proc().
    """

    def __init__(self, popen, name, remote=None, input_bytes=None, grace=5.0):
        self.popen = popen
        self.name = name
        self.remote = remote
        self.grace = grace
        self.returncode = None
        self._stopped = False
        self._out = []
        self._err = []
        self._pgid = popen.pid if remote is None else None
        self._pgid_known = threading.Event()
        if remote is None:
            self._pgid_known.set()
        self._threads = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        if input_bytes is not None:
            self._threads.append(
                threading.Thread(target=self._write_in, args=(input_bytes,), daemon=True)
            )
        for t in self._threads:
            t.start()

    def _read_out(self):
        while True:
            chunk = self.popen.stdout.read1(65536)
            if not chunk:
                break
            self._out.append(chunk)

    def _read_err(self):
        for line in iter(self.popen.stderr.readline, b""):
            if self.remote is not None and self._pgid is None and line.startswith(PGID_MARK):
                try:
                    self._pgid = int(line.split()[1])
                except (IndexError, ValueError):
                    pass
                self._pgid_known.set()
                continue
            self._err.append(line)
        self._pgid_known.set()

    def _write_in(self, data):
        try:
            self.popen.stdin.write(data)
        except (BrokenPipeError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    @property
    def stdout(self):
        return b"".join(self._out)

    @property
    def stderr(self):
        return b"".join(self._err).decode(errors="replace")

    def pgid(self, timeout=5.0):
        """The process group id (remote: as the remote reported it), or None."""
        self._pgid_known.wait(timeout)
        return self._pgid

    def _signal_group(self, sig):
        if self.remote is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pgid, sig)
            return
        pgid = self.pgid(2.0)
        if pgid is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)
            return
        remote_run(self.remote, f"kill -{sig.name[3:]} -{pgid} 2>/dev/null; true", timeout=30)

    def _join(self):
        for t in self._threads:
            t.join(5.0)

    def wait(self, timeout):
        """Waits up to ``timeout`` seconds for the exit; returns the exit code.
        On timeout ends the process group and fails."""
        try:
            self.returncode = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            fail(f"{self.name}: still running after {timeout} s; stopped it. stderr: {tail(self.stderr)}")
        self._join()
        return self.returncode

    def stop(self):
        """Ends the process group (TERM, then KILL after the grace period) and
        any member left behind by an exited leader.  Fails when a member
        survives SIGKILL.  Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(self.grace)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(self.grace)
        survivors = False
        # Members that outlived the leader (a backgrounded child, say).
        if self._pgid is not None and group_alive(self._pgid, self.remote):
            self._signal_group(signal.SIGKILL)
            survivors = not wait_group_gone(self._pgid, self.remote, timeout=self.grace)
        self.returncode = self.popen.returncode
        self._join()
        # Closing a stream while its reader thread is blocked in read() would
        # block too; a reader still running means someone outside the group
        # holds the pipe, and the daemon thread is left to it.
        if not any(t.is_alive() for t in self._threads):
            for stream in (self.popen.stdout, self.popen.stderr):
                with contextlib.suppress(OSError):
                    stream.close()
        if survivors:
            fail(f"{self.name}: process group {self._pgid} survived SIGKILL")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def local_proc(argv, name=None, input_bytes=None):
    """Starts ``argv`` here (no shell) as a new process group; ``input_bytes``
    is written to its stdin (else stdin is /dev/null)."""
    log(f"local: {shlex.join(argv)}")
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return Proc(popen, name or os.path.basename(argv[0]), input_bytes=input_bytes)


def remote_proc(remote, comm, name=None):
    """Starts the shell command ``comm`` on ``remote`` as its own process group."""
    log(f"remote: {comm}")
    return Proc(remote.cmd(wrap_remote(comm)), name or comm.split()[0], remote=remote)


def remote_run(remote, comm, timeout=30):
    """Runs a short shell command on ``remote``; returns (rc, stdout, stderr) as text."""
    popen = remote.cmd(comm)
    try:
        out, err = popen.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.communicate()
        fail(f"remote command timed out after {timeout} s: {comm}")
    return popen.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def tail(text, lines=6):
    """The last ``lines`` non-empty lines of ``text``, joined with ' | '."""
    kept = [line for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else "(no output)"


# --------------------------------------------------------------------------- ports


def rand_port(rng=random):
    """A TCP port in 10000..59999 that is free here for IPv4 and IPv6."""
    for _ in range(100):
        port = rng.randrange(10000, 60000)
        try:
            for family in (socket.AF_INET, socket.AF_INET6):
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.bind(("", port))
        except OSError:
            continue
        return port
    fail("no free TCP port found in 100 tries")


def listening_ports(proc_net_tcp_text):
    """The local ports in LISTEN state (st 0A) in /proc/net/tcp or tcp6 text."""
    ports = set()
    for line in proc_net_tcp_text.splitlines():
        parts = line.split()
        if len(parts) > 3 and ":" in parts[1] and parts[3] == "0A":
            with contextlib.suppress(ValueError):
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def _tcp_tables(remote):
    if remote is None:
        text = []
        for path in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
                text.append(f.read())
        return "\n".join(text)
    _, out, _ = remote_run(remote, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true")
    return out


def wait_port_listen(port, remote=None, proc=None, timeout=15.0):
    """Waits until a TCP listener on ``port`` exists (here or on ``remote``).
    Returns False early when ``proc`` exits first; fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if port in listening_ports(_tcp_tables(remote)):
            return True
        if proc is not None and proc.popen.poll() is not None:
            return False
        if time.monotonic() > deadline:
            where = "remote" if remote else "local"
            fail(f"no {where} listener on port {port} after {timeout} s")
        time.sleep(0.05)


