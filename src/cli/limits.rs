//! The limits of option values and the number parsers that the option table and the sweep
//! plan (`lab::plan`, which parses `--sweep KEY=V1,V2,...`) share. A leaf: it imports nothing
//! of the crate, so the sweep plan can use it without importing the command line.

/// Largest `-b` (rx-page-size): the largest power of two that fits in 32 bits.
pub const MAX_RX_PAGE_SIZE: u32 = 1 << 31;

/// Largest `--rx-buf-len`: 2 MiB, the hugepages that back the zcrx area then.
pub const MAX_RX_BUF_LEN: u32 = 2 << 20;

/// Most flows one run receives or sends (`--flows`).
pub const MAX_FLOWS: u32 = 64;

/// Largest accepted `--write-size` (also a `write-size` sweep point), bytes (64 MiB): one
/// buffer of that size is allocated.
pub const MAX_WRITE_SIZE: u64 = 64 << 20;

/// Largest `--hds-thresh` (also an `hds-thresh` sweep point), bytes: the kernel's attribute
/// (`ETHTOOL_A_RINGS_HDS_THRESH`) is a u32; the driver's hds-thresh-max is checked at the run.
pub(crate) const MAX_HDS_THRESH: u64 = u32::MAX as u64;

/// Largest `--rcvlowat`, bytes (1 GiB, the largest `--rcvbuf`): `SO_RCVLOWAT` is an int, and
/// the kernel caps it at half the receive buffer anyway.
pub(crate) const MAX_RCVLOWAT: u64 = 1 << 30;

/// Parses a decimal number: ASCII digits only (no sign, no spaces, no `0x`; leading zeros are
/// read as decimal, not octal). `None` for anything else, including overflow of `u64`.
pub(crate) fn dec_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok()
}

/// A byte count: decimal digits with an optional binary suffix `K`/`M`/`G` (either case) for
/// KiB/MiB/GiB. `None` for garbage or overflow of `u64`.
pub(crate) fn size(text: &str) -> Option<u64> {
    let (digits, mult) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1u64 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1u64 << 30),
        _ => (text, 1),
    };
    dec_u64(digits)?.checked_mul(mult)
}
