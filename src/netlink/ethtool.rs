//! The `ethtool` generic-netlink family (Documentation/netlink/specs/ethtool.yaml,
//! include/uapi/linux/ethtool_netlink_generated.h): channel counts and ring parameters,
//! including header split (`tcp-data-split`) and `hds-thresh`, which devmem needs; and the
//! list of a device's additional RSS contexts (an RSS_GET dump), which no ioctl can give.
//!
//! ethtool numbers its messages in two spaces: requests use the user→kernel enum
//! ([`EthtoolCmd`]), replies and notifications the kernel→user enum ([`EthtoolReply`]). The
//! same number means different messages in the two directions (16 is RINGS_SET in a request
//! and RINGS_GET_REPLY in a reply).

use super::attr::{attr_struct, kernel_names, put_attr, AttrIter, WireEnum};
use super::ctrl::{resolve_family, Family};
use super::dev_label;
use super::socket::{GenlRequest, NlSocket};
use crate::error::{Error, Result};

kernel_names! {
    /// User→kernel message ids (`ETHTOOL_MSG_*` of the USER enum) this crate sends (6.18
    /// numbers them 1..=50; STRSET_GET 1, FEATURES_GET/SET 11/12, PRIVFLAGS_GET/SET 13/14,
    /// RSS_SET 48 and RSS_CREATE_ACT/DELETE_ACT 49/50 are not sent). Requests are named in
    /// errors by their spec operation ([`EthtoolCmd::op`]), so only the tests that check the
    /// two directions number differently call the name function.
    #[cfg(test)]
    fn ethtool_msg_name -> u8 {
        ETHTOOL_MSG_RINGS_GET = 15,
        ETHTOOL_MSG_RINGS_SET = 16,
        ETHTOOL_MSG_CHANNELS_GET = 17,
        ETHTOOL_MSG_CHANNELS_SET = 18,
        ETHTOOL_MSG_RSS_GET = 38,
    }
}

kernel_names! {
    /// Kernel→user message ids (`ETHTOOL_MSG_*` of the KERNEL enum); 6.18 numbers them
    /// 1..=53.
    fn ethtool_reply_name -> u8 {
        ETHTOOL_MSG_STRSET_GET_REPLY = 1,
        ETHTOOL_MSG_FEATURES_GET_REPLY = 11,
        ETHTOOL_MSG_FEATURES_SET_REPLY = 12,
        ETHTOOL_MSG_FEATURES_NTF = 13,
        ETHTOOL_MSG_PRIVFLAGS_GET_REPLY = 14,
        ETHTOOL_MSG_PRIVFLAGS_NTF = 15,
        ETHTOOL_MSG_RINGS_GET_REPLY = 16,
        ETHTOOL_MSG_RINGS_NTF = 17,
        ETHTOOL_MSG_CHANNELS_GET_REPLY = 18,
        ETHTOOL_MSG_CHANNELS_NTF = 19,
        ETHTOOL_MSG_RSS_GET_REPLY = 38,
        ETHTOOL_MSG_RSS_NTF = 50,
        ETHTOOL_MSG_RSS_CREATE_ACT_REPLY = 51,
        ETHTOOL_MSG_RSS_CREATE_NTF = 52,
        ETHTOOL_MSG_RSS_DELETE_NTF = 53,
    }
}

/// Request message ids (user→kernel `ETHTOOL_MSG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EthtoolCmd {
    /// `ETHTOOL_MSG_RINGS_GET` (15).
    RingsGet = ETHTOOL_MSG_RINGS_GET,
    /// `ETHTOOL_MSG_RINGS_SET` (16).
    RingsSet = ETHTOOL_MSG_RINGS_SET,
    /// `ETHTOOL_MSG_CHANNELS_GET` (17).
    ChannelsGet = ETHTOOL_MSG_CHANNELS_GET,
    /// `ETHTOOL_MSG_CHANNELS_SET` (18).
    ChannelsSet = ETHTOOL_MSG_CHANNELS_SET,
    /// `ETHTOOL_MSG_RSS_GET` (38); sent as a dump.
    RssGet = ETHTOOL_MSG_RSS_GET,
}

impl EthtoolCmd {
    /// The spec's operation name, used in errors.
    pub fn op(self) -> &'static str {
        match self {
            EthtoolCmd::RingsGet => "rings-get",
            EthtoolCmd::RingsSet => "rings-set",
            EthtoolCmd::ChannelsGet => "channels-get",
            EthtoolCmd::ChannelsSet => "channels-set",
            EthtoolCmd::RssGet => "rss-get",
        }
    }
}

/// Reply message ids (kernel→user `ETHTOOL_MSG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EthtoolReply {
    /// `ETHTOOL_MSG_RINGS_GET_REPLY` (16).
    RingsGetReply = ETHTOOL_MSG_RINGS_GET_REPLY,
    /// `ETHTOOL_MSG_CHANNELS_GET_REPLY` (18).
    ChannelsGetReply = ETHTOOL_MSG_CHANNELS_GET_REPLY,
    /// `ETHTOOL_MSG_RSS_GET_REPLY` (38).
    RssGetReply = ETHTOOL_MSG_RSS_GET_REPLY,
}

/// `enum ethtool_tcp_data_split`: header split (HDS) mode of `ETHTOOL_A_RINGS_TCP_DATA_SPLIT`;
/// the discriminants are the wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TcpDataSplit {
    /// `ETHTOOL_TCP_DATA_SPLIT_UNKNOWN`: on GET, the driver does not report it; on SET, let
    /// the driver choose ("auto").
    Unknown = 0,
    /// `ETHTOOL_TCP_DATA_SPLIT_DISABLED`: header split off.
    Disabled = 1,
    /// `ETHTOOL_TCP_DATA_SPLIT_ENABLED`: header split on; devmem needs this.
    Enabled = 2,
}

impl TcpDataSplit {
    /// The enum's name in lower case: `"unknown"` (on SET: let the driver choose),
    /// `"disabled"` or `"enabled"`.
    pub fn name(self) -> &'static str {
        match self {
            TcpDataSplit::Unknown => "unknown",
            TcpDataSplit::Disabled => "disabled",
            TcpDataSplit::Enabled => "enabled",
        }
    }
}

impl WireEnum for TcpDataSplit {
    type Raw = u8;

    /// `Error::Decode` naming `ETHTOOL_A_RINGS_TCP_DATA_SPLIT` for values above 2.
    fn decode(v: u8) -> Result<Self> {
        match v {
            0 => Ok(TcpDataSplit::Unknown),
            1 => Ok(TcpDataSplit::Disabled),
            2 => Ok(TcpDataSplit::Enabled),
            v => Err(Error::decode(
                "ETHTOOL_A_RINGS_TCP_DATA_SPLIT",
                format!("value {v} is not unknown (0), disabled (1) or enabled (2)"),
            )),
        }
    }

    fn encode(&self) -> u8 {
        *self as u8
    }
}

attr_struct! {
    /// `ETHTOOL_A_HEADER_*`: the header nest (attribute 1 of every ethtool message) naming
    /// the device a request is about (and, in replies, which it was).
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Header("ethtool header") {
        /// Interface index.
        ETHTOOL_A_HEADER_DEV_INDEX = 1 => dev_index: opt u32,
        /// Interface name (at most 127 bytes in the 6.18 policy).
        ETHTOOL_A_HEADER_DEV_NAME = 2 => dev_name: opt string,
        /// `ETHTOOL_FLAG_COMPACT_BITSETS` 1, `OMIT_REPLY` 2, `STATS` 4.
        ETHTOOL_A_HEADER_FLAGS = 3 => flags: opt u32,
        /// PHY index (6.12+).
        ETHTOOL_A_HEADER_PHY_INDEX = 4 => phy_index: opt u32,
    }
}

attr_struct! {
    /// Channel (queue) counts from `CHANNELS_GET` (`ETHTOOL_A_CHANNELS_*`, all u32); `None`
    /// where the driver does not report one. C ncdevmem counts RX queues as
    /// `rx_count + combined_count`.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Channels("ethtool channels-get reply") {
        /// Most RX-only channels.
        ETHTOOL_A_CHANNELS_RX_MAX = 2 => rx_max: opt u32,
        /// Most TX-only channels.
        ETHTOOL_A_CHANNELS_TX_MAX = 3 => tx_max: opt u32,
        /// Most other (link interrupt, …) channels.
        ETHTOOL_A_CHANNELS_OTHER_MAX = 4 => other_max: opt u32,
        /// Most combined (RX+TX) channels.
        ETHTOOL_A_CHANNELS_COMBINED_MAX = 5 => combined_max: opt u32,
        /// RX-only channels in use.
        ETHTOOL_A_CHANNELS_RX_COUNT = 6 => rx_count: opt u32,
        /// TX-only channels in use.
        ETHTOOL_A_CHANNELS_TX_COUNT = 7 => tx_count: opt u32,
        /// Other channels in use.
        ETHTOOL_A_CHANNELS_OTHER_COUNT = 8 => other_count: opt u32,
        /// Combined channels in use.
        ETHTOOL_A_CHANNELS_COMBINED_COUNT = 9 => combined_count: opt u32,
    }
    also {
        ETHTOOL_A_CHANNELS_HEADER = 1,
    }
}

impl Channels {
    /// RX queues in use as C ncdevmem counts them: rx-count + combined-count (queues).
    pub fn rx_queues(&self) -> u32 {
        self.rx_count
            .unwrap_or(0)
            .saturating_add(self.combined_count.unwrap_or(0))
    }
}

attr_struct! {
    /// Ring parameters from `RINGS_GET` (`ETHTOOL_A_RINGS_*`); `None` where the driver does
    /// not report one.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Rings("ethtool rings-get reply") {
        /// Largest RX ring, descriptors.
        ETHTOOL_A_RINGS_RX_MAX = 2 => rx_max: opt u32,
        /// Largest RX mini ring, descriptors.
        ETHTOOL_A_RINGS_RX_MINI_MAX = 3 => rx_mini_max: opt u32,
        /// Largest RX jumbo ring, descriptors.
        ETHTOOL_A_RINGS_RX_JUMBO_MAX = 4 => rx_jumbo_max: opt u32,
        /// Largest TX ring, descriptors.
        ETHTOOL_A_RINGS_TX_MAX = 5 => tx_max: opt u32,
        /// RX ring size, descriptors.
        ETHTOOL_A_RINGS_RX = 6 => rx: opt u32,
        /// RX mini ring size, descriptors.
        ETHTOOL_A_RINGS_RX_MINI = 7 => rx_mini: opt u32,
        /// RX jumbo ring size, descriptors.
        ETHTOOL_A_RINGS_RX_JUMBO = 8 => rx_jumbo: opt u32,
        /// TX ring size, descriptors.
        ETHTOOL_A_RINGS_TX = 9 => tx: opt u32,
        /// RX buffer size, bytes.
        ETHTOOL_A_RINGS_RX_BUF_LEN = 10 => rx_buf_len: opt u32,
        /// Header split mode (u8 enum).
        ETHTOOL_A_RINGS_TCP_DATA_SPLIT = 11 => tcp_data_split: opt u8 as TcpDataSplit,
        /// Completion queue entry size, bytes.
        ETHTOOL_A_RINGS_CQE_SIZE = 12 => cqe_size: opt u32,
        /// TX push (u8, 0/1).
        ETHTOOL_A_RINGS_TX_PUSH = 13 => tx_push: opt u8,
        /// RX push (u8, 0/1).
        ETHTOOL_A_RINGS_RX_PUSH = 14 => rx_push: opt u8,
        /// TX push buffer, bytes.
        ETHTOOL_A_RINGS_TX_PUSH_BUF_LEN = 15 => tx_push_buf_len: opt u32,
        /// Largest TX push buffer, bytes.
        ETHTOOL_A_RINGS_TX_PUSH_BUF_LEN_MAX = 16 => tx_push_buf_len_max: opt u32,
        /// Header-split threshold, bytes (6.14+): packets with payload above this size are
        /// header-split. devmem needs 0.
        ETHTOOL_A_RINGS_HDS_THRESH = 17 => hds_thresh: opt u32,
        /// Largest header-split threshold, bytes (6.14+).
        ETHTOOL_A_RINGS_HDS_THRESH_MAX = 18 => hds_thresh_max: opt u32,
        // ETHTOOL_A_RINGS_RX_BUF_LEN_MAX = 19 (proposed; not in 6.18)
    }
    also {
        ETHTOOL_A_RINGS_HEADER = 1,
    }
}

attr_struct! {
    /// One `ETHTOOL_MSG_RSS_GET_REPLY` (`ETHTOOL_A_RSS_*`), as far as this tool reads it: which
    /// RSS context the message describes. The indirection table (attr 4, `u32` per entry) and
    /// key (5) are read through the `ETHTOOL_GRSSH` ioctl instead
    /// ([`crate::sys::ethtool_ioctl`]); the header (1) is decoded for its errors only.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct RssReply("ethtool rss-get reply") {
        /// The additional RSS context; absent for the default context (0).
        ETHTOOL_A_RSS_CONTEXT = 2 => context: opt u32,
        /// Hash function bits (`ETH_RSS_HASH_*`); absent when 0, and for the contexts of a
        /// driver without per-context keys.
        ETHTOOL_A_RSS_HFUNC = 3 => hfunc: opt u32,
        /// Input transformation (`RXH_XFRM_*`); absent when 0.
        ETHTOOL_A_RSS_INPUT_XFRM = 6 => input_xfrm: opt u32,
    }
    also {
        ETHTOOL_A_RSS_HEADER = 1,
        ETHTOOL_A_RSS_INDIR = 4,
        ETHTOOL_A_RSS_HKEY = 5,
        ETHTOOL_A_RSS_START_CONTEXT = 7,
    }
}

/// An `ethtool` family handle: a socket plus the resolved family.
#[derive(Debug)]
pub struct Ethtool {
    sock: NlSocket,
    family: Family,
}

impl Ethtool {
    /// Opens a socket and resolves `"ethtool"`.
    ///
    /// Errors: `Error::Netlink` ENOENT when the kernel lacks ethtool netlink
    /// (`CONFIG_ETHTOOL_NETLINK` off; see `caps::skip_if_family_missing`).
    pub fn open() -> Result<Self> {
        let mut sock = NlSocket::open()?;
        let family = resolve_family(&mut sock, "ethtool")?;
        Ok(Ethtool { sock, family })
    }

    /// The resolved family.
    pub fn family(&self) -> &Family {
        &self.family
    }

    fn get(&mut self, req: GenlRequest, reply: EthtoolReply) -> Result<Vec<u8>> {
        let replies = self.sock.request(&req)?;
        let what = format!("ethtool {} reply", ethtool_reply_name(reply as u8));
        let r = replies
            .into_iter()
            .next()
            .ok_or_else(|| Error::decode(what, "no reply message before the ACK"))?;
        checked_reply(r, reply)
    }

    /// `ETHTOOL_MSG_RSS_GET` (38) as a dump for `ifindex` (the header names the device, so the
    /// kernel dumps only its contexts; replies `ETHTOOL_MSG_RSS_GET_REPLY` 38, one per
    /// context, the default context's without `ETHTOOL_A_RSS_CONTEXT`): the ids of the
    /// device's additional RSS contexts, ascending. A device without RSS (veth: no
    /// `get_rxfh`) is dumped as nothing, so `[]`. No ioctl lists contexts; the dump exists
    /// since 6.11, `ETHTOOL_A_RSS_START_CONTEXT` is not sent.
    ///
    /// Errors: `Error::Netlink` (EOPNOTSUPP on kernels without the RSS_GET dump, ENODEV for a
    /// vanished device); `Error::Decode` for a reply that is not RSS_GET_REPLY.
    #[doc(alias = "ETHTOOL_MSG_RSS_GET")]
    pub fn rss_context_ids(&mut self, ifindex: u32) -> Result<Vec<u32>> {
        let req = rss_dump_request(&self.family, ifindex, dev_label(ifindex, None));
        rss_context_ids_of(self.sock.request(&req)?)
    }

    /// `ETHTOOL_MSG_CHANNELS_GET` (17; reply 18) for `ifindex`.
    ///
    /// Errors: `Error::Netlink` EOPNOTSUPP when the driver has no channels (lo), ENODEV for
    /// an unknown device.
    #[doc(alias = "ETHTOOL_MSG_CHANNELS_GET")]
    pub fn channels_get(&mut self, ifindex: u32) -> Result<Channels> {
        let req = header_request(
            &self.family,
            EthtoolCmd::ChannelsGet,
            ifindex,
            dev_label(ifindex, None),
        );
        let attrs = self.get(req, EthtoolReply::ChannelsGetReply)?;
        Channels::from_attrs(&attrs)
    }

    /// `ETHTOOL_MSG_RINGS_GET` (15; reply 16) for `ifindex`.
    ///
    /// Errors: `Error::Netlink` EOPNOTSUPP when the driver has no ring parameters (veth, lo).
    #[doc(alias = "ETHTOOL_MSG_RINGS_GET")]
    pub fn rings_get(&mut self, ifindex: u32) -> Result<Rings> {
        let req = header_request(
            &self.family,
            EthtoolCmd::RingsGet,
            ifindex,
            dev_label(ifindex, None),
        );
        let attrs = self.get(req, EthtoolReply::RingsGetReply)?;
        Rings::from_attrs(&attrs)
    }

    /// `ETHTOOL_MSG_RINGS_SET` (16; answered with an ACK only) for `ifindex`, carrying only
    /// the header split settings: `tcp-data-split` = `split` and, when `Some`, `hds-thresh`
    /// (bytes). Set hds-thresh only when RINGS_GET reported it. Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Netlink` — on 6.18 veth/lo/virtio_net: EOPNOTSUPP "setting TCP data
    /// split is not supported" at `ETHTOOL_A_RINGS_TCP_DATA_SPLIT`; with a memory provider
    /// bound, EINVAL "can't disable tcp-data-split while device has memory provider enabled".
    #[doc(alias = "ETHTOOL_MSG_RINGS_SET")]
    pub fn rings_set_hds(
        &mut self,
        ifindex: u32,
        split: TcpDataSplit,
        hds_thresh: Option<u32>,
    ) -> Result<()> {
        let req = rings_set_hds_request(&self.family, ifindex, None, split, hds_thresh);
        self.sock.request(&req).map(|_| ())
    }

    /// `ETHTOOL_MSG_CHANNELS_SET` (18; ACK only) for `ifindex` with the counts given (queues;
    /// `None` leaves a count unchanged). Needs CAP_NET_ADMIN.
    ///
    /// Errors: `Error::Netlink` — EINVAL "requested channel count exceeds maximum" at the
    /// count; EINVAL "requested channel counts are too low for existing memory provider
    /// setting (N)" when a bound queue would go away; EOPNOTSUPP for drivers without channels.
    #[doc(alias = "ETHTOOL_MSG_CHANNELS_SET")]
    pub fn channels_set(
        &mut self,
        ifindex: u32,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    ) -> Result<()> {
        let req = channels_set_request(&self.family, ifindex, None, rx, tx, combined);
        self.sock.request(&req).map(|_| ())
    }
}

/// The CHANNELS_SET counts `(rx, tx, combined)` C ncdevmem's probe sends to leave only
/// `keep_rx` RX queues (its "deactivating a bound queue must fail" check,
/// `docs/kernel-interface.md#ncdevmem-probe-mode`), given the driver's current CHANNELS_GET answer:
///
/// * the driver reports combined channels: combined = `keep_rx`, and rx = tx = 0 when it
///   also reports rx or tx counts;
/// * it reports rx (rx/tx drivers such as veth): rx = tx = `keep_rx`;
/// * neither: `(None, None, None)` — the device has neither combined nor rx channels and
///   there is nothing to send.
pub fn shrink_rx_request(
    current: &Channels,
    keep_rx: u32,
) -> (Option<u32>, Option<u32>, Option<u32>) {
    if current.combined_count.is_some() {
        let zero = (current.rx_count.is_some() || current.tx_count.is_some()).then_some(0);
        (zero, zero, Some(keep_rx))
    } else if current.rx_count.is_some() {
        (Some(keep_rx), Some(keep_rx), None)
    } else {
        (None, None, None)
    }
}

/// The attributes of reply `r` if it is the `expected` message; its header nest (attribute 1
/// of every set) is decoded for its errors only.
///
/// Errors: `Error::Decode` for another message id or a malformed header.
fn checked_reply(r: super::socket::GenlReply, expected: EthtoolReply) -> Result<Vec<u8>> {
    if r.cmd != expected as u8 {
        return Err(Error::decode(
            format!("ethtool {} reply", ethtool_reply_name(expected as u8)),
            format!(
                "message id {} ({}), expected {}",
                r.cmd,
                ethtool_reply_name(r.cmd),
                expected as u8
            ),
        ));
    }
    for a in AttrIter::new(&r.attrs) {
        let a = a?;
        if a.kind() == ETHTOOL_A_CHANNELS_HEADER {
            Header::from_attrs(a.payload())?;
        }
    }
    Ok(r.attrs)
}

/// The additional RSS context ids in the replies of an RSS_GET dump, ascending (the default
/// context's reply has no `ETHTOOL_A_RSS_CONTEXT` and adds nothing).
///
/// Errors: `Error::Decode` for a reply that is not RSS_GET_REPLY or a malformed attribute.
fn rss_context_ids_of(replies: Vec<super::socket::GenlReply>) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for r in replies {
        let attrs = checked_reply(r, EthtoolReply::RssGetReply)?;
        ids.extend(RssReply::from_attrs(&attrs)?.context);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The RSS_GET dump request for `ifindex` ([`Ethtool::rss_context_ids`]): the header nest
/// only, `NLM_F_DUMP`.
fn rss_dump_request(family: &Family, ifindex: u32, target: String) -> GenlRequest {
    header_request(family, EthtoolCmd::RssGet, ifindex, target).dump()
}

fn rings_set_hds_request(
    family: &Family,
    ifindex: u32,
    ifname: Option<&str>,
    split: TcpDataSplit,
    hds_thresh: Option<u32>,
) -> GenlRequest {
    let mut target = format!(
        "{}, tcp-data-split {}",
        dev_label(ifindex, ifname),
        split.name()
    );
    if let Some(t) = hds_thresh {
        target.push_str(&format!(", hds-thresh {t}"));
    }
    let mut req = header_request(family, EthtoolCmd::RingsSet, ifindex, target);
    let rings = Rings {
        tcp_data_split: Some(split),
        hds_thresh,
        ..Rings::default()
    };
    rings.emit(req.attrs());
    req
}

fn channels_set_request(
    family: &Family,
    ifindex: u32,
    ifname: Option<&str>,
    rx: Option<u32>,
    tx: Option<u32>,
    combined: Option<u32>,
) -> GenlRequest {
    let mut target = dev_label(ifindex, ifname);
    for (n, v) in [("rx", rx), ("tx", tx), ("combined", combined)] {
        if let Some(v) = v {
            target.push_str(&format!(", {n} {v}"));
        }
    }
    let mut req = header_request(family, EthtoolCmd::ChannelsSet, ifindex, target);
    let counts = Channels {
        rx_count: rx,
        tx_count: tx,
        combined_count: combined,
        ..Channels::default()
    };
    counts.emit(req.attrs());
    req
}

/// A request for `cmd` on device `ifindex`, labelled `target` in errors, with the header nest
/// `{ETHTOOL_A_HEADER_DEV_INDEX = ifindex}` as attribute 1 (`*_HEADER` is 1 in every set).
fn header_request(family: &Family, cmd: EthtoolCmd, ifindex: u32, target: String) -> GenlRequest {
    let mut req = family.request(cmd as u8, cmd.op()).target(target);
    // Attribute 1 is the header nest in every ethtool message set.
    let w = req.attrs();
    let nest = match cmd {
        EthtoolCmd::RingsGet | EthtoolCmd::RingsSet => {
            put_attr!(w, begin_nest, ETHTOOL_A_RINGS_HEADER)
        }
        EthtoolCmd::ChannelsGet | EthtoolCmd::ChannelsSet => {
            put_attr!(w, begin_nest, ETHTOOL_A_CHANNELS_HEADER)
        }
        EthtoolCmd::RssGet => put_attr!(w, begin_nest, ETHTOOL_A_RSS_HEADER),
    };
    let header = Header {
        dev_index: Some(ifindex),
        ..Header::default()
    };
    header.emit(w);
    w.end_nest(nest);
    req
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::netlink::attr::AttrWriter;
    use crate::netlink::socket::Exchange;
    use proptest::prelude::*;

    /// The header nest (attribute 1, flagged nested) of a message's attributes, decoded.
    fn header_of(attrs: &[u8]) -> Header {
        let a = AttrIter::new(attrs).next().unwrap().unwrap();
        assert_eq!((a.kind(), a.is_nested()), (1, true));
        Header::from_attrs(a.payload()).unwrap()
    }

    fn dev(index: u32, name: Option<&str>) -> Header {
        Header {
            dev_index: Some(index),
            dev_name: name.map(str::to_string),
            ..Header::default()
        }
    }

    /// A writer holding the header nest `dev(index, name)`.
    fn with_header(index: u32, name: Option<&str>) -> AttrWriter {
        let mut w = AttrWriter::new();
        let nest = w.begin_nest(1, "HEADER");
        dev(index, name).emit(&mut w);
        w.end_nest(nest);
        w
    }

    fn family() -> Family {
        Family::fixture("ethtool", 21)
    }

    /// CHANNELS_GET for ifindex 2, family id 21, seq 3, pid 0 (synthetic).
    #[rustfmt::skip]
    const CHANNELS_GET_REQ: &[u8] = &[
        0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
        0x15, 0x00,             // nlmsg_type 21 (ethtool)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x03, 0x00, 0x00, 0x00, // seq 3
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x11,                   // cmd 17 ETHTOOL_MSG_CHANNELS_GET
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_CHANNELS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x02, 0x00, 0x00, 0x00, //   ifindex 2
    ];

    #[test]
    fn channels_get_request_bytes() {
        let req = header_request(
            &family(),
            EthtoolCmd::ChannelsGet,
            2,
            dev_label(2, Some("veth0")),
        );
        assert_eq!(req.encode(3, 0).unwrap(), CHANNELS_GET_REQ);
        assert_eq!(header_of(&CHANNELS_GET_REQ[20..]), dev(2, None));
        assert_eq!(
            Channels::from_attrs(&CHANNELS_GET_REQ[20..]).unwrap(),
            Channels::default()
        );
        assert_eq!(
            req.writer().path_at(24).as_deref(),
            Some("ETHTOOL_A_CHANNELS_HEADER.ETHTOOL_A_HEADER_DEV_INDEX")
        );
    }

    /// 6.18's answer to CHANNELS_GET for veth0 (ifindex 3) in a fresh netns (captured with a
    /// raw-socket probe; seq 8, port id 18858; the ACK followed in a second datagram). Note the
    /// kernel's attribute order: rx-max, rx-count, tx-max, tx-count; no combined.
    #[rustfmt::skip]
    const CHANNELS_REPLY_VETH: &[u8] = &[
        0x4c, 0x00, 0x00, 0x00, // nlmsg_len 76
        0x15, 0x00,             // type 21 (ethtool)
        0x00, 0x00,             // flags 0
        0x08, 0x00, 0x00, 0x00, // seq 8
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0x12, 0x01, 0x00, 0x00, // cmd 18 ETHTOOL_MSG_CHANNELS_GET_REPLY, version 1
        0x18, 0x00, 0x01, 0x80, // nla_len 24, ETHTOOL_A_CHANNELS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x03, 0x00, 0x00, 0x00, //   3
        0x0a, 0x00, 0x02, 0x00, //   nla_len 10, ETHTOOL_A_HEADER_DEV_NAME
        b'v', b'e', b't', b'h', b'0', 0x00, // "veth0\0"
        0x00, 0x00,             //   padding
        0x08, 0x00, 0x02, 0x00, // ETHTOOL_A_CHANNELS_RX_MAX
        0x02, 0x00, 0x00, 0x00, // 2
        0x08, 0x00, 0x06, 0x00, // ETHTOOL_A_CHANNELS_RX_COUNT
        0x01, 0x00, 0x00, 0x00, // 1
        0x08, 0x00, 0x03, 0x00, // ETHTOOL_A_CHANNELS_TX_MAX
        0x02, 0x00, 0x00, 0x00, // 2
        0x08, 0x00, 0x07, 0x00, // ETHTOOL_A_CHANNELS_TX_COUNT
        0x01, 0x00, 0x00, 0x00, // 1
    ];

    #[test]
    fn channels_reply_round_trip() {
        let req = header_request(&family(), EthtoolCmd::ChannelsGet, 3, dev_label(3, None));
        let mut ex = Exchange::new(&req, 8, 18858);
        assert!(
            !ex.feed(CHANNELS_REPLY_VETH).unwrap(),
            "the ACK is still to come"
        );
        let reply = ex.into_replies().remove(0);
        assert_eq!(reply.cmd, EthtoolReply::ChannelsGetReply as u8);
        assert_eq!(header_of(&reply.attrs), dev(3, Some("veth0")));
        let c = Channels::from_attrs(&reply.attrs).unwrap();
        assert_eq!(
            c,
            Channels {
                rx_max: Some(2),
                tx_max: Some(2),
                rx_count: Some(1),
                tx_count: Some(1),
                ..Channels::default()
            }
        );
        assert_eq!(c.rx_queues(), 1);
        // Written back in the kernel's order, the attributes are the captured bytes.
        let mut w = with_header(3, Some("veth0"));
        c.emit_kinds(
            &mut w,
            &[
                ETHTOOL_A_CHANNELS_RX_MAX,
                ETHTOOL_A_CHANNELS_RX_COUNT,
                ETHTOOL_A_CHANNELS_TX_MAX,
                ETHTOOL_A_CHANNELS_TX_COUNT,
            ],
        );
        assert_eq!(w.bytes(), &CHANNELS_REPLY_VETH[20..]);
    }

    /// 6.18's answer to RINGS_GET for veth0 (captured; seq 9): EOPNOTSUPP, no extack.
    #[rustfmt::skip]
    const RINGS_EOPNOTSUPP_VETH: &[u8] = &[
        0x24, 0x00, 0x00, 0x00, // nlmsg_len 36
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x01,             // NLM_F_CAPPED
        0x09, 0x00, 0x00, 0x00, // seq 9
        0xaa, 0x49, 0x00, 0x00, // pid 18858
        0xa1, 0xff, 0xff, 0xff, // error -95 (EOPNOTSUPP)
        0x20, 0x00, 0x00, 0x00, //   echoed nlmsg_len 32
        0x15, 0x00, 0x05, 0x00, //   echoed type 21, flags REQUEST|ACK
        0x09, 0x00, 0x00, 0x00, //   echoed seq 9
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
    ];

    #[test]
    fn rings_get_refusal() {
        let req = header_request(
            &family(),
            EthtoolCmd::RingsGet,
            3,
            dev_label(3, Some("veth0")),
        );
        assert_eq!(req.encode(9, 0).unwrap().len(), 32, "matches the echo");
        let e = Exchange::new(&req, 9, 18858)
            .feed(RINGS_EOPNOTSUPP_VETH)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ethtool rings-get on veth0 (ifindex 3): EOPNOTSUPP (Operation not supported)"
        );
    }

    /// RINGS_GET_REPLY attributes of a NIC with header split on and hds-thresh 0 of 1024
    /// (synthetic: TODO capture on a devmem NIC).
    #[rustfmt::skip]
    const RINGS_REPLY_HDS: &[u8] = &[
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x04, 0x00, 0x00, 0x00, //   4
        0x08, 0x00, 0x02, 0x00, // ETHTOOL_A_RINGS_RX_MAX
        0x00, 0x10, 0x00, 0x00, // 4096
        0x08, 0x00, 0x06, 0x00, // ETHTOOL_A_RINGS_RX
        0x00, 0x04, 0x00, 0x00, // 1024
        0x05, 0x00, 0x0b, 0x00, // nla_len 5, ETHTOOL_A_RINGS_TCP_DATA_SPLIT
        0x02, 0x00, 0x00, 0x00, // 2 (enabled) + 3 bytes padding
        0x08, 0x00, 0x11, 0x00, // ETHTOOL_A_RINGS_HDS_THRESH
        0x00, 0x00, 0x00, 0x00, // 0 bytes
        0x08, 0x00, 0x12, 0x00, // ETHTOOL_A_RINGS_HDS_THRESH_MAX
        0x00, 0x04, 0x00, 0x00, // 1024 bytes
    ];

    #[test]
    fn rings_reply_round_trip() {
        assert_eq!(header_of(RINGS_REPLY_HDS), dev(4, None));
        let r = Rings::from_attrs(RINGS_REPLY_HDS).unwrap();
        assert_eq!(
            r,
            Rings {
                rx_max: Some(4096),
                rx: Some(1024),
                tcp_data_split: Some(TcpDataSplit::Enabled),
                hds_thresh: Some(0),
                hds_thresh_max: Some(1024),
                ..Rings::default()
            }
        );
        let mut w = with_header(4, None);
        r.emit(&mut w);
        assert_eq!(w.bytes(), RINGS_REPLY_HDS);
        let mut bad = RINGS_REPLY_HDS.to_vec();
        bad[32] = 3;
        let e = Rings::from_attrs(&bad).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot decode ETHTOOL_A_RINGS_TCP_DATA_SPLIT"),
            "{e}"
        );
    }

    /// RINGS_SET turning header split on with hds-thresh 0, ifindex 2, family id 21, seq 3,
    /// pid 0 (synthetic; the layout the 6.18 RINGS_SET policy accepts: attr 11 u8, attr 17
    /// u32).
    #[rustfmt::skip]
    const RINGS_SET_HDS_ON: &[u8] = &[
        0x30, 0x00, 0x00, 0x00, // nlmsg_len 48
        0x15, 0x00,             // nlmsg_type 21 (ethtool)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x03, 0x00, 0x00, 0x00, // seq 3
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x10,                   // cmd 16 ETHTOOL_MSG_RINGS_SET
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x02, 0x00, 0x00, 0x00, //   ifindex 2
        0x05, 0x00, 0x0b, 0x00, // nla_len 5, ETHTOOL_A_RINGS_TCP_DATA_SPLIT
        0x02, 0x00, 0x00, 0x00, // 2 (enabled) + 3 bytes padding
        0x08, 0x00, 0x11, 0x00, // ETHTOOL_A_RINGS_HDS_THRESH
        0x00, 0x00, 0x00, 0x00, // 0 bytes
    ];

    #[test]
    fn rings_set_request_bytes() {
        let req = rings_set_hds_request(&family(), 2, Some("eth0"), TcpDataSplit::Enabled, Some(0));
        assert_eq!(req.encode(3, 0).unwrap(), RINGS_SET_HDS_ON);
        assert_eq!(header_of(&RINGS_SET_HDS_ON[20..]), dev(2, None));
        assert_eq!(
            Rings::from_attrs(&RINGS_SET_HDS_ON[20..]).unwrap(),
            Rings {
                tcp_data_split: Some(TcpDataSplit::Enabled),
                hds_thresh: Some(0),
                ..Rings::default()
            }
        );
        assert_eq!(
            req.writer().path_at(32).as_deref(),
            Some("ETHTOOL_A_RINGS_TCP_DATA_SPLIT")
        );
        // Restoring "unknown" without hds-thresh: the header split attribute only.
        let req = rings_set_hds_request(&family(), 2, Some("eth0"), TcpDataSplit::Unknown, None);
        let mut expect = RINGS_SET_HDS_ON[..40].to_vec();
        expect[0] = 40; // nlmsg_len 40
        expect[36] = 0; // tcp-data-split 0 (unknown)
        assert_eq!(req.encode(3, 0).unwrap(), expect);
        // The plain receiver's --hds-thresh 256 (and its undo to an old non-zero value):
        // tcp-data-split enabled with hds-thresh 256, the u32 little-endian.
        let req =
            rings_set_hds_request(&family(), 2, Some("eth0"), TcpDataSplit::Enabled, Some(256));
        let mut expect = RINGS_SET_HDS_ON.to_vec();
        expect[45] = 0x01; // hds-thresh 0x0100 = 256
        assert_eq!(req.encode(3, 0).unwrap(), expect);
        assert_eq!(
            Rings::from_attrs(&expect[20..]).unwrap().hds_thresh,
            Some(256)
        );
        assert_eq!(
            req.writer().path_at(40).as_deref(),
            Some("ETHTOOL_A_RINGS_HDS_THRESH")
        );
    }

    /// The answer 6.18 gives on veth to the request above, rebuilt from the measured facts
    /// (`docs/kernel-interface.md#ethtool-netlink`: EOPNOTSUPP, extack message, offset →
    /// attr 11; the real-kernel test in tests/kernel_ethtool.rs checks the same), echo capped to
    /// our header.
    #[rustfmt::skip]
    const RINGS_SET_EOPNOTSUPP: &[u8] = &[
        0x58, 0x00, 0x00, 0x00, // nlmsg_len 88
        0x02, 0x00,             // NLMSG_ERROR
        0x00, 0x03,             // NLM_F_CAPPED | NLM_F_ACK_TLVS
        0x03, 0x00, 0x00, 0x00, // seq 3
        0x00, 0x00, 0x00, 0x00, // pid 0
        0xa1, 0xff, 0xff, 0xff, // error -95 (EOPNOTSUPP)
        0x30, 0x00, 0x00, 0x00, //   echoed nlmsg_len 48
        0x15, 0x00, 0x05, 0x00, //   echoed type 21, flags REQUEST|ACK
        0x03, 0x00, 0x00, 0x00, //   echoed seq 3
        0x00, 0x00, 0x00, 0x00, //   echoed pid 0
        0x2c, 0x00, 0x01, 0x00, // nla_len 44, NLMSGERR_ATTR_MSG
        b's', b'e', b't', b't', b'i', b'n', b'g', b' ',
        b'T', b'C', b'P', b' ', b'd', b'a', b't', b'a',
        b' ', b's', b'p', b'l', b'i', b't', b' ', b'i',
        b's', b' ', b'n', b'o', b't', b' ', b's', b'u',
        b'p', b'p', b'o', b'r', b't', b'e', b'd', 0x00, // "…not supported\0"
        0x08, 0x00, 0x02, 0x00, // NLMSGERR_ATTR_OFFS
        0x20, 0x00, 0x00, 0x00, // offset 32
    ];

    #[test]
    fn rings_set_refusal_names_the_attribute() {
        let req = rings_set_hds_request(&family(), 2, Some("eth0"), TcpDataSplit::Enabled, Some(0));
        let e = Exchange::new(&req, 3, 0)
            .feed(RINGS_SET_EOPNOTSUPP)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ethtool rings-set on eth0 (ifindex 2), tcp-data-split enabled, hds-thresh 0: \
             EOPNOTSUPP (Operation not supported); kernel: \"setting TCP data split is not \
             supported\"; at ETHTOOL_A_RINGS_TCP_DATA_SPLIT"
        );
    }

    /// CHANNELS_SET rx 2 tx 2 for ifindex 3 (synthetic; what the veth test sends).
    #[rustfmt::skip]
    const CHANNELS_SET_RX_TX: &[u8] = &[
        0x30, 0x00, 0x00, 0x00, // nlmsg_len 48
        0x15, 0x00,             // nlmsg_type 21 (ethtool)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x12,                   // cmd 18 ETHTOOL_MSG_CHANNELS_SET
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_CHANNELS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x03, 0x00, 0x00, 0x00, //   ifindex 3
        0x08, 0x00, 0x06, 0x00, // ETHTOOL_A_CHANNELS_RX_COUNT
        0x02, 0x00, 0x00, 0x00, // 2
        0x08, 0x00, 0x07, 0x00, // ETHTOOL_A_CHANNELS_TX_COUNT
        0x02, 0x00, 0x00, 0x00, // 2
    ];

    /// CHANNELS_SET combined 1 for ifindex 4 (synthetic; a combined-only driver).
    #[rustfmt::skip]
    const CHANNELS_SET_COMBINED: &[u8] = &[
        0x28, 0x00, 0x00, 0x00, // nlmsg_len 40
        0x15, 0x00,             // nlmsg_type 21 (ethtool)
        0x05, 0x00,             // NLM_F_REQUEST | NLM_F_ACK
        0x07, 0x00, 0x00, 0x00, // seq 7
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x12,                   // cmd 18 ETHTOOL_MSG_CHANNELS_SET
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_CHANNELS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x04, 0x00, 0x00, 0x00, //   ifindex 4
        0x08, 0x00, 0x09, 0x00, // ETHTOOL_A_CHANNELS_COMBINED_COUNT
        0x01, 0x00, 0x00, 0x00, // 1
    ];

    #[test]
    fn channels_set_request_bytes() {
        let req = channels_set_request(&family(), 3, Some("veth0"), Some(2), Some(2), None);
        assert_eq!(req.encode(7, 0).unwrap(), CHANNELS_SET_RX_TX);
        assert_eq!(header_of(&CHANNELS_SET_RX_TX[20..]), dev(3, None));
        assert_eq!(
            Channels::from_attrs(&CHANNELS_SET_RX_TX[20..]).unwrap(),
            Channels {
                rx_count: Some(2),
                tx_count: Some(2),
                ..Channels::default()
            }
        );
        assert_eq!(
            req.writer().path_at(40).as_deref(),
            Some("ETHTOOL_A_CHANNELS_TX_COUNT")
        );
        let req = channels_set_request(&family(), 4, Some("eth0"), None, None, Some(1));
        assert_eq!(req.encode(7, 0).unwrap(), CHANNELS_SET_COMBINED);
        assert_eq!(header_of(&CHANNELS_SET_COMBINED[20..]), dev(4, None));
        assert_eq!(
            Channels::from_attrs(&CHANNELS_SET_COMBINED[20..]).unwrap(),
            Channels {
                combined_count: Some(1),
                ..Channels::default()
            }
        );
    }

    #[test]
    fn shrink_rx_request_follows_c_ncdevmem() {
        // Combined-only driver (virtio_net, most NICs' default): combined = kept queues.
        let combined_only = Channels {
            combined_max: Some(8),
            combined_count: Some(8),
            ..Channels::default()
        };
        assert_eq!(shrink_rx_request(&combined_only, 4), (None, None, Some(4)));
        // Driver that reports rx/tx counts next to combined ones: rx and tx go to 0.
        let mixed = Channels {
            rx_count: Some(0),
            tx_count: Some(0),
            combined_count: Some(8),
            other_count: Some(1),
            ..Channels::default()
        };
        assert_eq!(shrink_rx_request(&mixed, 4), (Some(0), Some(0), Some(4)));
        // rx/tx driver (veth): rx = tx = kept queues.
        let rx_tx = Channels {
            rx_max: Some(2),
            tx_max: Some(2),
            rx_count: Some(2),
            tx_count: Some(2),
            ..Channels::default()
        };
        assert_eq!(shrink_rx_request(&rx_tx, 1), (Some(1), Some(1), None));
        // Neither combined nor rx channels: nothing to send.
        let tx_only = Channels {
            tx_count: Some(1),
            ..Channels::default()
        };
        assert_eq!(shrink_rx_request(&tx_only, 1), (None, None, None));
        assert_eq!(
            shrink_rx_request(&Channels::default(), 1),
            (None, None, None)
        );
    }

    /// RSS_GET dump of ifindex 4, family id 21, seq 6, pid 0 (synthetic; the layout the
    /// kernel's dump start reads: the header nest, no context attribute).
    #[rustfmt::skip]
    const RSS_DUMP_REQ: &[u8] = &[
        0x20, 0x00, 0x00, 0x00, // nlmsg_len 32
        0x15, 0x00,             // nlmsg_type 21 (ethtool)
        0x05, 0x03,             // NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP
        0x06, 0x00, 0x00, 0x00, // seq 6
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x26,                   // cmd 38 ETHTOOL_MSG_RSS_GET
        0x01,                   // version 1
        0x00, 0x00,             // reserved
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_RSS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x04, 0x00, 0x00, 0x00, //   ifindex 4
    ];

    /// The dump's answer for a device with a 4-entry table and RSS context 2 (synthetic, in
    /// the order net/ethtool/rss.c fills a reply: header, context, indir; a driver without
    /// per-context keys sends no hfunc/key for the context): the default context's reply,
    /// context 2's, then NLMSG_DONE.
    #[rustfmt::skip]
    const RSS_DUMP_REPLY: &[u8] = &[
        0x3c, 0x00, 0x00, 0x00, // nlmsg_len 60
        0x15, 0x00,             // type 21 (ethtool)
        0x02, 0x00,             // NLM_F_MULTI
        0x06, 0x00, 0x00, 0x00, // seq 6
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x26, 0x01, 0x00, 0x00, // cmd 38 ETHTOOL_MSG_RSS_GET_REPLY, version 1
        0x0c, 0x00, 0x01, 0x80, // nla_len 12, ETHTOOL_A_RSS_HEADER | NLA_F_NESTED
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x04, 0x00, 0x00, 0x00, //   4
        0x14, 0x00, 0x04, 0x00, // nla_len 20, ETHTOOL_A_RSS_INDIR (no context: the default)
        0x00, 0x00, 0x00, 0x00, //   queue 0
        0x01, 0x00, 0x00, 0x00, //   queue 1
        0x00, 0x00, 0x00, 0x00, //   queue 0
        0x01, 0x00, 0x00, 0x00, //   queue 1
        0x08, 0x00, 0x03, 0x00, // ETHTOOL_A_RSS_HFUNC
        0x01, 0x00, 0x00, 0x00, //   ETH_RSS_HASH_TOP
        0x3c, 0x00, 0x00, 0x00, // nlmsg_len 60
        0x15, 0x00,             // type 21
        0x02, 0x00,             // NLM_F_MULTI
        0x06, 0x00, 0x00, 0x00, // seq 6
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x26, 0x01, 0x00, 0x00, // cmd 38, version 1
        0x0c, 0x00, 0x01, 0x80, // ETHTOOL_A_RSS_HEADER
        0x08, 0x00, 0x01, 0x00, //   ETHTOOL_A_HEADER_DEV_INDEX
        0x04, 0x00, 0x00, 0x00, //   4
        0x08, 0x00, 0x02, 0x00, // ETHTOOL_A_RSS_CONTEXT
        0x02, 0x00, 0x00, 0x00, //   2
        0x14, 0x00, 0x04, 0x00, // nla_len 20, ETHTOOL_A_RSS_INDIR
        0x02, 0x00, 0x00, 0x00, //   queue 2
        0x03, 0x00, 0x00, 0x00, //   queue 3
        0x02, 0x00, 0x00, 0x00, //   queue 2
        0x03, 0x00, 0x00, 0x00, //   queue 3
        0x14, 0x00, 0x00, 0x00, // nlmsg_len 20
        0x03, 0x00,             // NLMSG_DONE
        0x02, 0x00,             // NLM_F_MULTI
        0x06, 0x00, 0x00, 0x00, // seq 6
        0x00, 0x00, 0x00, 0x00, // pid 0
        0x00, 0x00, 0x00, 0x00, // status 0
    ];

    #[test]
    fn rss_dump_request_and_context_ids() {
        let req = rss_dump_request(&family(), 4, dev_label(4, Some("dnic0a")));
        assert_eq!(req.encode(6, 0).unwrap(), RSS_DUMP_REQ);
        assert_eq!(header_of(&RSS_DUMP_REQ[20..]), dev(4, None));
        let mut ex = Exchange::new(&req, 6, 0);
        assert!(ex.feed(RSS_DUMP_REPLY).unwrap(), "DONE ends the dump");
        let replies = ex.into_replies();
        assert_eq!(replies.len(), 2);
        let decoded: Vec<RssReply> = replies
            .iter()
            .map(|r| RssReply::from_attrs(&r.attrs).unwrap())
            .collect();
        assert_eq!(
            decoded,
            vec![
                RssReply {
                    hfunc: Some(1),
                    ..RssReply::default()
                },
                RssReply {
                    context: Some(2),
                    ..RssReply::default()
                },
            ]
        );
        assert_eq!(rss_context_ids_of(replies.clone()).unwrap(), vec![2]);
        // A reply of another message is a decode error, not an empty list.
        let mut other = replies[1].clone();
        other.cmd = EthtoolReply::ChannelsGetReply as u8;
        let e = rss_context_ids_of(vec![other]).unwrap_err();
        assert!(e.to_string().contains("expected 38"), "{e}");
        assert_eq!(rss_context_ids_of(Vec::new()).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn request_and_reply_ids_differ() {
        assert_eq!(EthtoolCmd::RingsGet as u8, 15);
        assert_eq!(EthtoolReply::RingsGetReply as u8, 16);
        assert_eq!(EthtoolCmd::ChannelsGet as u8, 17);
        assert_eq!(EthtoolReply::ChannelsGetReply as u8, 18);
        assert_eq!(ethtool_msg_name(16), "ETHTOOL_MSG_RINGS_SET");
        assert_eq!(ethtool_reply_name(16), "ETHTOOL_MSG_RINGS_GET_REPLY");
    }

    proptest! {
        #[test]
        fn ethtool_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Channels::from_attrs(&bytes);
            let _ = Rings::from_attrs(&bytes);
            let _ = RssReply::from_attrs(&bytes);
        }
    }
}
