#!/usr/bin/env python3
"""devmem TCP tests driving ncdevmem-rs, mirroring the kernel's
drivers/net/hw/devmem.py, with KTAP output.

Two ways to run:

* inside a kernel tree: put this directory in (or under)
  ``tools/testing/selftests/drivers/net/hw/`` -- the kernel's ``lib.py``
  (``NetDrvEpEnv``, ``ksft_run``) is found in this script's directory or its
  parent and used, with the kernel tree's ``net.config`` (beside this script,
  else in ``hw/``; ksft_tree.py); without ``NETIF`` anywhere every case is
  skipped (the library's netdevsim fallback has no devmem);
* stand-alone: ksft_env.py's environment, configured by ``NETIF``,
  ``LOCAL_V4``/``LOCAL_V6``, ``REMOTE_V4``/``REMOTE_V6``, ``REMOTE_TYPE``
  (netns|ssh) and ``REMOTE_ARGS`` from the environment or ``net.config``
  (beside this script, or the file named by ``DEVMEM_PY_NET_CONFIG``).

Exit codes: 0 every case passed or skipped, 1 a case failed, 4 every case
skipped.

Knobs (environment): ``NCDEVMEM`` the binary (default: beside this script,
then ``../target/release/ncdevmem-rs``, then $PATH); ``DEVMEM_PY_CASES`` a
comma-separated list of case names to run; ``DEVMEM_PY_REMOTE_TOOL``
auto|ncdevmem-rs|socat; ``DEVMEM_PY_TIMEOUT`` seconds per transfer (60);
``DEVMEM_PY_SELFTEST_FAIL=1`` adds a case that must fail (the harness's own
failure path); ``DEVMEM_PY_STANDALONE=1`` ignores a kernel lib.py.
"""

import os
import sys

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
if SCRIPT_DIR not in sys.path:
    sys.path.insert(0, SCRIPT_DIR)

import devmem_lib  # noqa: E402  (after the path set-up above)
import ksft_env  # noqa: E402
import ksft_proc  # noqa: E402
import ksft_tree  # noqa: E402

# --------------------------------------------------------------------------- the kernel's cases


def check_rx(cfg):
    devmem_lib.run_rx(cfg)


def check_tx(cfg):
    devmem_lib.run_tx(cfg)


def check_tx_chunks(cfg):
    devmem_lib.run_tx(cfg, chunk=3)


def check_rx_hds(cfg):
    devmem_lib.run_rx_hds(cfg)


def check_rx_large_niov(cfg):
    devmem_lib.run_rx_large_niov(cfg)


# --------------------------------------------------------------------------- ours: devmem and zcrx


def check_rx_multi_mb(cfg):
    devmem_lib.run_rx_multi_mb(cfg)


def check_tx_rx(cfg):
    devmem_lib.run_tx_rx(cfg)


def check_rx_autorelease_off(cfg):
    devmem_lib.run_rx_autorelease(cfg, on=False)


def check_rx_autorelease_on(cfg):
    devmem_lib.run_rx_autorelease(cfg, on=True)


def check_zcrx(cfg):
    devmem_lib.run_zcrx(cfg)


def check_zcrx_large_buf(cfg):
    devmem_lib.run_zcrx(cfg, rx_buf_len=devmem_lib.LARGE_NIOV_RX_PAGE_SIZE)


# --------------------------------------------------------------------------- ours: plain TCP and the harness


def check_plain_rx(cfg):
    devmem_lib.run_plain_rx(cfg)


def check_plain_rx_corrupted(cfg):
    devmem_lib.run_plain_rx_corrupted(cfg)


def check_plain_rx_segments(cfg):
    devmem_lib.run_plain_rx_segments(cfg)


def check_plain_tx(cfg):
    devmem_lib.run_plain_tx(cfg)


def check_harness_cleanup(cfg):
    devmem_lib.run_harness_cleanup(cfg)


def check_selftest_must_fail(cfg):
    """Enabled by DEVMEM_PY_SELFTEST_FAIL=1: a corrupted sender treated as if
    the run had to be clean, so this case is reported ``not ok``."""
    devmem_lib.run_plain_rx_corrupted(cfg, expect_detection=False)


CASES = [
    check_rx,
    check_tx,
    check_tx_chunks,
    check_rx_hds,
    check_rx_large_niov,
    check_rx_multi_mb,
    check_tx_rx,
    check_rx_autorelease_off,
    check_rx_autorelease_on,
    check_zcrx,
    check_zcrx_large_buf,
    check_plain_rx,
    check_plain_rx_corrupted,
    check_plain_rx_segments,
    check_plain_tx,
    check_harness_cleanup,
]


def select_cases(environ):
    """The cases to run: CASES (plus the must-fail self-test when asked),
    narrowed by DEVMEM_PY_CASES.  Raises ConfigError for an unknown name."""
    cases = list(CASES)
    if environ.get("DEVMEM_PY_SELFTEST_FAIL") == "1":
        cases.append(check_selftest_must_fail)
    wanted = [n.strip() for n in environ.get("DEVMEM_PY_CASES", "").split(",") if n.strip()]
    if wanted:
        by_name = {c.__name__: c for c in CASES + [check_selftest_must_fail]}
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            raise ksft_env.ConfigError(f"DEVMEM_PY_CASES: unknown case(s) {', '.join(unknown)}")
        cases = [c for c in CASES + [check_selftest_must_fail] if c.__name__ in wanted]
    return cases


# --------------------------------------------------------------------------- environments


def ctx_from_kernel_cfg(cfg, binary, timeout):
    """Our Ctx from a kernel NetDrvEpEnv (addr_v / remote_addr_v, or the older
    v4 / v6 / remote_v4 / remote_v6 attributes)."""
    addr_v = dict(getattr(cfg, "addr_v", None) or {"4": getattr(cfg, "v4", None), "6": getattr(cfg, "v6", None)})
    remote_v = dict(
        getattr(cfg, "remote_addr_v", None)
        or {"4": getattr(cfg, "remote_v4", None), "6": getattr(cfg, "remote_v6", None)}
    )
    common = [v for v in ("6", "4") if addr_v.get(v) and remote_v.get(v)]
    ipver = str(getattr(cfg, "addr_ipver", None) or (common[0] if common else "6"))
    return devmem_lib.Ctx(cfg.ifname, addr_v, remote_v, ipver, cfg.remote, binary, timeout)


def main():
    environ = os.environ
    try:
        cases = select_cases(environ)
    except ksft_env.ConfigError as exc:
        return ksft_env.ktap_bail_out(exc)
    try:
        timeout = float(environ.get("DEVMEM_PY_TIMEOUT", "60"))
        if not timeout > 0:
            raise ValueError
    except ValueError:
        return ksft_env.ktap_bail_out(f"DEVMEM_PY_TIMEOUT={environ['DEVMEM_PY_TIMEOUT']!r}: expected seconds > 0")
    binary = devmem_lib.find_binary(SCRIPT_DIR, environ)

    found = ksft_tree.find_kernel_lib(SCRIPT_DIR, environ)
    if found is not None:
        klib, hw_dir = found
        if binary is None:
            return ksft_env.ktap_bail_out("ncdevmem-rs not found: build it (cargo build --release) or set NCDEVMEM")
        ksft_proc.use_ksft(klib.KsftSkipEx, getattr(klib, "KsftFailEx", AssertionError))
        try:
            src_path = ksft_tree.src_path_for(__file__, hw_dir, environ)
            with ksft_tree.opened_env(klib, klib.NetDrvEpEnv, src_path) as cfg:
                klib.ksft_run(cases, args=(ctx_from_kernel_cfg(cfg, binary, timeout),))
        except ksft_tree.TreeSetupError as err:
            return ksft_tree.report(err)
        klib.ksft_exit()
        return 0

    config_path = environ.get("DEVMEM_PY_NET_CONFIG") or os.path.join(SCRIPT_DIR, "net.config")
    try:
        env = ksft_env.NetEnv(config_path, environ)
    except ksft_env.ConfigMissing as exc:
        return ksft_env.ktap_skip_all(exc)
    except ksft_env.ConfigError as exc:
        return ksft_env.ktap_bail_out(exc)
    if binary is None:
        return ksft_env.ktap_bail_out("ncdevmem-rs not found: build it (cargo build --release) or set NCDEVMEM")
    with env:
        ctx = devmem_lib.Ctx(env.ifname, env.addr_v, env.remote_addr_v, env.addr_ipver, env.remote, binary, timeout)
        ksft_env.ktap_comment(
            f"ncdevmem-rs: {binary}; NETIF {env.ifname}; {env.addr} -> remote {env.remote_addr} ({env.remote!r})"
        )
        totals = ksft_env.ksft_run(cases, args=(ctx,), prefix="devmem")
    return totals.exit_code()


if __name__ == "__main__":
    sys.exit(main())
