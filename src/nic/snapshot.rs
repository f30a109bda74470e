//! A NIC state snapshot (header split, channel counts, RSS indirection table, additional RSS
//! contexts with their tables, ntuple feature and rule locations) read through [`NicOps`], and
//! a readable comparison. `--verify-restore` takes one before the run and one after the unwind
//! and fails the run when they differ.
//!
//! The contexts are listed with the ethtool netlink RSS_GET dump — the one call that names
//! them; no ioctl does — and each table is read with the `ETHTOOL_GRSSH` ioctl, like the
//! default table.

use std::collections::BTreeMap;
use std::fmt;

use super::guards::{describe_rss, split_cli, SharedNic};
use super::{HdsConfig, NicOps, RssContextId, RssTable, RuleLocation};
use crate::error::{Error, Result};
use crate::netlink::ethtool::Channels;

/// One fact read from the NIC: its value, "the driver does not support this" (EOPNOTSUPP),
/// or another error (as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact<T> {
    /// The value the kernel reported.
    Known(T),
    /// The driver answered EOPNOTSUPP; the text is the kernel's answer.
    Unsupported(String),
    /// Any other error, as text.
    Failed(String),
}

impl<T> Fact<T> {
    /// Files a kernel answer: `Ok` → `Known`, EOPNOTSUPP → `Unsupported`, else `Failed`.
    pub(crate) fn from_result(r: Result<T>) -> Fact<T> {
        match r {
            Ok(v) => Fact::Known(v),
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => Fact::Unsupported(e.to_string()),
            Err(e) => Fact::Failed(e.to_string()),
        }
    }
}

/// The channel counts that can change (not the maxima).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelCounts {
    /// rx-count.
    pub rx: Option<u32>,
    /// tx-count.
    pub tx: Option<u32>,
    /// other-count.
    pub other: Option<u32>,
    /// combined-count.
    pub combined: Option<u32>,
}

impl From<&Channels> for ChannelCounts {
    fn from(c: &Channels) -> Self {
        ChannelCounts {
            rx: c.rx_count,
            tx: c.tx_count,
            other: c.other_count,
            combined: c.combined_count,
        }
    }
}

impl fmt::Display for ChannelCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        write!(
            f,
            "rx {} tx {} other {} combined {}",
            o(self.rx),
            o(self.tx),
            o(self.other),
            o(self.combined)
        )
    }
}

/// What the NIC looked like at one moment, as far as this tool changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicSnapshot {
    /// Header split (RINGS_GET).
    pub hds: Fact<HdsConfig>,
    /// Channel counts (CHANNELS_GET).
    pub channels: Fact<ChannelCounts>,
    /// RSS indirection table (GRSSH).
    pub rss: Fact<RssTable>,
    /// Additional RSS contexts and their tables (RSS_GET dump for the ids, GRSSH for each
    /// table).
    pub contexts: Fact<BTreeMap<RssContextId, RssTable>>,
    /// The `rx-ntuple-filter` feature.
    pub ntuple: Fact<bool>,
    /// Locations of installed ntuple rules (anyone's), ascending.
    pub rules: Fact<Vec<RuleLocation>>,
}

impl NicSnapshot {
    /// Reads every item; an item the driver does not support is `Unsupported`.
    pub fn take(nic: &mut dyn NicOps) -> NicSnapshot {
        NicSnapshot {
            hds: Fact::from_result(nic.hds_get()),
            channels: Fact::from_result(nic.channels_get().map(|c| ChannelCounts::from(&c))),
            rss: Fact::from_result(nic.rss_get()),
            contexts: Fact::from_result(read_contexts(nic)),
            ntuple: Fact::from_result(nic.ntuple_get()),
            rules: Fact::from_result(nic.flow_rules().map(|(mut l, _)| {
                l.sort_unstable();
                l
            })),
        }
    }

    /// The differences from `self` (before) to `after`, one readable line each; empty when
    /// equal. An item that could not be read on either side counts as a difference (the
    /// restore cannot be proven).
    pub fn diff(&self, after: &NicSnapshot) -> Vec<String> {
        let mut out = diff_item("header split", &self.hds, &after.hds, |a, b| {
            let mut v = Vec::new();
            if a.tcp_data_split != b.tcp_data_split {
                v.push(format!(
                    "header split: tcp-data-split was {}, now {}",
                    split_cli(a.tcp_data_split),
                    split_cli(b.tcp_data_split)
                ));
            }
            if a.hds_thresh != b.hds_thresh {
                let o = |v: Option<u32>| v.map_or_else(|| "not reported".into(), |v| v.to_string());
                v.push(format!(
                    "header split: hds-thresh was {}, now {}",
                    o(a.hds_thresh),
                    o(b.hds_thresh)
                ));
            }
            v
        });
        out.extend(diff_item(
            "channels",
            &self.channels,
            &after.channels,
            |a, b| vec![format!("channels: were {a}, now {b}")],
        ));
        out.extend(diff_item(
            "RSS indirection table",
            &self.rss,
            &after.rss,
            |a, b| vec![describe_rss_diff(a, b)],
        ));
        out.extend(diff_item(
            "RSS contexts",
            &self.contexts,
            &after.contexts,
            |a, b| vec![describe_contexts_diff(a, b)],
        ));
        out.extend(diff_item(
            "ntuple feature",
            &self.ntuple,
            &after.ntuple,
            |a, b| {
                let s = |v: &bool| if *v { "on" } else { "off" };
                vec![format!("ntuple feature: was {}, now {}", s(a), s(b))]
            },
        ));
        out.extend(diff_item(
            "ntuple rules",
            &self.rules,
            &after.rules,
            |a, b| {
                let only = |x: &[RuleLocation], y: &[RuleLocation]| {
                    let v: Vec<String> = x
                        .iter()
                        .filter(|l| !y.contains(l))
                        .map(|l| l.to_string())
                        .collect();
                    v.join(", ")
                };
                let parts: Vec<String> = [("added at", only(b, a)), ("removed from", only(a, b))]
                    .into_iter()
                    .filter(|(_, locs)| !locs.is_empty())
                    .map(|(what, locs)| format!("{what} location(s) {locs}"))
                    .collect();
                vec![format!("ntuple rules: {}", parts.join("; "))]
            },
        ));
        out
    }
}

/// The difference lines of one item: `values` for two different known values, else a line
/// when it could not be read on a side or its support changed.
fn diff_item<T: PartialEq>(
    what: &str,
    a: &Fact<T>,
    b: &Fact<T>,
    values: impl FnOnce(&T, &T) -> Vec<String>,
) -> Vec<String> {
    let line = match (a, b) {
        (Fact::Known(x), Fact::Known(y)) if x != y => return values(x, y),
        (Fact::Known(_), Fact::Known(_)) | (Fact::Unsupported(_), Fact::Unsupported(_)) => {
            return Vec::new()
        }
        (Fact::Failed(e), _) => format!("{what}: could not read it before the run: {e}"),
        (_, Fact::Failed(e)) => format!("{what}: could not read it after the run: {e}"),
        (Fact::Known(_), Fact::Unsupported(_)) => {
            format!("{what}: was readable before the run, unsupported after")
        }
        (Fact::Unsupported(_), Fact::Known(_)) => {
            format!("{what}: was unsupported before the run, readable after")
        }
    };
    vec![line]
}

/// Every additional RSS context of `nic` with its table.
///
/// Errors: the listing's or a table read's.
fn read_contexts(nic: &mut dyn NicOps) -> Result<BTreeMap<RssContextId, RssTable>> {
    let ids = nic.rss_contexts()?;
    ids.into_iter()
        .map(|id| nic.rss_context_get(id).map(|t| (id, t)))
        .collect()
}

/// `RSS contexts: added 1 (128 entries spread over queues 4..8); removed 2 (…); context 3's
/// table changed (was …, now …)`.
fn describe_contexts_diff(
    a: &BTreeMap<RssContextId, RssTable>,
    b: &BTreeMap<RssContextId, RssTable>,
) -> String {
    let mut parts = Vec::new();
    for (id, t) in b.iter().filter(|(id, _)| !a.contains_key(id)) {
        parts.push(format!("added {id} ({})", describe_rss(t)));
    }
    for (id, t) in a.iter().filter(|(id, _)| !b.contains_key(id)) {
        parts.push(format!("removed {id} ({})", describe_rss(t)));
    }
    for (id, was) in a {
        match b.get(id) {
            Some(now) if now != was => parts.push(format!(
                "context {id}'s table changed (was {}, now {})",
                describe_rss(was),
                describe_rss(now)
            )),
            _ => {}
        }
    }
    format!("RSS contexts: {}", parts.join("; "))
}

fn describe_rss_diff(a: &RssTable, b: &RssTable) -> String {
    let shape = |t: &RssTable| match super::guards::span_of(t) {
        Some(span) => format!("{} entries over {span}", t.indir.len()),
        None => format!("{} entries, custom", t.indir.len()),
    };
    if a.indir.len() != b.indir.len() {
        return format!("RSS indirection table: was {}, now {}", shape(a), shape(b));
    }
    let differ: Vec<usize> = (0..a.indir.len())
        .filter(|&i| a.indir[i] != b.indir[i])
        .collect();
    let first = differ[0];
    format!(
        "RSS indirection table: {} of {} entries differ (entry {first} was queue {}, now {}); was {}, now {}",
        differ.len(),
        a.indir.len(),
        a.indir[first],
        b.indir[first],
        shape(a),
        shape(b)
    )
}

/// `--verify-restore`: reads the NIC again and compares it with `before`.
///
/// Errors: `Error::Failure` listing every difference ("NIC not restored: …").
pub fn verify_restored(nic: &SharedNic, before: &NicSnapshot) -> Result<()> {
    let after = nic.with(|n| Ok(NicSnapshot::take(n)))?;
    let diff = before.diff(&after);
    if diff.is_empty() {
        Ok(())
    } else {
        Err(Error::Failure(format!(
            "{}: NIC not restored to its state before the run: {}",
            nic.ifname(),
            diff.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::ethtool::TcpDataSplit;
    use crate::nic::scripted::ScriptedNic;
    use crate::nic::NicOps;

    #[test]
    fn equal_nics_have_no_diff_and_changes_read_well() {
        let nic = ScriptedNic::good("eth0", 8).with_foreign_rule(5);
        let mut n = nic.clone();
        let before = NicSnapshot::take(&mut n);
        assert!(before.diff(&NicSnapshot::take(&mut n)).is_empty());

        n.hds_set(TcpDataSplit::Enabled, Some(0)).unwrap();
        n.rss_set(&crate::nic::guards::equal_table(128, 7)).unwrap();
        n.flow_rule_delete(5).unwrap();
        n.ntuple_set(false).unwrap();
        n.channels_set(crate::nic::ChannelsSet {
            combined: Some(16),
            ..Default::default()
        })
        .unwrap();
        let after = NicSnapshot::take(&mut n);
        let d = before.diff(&after);
        assert_eq!(
            d,
            vec![
                "header split: tcp-data-split was off, now on".to_string(),
                "header split: hds-thresh was 128, now 0".into(),
                "channels: were rx - tx - other - combined 8, now rx - tx - other - combined 16"
                    .into(),
                "RSS indirection table: 107 of 128 entries differ (entry 7 was queue 7, now 0); \
                 was 128 entries over queues 0..8, now 128 entries over queues 0..7"
                    .into(),
                "ntuple feature: was on, now off".into(),
                "ntuple rules: removed from location(s) 5".into(),
            ]
        );
    }

    #[test]
    fn unsupported_items_compare_equal_and_failures_do_not() {
        let veth = ScriptedNic::veth("va");
        let mut n = veth.clone();
        let s = NicSnapshot::take(&mut n);
        assert!(matches!(s.hds, Fact::Unsupported(_)));
        assert!(matches!(s.rss, Fact::Unsupported(_)));
        assert!(s.diff(&s.clone()).is_empty());
        let mut broken = s.clone();
        broken.channels = Fact::Failed("EIO".into());
        assert_eq!(
            s.diff(&broken),
            vec!["channels: could not read it after the run: EIO".to_string()]
        );
    }
}
