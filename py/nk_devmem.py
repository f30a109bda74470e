#!/usr/bin/env python3
"""devmem TCP through netkit with ncdevmem-rs, mirroring the kernel's
drivers/net/hw/nk_devmem.py (7.3): RX, TX, TX in chunks, the HDS sweep and
the 16 KiB rx-page-size sweep, with the receiver or sender in a network
namespace on a netkit device that leases a queue of NETIF.

Runs only inside a kernel tree (nk_lib.py: the gates, in order -- the probe
for every rx-page-size, netkit queue leasing, the kernel's NetDrvContEnv --
and the flows).  Exit codes: the kernel's ksft_exit (0 passed or skipped, 1
a failure) once the cases run; before that 4 (the run skipped, reason on the
``1..0 # SKIP`` line) or 1 (``Bail out!``).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nk_lib  # noqa: E402  (after the path set-up above)


def check_nk_rx(ctx):
    nk_lib.run_rx(ctx)


def check_nk_tx(ctx):
    nk_lib.run_tx(ctx)


def check_nk_tx_chunks(ctx):
    nk_lib.run_tx(ctx, chunk=3)


def check_nk_rx_hds(ctx):
    nk_lib.run_rx_hds(ctx)


def check_nk_rx_large_niov(ctx):
    nk_lib.run_rx_large_niov(ctx)


CASES = [check_nk_rx, check_nk_tx, check_nk_tx_chunks, check_nk_rx_hds, check_nk_rx_large_niov]

if __name__ == "__main__":
    sys.exit(nk_lib.main(__file__, CASES))
