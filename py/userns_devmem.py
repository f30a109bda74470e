#!/usr/bin/env python3
"""devmem TCP through netkit from a network namespace owned by a non-init
user namespace, with ncdevmem-rs, mirroring the kernel's
drivers/net/hw/userns_devmem.py (7.3): RX, TX, TX in chunks and the HDS
sweep.  Same gates, flows and exit codes as nk_devmem.py (nk_lib.py); only
the environment's namespace differs.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nk_lib  # noqa: E402  (after the path set-up above)


def check_userns_rx(ctx):
    nk_lib.run_rx(ctx)


def check_userns_tx(ctx):
    nk_lib.run_tx(ctx)


def check_userns_tx_chunks(ctx):
    nk_lib.run_tx(ctx, chunk=3)


def check_userns_rx_hds(ctx):
    nk_lib.run_rx_hds(ctx)


CASES = [check_userns_rx, check_userns_tx, check_userns_tx_chunks, check_userns_rx_hds]

if __name__ == "__main__":
    sys.exit(nk_lib.main(__file__, CASES, userns=True))
