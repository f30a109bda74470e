//! [`RealNic`]: the [`NicOps`] of a real interface, talking to the kernel directly — ethtool
//! netlink for header split and channels (`RINGS_GET/SET`, `CHANNELS_GET/SET`) and the list of
//! RSS contexts (an `RSS_GET` dump), `SIOCETHTOOL` ioctls for the RSS indirection tables (the
//! default one and additional RSS contexts), ntuple rules and the `rx-ntuple-filter` feature
//! ([`crate::sys::ethtool_ioctl`]), and netdev netlink for queues and `bind-rx`.
//!
//! Everything happens in the network namespace of the thread that called [`RealNic::open`]
//! (its sockets are created there). Errors are passed through unchanged: an operation the
//! driver lacks surfaces as errno EOPNOTSUPP, as [`NicOps`] promises.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};
use crate::netlink::ethtool::{Channels, Ethtool, TcpDataSplit};
use crate::netlink::netdev::{BindRxRequest, DevInfo, Netdev, PagePoolInfo, QueueInfo};
use crate::nic::{
    Binding, ChannelsSet, FlowRule, FlowType, HdsConfig, NicOps, RssContextId, RssTable,
    RuleLocation,
};
use crate::sys::ethtool_ioctl::{
    ethtool_rx_flow_spec, pick_free_location, tcp4_flow_spec, tcp6_flow_spec, DrvInfo,
    EthtoolIoctl, ETHTOOL_GRSSH, NTUPLE_FEATURE, RX_CLS_LOC_ANY,
};

/// Where `rx-ntuple-filter` sits in this kernel's feature bits (looked up by name once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FeatureBit {
    /// Index in the `ETH_SS_FEATURES` strings = feature bit.
    bit: u32,
    /// Feature blocks (u32 words) the kernel uses: ⌈feature count / 32⌉.
    words: u32,
}

/// One real network interface, with the three kernel channels NIC setup needs: an ethtool
/// netlink socket, a netdev netlink socket and an ioctl socket.
#[derive(Debug)]
pub struct RealNic {
    ifname: String,
    ifindex: u32,
    ethtool: Ethtool,
    netdev: Netdev,
    ioctl: EthtoolIoctl,
    ntuple: Option<FeatureBit>,
}

impl RealNic {
    /// Opens interface `ifname` (the `-f` argument) in the calling thread's network namespace:
    /// resolves its ifindex (`if_nametoindex`), opens the ethtool and netdev generic-netlink
    /// families and an `AF_INET` socket for `SIOCETHTOOL`.
    ///
    /// Errors: `Error::Usage` naming `-f` when no interface has that name; `Error::Netlink`
    /// ENOENT when a family is missing (see [`crate::caps::skip_if_family_missing`]);
    /// `Error::Sys` for socket failures.
    pub fn open(ifname: &str) -> Result<Self> {
        let ifindex = match crate::sys::if_index(ifname) {
            Ok(i) => i,
            Err(libc::ENODEV | libc::EINVAL) => {
                return Err(Error::Usage(format!(
                    "-f: no network interface named {ifname:?} in this network namespace"
                )))
            }
            Err(errno) => return Err(Error::sys(format!("if_nametoindex({ifname:?})"), errno)),
        };
        let ioctl = EthtoolIoctl::open(ifname).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("-f: {m}")),
            e => e,
        })?;
        Ok(RealNic {
            ifname: ifname.to_string(),
            ifindex,
            ethtool: Ethtool::open()?,
            netdev: Netdev::open()?,
            ioctl,
            ntuple: None,
        })
    }

    /// RX rings the flow-steering layer knows (`ETHTOOL_GRXRINGS`), in queues.
    ///
    /// Errors: `Error::Sys` (EOPNOTSUPP on veth and lo in 6.18).
    pub fn rx_rings(&self) -> Result<u64> {
        self.ioctl.rx_rings()
    }

    /// The location a rule insert asks for: `RX_CLS_LOC_ANY` when GRXCLSRLCNT says the driver
    /// picks (or answers EOPNOTSUPP), else the highest free location of the rule list.
    ///
    /// Errors: the rule list's; `Error::Sys` ENOSPC when every location is in use.
    fn insert_location(&self) -> Result<u32> {
        match self.ioctl.rule_count() {
            Ok(c) if c.driver_picks_location => Ok(RX_CLS_LOC_ANY),
            Ok(c) => {
                let (used, size) = self.ioctl.rule_locations(c.rule_cnt)?;
                let table = if size != 0 { size } else { c.table_size };
                pick_free_location(table, &used).ok_or_else(|| {
                    Error::sys(
                        format!(
                            "ntuple rule insert on {}: all {table} rule locations are in use",
                            self.ifname
                        ),
                        libc::ENOSPC,
                    )
                })
            }
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => Ok(RX_CLS_LOC_ANY),
            Err(e) => Err(e),
        }
    }

    fn ntuple_bit(&mut self) -> Result<FeatureBit> {
        if let Some(f) = self.ntuple {
            return Ok(f);
        }
        let names = self.ioctl.feature_names()?;
        let bit = names
            .iter()
            .position(|n| n == NTUPLE_FEATURE)
            .ok_or_else(|| {
                Error::sys(
                    format!(
                        "ETH_SS_FEATURES on {}: this kernel has no feature named \
                         {NTUPLE_FEATURE:?} among its {} features",
                        self.ifname,
                        names.len()
                    ),
                    libc::EOPNOTSUPP,
                )
            })?;
        let f = FeatureBit {
            bit: bit as u32,
            words: crate::sys::ethtool_ioctl::feature_words(names.len() as u32),
        };
        self.ntuple = Some(f);
        Ok(f)
    }
}

fn as_v4(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

fn as_v6(ip: IpAddr) -> Option<Ipv6Addr> {
    match ip {
        IpAddr::V6(a) => Some(a),
        IpAddr::V4(_) => None,
    }
}

/// The `ethtool_rx_flow_spec` for `rule` at `location`: tcp4 with the dotted-quad addresses
/// (IPv4-mapped IPv6 addresses are unwrapped), tcp6 otherwise; exact-match masks; a 5-tuple
/// rule when `rule.src` is given, else a 3-tuple rule.
///
/// Errors: `Error::Failure` when an address does not fit the flow type (IPv6 in a tcp4
/// rule, IPv4 in a tcp6 rule).
pub(crate) fn flow_spec_for(rule: &FlowRule, location: u32) -> Result<ethtool_rx_flow_spec> {
    /// `(src, dst)` of `rule` in the family `conv` gives (dst checked first).
    type Ends<A> = (Option<(A, u16)>, (A, u16));
    fn ends<A>(rule: &FlowRule, conv: fn(IpAddr) -> Option<A>, want: &str) -> Result<Ends<A>> {
        let ep = |(ip, port): (IpAddr, u16)| {
            conv(ip).map(|a| (a, port)).ok_or_else(|| {
                let kind = rule.flow_type;
                Error::Failure(format!(
                    "ntuple rule {kind:?} needs {want} addresses, got {ip}"
                ))
            })
        };
        let dst = ep(rule.dst)?;
        Ok((rule.src.map(ep).transpose()?, dst))
    }
    Ok(match rule.flow_type {
        FlowType::Tcp4 => {
            let (src, dst) = ends(rule, as_v4, "IPv4")?;
            tcp4_flow_spec(src, dst, rule.queue, location)
        }
        FlowType::Tcp6 => {
            let (src, dst) = ends(rule, as_v6, "IPv6")?;
            tcp6_flow_spec(src, dst, rule.queue, location)
        }
    })
}

impl NicOps for RealNic {
    fn ifname(&self) -> &str {
        &self.ifname
    }

    fn page_pools(&mut self) -> Result<Vec<PagePoolInfo>> {
        let ifindex = self.ifindex;
        Ok(self
            .netdev
            .page_pool_get_dump()?
            .into_iter()
            .filter(|p| p.ifindex == Some(ifindex))
            .collect())
    }

    fn dev_info(&mut self) -> Result<DevInfo> {
        self.netdev.dev_get(self.ifindex)
    }

    fn drvinfo(&mut self) -> Result<DrvInfo> {
        self.ioctl.drvinfo()
    }

    fn ifindex(&self) -> u32 {
        self.ifindex
    }

    fn hds_get(&mut self) -> Result<HdsConfig> {
        let r = self.ethtool.rings_get(self.ifindex)?;
        Ok(HdsConfig {
            tcp_data_split: r.tcp_data_split,
            hds_thresh: r.hds_thresh,
            hds_thresh_max: r.hds_thresh_max,
        })
    }

    fn hds_set(&mut self, split: TcpDataSplit, hds_thresh: Option<u32>) -> Result<()> {
        self.ethtool.rings_set_hds(self.ifindex, split, hds_thresh)
    }

    fn channels_get(&mut self) -> Result<Channels> {
        self.ethtool.channels_get(self.ifindex)
    }

    fn channels_set(&mut self, set: ChannelsSet) -> Result<()> {
        self.ethtool
            .channels_set(self.ifindex, set.rx, set.tx, set.combined)
    }

    fn rss_get(&mut self) -> Result<RssTable> {
        let (_, indir) = self.ioctl.rss_get()?;
        if indir.is_empty() {
            return Err(Error::sys(
                format!(
                    "ioctl(SIOCETHTOOL, {}) on {}: the driver has no RSS indirection table \
                     (indir_size 0)",
                    crate::sys::ethtool_ioctl::cmd_name(ETHTOOL_GRSSH),
                    self.ifname
                ),
                libc::EOPNOTSUPP,
            ));
        }
        Ok(RssTable { indir })
    }

    fn rss_set(&mut self, table: &RssTable) -> Result<()> {
        self.ioctl.rss_set(&table.indir)
    }

    fn rss_reset(&mut self) -> Result<()> {
        self.ioctl.rss_reset()
    }

    fn rss_context_create(&mut self, table: &RssTable) -> Result<RssContextId> {
        self.ioctl.rss_context_create(&table.indir)
    }

    fn rss_context_get(&mut self, id: RssContextId) -> Result<RssTable> {
        let (_, indir) = self.ioctl.rss_context_get(id)?;
        Ok(RssTable { indir })
    }

    fn rss_context_delete(&mut self, id: RssContextId) -> Result<()> {
        self.ioctl.rss_context_delete(id)
    }

    fn rss_contexts(&mut self) -> Result<Vec<RssContextId>> {
        self.ethtool.rss_context_ids(self.ifindex)
    }

    fn ntuple_get(&mut self) -> Result<bool> {
        let f = self.ntuple_bit()?;
        let blocks = self.ioctl.features_get(f.words)?;
        let block = blocks
            .get((f.bit / 32) as usize)
            .ok_or_else(|| Error::Decode {
                what: "ethtool_gfeatures.features".into(),
                detail: format!("{} blocks, {NTUPLE_FEATURE} is bit {}", blocks.len(), f.bit),
            })?;
        Ok(block.active & (1 << (f.bit % 32)) != 0)
    }

    fn ntuple_set(&mut self, on: bool) -> Result<()> {
        let f = self.ntuple_bit()?;
        let flags = self.ioctl.features_set(f.words, f.bit, on)?;
        let state = if on { "on" } else { "off" };
        if flags.unsupported() {
            return Err(Error::sys(
                format!(
                    "ioctl(SIOCETHTOOL, ETHTOOL_SFEATURES {NTUPLE_FEATURE} {state}) on {}: \
                     the device cannot change this feature (ETHTOOL_F_UNSUPPORTED)",
                    self.ifname
                ),
                libc::EOPNOTSUPP,
            ));
        }
        if flags.wish() {
            crate::elog!(
                "{}: {}: {NTUPLE_FEATURE} requested {state}, but the device did not apply it \
                 (ETHTOOL_F_WISH)",
                crate::cli::PROGRAM,
                self.ifname
            );
        }
        Ok(())
    }

    fn flow_rules(&mut self) -> Result<(Vec<RuleLocation>, u32)> {
        let count = self.ioctl.rule_count()?;
        let (locs, size) = self.ioctl.rule_locations(count.rule_cnt)?;
        Ok((locs, if size != 0 { size } else { count.table_size }))
    }

    /// As ethtool(8): asks GRXCLSRLCNT whether the driver picks locations itself
    /// (`RX_CLS_LOC_SPECIAL`); if so inserts at `RX_CLS_LOC_ANY`, otherwise at the highest
    /// free location of the rule list. Unlike ethtool(8), a driver that answers EOPNOTSUPP to
    /// GRXCLSRLCNT still gets the insert at `RX_CLS_LOC_ANY`, so the error names the insert.
    fn flow_rule_insert(&mut self, rule: &FlowRule) -> Result<RuleLocation> {
        let fs = flow_spec_for(rule, self.insert_location()?)?;
        self.ioctl.rule_insert(&fs)
    }

    /// As [`flow_rule_insert`](NicOps::flow_rule_insert), with `FLOW_RSS` and `ctx`.
    fn flow_rule_insert_rss(&mut self, rule: &FlowRule, ctx: RssContextId) -> Result<RuleLocation> {
        let fs = flow_spec_for(rule, self.insert_location()?)?;
        self.ioctl.rule_insert_rss(&fs, ctx)
    }

    fn flow_rule_delete(&mut self, loc: RuleLocation) -> Result<()> {
        self.ioctl.rule_delete(loc)
    }

    fn queues(&mut self) -> Result<Vec<QueueInfo>> {
        self.netdev.queue_get_dump(self.ifindex)
    }

    fn bind_rx(&mut self, req: &BindRxRequest) -> Result<Box<dyn Binding>> {
        Ok(Box::new(self.netdev.bind_rx_request(req)?))
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::sys::ethtool_ioctl::{TCP_V4_FLOW, TCP_V6_FLOW};

    fn rule(flow_type: FlowType, src: Option<(&str, u16)>, dst: (&str, u16)) -> FlowRule {
        FlowRule {
            flow_type,
            src: src.map(|(a, p)| (a.parse().unwrap(), p)),
            dst: (dst.0.parse().unwrap(), dst.1),
            queue: 5,
        }
    }

    #[test]
    fn tcp4_rule_unwraps_v4_mapped_addresses() {
        let plain = rule(
            FlowType::Tcp4,
            Some(("198.51.100.2", 5201)),
            ("198.51.100.1", 5201),
        );
        let mapped = rule(
            FlowType::Tcp4,
            Some(("::ffff:198.51.100.2", 5201)),
            ("::ffff:198.51.100.1", 5201),
        );
        let a = flow_spec_for(&plain, RX_CLS_LOC_ANY).unwrap();
        assert_eq!(a, flow_spec_for(&mapped, RX_CLS_LOC_ANY).unwrap());
        assert_eq!(a.flow_type, TCP_V4_FLOW);
        assert_eq!(&a.h_u[..4], &[198, 51, 100, 2], "ip4src, dotted quad");
        assert_eq!(&a.h_u[4..8], &[198, 51, 100, 1], "ip4dst");
        assert_eq!((a.ring_cookie, a.location), (5, RX_CLS_LOC_ANY));
    }

    #[test]
    fn tcp6_rule_and_family_mismatches() {
        let r = rule(FlowType::Tcp6, None, ("2001:db8::1", 443));
        let fs = flow_spec_for(&r, 9).unwrap();
        assert_eq!(fs.flow_type, TCP_V6_FLOW);
        assert_eq!(&fs.h_u[16..18], &[0x20, 0x01], "ip6dst starts at byte 16");
        assert!(fs.m_u[..16].iter().all(|&b| b == 0), "3-tuple: no src mask");
        assert_eq!(fs.location, 9);

        let e = flow_spec_for(&rule(FlowType::Tcp4, None, ("2001:db8::1", 1)), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ntuple rule Tcp4 needs IPv4 addresses, got 2001:db8::1"
        );
        let e = flow_spec_for(
            &rule(
                FlowType::Tcp6,
                Some(("198.51.100.2", 1)),
                ("2001:db8::1", 1),
            ),
            0,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("needs IPv6 addresses, got 198.51.100.2"),
            "{e}"
        );
    }
}
