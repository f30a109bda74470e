//! `SIOCETHTOOL` ioctls (include/uapi/linux/ethtool.h;
//! `docs/kernel-interface.md#siocethtool-ioctls`): ntuple flow rules (`struct ethtool_rxnfc`,
//! also `FLOW_RSS` rules naming an RSS context), the RSS indirection table of the default
//! context and additional RSS contexts (create, read, delete; `struct ethtool_rxfh`), features
//! looked up by name
//! (`ETH_SS_FEATURES` strings, `ethtool_gfeatures` / `ethtool_sfeatures`) and driver info
//! (`ethtool_drvinfo`).
//!
//! Two layers:
//! * pure encoders and decoders between the `#[repr(C)]` structs and the exact bytes the kernel
//!   reads and writes. Each struct is one `field: type = offset` list (`uapi_struct!`,
//!   `sys/uapi_struct.rs`) from which its compile-time layout asserts and its codec are
//!   generated, so the bytes follow the asserted layout; byte-exact tests are at the bottom;
//! * [`EthtoolIoctl`]: an `AF_INET`/`SOCK_DGRAM` socket plus an interface name, issuing the
//!   calls with `struct ifreq { ifr_name, ifr_data }` and 8-byte aligned buffers sized for what
//!   the kernel reads and writes for each command (flexible arrays included).
//!
//! Sizes and offsets are x86_64 (LP64) and were checked against the 6.18 kernel's BTF and gcc on
//! the 6.1 uapi headers. Addresses and ports in flow specs are in network byte order; a mask bit
//! of 1 means "compare this bit".

#![allow(non_camel_case_types)]

use std::mem::{offset_of, size_of};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{Error, Result};
use crate::sys::uapi_struct::{need, uapi_struct, Wire};
use crate::sys::{cvt, ioctl_request};

// ---- command codes (include/uapi/linux/ethtool.h; frozen values, checked with gcc on 6.1) ----

/// Declares the `ETHTOOL_*` command constants and [`cmd_name`] from one list.
macro_rules! ethtool_cmds {
    ($($(#[$doc:meta])* $name:ident = $val:literal;)*) => {
        $($(#[$doc])* pub const $name: u32 = $val;)*

        /// The uapi name of an `ETHTOOL_*` command code, for error messages.
        pub fn cmd_name(cmd: u32) -> &'static str {
            match cmd {
                $($name => stringify!($name),)*
                _ => "ETHTOOL_?",
            }
        }
    };
}

ethtool_cmds! {
    /// `ETHTOOL_GDRVINFO`: driver name, version, bus info (`struct ethtool_drvinfo`).
    ETHTOOL_GDRVINFO = 0x03;
    /// `ETHTOOL_GSTRINGS`: a string set (`struct ethtool_gstrings`).
    ETHTOOL_GSTRINGS = 0x1b;
    /// `ETHTOOL_GRXRINGS`: number of RX rings in `ethtool_rxnfc.data`.
    ETHTOOL_GRXRINGS = 0x2d;
    /// `ETHTOOL_GRXCLSRLCNT`: ntuple rule count (`rule_cnt`) and table size (`data`, with
    /// [`RX_CLS_LOC_SPECIAL`] when the driver picks locations itself).
    ETHTOOL_GRXCLSRLCNT = 0x2e;
    /// `ETHTOOL_GRXCLSRLALL`: ntuple rule locations (`rule_locs[rule_cnt]`) and table size.
    ETHTOOL_GRXCLSRLALL = 0x30;
    /// `ETHTOOL_SRXCLSRLDEL`: delete the ntuple rule at `fs.location`.
    ETHTOOL_SRXCLSRLDEL = 0x31;
    /// `ETHTOOL_SRXCLSRLINS`: insert an ntuple rule; the kernel writes the location back.
    ETHTOOL_SRXCLSRLINS = 0x32;
    /// `ETHTOOL_GSSET_INFO`: string-set sizes (`struct ethtool_sset_info`).
    ETHTOOL_GSSET_INFO = 0x37;
    /// `ETHTOOL_GFEATURES`: netdev features (`struct ethtool_gfeatures`).
    ETHTOOL_GFEATURES = 0x3a;
    /// `ETHTOOL_SFEATURES`: change netdev features (`struct ethtool_sfeatures`); returns
    /// `ETHTOOL_F_*` flags.
    ETHTOOL_SFEATURES = 0x3b;
    /// `ETHTOOL_GRSSH`: RSS indirection table and key (`struct ethtool_rxfh`).
    ETHTOOL_GRSSH = 0x46;
    /// `ETHTOOL_SRSSH`: set RSS indirection table and/or key.
    ETHTOOL_SRSSH = 0x47;
}

/// `ETH_SS_FEATURES`: the string set of netdev feature names.
pub const ETH_SS_FEATURES: u32 = 4;
/// `ETH_GSTRING_LEN`: bytes per string in a string set (nul-padded).
pub const ETH_GSTRING_LEN: usize = 32;
/// The `ETH_SS_FEATURES` name of `NETIF_F_NTUPLE`. Its bit index is kernel-internal (38 in
/// 6.18), so it is always looked up by this name.
pub const NTUPLE_FEATURE: &str = "rx-ntuple-filter";

/// `TCP_V4_FLOW` (flow type of a tcp4 rule).
pub const TCP_V4_FLOW: u32 = 1;
/// `TCP_V6_FLOW` (flow type of a tcp6 rule).
pub const TCP_V6_FLOW: u32 = 5;
/// `RX_CLS_LOC_SPECIAL`: flag in GRXCLSRLCNT's `data`: the driver accepts special locations.
pub const RX_CLS_LOC_SPECIAL: u32 = 0x8000_0000;
/// `RX_CLS_LOC_ANY`: let the driver pick any free rule location.
pub const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;
/// `FLOW_RSS` (flag in `ethtool_rx_flow_spec.flow_type`, uapi since 4.17): the rule delivers to
/// the RSS context named in `ethtool_rxnfc.rss_context`, whose indirection table picks the
/// queue; `ring_cookie` is then an offset added to that queue, which the ethtool core refuses
/// (EINVAL) unless it is 0 or the driver sets `cap_rss_rxnfc_adds` (net/ethtool/ioctl.c
/// `ethtool_set_rxnfc`).
pub const FLOW_RSS: u32 = 0x2000_0000;
/// `ETH_RXFH_CONTEXT_ALLOC` (`ethtool_rxfh.rss_context` of an SRSSH, uapi since 4.17): create
/// a new additional RSS context; the kernel writes the id it allocated (1 ≤ id <
/// the driver's `rxfh_max_num_contexts`) back into `rss_context`.
pub const ETH_RXFH_CONTEXT_ALLOC: u32 = 0xffff_ffff;

/// `ETHTOOL_F_UNSUPPORTED`: SFEATURES asked to change a feature the device cannot change.
pub const ETHTOOL_F_UNSUPPORTED: u32 = 1;
/// `ETHTOOL_F_WISH`: SFEATURES recorded the wish, but the active features differ.
pub const ETHTOOL_F_WISH: u32 = 2;
/// `ETHTOOL_F_COMPAT`: SFEATURES went through a legacy compatibility path.
pub const ETHTOOL_F_COMPAT: u32 = 4;

/// `ETH_RSS_HASH_NO_CHANGE` (`ethtool_rxfh.hfunc`): keep the hash function.
pub const ETH_RSS_HASH_NO_CHANGE: u8 = 0;
/// `RXH_XFRM_NO_CHANGE` (`ethtool_rxfh.input_xfrm`, 6.8+): keep the input transformation.
/// 0 would *clear* a symmetric-xor transform, so SRSSH sends this value.
pub const RXH_XFRM_NO_CHANGE: u8 = 0xff;

/// Largest table, rule count or string count accepted from the kernel before allocating a
/// buffer for it (entries); real devices use a few thousand at most.
pub const MAX_KERNEL_COUNT: u32 = 1 << 20;

/// A count the kernel reported, checked against [`MAX_KERNEL_COUNT`] before it sizes a buffer.
fn bounded(what: &str, n: u32) -> Result<usize> {
    if n > MAX_KERNEL_COUNT {
        return Err(Error::decode(
            what,
            format!("{n} entries is more than the {MAX_KERNEL_COUNT} this tool accepts"),
        ));
    }
    Ok(n as usize)
}

// ---- flow specs ----

uapi_struct! {
    /// `struct ethtool_tcpip4_spec` (16 bytes): the tcp4 member of `union ethtool_flow_union`.
    /// Addresses (`__be32`) hold the four octets in memory order (`u32::from_ne_bytes(octets)`),
    /// ports (`__be16`) are `port.to_be()`.
    #[derive(Default)]
    ethtool_tcpip4_spec = 16 {
        /// Source address, network byte order.
        ip4src: u32 = 0,
        /// Destination address, network byte order.
        ip4dst: u32 = 4,
        /// Source port, network byte order.
        psrc: u16 = 8,
        /// Destination port, network byte order.
        pdst: u16 = 10,
        /// Type of service.
        tos: u8 = 12,
    }
}

uapi_struct! {
    /// `struct ethtool_tcpip6_spec` (40 bytes): the tcp6 member of `union ethtool_flow_union`.
    /// Addresses (`__be32[4]`) hold the sixteen octets in memory order, ports are `port.to_be()`.
    #[derive(Default)]
    ethtool_tcpip6_spec = 40 {
        /// Source address, network byte order.
        ip6src: [u32; 4] = 0,
        /// Destination address, network byte order.
        ip6dst: [u32; 4] = 16,
        /// Source port, network byte order.
        psrc: u16 = 32,
        /// Destination port, network byte order.
        pdst: u16 = 34,
        /// Traffic class.
        tclass: u8 = 36,
    }
}

fn be32x4(octets: [u8; 16]) -> [u32; 4] {
    Wire::get(&octets)
}

uapi_struct! {
    /// `struct ethtool_flow_ext` (20 bytes): VLAN / destination MAC / user data extension; this
    /// tool never sets it (no `FLOW_EXT` / `FLOW_MAC_EXT`).
    #[derive(Default)]
    ethtool_flow_ext = 20 {
        /// Reserved.
        padding: [u8; 2] = 0,
        /// Destination MAC (with `FLOW_MAC_EXT`).
        h_dest: [u8; 6] = 2,
        /// VLAN EtherType, network byte order.
        vlan_etype: u16 = 8,
        /// VLAN tag control information, network byte order.
        vlan_tci: u16 = 10,
        /// User-defined data, network byte order.
        data: [u32; 2] = 12,
    }
}

/// Size of `union ethtool_flow_union` in bytes (its largest members are 52 bytes).
pub const FLOW_UNION_LEN: usize = 52;

uapi_struct! {
    /// `struct ethtool_rx_flow_spec` (168 bytes): one ntuple rule. The two unions (`h_u` match
    /// values, `m_u` masks) are kept as their 52 bytes; fill them with
    /// [`ethtool_tcpip4_spec::to_bytes`] / [`ethtool_tcpip6_spec::to_bytes`].
    ethtool_rx_flow_spec = 168 {
        /// `TCP_V4_FLOW`, `TCP_V6_FLOW`, … (plus `FLOW_EXT` / `FLOW_MAC_EXT` / `FLOW_RSS` flags).
        flow_type: u32 = 0,
        /// `union ethtool_flow_union h_u`: header values to match.
        h_u: [u8; FLOW_UNION_LEN] = 4,
        /// Extension values.
        h_ext: ethtool_flow_ext = 56,
        /// `union ethtool_flow_union m_u`: masks for `h_u` (1 = compare).
        m_u: [u8; FLOW_UNION_LEN] = 76,
        /// Masks for `h_ext`.
        m_ext: ethtool_flow_ext = 128,
        /// Destination RX queue index (low 32 bits), or `RX_CLS_FLOW_DISC`.
        ring_cookie: u64 = 152,
        /// Rule location (index in the rule table) or a special `RX_CLS_LOC_*` value.
        location: u32 = 160,
    }
}

impl Default for ethtool_rx_flow_spec {
    fn default() -> Self {
        Self::get(&[0; 168])
    }
}

fn ip_mask<T: Default>(given: bool, ones: T) -> T {
    if given {
        ones
    } else {
        T::default()
    }
}

/// A tcp4 ntuple rule, as `ethtool -N IF flow-type tcp4 [src-ip S src-port P] dst-ip D
/// dst-port P action QUEUE [loc LOCATION]` builds it: `TCP_V4_FLOW`, the given fields with
/// all-ones masks (exact match), `ring_cookie = queue`. `src` given makes a 5-tuple rule,
/// `None` a 3-tuple rule. Ports are host order here.
pub fn tcp4_flow_spec(
    src: Option<(Ipv4Addr, u16)>,
    dst: (Ipv4Addr, u16),
    queue: u32,
    location: u32,
) -> ethtool_rx_flow_spec {
    let (sip, sport) = src.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
    let h = ethtool_tcpip4_spec {
        ip4src: u32::from_ne_bytes(sip.octets()),
        ip4dst: u32::from_ne_bytes(dst.0.octets()),
        psrc: sport.to_be(),
        pdst: dst.1.to_be(),
        tos: 0,
    };
    let m = ethtool_tcpip4_spec {
        ip4src: ip_mask(src.is_some(), u32::MAX),
        ip4dst: u32::MAX,
        psrc: ip_mask(src.is_some(), u16::MAX),
        pdst: u16::MAX,
        tos: 0,
    };
    let mut fs = ethtool_rx_flow_spec {
        flow_type: TCP_V4_FLOW,
        ring_cookie: u64::from(queue),
        location,
        ..Default::default()
    };
    fs.h_u[..16].copy_from_slice(&h.to_bytes());
    fs.m_u[..16].copy_from_slice(&m.to_bytes());
    fs
}

/// A tcp6 ntuple rule (`TCP_V6_FLOW`); otherwise as [`tcp4_flow_spec`].
pub(crate) fn tcp6_flow_spec(
    src: Option<(Ipv6Addr, u16)>,
    dst: (Ipv6Addr, u16),
    queue: u32,
    location: u32,
) -> ethtool_rx_flow_spec {
    let (sip, sport) = src.unwrap_or((Ipv6Addr::UNSPECIFIED, 0));
    let h = ethtool_tcpip6_spec {
        ip6src: be32x4(sip.octets()),
        ip6dst: be32x4(dst.0.octets()),
        psrc: sport.to_be(),
        pdst: dst.1.to_be(),
        tclass: 0,
    };
    let m = ethtool_tcpip6_spec {
        ip6src: ip_mask(src.is_some(), [u32::MAX; 4]),
        ip6dst: [u32::MAX; 4],
        psrc: ip_mask(src.is_some(), u16::MAX),
        pdst: u16::MAX,
        tclass: 0,
    };
    let mut fs = ethtool_rx_flow_spec {
        flow_type: TCP_V6_FLOW,
        ring_cookie: u64::from(queue),
        location,
        ..Default::default()
    };
    fs.h_u[..40].copy_from_slice(&h.to_bytes());
    fs.m_u[..40].copy_from_slice(&m.to_bytes());
    fs
}

/// Byte offset of `rule_locs[]` in `struct ethtool_rxnfc` (inside the struct's tail padding:
/// the kernel copies the 192-byte struct, then the locations from here).
pub const RXNFC_RULE_LOCS_OFFSET: usize = 188;

uapi_struct! {
    /// `struct ethtool_rxnfc` (192 bytes, 8-byte aligned) without its flexible `rule_locs[]`.
    #[derive(Default)]
    ethtool_rxnfc = 192 {
        /// `ETHTOOL_*` command.
        cmd: u32 = 0,
        /// Flow type for GRXFH/SRXFH (unused here).
        flow_type: u32 = 4,
        /// GRXRINGS: ring count; GRXCLSRLCNT/ALL: rule table size (+ `RX_CLS_LOC_SPECIAL`).
        data: u64 = 8,
        /// The rule (SRXCLSRLINS), or its location (SRXCLSRLDEL).
        fs: ethtool_rx_flow_spec = 16,
        /// `rule_cnt` (GRXCLSRLCNT/ALL) — a union with `rss_context`, the RSS context id of an
        /// SRXCLSRLINS whose `fs.flow_type` has [`FLOW_RSS`].
        rule_cnt: u32 = 184,
    }
}
const _: () = assert!(std::mem::align_of::<ethtool_rxnfc>() == 8);
const _: () = assert!(offset_of!(ethtool_rxnfc, rule_cnt) + 4 == RXNFC_RULE_LOCS_OFFSET);

impl ethtool_rxnfc {
    /// A request for `cmd` with everything else zero.
    pub fn new(cmd: u32) -> Self {
        ethtool_rxnfc {
            cmd,
            ..Default::default()
        }
    }
}

/// The `ETHTOOL_SRXCLSRLINS` argument inserting `fs`: as given, or with `Some(ctx)` as a
/// `FLOW_RSS` rule (`ethtool -N IF … context CTX`): [`FLOW_RSS`] added to `fs.flow_type` and
/// `ctx` in `rss_context` (the union with `rule_cnt` at offset 184). `fs.ring_cookie` stays
/// as given; for a context rule it is the queue offset, which must be 0 on drivers that cannot
/// add it to the context's pick.
pub fn rule_insert_request(fs: &ethtool_rx_flow_spec, rss_context: Option<u32>) -> ethtool_rxnfc {
    let mut fs = *fs;
    if rss_context.is_some() {
        fs.flow_type |= FLOW_RSS;
    }
    ethtool_rxnfc {
        fs,
        rule_cnt: rss_context.unwrap_or(0),
        ..ethtool_rxnfc::new(ETHTOOL_SRXCLSRLINS)
    }
}

uapi_struct! {
    /// `struct ethtool_rxfh` (24-byte header; `rss_config[]` follows: `indir_size` u32 queue
    /// indices, then `key_size` key bytes).
    #[derive(Default)]
    ethtool_rxfh = 24 {
        /// `ETHTOOL_GRSSH` or `ETHTOOL_SRSSH`.
        cmd: u32 = 0,
        /// RSS context; 0 = the default context.
        rss_context: u32 = 4,
        /// Entries in the indirection table (GRSSH with 0: "tell me the size"; SRSSH with 0:
        /// reset to the driver default).
        indir_size: u32 = 8,
        /// Key length in bytes (0: no key read / key unchanged).
        key_size: u32 = 12,
        /// Hash function bits (`ETH_RSS_HASH_NO_CHANGE` = 0 on set).
        hfunc: u8 = 16,
        /// Input transformation (6.8+; `RXH_XFRM_NO_CHANGE` = 0xff on set).
        input_xfrm: u8 = 17,
        /// Reserved, must be 0.
        rsvd8: [u8; 2] = 18,
        /// Reserved, must be 0.
        rsvd32: u32 = 20,
    }
}

/// GRSSH request for RSS context `rss_context` (0 = the default context): header with
/// `indir_size` (0 = ask for the sizes) and `key_size` 0 (no key), followed by room for
/// `indir_size` entries.
pub(crate) fn rxfh_get_request(rss_context: u32, indir_size: u32) -> Result<Vec<u8>> {
    let n = bounded("ethtool_rxfh.indir_size", indir_size)?;
    let mut b = ethtool_rxfh {
        cmd: ETHTOOL_GRSSH,
        rss_context,
        indir_size,
        ..Default::default()
    }
    .to_bytes()
    .to_vec();
    b.resize(size_of::<ethtool_rxfh>() + 4 * n, 0);
    Ok(b)
}

/// The 24-byte SRSSH header for `rss_context` and `indir_size`, changing nothing but the
/// table: `key_size` 0 (key unchanged), `hfunc` `ETH_RSS_HASH_NO_CHANGE`, `input_xfrm`
/// `RXH_XFRM_NO_CHANGE`. An RSS context of a driver without per-context keys refuses any other
/// key, hash function or input transformation (EOPNOTSUPP).
fn srssh_header(rss_context: u32, indir_size: u32) -> ethtool_rxfh {
    ethtool_rxfh {
        cmd: ETHTOOL_SRSSH,
        rss_context,
        indir_size,
        key_size: 0,
        hfunc: ETH_RSS_HASH_NO_CHANGE,
        input_xfrm: RXH_XFRM_NO_CHANGE,
        ..Default::default()
    }
}

/// SRSSH request writing `indir` as the whole indirection table of `rss_context` and nothing
/// else ([`srssh_header`], then the table).
///
/// Errors: `Error::Failure` for an empty table (that would mean "reset to the driver
/// default" for context 0 and "delete" for another context).
fn rxfh_table_request(rss_context: u32, indir: &[u32]) -> Result<Vec<u8>> {
    let size = u32::try_from(indir.len())
        .ok()
        .filter(|&n| n > 0 && n <= MAX_KERNEL_COUNT);
    let Some(indir_size) = size else {
        return Err(Error::Failure(format!(
            "RSS indirection table of {} entries cannot be written (SRSSH needs 1..={MAX_KERNEL_COUNT}; \
             0 would reset the table to the driver default, or delete an RSS context)",
            indir.len()
        )));
    };
    let mut b = srssh_header(rss_context, indir_size).to_bytes().to_vec();
    for q in indir {
        b.extend_from_slice(&q.to_ne_bytes());
    }
    Ok(b)
}

/// SRSSH request writing the whole indirection table of the default context and nothing
/// else: `indir_size = indir.len()`, `key_size` 0 (key unchanged), `hfunc`
/// `ETH_RSS_HASH_NO_CHANGE`, `input_xfrm` `RXH_XFRM_NO_CHANGE`, then the table.
///
/// Errors: `Error::Failure` for an empty table (that would mean "reset to the driver
/// default", which is not what restoring a saved table asks for).
pub(crate) fn rxfh_set_request(indir: &[u32]) -> Result<Vec<u8>> {
    rxfh_table_request(0, indir)
}

/// SRSSH request creating an additional RSS context whose indirection table is `indir`
/// (`ethtool -X IF context new weight …`): `rss_context` [`ETH_RXFH_CONTEXT_ALLOC`],
/// `indir_size = indir.len()` (it must be the device's table size), key, hash function and
/// input transformation unchanged (the context shares the device's), then the table. The
/// kernel writes the new context's id back at `rss_context` (offset 4).
///
/// Errors: `Error::Failure` for an empty table (SRSSH with `indir_size` 0 and
/// `ETH_RXFH_CONTEXT_ALLOC` is refused, EINVAL).
pub fn rxfh_context_create_request(indir: &[u32]) -> Result<Vec<u8>> {
    rxfh_table_request(ETH_RXFH_CONTEXT_ALLOC, indir)
}

/// SRSSH request deleting additional RSS context `rss_context` (`ethtool -X IF context N
/// delete`): the header alone with `indir_size` 0 and `key_size` 0 — for a context other than
/// 0 that is the delete — `hfunc` `ETH_RSS_HASH_NO_CHANGE`, `input_xfrm` `RXH_XFRM_NO_CHANGE`.
/// The kernel refuses (EBUSY) while an ntuple rule still names the context, and answers ENOENT
/// for an id it does not have.
///
/// Errors: `Error::Failure` for 0 (the same request on the default context resets its table)
/// and for [`ETH_RXFH_CONTEXT_ALLOC`] (not a context id).
pub fn rxfh_context_delete_request(rss_context: u32) -> Result<[u8; 24]> {
    if rss_context == 0 || rss_context == ETH_RXFH_CONTEXT_ALLOC {
        return Err(Error::Failure(format!(
            "RSS context {rss_context:#x} cannot be deleted: 0 is the default context (SRSSH \
             with indir_size 0 would reset its table) and {ETH_RXFH_CONTEXT_ALLOC:#x} is \
             ETH_RXFH_CONTEXT_ALLOC"
        )));
    }
    Ok(srssh_header(rss_context, 0).to_bytes())
}

/// SRSSH request resetting the indirection table of the default context to the driver
/// default (`ethtool -X IF default`): the 24-byte header alone with `indir_size` 0 ("reset"),
/// `key_size` 0 (key unchanged), `hfunc` `ETH_RSS_HASH_NO_CHANGE`, `input_xfrm`
/// `RXH_XFRM_NO_CHANGE`. Unlike writing a table (any `indir_size` > 0), this also clears the
/// device's "user configured the table" flag (`IFF_RXFH_CONFIGURED`), so the driver spreads
/// the table again when the channel count changes.
pub fn rxfh_reset_request() -> [u8; 24] {
    srssh_header(0, 0).to_bytes()
}

/// The RSS context id an SRSSH with [`ETH_RXFH_CONTEXT_ALLOC`] got, from the header the kernel
/// wrote back (`rss_context` at offset 4). Never 0 or `ETH_RXFH_CONTEXT_ALLOC` for a kernel
/// that created one (the core allocates ids from 1, below the driver's limit).
///
/// Errors: `Error::Decode` for a short buffer, or when the kernel left 0 or
/// `ETH_RXFH_CONTEXT_ALLOC` there (no id that can be deleted later).
pub(crate) fn parse_rxfh_created(b: &[u8]) -> Result<u32> {
    let id = ethtool_rxfh::from_bytes(b)?.rss_context;
    if id == 0 || id == ETH_RXFH_CONTEXT_ALLOC {
        return Err(Error::decode(
            "ethtool_rxfh.rss_context",
            format!("the kernel answered context id {id:#x} to ETH_RXFH_CONTEXT_ALLOC"),
        ));
    }
    Ok(id)
}

/// Splits a GRSSH answer into the header and the `indir_size` table entries that follow it.
///
/// Errors: `Error::Decode` when the buffer is shorter than the header says.
pub(crate) fn parse_rxfh_reply(b: &[u8]) -> Result<(ethtool_rxfh, Vec<u32>)> {
    let h = ethtool_rxfh::from_bytes(b)?;
    let n = bounded("ethtool_rxfh.indir_size", h.indir_size)?;
    let start = size_of::<ethtool_rxfh>();
    need("ethtool_rxfh.rss_config", b, start + 4 * n)?;
    let indir = (0..n).map(|i| u32::get(&b[start + 4 * i..])).collect();
    Ok((h, indir))
}

// ---- string sets and features ----

uapi_struct! {
    /// `struct ethtool_sset_info` (16-byte header; `data[]` u32 counts follow, one per set bit).
    #[derive(Default)]
    ethtool_sset_info = 16 {
        /// `ETHTOOL_GSSET_INFO`.
        cmd: u32 = 0,
        /// Reserved.
        reserved: u32 = 4,
        /// In: string sets asked for (bit per `ETH_SS_*`); out: those the device has.
        sset_mask: u64 = 8,
    }
}

uapi_struct! {
    /// `struct ethtool_gstrings` (12-byte header; `len` × 32-byte strings follow).
    #[derive(Default)]
    ethtool_gstrings = 12 {
        /// `ETHTOOL_GSTRINGS`.
        cmd: u32 = 0,
        /// `ETH_SS_*`.
        string_set: u32 = 4,
        /// Number of strings (the kernel writes its own count back).
        len: u32 = 8,
    }
}

uapi_struct! {
    /// `struct ethtool_get_features_block` (16 bytes): 32 feature bits per block.
    #[derive(Default)]
    ethtool_get_features_block = 16 {
        /// Bits the user may change (`hw_features`).
        available: u32 = 0,
        /// Bits the user asked for (`wanted_features`).
        requested: u32 = 4,
        /// Bits in effect (`features`).
        active: u32 = 8,
        /// Bits that never change.
        never_changed: u32 = 12,
    }
}

uapi_struct! {
    /// `struct ethtool_gfeatures` header (8 bytes; `size` blocks follow).
    #[derive(Default)]
    ethtool_gfeatures = 8 {
        /// `ETHTOOL_GFEATURES`.
        cmd: u32 = 0,
        /// In: blocks of room; out: blocks the kernel has (`ETHTOOL_DEV_FEATURE_WORDS`).
        size: u32 = 4,
    }
}

uapi_struct! {
    /// `struct ethtool_set_features_block` (8 bytes).
    #[derive(Default)]
    ethtool_set_features_block = 8 {
        /// Bits to change.
        valid: u32 = 0,
        /// New values of the `valid` bits.
        requested: u32 = 4,
    }
}

uapi_struct! {
    /// `struct ethtool_sfeatures` header (8 bytes; `size` blocks follow). The kernel requires
    /// `size` to equal its `ETHTOOL_DEV_FEATURE_WORDS` (= ⌈feature count / 32⌉), else EINVAL.
    #[derive(Default)]
    ethtool_sfeatures = 8 {
        /// `ETHTOOL_SFEATURES`.
        cmd: u32 = 0,
        /// Number of blocks.
        size: u32 = 4,
    }
}

/// Feature blocks (32 bits each) needed for `count` feature names.
pub fn feature_words(count: u32) -> u32 {
    count.div_ceil(32)
}

/// Splits `len` nul-padded 32-byte strings (the data after an `ethtool_gstrings` header).
///
/// Errors: `Error::Decode` when `data` is shorter than `len` strings.
pub(crate) fn parse_gstrings(data: &[u8], len: u32) -> Result<Vec<String>> {
    let n = bounded("ethtool_gstrings.len", len)?;
    need("ethtool_gstrings.data", data, n * ETH_GSTRING_LEN)?;
    Ok(data[..n * ETH_GSTRING_LEN]
        .chunks_exact(ETH_GSTRING_LEN)
        .map(|s| {
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        })
        .collect())
}

/// GFEATURES request with room for `words` blocks.
pub(crate) fn gfeatures_request(words: u32) -> Result<Vec<u8>> {
    let n = bounded("ethtool_gfeatures.size", words)?;
    let header = ethtool_gfeatures {
        cmd: ETHTOOL_GFEATURES,
        size: words,
    };
    let mut b = header.to_bytes().to_vec();
    b.resize(8 + n * 16, 0);
    Ok(b)
}

/// The blocks of a GFEATURES answer: as many as both the room we gave (`words`) and the
/// kernel's `size` allow.
///
/// Errors: `Error::Decode` for a short buffer.
pub(crate) fn parse_gfeatures(b: &[u8], words: u32) -> Result<Vec<ethtool_get_features_block>> {
    let size = ethtool_gfeatures::from_bytes(b)?.size.min(words);
    let n = bounded("ethtool_gfeatures.size", size)?;
    need("ethtool_gfeatures.features", b, 8 + 16 * n)?;
    Ok((0..n)
        .map(|i| ethtool_get_features_block::get(&b[8 + 16 * i..]))
        .collect())
}

/// SFEATURES request changing exactly feature bit `bit` (index in the `ETH_SS_FEATURES`
/// strings) to `on`, with `words` blocks (⌈feature count / 32⌉).
///
/// Errors: `Error::Failure` when `bit` does not fit in `words` blocks.
pub(crate) fn sfeatures_request(words: u32, bit: u32, on: bool) -> Result<Vec<u8>> {
    let n = bounded("ethtool_sfeatures.size", words)?;
    let block = (bit / 32) as usize;
    if block >= n {
        return Err(Error::Failure(format!(
            "feature bit {bit} is outside the {words} feature blocks"
        )));
    }
    let header = ethtool_sfeatures {
        cmd: ETHTOOL_SFEATURES,
        size: words,
    };
    let mut b = header.to_bytes().to_vec();
    b.resize(8 + n * 8, 0);
    let mask = 1u32 << (bit % 32);
    let change = ethtool_set_features_block {
        valid: mask,
        requested: if on { mask } else { 0 },
    };
    change.put(&mut b[8 + 8 * block..]);
    Ok(b)
}

/// What `ETHTOOL_SFEATURES` answered (its non-negative return value, `ETHTOOL_F_*` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetFeaturesFlags(pub u32);

impl SetFeaturesFlags {
    /// `ETHTOOL_F_UNSUPPORTED`: a requested bit is not changeable on this device; nothing
    /// changed for it.
    pub fn unsupported(self) -> bool {
        self.0 & ETHTOOL_F_UNSUPPORTED != 0
    }

    /// `ETHTOOL_F_WISH`: the request was recorded but the active features differ from it.
    pub fn wish(self) -> bool {
        self.0 & ETHTOOL_F_WISH != 0
    }
}

// ---- driver info ----

/// `struct ethtool_drvinfo` (196 bytes), the fields this tool reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrvInfo {
    /// Driver name, e.g. `"veth"`, `"mlx5_core"` (`driver[32]` at offset 4).
    pub driver: String,
    /// Driver version (`version[32]` at 36).
    pub version: String,
    /// Firmware version (`fw_version[32]` at 68).
    pub fw_version: String,
    /// Bus address, e.g. `"0000:00:03.0"`; empty for virtual devices (`bus_info[32]` at 100).
    pub bus_info: String,
}

/// `sizeof(struct ethtool_drvinfo)` in bytes (checked with gcc on the 6.1 headers).
pub const DRVINFO_LEN: usize = 196;

impl DrvInfo {
    /// Decodes the nul-padded name fields of an `ethtool_drvinfo`.
    ///
    /// Errors: `Error::Decode` for fewer than 196 bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        need("struct ethtool_drvinfo", b, DRVINFO_LEN)?;
        let s = |off: usize| {
            let f = &b[off..off + 32];
            let end = f.iter().position(|&c| c == 0).unwrap_or(32);
            String::from_utf8_lossy(&f[..end]).into_owned()
        };
        Ok(DrvInfo {
            driver: s(4),
            version: s(36),
            fw_version: s(68),
            bus_info: s(100),
        })
    }
}

// ---- rule table ----

/// `ETHTOOL_GRXCLSRLCNT`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleCount {
    /// Rules installed (`rule_cnt`).
    pub rule_cnt: u32,
    /// Rule table size in entries (`data` without `RX_CLS_LOC_SPECIAL`).
    pub table_size: u32,
    /// `data` had `RX_CLS_LOC_SPECIAL`: the driver picks a location for `RX_CLS_LOC_ANY`.
    pub driver_picks_location: bool,
}

impl RuleCount {
    /// From GRXCLSRLCNT's `rule_cnt` and `data`.
    pub(crate) fn from_rxnfc(r: &ethtool_rxnfc) -> Self {
        let data = r.data as u32;
        RuleCount {
            rule_cnt: r.rule_cnt,
            table_size: data & !RX_CLS_LOC_SPECIAL,
            driver_picks_location: data & RX_CLS_LOC_SPECIAL != 0,
        }
    }
}

/// The location ethtool(8) picks for `RX_CLS_LOC_ANY` when the driver cannot: the highest
/// index below `table_size` not in `used`. `None` when the table is full (or has no entries).
pub(crate) fn pick_free_location(table_size: u32, used: &[u32]) -> Option<u32> {
    (0..table_size).rev().find(|loc| !used.contains(loc))
}

// ---- the ioctl ----

/// An `AF_INET`/`SOCK_DGRAM` socket for `SIOCETHTOOL` on one interface (by name, in the
/// network namespace the socket was opened in). Set commands need CAP_NET_ADMIN.
#[derive(Debug)]
pub struct EthtoolIoctl {
    fd: OwnedFd,
    ifname: String,
    name: [libc::c_char; libc::IFNAMSIZ],
}

impl EthtoolIoctl {
    /// Opens the socket for interface `ifname`.
    ///
    /// Errors: `Error::Sys` with `EINVAL` ("invalid interface name ...", before any call)
    /// for a name of 16 bytes or more or with a NUL byte; `Error::Sys` for `socket()`.
    pub fn open(ifname: &str) -> Result<Self> {
        let bytes = ifname.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            let call = format!(
                "invalid interface name {ifname:?} (1 to {} bytes, no NUL)",
                libc::IFNAMSIZ - 1
            );
            return Err(Error::sys(call, libc::EINVAL));
        }
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        for (d, s) in name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: socket() takes no pointers; the return value is checked by cvt below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        let fd = cvt(fd, "socket(AF_INET, SOCK_DGRAM) for SIOCETHTOOL")?;
        // SAFETY: `fd` is a fresh descriptor from a successful socket() call that nothing
        // else owns; OwnedFd takes sole ownership and closes it once.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EthtoolIoctl {
            fd,
            ifname: ifname.to_string(),
            name,
        })
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    fn call_name(&self, cmd: u32) -> String {
        format!("ioctl(SIOCETHTOOL, {}) on {}", cmd_name(cmd), self.ifname)
    }

    /// Issues `SIOCETHTOOL` with `buf` as the command struct (its first u32 is the command)
    /// and copies what the kernel wrote back into `buf`. Returns the ioctl's non-negative
    /// result (0, or `ETHTOOL_F_*` flags for SFEATURES).
    ///
    /// # Safety
    ///
    /// `buf` must be at least as long as every byte the kernel reads or writes for the
    /// command in `buf[0..4]` given the struct's contents (header plus flexible array); the
    /// kernel does not know the buffer's length.
    unsafe fn ioctl(&self, buf: &mut [u8]) -> Result<i32> {
        need("SIOCETHTOOL command buffer", buf, 4)?;
        let cmd = u32::get(buf);
        // An 8-byte aligned copy (struct ethtool_rxnfc has a u64), as long as `buf` rounded up.
        let mut words = vec![0u64; buf.len().div_ceil(8)];
        for (w, c) in words.iter_mut().zip(buf.chunks(8)) {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            *w = u64::from_ne_bytes(a);
        }
        // SAFETY: ifreq is plain old data (a char array and a union of integers/pointers), so
        // all-zero is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_name = self.name;
        ifr.ifr_ifru.ifru_data = words.as_mut_ptr().cast();
        // SAFETY: `ifr` is a live, initialised ifreq whose name is nul-terminated (at most 15
        // bytes, checked in open). Its `ifru_data` points to `words`, a live, 8-byte aligned
        // allocation of at least `buf.len()` bytes that is not otherwise accessed until the
        // call returns; by this function's contract that covers everything the kernel reads
        // and writes for `cmd`. The fd is owned by self and open. The result is checked.
        let ret = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                ioctl_request(libc::SIOCETHTOOL as u32),
                &mut ifr,
            )
        };
        let ret = cvt(ret, &self.call_name(cmd))?;
        for (c, w) in buf.chunks_mut(8).zip(&words) {
            let n = c.len();
            c.copy_from_slice(&w.to_ne_bytes()[..n]);
        }
        Ok(ret)
    }

    /// One `struct ethtool_rxnfc` round trip without `rule_locs`.
    fn rxnfc(&self, req: &ethtool_rxnfc) -> Result<ethtool_rxnfc> {
        let mut b = req.to_bytes();
        // SAFETY: for GRXRINGS, GRXCLSRLCNT, SRXCLSRLINS and SRXCLSRLDEL the kernel reads and
        // writes sizeof(struct ethtool_rxnfc) = 192 bytes, the length of `b`; GRXCLSRLALL
        // (which writes rule_locs) never comes through here (rule_cnt 0 → no rule buffer).
        unsafe { self.ioctl(&mut b)? };
        ethtool_rxnfc::from_bytes(&b)
    }

    /// `ETHTOOL_GDRVINFO`: driver name, version, firmware, bus.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP for devices without ethtool ops, such as lo).
    pub fn drvinfo(&self) -> Result<DrvInfo> {
        let mut b = vec![0u8; DRVINFO_LEN];
        ETHTOOL_GDRVINFO.put(&mut b);
        // SAFETY: GDRVINFO writes sizeof(struct ethtool_drvinfo) = 196 bytes, the length of `b`.
        unsafe { self.ioctl(&mut b)? };
        DrvInfo::from_bytes(&b)
    }

    /// `ETHTOOL_GRXRINGS`: number of RX rings (queues) the flow-steering layer sees.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP on veth and lo in 6.18).
    pub fn rx_rings(&self) -> Result<u64> {
        Ok(self.rxnfc(&ethtool_rxnfc::new(ETHTOOL_GRXRINGS))?.data)
    }

    /// `ETHTOOL_GRXCLSRLCNT`: installed rules and table size.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP for drivers without ntuple support: veth, lo,
    /// virtio_net).
    pub fn rule_count(&self) -> Result<RuleCount> {
        let r = self.rxnfc(&ethtool_rxnfc::new(ETHTOOL_GRXCLSRLCNT))?;
        Ok(RuleCount::from_rxnfc(&r))
    }

    /// `ETHTOOL_GRXCLSRLALL` with room for `capacity` locations: the rule locations and the
    /// table size (entries). `capacity` 0 answers `([], 0)` without a call (a rule buffer of
    /// zero entries is not something every driver handles).
    ///
    /// Errors: `Error::Sys` (a driver answers EMSGSIZE when more rules exist than
    /// `capacity`); `Error::Decode` for a capacity above [`MAX_KERNEL_COUNT`].
    pub(crate) fn rule_locations(&self, capacity: u32) -> Result<(Vec<u32>, u32)> {
        let n = bounded("ethtool_rxnfc.rule_cnt", capacity)?;
        if n == 0 {
            return Ok((Vec::new(), 0));
        }
        let req = ethtool_rxnfc {
            rule_cnt: capacity,
            ..ethtool_rxnfc::new(ETHTOOL_GRXCLSRLALL)
        };
        let mut b = req.to_bytes().to_vec();
        b.resize(
            (RXNFC_RULE_LOCS_OFFSET + 4 * n).max(size_of::<ethtool_rxnfc>()),
            0,
        );
        // SAFETY: the kernel reads and writes the 192-byte struct and then writes rule_cnt u32
        // locations at offset 188; `b` holds 188 + 4 × capacity bytes (at least 192), and a
        // driver fills at most the capacity it was given (it fails with EMSGSIZE otherwise).
        unsafe { self.ioctl(&mut b)? };
        let r = ethtool_rxnfc::from_bytes(&b)?;
        let got = (r.rule_cnt as usize).min(n);
        let locs = (0..got)
            .map(|i| u32::get(&b[RXNFC_RULE_LOCS_OFFSET + 4 * i..]))
            .collect();
        Ok((locs, (r.data as u32) & !RX_CLS_LOC_SPECIAL))
    }

    /// `ETHTOOL_SRXCLSRLINS`: inserts `fs` and returns the location the kernel wrote back
    /// (the one to delete later). Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP for drivers without ntuple filters; EINVAL / ENOSPC /
    /// EEXIST as the driver decides).
    pub fn rule_insert(&self, fs: &ethtool_rx_flow_spec) -> Result<u32> {
        Ok(self.rxnfc(&rule_insert_request(fs, None))?.fs.location)
    }

    /// `ETHTOOL_SRXCLSRLINS` of `fs` as a `FLOW_RSS` rule delivering to RSS context
    /// `rss_context` ([`rule_insert_request`]); `fs.ring_cookie` is the queue offset added to
    /// the context's pick (keep it 0). Returns the location the kernel wrote back. Needs
    /// CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` — EOPNOTSUPP for drivers without ntuple filters (veth); EINVAL
    /// from the ethtool core for a context id it does not have or a non-zero offset the
    /// driver cannot add; the driver's own refusals.
    pub fn rule_insert_rss(&self, fs: &ethtool_rx_flow_spec, rss_context: u32) -> Result<u32> {
        Ok(self
            .rxnfc(&rule_insert_request(fs, Some(rss_context)))?
            .fs
            .location)
    }

    /// `ETHTOOL_SRXCLSRLDEL`: deletes the rule at `location`. Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP without ntuple filters; ENOENT/EINVAL for an unused
    /// location, driver-specific).
    pub fn rule_delete(&self, location: u32) -> Result<()> {
        let mut req = ethtool_rxnfc::new(ETHTOOL_SRXCLSRLDEL);
        req.fs.location = location;
        self.rxnfc(&req).map(|_| ())
    }

    /// `ETHTOOL_GRSSH` twice on the default context: first with sizes 0 to learn the table
    /// size, then reading the table (no key). Returns the header of the second answer and the
    /// table (queue index per bucket).
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP for drivers without RSS: veth, lo);
    /// `Error::Decode` for an absurd table size.
    pub fn rss_get(&self) -> Result<(ethtool_rxfh, Vec<u32>)> {
        self.rss_context_get(0)
    }

    /// [`rss_get`](Self::rss_get) for RSS context `rss_context` (0 = the default context):
    /// the context's indirection table as the ethtool core keeps it (no key: a driver
    /// without per-context keys reports `key_size` 0 for a context).
    ///
    /// Errors: `Error::Sys` — EOPNOTSUPP for a driver without RSS (veth) or, for a context
    /// other than 0, without additional RSS contexts; ENOENT for a context id the device does
    /// not have (the size query already answers it); `Error::Decode` for an absurd table size.
    pub fn rss_context_get(&self, rss_context: u32) -> Result<(ethtool_rxfh, Vec<u32>)> {
        let mut probe = rxfh_get_request(rss_context, 0)?;
        // SAFETY: with indir_size 0 and key_size 0 the kernel reads and writes only the
        // 24-byte header (its rss_config copy is indir_size×4 + key_size = 0 bytes).
        unsafe { self.ioctl(&mut probe)? };
        let size = ethtool_rxfh::from_bytes(&probe)?.indir_size;
        let mut b = rxfh_get_request(rss_context, size)?;
        // SAFETY: `b` is the 24-byte header plus size × 4 bytes; the kernel writes the header
        // and user indir_size × 4 + user key_size (0) bytes of rss_config — exactly that — or
        // fails with EINVAL if the device's size changed meanwhile.
        unsafe { self.ioctl(&mut b)? };
        parse_rxfh_reply(&b)
    }

    /// `ETHTOOL_SRSSH` with [`ETH_RXFH_CONTEXT_ALLOC`] ([`rxfh_context_create_request`]):
    /// creates an additional RSS context with `indir` (the device's table size) as its
    /// indirection table and returns the id the kernel allocated. Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` — EOPNOTSUPP for a driver without RSS (veth) or without additional
    /// contexts; EINVAL for a table of the wrong size or naming a queue ≥ the RX ring count;
    /// EBUSY when the driver's context ids are all in use (the core's id allocator);
    /// `Error::Failure` for an empty table; `Error::Decode` for an id of 0 written back.
    pub fn rss_context_create(&self, indir: &[u32]) -> Result<u32> {
        let mut b = rxfh_context_create_request(indir)?;
        // SAFETY: the kernel reads the 24-byte header and, when indir_size equals the device's
        // size, indir_size × 4 table bytes (key_size 0: no key); `b` is exactly that long. It
        // writes back only the 4-byte rss_context inside the header.
        unsafe { self.ioctl(&mut b)? };
        parse_rxfh_created(&b)
    }

    /// `ETHTOOL_SRSSH` deleting additional RSS context `rss_context`
    /// ([`rxfh_context_delete_request`]). Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` — EOPNOTSUPP for a driver without (additional) RSS contexts;
    /// EBUSY while an ntuple rule names the context; ENOENT for an id the device does not
    /// have; `Error::Failure` for 0 or `ETH_RXFH_CONTEXT_ALLOC` (never sent).
    pub fn rss_context_delete(&self, rss_context: u32) -> Result<()> {
        let mut b = rxfh_context_delete_request(rss_context)?;
        // SAFETY: with indir_size 0 and key_size 0 the kernel reads only the 24-byte header
        // and writes back at most the 4-byte rss_context inside it; `b` is those 24 bytes.
        unsafe { self.ioctl(&mut b)? };
        Ok(())
    }

    /// `ETHTOOL_SRSSH` on the default context: writes `indir` as the whole indirection table,
    /// key, hash function and input transformation unchanged. Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP without RSS; EINVAL when the length differs from the
    /// device's table size or an entry is ≥ the RX ring count); `Error::Failure` for an empty
    /// table.
    pub fn rss_set(&self, indir: &[u32]) -> Result<()> {
        let mut b = rxfh_set_request(indir)?;
        // SAFETY: the kernel reads the 24-byte header and, when indir_size equals the device's
        // size, indir_size × 4 table bytes (key_size 0: no key); `b` is exactly that long. It
        // writes back only the 4-byte rss_context inside the header.
        unsafe { self.ioctl(&mut b)? };
        Ok(())
    }

    /// `ETHTOOL_SRSSH` with `indir_size` 0 on the default context ([`rxfh_reset_request`]):
    /// the indirection table goes back to the driver default (`i % RX rings`) and the
    /// device is no longer marked as user-configured; key, hash function and input
    /// transformation unchanged. Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP without RSS).
    pub fn rss_reset(&self) -> Result<()> {
        let mut b = rxfh_reset_request();
        // SAFETY: with indir_size 0 and key_size 0 the kernel reads only the 24-byte header
        // (its rss_config copy is 0 bytes; the default table is built in the kernel) and
        // writes back at most the 4-byte rss_context inside it; `b` is those 24 bytes.
        unsafe { self.ioctl(&mut b)? };
        Ok(())
    }

    /// `ETHTOOL_GSSET_INFO` + `ETHTOOL_GSTRINGS` for `ETH_SS_FEATURES`: the feature names,
    /// index = feature bit.
    ///
    /// Errors: `Error::Sys`; `Error::Decode` if the kernel reports more strings than it
    /// counted.
    pub fn feature_names(&self) -> Result<Vec<String>> {
        let header = ethtool_sset_info {
            cmd: ETHTOOL_GSSET_INFO,
            reserved: 0,
            sset_mask: 1 << ETH_SS_FEATURES,
        };
        let mut info = header.to_bytes().to_vec();
        info.resize(ethtool_sset_info::LEN + 8, 0);
        // SAFETY: the kernel writes the 16-byte header and one u32 per string set that is both
        // asked for and present — at most one here — so 20 of the 24 bytes.
        unsafe { self.ioctl(&mut info)? };
        let mask = ethtool_sset_info::get(&info).sset_mask;
        if mask & (1 << ETH_SS_FEATURES) == 0 {
            return Err(Error::sys(
                self.call_name(ETHTOOL_GSSET_INFO),
                libc::EOPNOTSUPP,
            ));
        }
        let count = u32::get(&info[ethtool_sset_info::LEN..]);
        // Room for more strings than counted: GSTRINGS writes the kernel's own count, which for
        // ETH_SS_FEATURES is a compile-time constant equal to the count above; the slack makes
        // a mismatch a decode error instead of an overrun.
        const SLACK: usize = 64;
        let room = bounded("ethtool_sset_info.data[0]", count)? + SLACK;
        let header = ethtool_gstrings {
            cmd: ETHTOOL_GSTRINGS,
            string_set: ETH_SS_FEATURES,
            len: count,
        };
        let mut b = header.to_bytes().to_vec();
        b.resize(ethtool_gstrings::LEN + room * ETH_GSTRING_LEN, 0);
        // SAFETY: the kernel writes the 12-byte header and len × 32 bytes, where len is the
        // string count of ETH_SS_FEATURES — the `count` GSSET_INFO just reported — and `b`
        // has room for count + 64 strings.
        unsafe { self.ioctl(&mut b)? };
        let len = ethtool_gstrings::get(&b).len;
        if len as usize > room {
            return Err(Error::decode(
                "ethtool_gstrings.len",
                format!("{len} strings, but GSSET_INFO counted {count}"),
            ));
        }
        parse_gstrings(&b[ethtool_gstrings::LEN..], len)
    }

    /// `ETHTOOL_GFEATURES` with room for `words` blocks.
    ///
    /// Errors: `Error::Sys`.
    pub fn features_get(&self, words: u32) -> Result<Vec<ethtool_get_features_block>> {
        let mut b = gfeatures_request(words)?;
        // SAFETY: the kernel writes the 8-byte header and min(words, its own word count)
        // 16-byte blocks; `b` has room for `words` blocks.
        unsafe { self.ioctl(&mut b)? };
        parse_gfeatures(&b, words)
    }

    /// `ETHTOOL_SFEATURES` changing only feature bit `bit` to `on`; `words` must be the
    /// kernel's block count (⌈feature count / 32⌉). Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Sys` (EINVAL for a wrong `words`); the flags (unsupported / wish) are
    /// returned for the caller to judge.
    pub fn features_set(&self, words: u32, bit: u32, on: bool) -> Result<SetFeaturesFlags> {
        let mut b = sfeatures_request(words, bit, on)?;
        // SAFETY: the kernel reads the 8-byte header and, only if `size` equals its own block
        // count, that many 8-byte blocks — `b` holds `words` blocks; it writes nothing back.
        let ret = unsafe { self.ioctl(&mut b)? };
        Ok(SetFeaturesFlags(ret as u32))
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// `ethtool -N IF flow-type tcp4 src-ip 198.51.100.2 dst-ip 198.51.100.1 src-port 5201
    /// dst-port 5201 action 3` as the SRXCLSRLINS argument (synthetic, from the uapi layout;
    /// every byte of the 192 shown).
    #[rustfmt::skip]
    const TCP4_5TUPLE: [u8; 192] = [
        0x32, 0x00, 0x00, 0x00, // @0   cmd ETHTOOL_SRXCLSRLINS
        0x00, 0x00, 0x00, 0x00, // @4   flow_type (GRXFH only)
        0x00, 0x00, 0x00, 0x00, // @8   data (u64)
        0x00, 0x00, 0x00, 0x00, //
        0x01, 0x00, 0x00, 0x00, // @16  fs.flow_type TCP_V4_FLOW
        198,  51,   100,  2,    // @20  fs.h_u.tcp_ip4_spec.ip4src 198.51.100.2
        198,  51,   100,  1,    // @24  .ip4dst 198.51.100.1
        0x14, 0x51, 0x14, 0x51, // @28  .psrc 5201, .pdst 5201 (big endian)
        0x00, 0x00, 0x00, 0x00, // @32  .tos 0 + 3 bytes padding
        0x00, 0x00, 0x00, 0x00, // @36  rest of the 52-byte h_u union
        0x00, 0x00, 0x00, 0x00, // @40
        0x00, 0x00, 0x00, 0x00, // @44
        0x00, 0x00, 0x00, 0x00, // @48
        0x00, 0x00, 0x00, 0x00, // @52
        0x00, 0x00, 0x00, 0x00, // @56
        0x00, 0x00, 0x00, 0x00, // @60
        0x00, 0x00, 0x00, 0x00, // @64
        0x00, 0x00, 0x00, 0x00, // @68
        0x00, 0x00, 0x00, 0x00, // @72  fs.h_ext (20 bytes, unused)
        0x00, 0x00, 0x00, 0x00, // @76
        0x00, 0x00, 0x00, 0x00, // @80
        0x00, 0x00, 0x00, 0x00, // @84
        0x00, 0x00, 0x00, 0x00, // @88
        0xff, 0xff, 0xff, 0xff, // @92  fs.m_u.tcp_ip4_spec.ip4src mask: compare all bits
        0xff, 0xff, 0xff, 0xff, // @96  .ip4dst mask
        0xff, 0xff, 0xff, 0xff, // @100 .psrc mask, .pdst mask
        0x00, 0x00, 0x00, 0x00, // @104 .tos mask 0 (don't care) + padding
        0x00, 0x00, 0x00, 0x00, // @108 rest of the m_u union
        0x00, 0x00, 0x00, 0x00, // @112
        0x00, 0x00, 0x00, 0x00, // @116
        0x00, 0x00, 0x00, 0x00, // @120
        0x00, 0x00, 0x00, 0x00, // @124
        0x00, 0x00, 0x00, 0x00, // @128
        0x00, 0x00, 0x00, 0x00, // @132
        0x00, 0x00, 0x00, 0x00, // @136
        0x00, 0x00, 0x00, 0x00, // @140
        0x00, 0x00, 0x00, 0x00, // @144 fs.m_ext (20 bytes)
        0x00, 0x00, 0x00, 0x00, // @148
        0x00, 0x00, 0x00, 0x00, // @152
        0x00, 0x00, 0x00, 0x00, // @156
        0x00, 0x00, 0x00, 0x00, // @160
        0x00, 0x00, 0x00, 0x00, // @164 hole before ring_cookie
        0x03, 0x00, 0x00, 0x00, // @168 fs.ring_cookie = queue 3 (u64)
        0x00, 0x00, 0x00, 0x00, //
        0xff, 0xff, 0xff, 0xff, // @176 fs.location RX_CLS_LOC_ANY
        0x00, 0x00, 0x00, 0x00, // @180 tail padding of fs
        0x00, 0x00, 0x00, 0x00, // @184 rule_cnt / rss_context
        0x00, 0x00, 0x00, 0x00, // @188 tail padding (rule_locs[] would start here)
    ];

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn ins(fs: ethtool_rx_flow_spec) -> [u8; 192] {
        rule_insert_request(&fs, None).to_bytes()
    }

    #[test]
    fn tcp4_5tuple_bytes() {
        let fs = tcp4_flow_spec(
            Some((v4("198.51.100.2"), 5201)),
            (v4("198.51.100.1"), 5201),
            3,
            RX_CLS_LOC_ANY,
        );
        let b = ins(fs);
        assert_eq!(b, TCP4_5TUPLE);
        let back = ethtool_rxnfc::from_bytes(&b).unwrap();
        assert_eq!(back.fs, fs);
        assert_eq!(back.cmd, ETHTOOL_SRXCLSRLINS);
    }

    /// The expected bytes of an SRXCLSRLINS request built field by field: all zero except
    /// cmd, fs.flow_type, the given h_u/m_u ranges, ring_cookie and location.
    fn expected(flow: u32, h_u: &[(usize, &[u8])], m_u: &[(usize, &[u8])], queue: u8) -> [u8; 192] {
        let mut e = [0u8; 192];
        e[0] = 0x32; // cmd ETHTOOL_SRXCLSRLINS
        e[16] = flow as u8; // fs.flow_type
        for (off, bytes) in h_u {
            e[20 + off..20 + off + bytes.len()].copy_from_slice(bytes); // fs.h_u @20
        }
        for (off, bytes) in m_u {
            e[92 + off..92 + off + bytes.len()].copy_from_slice(bytes); // fs.m_u @92
        }
        e[168] = queue; // fs.ring_cookie @168
        e[176..180].copy_from_slice(&[0xff; 4]); // fs.location RX_CLS_LOC_ANY @176
        e
    }

    #[test]
    fn tcp4_3tuple_bytes() {
        let b = ins(tcp4_flow_spec(
            None,
            (v4("198.51.100.1"), 5201),
            1,
            RX_CLS_LOC_ANY,
        ));
        let e = expected(
            1,                                               // TCP_V4_FLOW
            &[(4, &[198, 51, 100, 1]), (10, &[0x14, 0x51])], // ip4dst @4, pdst @10
            &[(4, &[0xff; 4]), (10, &[0xff; 2])],            // their masks; src masks 0
            1,
        );
        assert_eq!(b, e);
        assert_eq!(b, {
            // Same as the 5-tuple fixture with src fields and src masks cleared.
            let mut f = TCP4_5TUPLE;
            f[20..24].fill(0); // ip4src
            f[28..30].fill(0); // psrc
            f[92..96].fill(0); // ip4src mask
            f[100..102].fill(0); // psrc mask
            f[168] = 1; // queue 1
            f
        });
    }

    #[test]
    fn tcp6_5tuple_bytes() {
        let src = v6("2001:db8::2");
        let dst = v6("2001:db8::1");
        let b = ins(tcp6_flow_spec(
            Some((src, 40000)),
            (dst, 5201),
            7,
            RX_CLS_LOC_ANY,
        ));
        let e = expected(
            5, // TCP_V6_FLOW
            &[
                (0, &src.octets()),  // ip6src @0 (16 bytes, network order)
                (16, &dst.octets()), // ip6dst @16
                (32, &[0x9c, 0x40]), // psrc 40000 @32
                (34, &[0x14, 0x51]), // pdst 5201 @34
            ],
            &[(0, &[0xff; 16]), (16, &[0xff; 16]), (32, &[0xff; 4])], // masks; tclass mask 0
            7,
        );
        assert_eq!(b, e);
        assert_eq!(&b[20..22], &[0x20, 0x01], "address bytes in network order");
        assert_eq!(b[35], 0x02, "…::2 ends the source address");
    }

    #[test]
    fn tcp6_3tuple_bytes() {
        let dst = v6("2001:db8::1");
        let b = ins(tcp6_flow_spec(None, (dst, 5201), 0, RX_CLS_LOC_ANY));
        let e = expected(
            5,
            &[(16, &dst.octets()), (34, &[0x14, 0x51])],
            &[(16, &[0xff; 16]), (34, &[0xff; 2])],
            0,
        );
        assert_eq!(b, e);
    }

    /// GRSSH size query, then the read of a 4-entry table (synthetic).
    #[rustfmt::skip]
    const RSS_GET_SIZE: [u8; 24] = [
        0x46, 0x00, 0x00, 0x00, // cmd ETHTOOL_GRSSH
        0x00, 0x00, 0x00, 0x00, // rss_context 0 (default)
        0x00, 0x00, 0x00, 0x00, // indir_size 0: "tell me the sizes"
        0x00, 0x00, 0x00, 0x00, // key_size 0: no key
        0x00,                   // hfunc
        0x00,                   // input_xfrm
        0x00, 0x00,             // rsvd8[2]
        0x00, 0x00, 0x00, 0x00, // rsvd32
    ];

    #[test]
    fn rss_get_request_bytes() {
        assert_eq!(rxfh_get_request(0, 0).unwrap(), RSS_GET_SIZE);
        let b = rxfh_get_request(0, 4).unwrap();
        assert_eq!(b.len(), 24 + 16, "header + 4 u32 entries");
        assert_eq!(&b[8..12], &[4, 0, 0, 0], "indir_size 4");
        let mut rest = b.clone();
        rest[8] = 0;
        assert_eq!(&rest[..24], &RSS_GET_SIZE, "otherwise the same header");
        assert!(b[24..].iter().all(|&x| x == 0), "room for the table");
    }

    /// What a driver writes back for a 4-entry table spread over queues 0 and 1, with a 40-byte
    /// key, Toeplitz hash (bit 0) and no input transform (synthetic).
    #[rustfmt::skip]
    const RSS_GET_REPLY: [u8; 40] = [
        0x46, 0x00, 0x00, 0x00, // cmd
        0x00, 0x00, 0x00, 0x00, // rss_context 0
        0x04, 0x00, 0x00, 0x00, // indir_size 4
        0x28, 0x00, 0x00, 0x00, // key_size 40 (the device's; no key was asked for)
        0x01,                   // hfunc ETH_RSS_HASH_TOP
        0x00,                   // input_xfrm
        0x00, 0x00,             // rsvd8
        0x00, 0x00, 0x00, 0x00, // rsvd32
        0x00, 0x00, 0x00, 0x00, // indir[0] = queue 0
        0x01, 0x00, 0x00, 0x00, // indir[1] = queue 1
        0x00, 0x00, 0x00, 0x00, // indir[2] = queue 0
        0x01, 0x00, 0x00, 0x00, // indir[3] = queue 1
    ];

    #[test]
    fn rss_get_reply_parse() {
        let (h, indir) = parse_rxfh_reply(&RSS_GET_REPLY).unwrap();
        assert_eq!(
            h,
            ethtool_rxfh {
                cmd: ETHTOOL_GRSSH,
                indir_size: 4,
                key_size: 40,
                hfunc: 1,
                ..Default::default()
            }
        );
        assert_eq!(indir, vec![0, 1, 0, 1]);
        assert_eq!(h.to_bytes(), RSS_GET_REPLY[..24]);
        let e = parse_rxfh_reply(&RSS_GET_REPLY[..36]).unwrap_err();
        assert!(e.to_string().contains("ethtool_rxfh.rss_config"), "{e}");
    }

    /// SRSSH writing the table [0, 0, 1, 1] (what "spread over queues [0, 2)" gives for 4
    /// buckets, in blocks), key, hash function and input transform unchanged (synthetic).
    #[rustfmt::skip]
    const RSS_SET_REQ: [u8; 40] = [
        0x47, 0x00, 0x00, 0x00, // cmd ETHTOOL_SRSSH
        0x00, 0x00, 0x00, 0x00, // rss_context 0
        0x04, 0x00, 0x00, 0x00, // indir_size 4 (= the device's table size)
        0x00, 0x00, 0x00, 0x00, // key_size 0: key unchanged
        0x00,                   // hfunc ETH_RSS_HASH_NO_CHANGE
        0xff,                   // input_xfrm RXH_XFRM_NO_CHANGE
        0x00, 0x00,             // rsvd8
        0x00, 0x00, 0x00, 0x00, // rsvd32
        0x00, 0x00, 0x00, 0x00, // indir[0] = 0
        0x00, 0x00, 0x00, 0x00, // indir[1] = 0
        0x01, 0x00, 0x00, 0x00, // indir[2] = 1
        0x01, 0x00, 0x00, 0x00, // indir[3] = 1
    ];

    #[test]
    fn rss_set_request_bytes() {
        assert_eq!(rxfh_set_request(&[0, 0, 1, 1]).unwrap(), RSS_SET_REQ);
        let e = rxfh_set_request(&[]).unwrap_err();
        assert!(e.to_string().contains("reset the table"), "{e}");
    }

    /// SRSSH "reset to the driver default" (`ethtool -X IF default`): header only, no table
    /// (synthetic from the uapi layout).
    #[rustfmt::skip]
    const RSS_RESET_REQ: [u8; 24] = [
        0x47, 0x00, 0x00, 0x00, // cmd ETHTOOL_SRSSH
        0x00, 0x00, 0x00, 0x00, // rss_context 0 (the default context; reset needs it)
        0x00, 0x00, 0x00, 0x00, // indir_size 0: reset the table to the driver default
        0x00, 0x00, 0x00, 0x00, // key_size 0: key unchanged
        0x00,                   // hfunc ETH_RSS_HASH_NO_CHANGE
        0xff,                   // input_xfrm RXH_XFRM_NO_CHANGE
        0x00, 0x00,             // rsvd8
        0x00, 0x00, 0x00, 0x00, // rsvd32
    ];

    #[test]
    fn rss_reset_request_bytes() {
        assert_eq!(rxfh_reset_request(), RSS_RESET_REQ);
        let h = ethtool_rxfh::from_bytes(&RSS_RESET_REQ).unwrap();
        assert_eq!((h.cmd, h.indir_size, h.key_size), (ETHTOOL_SRSSH, 0, 0));
    }

    #[test]
    fn rss_context_values_are_the_uapi_ones() {
        // include/uapi/linux/ethtool.h
        assert_eq!(ETH_RXFH_CONTEXT_ALLOC, 0xffff_ffff);
        assert_eq!(FLOW_RSS, 0x2000_0000);
        assert_eq!((ETHTOOL_GRSSH, ETHTOOL_SRSSH), (0x46, 0x47));
        assert_eq!(ETHTOOL_SRXCLSRLINS, 0x32);
    }

    /// SRSSH creating an RSS context with the 4-entry table [2, 3, 2, 3] (a context over queues
    /// 2..4 on a device with a 4-entry table), key, hash function and input transform
    /// unchanged (synthetic, from the uapi layout; ethtool(8) sends the same header for
    /// `-X IF context new start 2 equal 2`).
    #[rustfmt::skip]
    const RSS_CTX_CREATE_REQ: [u8; 40] = [
        0x47, 0x00, 0x00, 0x00, // cmd ETHTOOL_SRSSH
        0xff, 0xff, 0xff, 0xff, // rss_context ETH_RXFH_CONTEXT_ALLOC: create one
        0x04, 0x00, 0x00, 0x00, // indir_size 4 (= the device's table size)
        0x00, 0x00, 0x00, 0x00, // key_size 0: the device's key
        0x00,                   // hfunc ETH_RSS_HASH_NO_CHANGE
        0xff,                   // input_xfrm RXH_XFRM_NO_CHANGE
        0x00, 0x00,             // rsvd8
        0x00, 0x00, 0x00, 0x00, // rsvd32
        0x02, 0x00, 0x00, 0x00, // indir[0] = queue 2
        0x03, 0x00, 0x00, 0x00, // indir[1] = queue 3
        0x02, 0x00, 0x00, 0x00, // indir[2] = queue 2
        0x03, 0x00, 0x00, 0x00, // indir[3] = queue 3
    ];

    #[test]
    fn rss_context_create_request_and_answer() {
        assert_eq!(
            rxfh_context_create_request(&[2, 3, 2, 3]).unwrap(),
            RSS_CTX_CREATE_REQ
        );
        assert!(rxfh_context_create_request(&[]).is_err(), "no empty table");
        // The kernel writes the allocated id over ETH_RXFH_CONTEXT_ALLOC and nothing else.
        let mut answer = RSS_CTX_CREATE_REQ;
        answer[4..8].copy_from_slice(&[0x01, 0x00, 0x00, 0x00]); // rss_context 1
        assert_eq!(parse_rxfh_created(&answer).unwrap(), 1);
        for bad in [0u32, ETH_RXFH_CONTEXT_ALLOC] {
            answer[4..8].copy_from_slice(&bad.to_ne_bytes());
            let e = parse_rxfh_created(&answer).unwrap_err();
            assert!(e.to_string().contains("ethtool_rxfh.rss_context"), "{e}");
        }
        assert!(parse_rxfh_created(&answer[..23]).is_err());
    }

    #[test]
    fn rss_context_get_request_bytes() {
        // The size query of RSS context 1: the default context's, but for rss_context.
        let mut ctx1 = RSS_GET_SIZE;
        ctx1[4] = 0x01; // rss_context 1
        assert_eq!(rxfh_get_request(1, 0).unwrap(), ctx1);
        let b = rxfh_get_request(1, 128).unwrap();
        assert_eq!(b.len(), 24 + 4 * 128, "header + 128 u32 entries");
        assert_eq!(&b[4..8], &[1, 0, 0, 0], "rss_context 1");
        assert_eq!(&b[8..12], &[128, 0, 0, 0], "indir_size 128");
    }

    /// SRSSH deleting RSS context 3 (`ethtool -X IF context 3 delete`; synthetic).
    #[rustfmt::skip]
    const RSS_CTX_DELETE_REQ: [u8; 24] = [
        0x47, 0x00, 0x00, 0x00, // cmd ETHTOOL_SRSSH
        0x03, 0x00, 0x00, 0x00, // rss_context 3
        0x00, 0x00, 0x00, 0x00, // indir_size 0 with key_size 0 on a context: delete it
        0x00, 0x00, 0x00, 0x00, // key_size 0
        0x00,                   // hfunc ETH_RSS_HASH_NO_CHANGE
        0xff,                   // input_xfrm RXH_XFRM_NO_CHANGE
        0x00, 0x00,             // rsvd8
        0x00, 0x00, 0x00, 0x00, // rsvd32
    ];

    #[test]
    fn rss_context_delete_request_bytes() {
        assert_eq!(rxfh_context_delete_request(3).unwrap(), RSS_CTX_DELETE_REQ);
        // The delete differs from the default context's reset only in rss_context.
        let mut reset = RSS_CTX_DELETE_REQ;
        reset[4] = 0;
        assert_eq!(rxfh_reset_request(), reset);
        for never in [0, ETH_RXFH_CONTEXT_ALLOC] {
            let e = rxfh_context_delete_request(never).unwrap_err();
            assert!(e.to_string().contains("cannot be deleted"), "{e}");
        }
    }

    #[test]
    fn flow_rss_rule_bytes() {
        // `ethtool -N IF flow-type tcp4 dst-ip 198.51.100.1 dst-port 5201 context 2`: the
        // 3-tuple rule with FLOW_RSS, queue offset 0 and the context in rss_context.
        let fs = tcp4_flow_spec(None, (v4("198.51.100.1"), 5201), 0, RX_CLS_LOC_ANY);
        let b = rule_insert_request(&fs, Some(2)).to_bytes();
        let mut e = expected(
            1,                                               // TCP_V4_FLOW
            &[(4, &[198, 51, 100, 1]), (10, &[0x14, 0x51])], // ip4dst @4, pdst @10
            &[(4, &[0xff; 4]), (10, &[0xff; 2])],            // their masks
            0,                                               // ring_cookie: offset 0
        );
        e[16..20].copy_from_slice(&[0x01, 0x00, 0x00, 0x20]); // fs.flow_type TCP_V4_FLOW | FLOW_RSS
        e[184..188].copy_from_slice(&[0x02, 0x00, 0x00, 0x00]); // rss_context 2 (union with rule_cnt)
        assert_eq!(b, e);
        let back = ethtool_rxnfc::from_bytes(&b).unwrap();
        assert_eq!(back.fs.flow_type, TCP_V4_FLOW | FLOW_RSS);
        assert_eq!((back.rule_cnt, back.fs.ring_cookie), (2, 0));
        // Without a context the same spec is the plain rule, byte for byte.
        assert_eq!(rule_insert_request(&fs, None).to_bytes(), ins(fs));
        assert_eq!(rule_insert_request(&fs, None).fs.flow_type, TCP_V4_FLOW);
    }

    #[test]
    fn gstrings_and_features() {
        let mut data = vec![0u8; 3 * 32];
        data[..7].copy_from_slice(b"tx-sg\0\0");
        data[32..48].copy_from_slice(b"rx-ntuple-filter");
        let names = parse_gstrings(&data, 3).unwrap();
        assert_eq!(names, vec!["tx-sg", "rx-ntuple-filter", ""]);
        assert!(parse_gstrings(&data, 4).is_err());

        assert_eq!(feature_words(64), 2);
        assert_eq!(feature_words(65), 3);
        // Bit 38 (rx-ntuple-filter on 6.18) on: block 1, bit 6.
        #[rustfmt::skip]
        let on: [u8; 24] = [
            0x3b, 0x00, 0x00, 0x00, // cmd ETHTOOL_SFEATURES
            0x02, 0x00, 0x00, 0x00, // size 2 blocks
            0x00, 0x00, 0x00, 0x00, // block 0 valid
            0x00, 0x00, 0x00, 0x00, // block 0 requested
            0x40, 0x00, 0x00, 0x00, // block 1 valid: bit 6 (feature 38)
            0x40, 0x00, 0x00, 0x00, // block 1 requested: on
        ];
        assert_eq!(sfeatures_request(2, 38, true).unwrap(), on);
        let mut off = on;
        off[20] = 0; // requested: off
        assert_eq!(sfeatures_request(2, 38, false).unwrap(), off);
        assert!(sfeatures_request(1, 38, true).is_err());

        let mut g = gfeatures_request(2).unwrap();
        assert_eq!(&g[..8], &[0x3a, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(g.len(), 8 + 32);
        g[8 + 16 + 8] = 0x40; // block 1 active bit 6
        let blocks = parse_gfeatures(&g, 2).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1].active, 0x40);
        assert_eq!(
            parse_gfeatures(&g, 1).unwrap().len(),
            1,
            "never past our room"
        );

        let f = SetFeaturesFlags(ETHTOOL_F_UNSUPPORTED);
        assert!(f.unsupported() && !f.wish());
        assert!(SetFeaturesFlags(ETHTOOL_F_WISH).wish());
    }

    #[test]
    fn rule_table_helpers() {
        let r = ethtool_rxnfc {
            data: u64::from(RX_CLS_LOC_SPECIAL | 1024),
            rule_cnt: 3,
            ..ethtool_rxnfc::new(ETHTOOL_GRXCLSRLCNT)
        };
        assert_eq!(
            RuleCount::from_rxnfc(&r),
            RuleCount {
                rule_cnt: 3,
                table_size: 1024,
                driver_picks_location: true
            }
        );
        assert_eq!(pick_free_location(8, &[]), Some(7));
        assert_eq!(pick_free_location(8, &[7, 6, 3]), Some(5));
        assert_eq!(pick_free_location(2, &[0, 1]), None);
        assert_eq!(pick_free_location(0, &[]), None);
    }

    #[test]
    fn drvinfo_decodes_names() {
        let mut b = vec![0u8; DRVINFO_LEN];
        b[0] = 0x03;
        b[4..8].copy_from_slice(b"veth");
        b[36..39].copy_from_slice(b"1.0");
        b[100..112].copy_from_slice(b"0000:00:03.0");
        let d = DrvInfo::from_bytes(&b).unwrap();
        assert_eq!(
            (
                d.driver.as_str(),
                d.version.as_str(),
                d.fw_version.as_str(),
                d.bus_info.as_str()
            ),
            ("veth", "1.0", "", "0000:00:03.0")
        );
        assert!(DrvInfo::from_bytes(&b[..195]).is_err());
    }

    #[test]
    fn bad_names_refused() {
        for n in ["", "sixteen-bytes-xx", "a\0b"] {
            let e = EthtoolIoctl::open(n).unwrap_err();
            assert!(
                matches!(e, Error::Sys { ref call, errno: libc::EINVAL }
                    if call.starts_with("invalid interface name")),
                "{n:?}: {e}"
            );
        }
    }
}
