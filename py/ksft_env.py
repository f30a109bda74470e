"""A small stand-alone test environment with the kernel selftests' conventions.

Used by ``devmem.py`` when it does not run inside a kernel tree (where
``tools/testing/selftests/drivers/net/hw/lib/py`` provides ``NetDrvEpEnv`` and
``ksft_run``).  It offers the same surface, written from the conventions, not
from the kernel's code:

* configuration: ``NETIF``, ``LOCAL_V4``/``LOCAL_V6``, ``REMOTE_V4``/``REMOTE_V6``,
  ``REMOTE_TYPE`` (``netns`` or ``ssh``) and ``REMOTE_ARGS`` (namespace name or
  ssh host), taken from a ``net.config`` file of ``KEY=VALUE`` lines and from
  the environment (the environment wins);
* a remote host object with ``cmd(command) -> subprocess.Popen`` (a shell
  command line run on the remote) and ``deploy(path) -> remote path``;
* KTAP output: ``TAP version 13``, ``1..N``, ``ok N name``,
  ``ok N name # SKIP reason``, ``not ok N name``, a ``# Totals:`` line, and the
  kselftest exit codes 0 (everything passed or skipped), 1 (a failure) and 4
  (everything skipped).

Standard library only.
"""

import os
import shlex
import subprocess
import sys
import traceback

KSFT_PASS = 0
KSFT_FAIL = 1
KSFT_SKIP = 4

CONFIG_KEYS = (
    "NETIF",
    "LOCAL_V4",
    "LOCAL_V6",
    "REMOTE_V4",
    "REMOTE_V6",
    "REMOTE_TYPE",
    "REMOTE_ARGS",
)


class KsftSkipEx(Exception):
    """Raised by a test case that cannot run here; the message is the reason."""


class KsftFailEx(Exception):
    """Raised by a test case whose check failed; the message says what differed."""


class ConfigMissing(Exception):
    """No usable configuration at all: every case is skipped (exit 4)."""


class ConfigError(Exception):
    """A configuration that is present but wrong: the run bails out (exit 1)."""


# --------------------------------------------------------------------------- config


def parse_config_text(text):
    """Parses ``net.config`` text: ``KEY=VALUE`` lines, ``#`` comments, blank lines.

    Values may be quoted the shell way (``NETIF="eth0"``).  Returns a dict of
    str to str.  Raises ConfigError naming the line for a line without ``=``.
    """
    out = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"net.config line {lineno}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if value:
            try:
                words = shlex.split(value, comments=True)
            except ValueError as exc:
                raise ConfigError(f"net.config line {lineno}: {exc}") from None
            value = " ".join(words)
        out[key] = value
    return out


def load_config(path, environ=None):
    """Returns the merged configuration: the file at ``path`` (if it exists),
    overridden by the variables of ``environ`` (default ``os.environ``) whose
    names are in CONFIG_KEYS.  Empty values count as unset."""
    environ = os.environ if environ is None else environ
    cfg = {}
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cfg.update(parse_config_text(f.read()))
    for key in CONFIG_KEYS:
        if environ.get(key):
            cfg[key] = environ[key]
    return {k: v for k, v in cfg.items() if v != ""}


# --------------------------------------------------------------------------- remotes


class NetnsRemote:
    """The remote end is a network namespace on this host.  Commands run with
    ``ip netns exec NAME sh -c COMMAND``; deploying a file returns its own
    absolute path (the namespace shares the file system)."""

    kind = "netns"

    def __init__(self, name):
        self.name = name

    def cmd(self, comm):
        return subprocess.Popen(
            ["ip", "netns", "exec", self.name, "sh", "-c", comm],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def deploy(self, what):
        return os.path.abspath(what)

    def close(self):
        pass

    def __repr__(self):
        return f"netns:{self.name}"


class SshRemote:
    """The remote end is an ssh host.  Commands run with ``ssh HOST COMMAND``
    (batch mode: no password prompts); deploying copies the file with scp
    into a temporary directory made on first use and removed by close()."""

    kind = "ssh"

    def __init__(self, host):
        self.host = host
        self._tmpdir = None

    def _ssh(self):
        return ["ssh", "-q", "-o", "BatchMode=yes", self.host]

    def cmd(self, comm):
        return subprocess.Popen(
            self._ssh() + [comm],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def _run(self, argv, timeout=60):
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        if res.returncode != 0:
            raise KsftFailEx(
                f"{shlex.join(argv)} exited {res.returncode}: "
                f"{res.stderr.decode(errors='replace').strip()}"
            )
        return res.stdout.decode(errors="replace")

    def deploy(self, what):
        if self._tmpdir is None:
            self._tmpdir = self._run(self._ssh() + ["mktemp -d"]).strip()
        dest = f"{self._tmpdir}/{os.path.basename(what)}"
        self._run(["scp", "-q", "-o", "BatchMode=yes", os.path.abspath(what), f"{self.host}:{dest}"])
        return dest

    def close(self):
        if self._tmpdir:
            try:
                self._run(self._ssh() + [f"rm -rf {shlex.quote(self._tmpdir)}"], timeout=30)
            except (KsftFailEx, subprocess.TimeoutExpired):
                pass
            self._tmpdir = None

    def __repr__(self):
        return f"ssh:{self.host}"


def make_remote(kind, args):
    """Returns the remote object for REMOTE_TYPE ``kind`` and REMOTE_ARGS ``args``."""
    if kind == "netns":
        return NetnsRemote(args)
    if kind == "ssh":
        return SshRemote(args)
    raise ConfigError(f"REMOTE_TYPE {kind!r}: expected 'netns' or 'ssh'")


# --------------------------------------------------------------------------- environment


class NetEnv:
    """The device under test (``ifname``, local addresses) and the remote peer.

    Attributes, named as the kernel's ``NetDrvEpEnv`` names them:
    ``ifname``, ``addr_v`` / ``remote_addr_v`` (dicts ``{"4": ..., "6": ...}``,
    a family missing when not configured), ``addr`` / ``remote_addr`` (IPv6
    when both ends have it, else IPv4), ``addr_ipver`` ("6" or "4") and
    ``remote``.  Use as a context manager: leaving it closes the remote
    (removes an ssh temporary directory).
    """

    def __init__(self, config_path=None, environ=None):
        cfg = load_config(config_path, environ)
        if "NETIF" not in cfg:
            where = config_path if config_path else "(no file)"
            raise ConfigMissing(f"NETIF is not set (environment or net.config {where})")
        self.ifname = cfg["NETIF"]
        if not os.path.exists(f"/sys/class/net/{self.ifname}"):
            raise ConfigError(f"NETIF {self.ifname!r}: no such interface in this network namespace")
        self.addr_v = {v: cfg[f"LOCAL_V{v}"] for v in ("4", "6") if cfg.get(f"LOCAL_V{v}")}
        self.remote_addr_v = {v: cfg[f"REMOTE_V{v}"] for v in ("4", "6") if cfg.get(f"REMOTE_V{v}")}
        common = [v for v in ("6", "4") if v in self.addr_v and v in self.remote_addr_v]
        if not common:
            raise ConfigMissing(
                "need LOCAL_V4 and REMOTE_V4, or LOCAL_V6 and REMOTE_V6 (environment or net.config)"
            )
        self.addr_ipver = common[0]
        self.addr = self.addr_v[self.addr_ipver]
        self.remote_addr = self.remote_addr_v[self.addr_ipver]
        if not cfg.get("REMOTE_TYPE") or not cfg.get("REMOTE_ARGS"):
            raise ConfigMissing("REMOTE_TYPE and REMOTE_ARGS are not set (environment or net.config)")
        self.remote = make_remote(cfg["REMOTE_TYPE"], cfg["REMOTE_ARGS"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remote.close()
        return False


# --------------------------------------------------------------------------- KTAP


class Totals:
    """Counts of case results; ``exit_code()`` maps them to kselftest's codes."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def line(self):
        return (
            f"# Totals: pass:{self.passed} fail:{self.failed} xfail:0 xpass:0 "
            f"skip:{self.skipped} error:0"
        )

    def exit_code(self):
        if self.failed:
            return KSFT_FAIL
        if self.skipped and not self.passed:
            return KSFT_SKIP
        return KSFT_PASS


def _one_line(text):
    return " ".join(str(text).split())


def ktap_comment(text, out=None):
    """Prints ``text`` as KTAP diagnostic lines (each prefixed with ``# ``)."""
    out = out or sys.stdout
    for line in str(text).splitlines() or [""]:
        print(f"# {line}", file=out)
    out.flush()


def ksft_run(cases, args=(), prefix="devmem", out=None):
    """Runs each case (a callable) with ``*args`` and prints KTAP.

    A case passes when it returns, skips when it raises KsftSkipEx, and fails
    on any other exception (its traceback is printed as diagnostics).
    KeyboardInterrupt fails the running case and stops the run.  Returns a
    Totals.
    """
    out = out or sys.stdout
    totals = Totals()
    print("TAP version 13", file=out)
    print(f"1..{len(cases)}", file=out)
    out.flush()
    for n, case in enumerate(cases, 1):
        name = f"{prefix}.{case.__name__}" if prefix else case.__name__
        stop = False
        try:
            case(*args)
            result = f"ok {n} {name}"
            totals.passed += 1
        except KsftSkipEx as exc:
            result = f"ok {n} {name} # SKIP {_one_line(exc)}"
            totals.skipped += 1
        except KeyboardInterrupt:
            ktap_comment("interrupted", out)
            result = f"not ok {n} {name} # interrupted"
            totals.failed += 1
            stop = True
        except Exception as exc:  # every other exception is this case's failure
            if isinstance(exc, (KsftFailEx, AssertionError)):
                ktap_comment(f"FAIL: {exc}", out)
            else:
                ktap_comment("Exception| " + "".join(traceback.format_exception(exc)).rstrip(), out)
            result = f"not ok {n} {name}"
            totals.failed += 1
        print(result, file=out)
        out.flush()
        if stop:
            break
    print(totals.line(), file=out)
    out.flush()
    return totals


def ktap_skip_all(reason, out=None):
    """Prints the KTAP of a run that cannot start (``1..0 # SKIP reason``); returns 4."""
    out = out or sys.stdout
    print("TAP version 13", file=out)
    print(f"1..0 # SKIP {_one_line(reason)}", file=out)
    out.flush()
    return KSFT_SKIP


def ktap_bail_out(reason, out=None):
    """Prints ``Bail out! reason`` for a broken configuration; returns 1."""
    out = out or sys.stdout
    print("TAP version 13", file=out)
    print(f"Bail out! {_one_line(reason)}", file=out)
    out.flush()
    return KSFT_FAIL
