//! Undo guards: one value per NIC change (`docs/architecture.md#undo-guards`): header split,
//! channels, the RSS table, the ntuple feature, a flow rule (to a queue or an RSS context) and
//! an additional RSS context.
//!
//! Each guard reads the previous state before it applies its change, has a fallible
//! `restore(self)` that the normal path calls (its error names what was left behind and the
//! `ethtool` command that fixes it by hand), and a `Drop` that restores best-effort on every
//! other path (error, panic, signal) and logs what it could not undo. Channels, RSS, ntuple and
//! flow-rule guards whose change was a no-op (the NIC already had the wanted state) restore
//! nothing; header split is always written and always restored, because drivers report the
//! effective mode while the bind checks the configured one.
//!
//! Guards share the NIC through [`SharedNic`]; [`crate::nic::setup::NicSetup`] keeps them in
//! fields ordered so that they unwind in reverse setup order.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::AtomicI32;

use super::{
    ChannelsSet, FlowRule, FlowType, HdsConfig, NicOps, QueueSpan, RssContextId, RssTable,
    RuleLocation,
};
use crate::error::{Error, Result};
use crate::missing::Missing;
use crate::netlink::ethtool::{Channels, TcpDataSplit};

/// One NIC shared by the guards, the setup and the probe: a reference-counted handle to a
/// boxed [`NicOps`]. Single-threaded (the tool's NIC work happens on the main thread).
///
/// It also carries the stop flag the setup steps look at between changes
/// ([`SharedNic::interrupted`]): the SIGINT/SIGTERM/SIGHUP handler's [`crate::signals::STOP`]
/// unless a test gives its own (`SharedNic::stop_flag`, in test builds). Undo steps never look at
/// it.
#[derive(Clone)]
pub struct SharedNic {
    inner: Rc<RefCell<Box<dyn NicOps>>>,
    ifname: String,
    stop: &'static AtomicI32,
}

impl fmt::Debug for SharedNic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedNic({})", self.ifname)
    }
}

impl SharedNic {
    /// Wraps `nic`.
    pub fn new(nic: Box<dyn NicOps>) -> SharedNic {
        let ifname = nic.ifname().to_string();
        SharedNic {
            inner: Rc::new(RefCell::new(nic)),
            ifname,
            stop: &crate::signals::STOP,
        }
    }

    /// Uses `stop` instead of [`crate::signals::STOP`] as the stop flag (a signal number, 0 =
    /// keep going); for tests (test builds and the `testing` feature only).
    #[cfg(any(test, feature = "testing"))]
    pub fn stop_flag(mut self, stop: &'static AtomicI32) -> SharedNic {
        self.stop = stop;
        self
    }

    /// `Err(Error::Interrupted(sig))` once a stop signal arrived: the setup steps call this
    /// before each change, so a signal during setup stops it at the next step (and the undo
    /// guards unwind what was done).
    pub fn interrupted(&self) -> Result<()> {
        crate::signals::check_flag(self.stop)
    }

    /// Interface name, for messages.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.inner.try_borrow().map_or(0, |n| n.ifindex())
    }

    /// Runs `f` with the NIC. Never panics: a nested call (a bug) is `Error::Failure`.
    pub fn with<R>(&self, f: impl FnOnce(&mut dyn NicOps) -> Result<R>) -> Result<R> {
        let mut nic = self.inner.try_borrow_mut().map_err(|_| {
            Error::Failure(format!(
                "{}: NIC handle already in use (nested NIC call)",
                self.ifname
            ))
        })?;
        f(nic.as_mut())
    }
}

/// `ethtool -G … tcp-data-split` spelling of a header-split mode: `auto` (unknown / not
/// reported), `off`, `on`.
pub(crate) fn split_cli(split: Option<TcpDataSplit>) -> &'static str {
    match split {
        None | Some(TcpDataSplit::Unknown) => "auto",
        Some(TcpDataSplit::Disabled) => "off",
        Some(TcpDataSplit::Enabled) => "on",
    }
}

/// A header-split setting as `ethtool -g` would name it: `tcp-data-split off, hds-thresh 128`
/// (`tcp-data-split not reported` when the driver does not report it).
pub fn describe_hds(h: &HdsConfig) -> String {
    let split = match h.tcp_data_split {
        None => "not reported",
        split => split_cli(split),
    };
    let thresh = h.hds_thresh.map(|t| format!(", hds-thresh {t}"));
    format!("tcp-data-split {split}{}", thresh.unwrap_or_default())
}

/// The "could not undo" failure: what, where, what it was, why, and the command.
fn leftover(what: &str, nic: &SharedNic, was: &str, err: &Error, fix: &str) -> Error {
    let ifname = nic.ifname();
    Error::Failure(format!(
        "could not restore {what} on {ifname} (was: {was}): {err}; run `{fix}`"
    ))
}

/// Writes a line to stderr without ever panicking (a closed stderr is ignored).
pub(crate) fn log_stderr(line: &str) {
    crate::elog!(
        "{}: {line}{}",
        crate::cli::PROGRAM,
        if std::thread::panicking() {
            " (while unwinding after a panic)"
        } else {
            ""
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Header split
// ---------------------------------------------------------------------------------------------

/// Header split turned on: tcp-data-split ENABLED and, when the driver reports it, hds-thresh
/// 0 (ethtool RINGS_SET). Restores the careful way (ncdevmem.c `restore_ring_config`): set
/// tcp-data-split UNKNOWN ("let the driver choose") with the old hds-thresh, re-read, and only
/// if that did not bring back the old values, write the exact old values.
#[derive(Debug)]
pub struct HdsGuard {
    nic: SharedNic,
    old: HdsConfig,
    armed: bool,
}

impl HdsGuard {
    /// Reads the ring config and turns header split on.
    ///
    /// Errors: as [`NicOps::hds_get`]/[`NicOps::hds_set`] (EOPNOTSUPP when the driver has no
    /// ring parameters or cannot set header split); callers map them with
    /// [`crate::caps::classify`].
    pub fn enable(nic: &SharedNic) -> Result<HdsGuard> {
        let old = nic.with(|n| n.hds_get())?;
        HdsGuard::write(nic, old, old.hds_thresh.map(|_| 0))
    }

    /// Reads the ring config and turns header split on with hds-thresh `thresh` bytes (the
    /// plain receiver's `--hds-thresh`): payloads of at most `thresh` bytes stay in the
    /// header buffer, larger ones are split. The same undo as [`enable`](Self::enable).
    ///
    /// Errors: `Error::Skip` ([`Missing::Driver`]) when the driver reports no hds-thresh in
    /// RINGS_GET (it cannot take one) or when `thresh` is over its hds-thresh-max; otherwise
    /// as [`enable`](Self::enable).
    pub(crate) fn enable_with_thresh(nic: &SharedNic, thresh: u32) -> Result<HdsGuard> {
        let old = nic.with(|n| n.hds_get())?;
        let missing = |answer: String| {
            Error::Skip(Missing::Driver {
                ifname: nic.ifname().to_string(),
                what: format!("hds-thresh {thresh}"),
                answer,
                hint: None,
            })
        };
        if old.hds_thresh.is_none() {
            return Err(missing("ethtool rings-get reports no hds-thresh".into()));
        }
        if let Some(max) = old.hds_thresh_max.filter(|max| thresh > *max) {
            return Err(missing(format!(
                "it is over the driver's hds-thresh-max {max} (ethtool rings-get)"
            )));
        }
        HdsGuard::write(nic, old, Some(thresh))
    }

    /// Writes tcp-data-split ENABLED with `want_thresh`; `old` is what the undo restores.
    fn write(nic: &SharedNic, old: HdsConfig, want_thresh: Option<u32>) -> Result<HdsGuard> {
        // Always written, even when RINGS_GET already reports "enabled": drivers report the
        // effective mode (netdevsim, bnxt report "enabled" while configured "unknown"), but
        // the memory-provider check at bind time reads the *configured* value, which only an
        // explicit ENABLED sets (as C ncdevmem does).
        nic.with(|n| n.hds_set(TcpDataSplit::Enabled, want_thresh))?;
        Ok(HdsGuard {
            nic: nic.clone(),
            old,
            armed: true,
        })
    }

    /// The ring config before [`enable`](Self::enable).
    pub fn old(&self) -> HdsConfig {
        self.old
    }

    /// The command that puts the old values back by hand.
    pub fn fix_command(&self) -> String {
        format!(
            "ethtool -G {} tcp-data-split {}{}",
            self.nic.ifname(),
            split_cli(self.old.tcp_data_split),
            self.old
                .hds_thresh
                .map(|t| format!(" hds-thresh {t}"))
                .unwrap_or_default()
        )
    }

    fn undo(&self) -> Result<()> {
        let old = self.old;
        self.nic
            .with(|n| {
                n.hds_set(TcpDataSplit::Unknown, old.hds_thresh)?;
                let now = n.hds_get()?;
                let known = old.tcp_data_split.filter(|s| *s != TcpDataSplit::Unknown);
                let split_back = known.is_none_or(|s| now.tcp_data_split == Some(s));
                let thresh_back = old.hds_thresh.is_none() || now.hds_thresh == old.hds_thresh;
                if !(split_back && thresh_back) {
                    let split = old.tcp_data_split.unwrap_or(TcpDataSplit::Unknown);
                    n.hds_set(split, old.hds_thresh)?;
                }
                Ok(())
            })
            .map_err(|e| {
                let was = describe_hds(&old);
                leftover("header split", &self.nic, &was, &e, &self.fix_command())
            })
    }
}

// ---------------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------------

/// The CHANNELS_SET that leaves `rx` RX and `tx` TX queues, as ncdevmem.c's
/// `configure_channels` computes it: for a driver with combined channels, rx/tx-only counts
/// go to 0 (when reported) and the smaller of the two becomes combined, the rest rx- or
/// tx-only; for an rx/tx-only driver (veth), rx and tx directly.
///
/// Errors: `Error::Skip` when the driver reports neither combined nor rx counts.
pub fn channels_for(old: &Channels, rx: u32, tx: u32) -> Result<ChannelsSet> {
    if old.combined_count.is_some() {
        let reports_split = old.rx_count.is_some() || old.tx_count.is_some();
        let mut set = ChannelsSet {
            rx: reports_split.then_some(0),
            tx: reports_split.then_some(0),
            combined: Some(rx.min(tx)),
        };
        if rx > tx {
            set.rx = Some(rx - tx);
        } else if tx > rx {
            set.tx = Some(tx - rx);
        }
        Ok(set)
    } else if old.rx_count.is_some() {
        Ok(ChannelsSet {
            rx: Some(rx),
            tx: Some(tx),
            combined: None,
        })
    } else {
        Err(Error::Skip(crate::caps::Missing::ChannelConfig))
    }
}

/// `"rx 0 tx 0 combined 4"`: the counts a [`ChannelsSet`] sets (unset ones left out).
pub(crate) fn describe_channels_set(set: &ChannelsSet) -> String {
    let parts: Vec<String> = [("rx", set.rx), ("tx", set.tx), ("combined", set.combined)]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n} {v}")))
        .collect();
    parts.join(" ")
}

/// A CHANNELS_SET change. Restores the old count of every field the change set.
#[derive(Debug)]
pub struct ChannelsGuard {
    nic: SharedNic,
    old: Channels,
    set: ChannelsSet,
    armed: bool,
}

impl ChannelsGuard {
    /// Reads the channel counts and applies `set`.
    ///
    /// Errors: as [`NicOps::channels_get`]/[`NicOps::channels_set`] (EINVAL when the kernel
    /// refuses the counts, e.g. below a bound queue).
    pub fn apply(nic: &SharedNic, set: ChannelsSet) -> Result<ChannelsGuard> {
        let old = nic.with(|n| n.channels_get())?;
        nic.with(|n| n.channels_set(set))?;
        Ok(ChannelsGuard {
            nic: nic.clone(),
            old,
            set,
            armed: true,
        })
    }

    /// The channel counts before [`apply`](Self::apply).
    pub fn old(&self) -> &Channels {
        &self.old
    }

    /// The CHANNELS_SET that undoes the change: the old count of every field `set` touched.
    pub(crate) fn restore_set(&self) -> ChannelsSet {
        let back = |touched: Option<u32>, old: Option<u32>| touched.map(|_| old.unwrap_or(0));
        ChannelsSet {
            rx: back(self.set.rx, self.old.rx_count),
            tx: back(self.set.tx, self.old.tx_count),
            combined: back(self.set.combined, self.old.combined_count),
        }
    }

    /// The command that puts the old counts back by hand.
    pub fn fix_command(&self) -> String {
        format!(
            "ethtool -L {} {}",
            self.nic.ifname(),
            describe_channels_set(&self.restore_set())
        )
    }

    fn undo(&self) -> Result<()> {
        let set = self.restore_set();
        self.nic.with(|n| n.channels_set(set)).map_err(|e| {
            let was = describe_channels_set(&set);
            leftover("channel counts", &self.nic, &was, &e, &self.fix_command())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// RSS indirection table
// ---------------------------------------------------------------------------------------------

/// The table `ethtool -X IF equal N` writes: `len` entries, entry `i` = `i % n` (queues).
pub fn equal_table(len: usize, n: u32) -> RssTable {
    span_table(len, QueueSpan { start: 0, count: n })
}

/// The table `ethtool -X IF context C start S equal N` writes: `len` entries spread evenly over
/// `span`, entry `i` = `span.start + i % span.count` (a count of 0 counts as 1).
pub fn span_table(len: usize, span: QueueSpan) -> RssTable {
    let n = u64::from(span.count.max(1));
    RssTable {
        indir: (0..len)
            .map(|i| span.start.saturating_add((i as u64 % n) as u32))
            .collect(),
    }
}

/// `Some(span)` when `table` is exactly [`span_table`] of its length over `span` (the span
/// from its lowest to its highest queue).
pub(crate) fn span_of(table: &RssTable) -> Option<QueueSpan> {
    let start = table.indir.iter().copied().min()?;
    let count = table
        .indir
        .iter()
        .copied()
        .max()?
        .checked_sub(start)?
        .checked_add(1)?;
    let span = QueueSpan { start, count };
    (span_table(table.indir.len(), span) == *table).then_some(span)
}

/// `Some(n)` when `table` is exactly what `ethtool -X IF equal n` writes.
pub(crate) fn equal_spread_of(table: &RssTable) -> Option<u32> {
    span_of(table).filter(|s| s.start == 0).map(|s| s.count)
}

/// A readable summary of an indirection table that never prints a large table whole:
/// `"128 entries spread over queues 0..8"` (or `4..8`, for a context's table),
/// `"custom table [3, 3, 1, 0]"` (up to 16 entries), or
/// `"custom table of 512 entries using queues 0 (256), 1 (128), 3 (128)"` (queue and how many
/// entries point to it; at most 16 queues named).
pub(crate) fn describe_rss(table: &RssTable) -> String {
    const SHOW: usize = 16;
    let len = table.indir.len();
    if len == 0 {
        return "empty table".into();
    }
    if let Some(span) = span_of(table) {
        return format!("{len} entries spread over {span}");
    }
    if len <= SHOW {
        return format!("custom table {:?}", table.indir);
    }
    let mut per_queue = std::collections::BTreeMap::<u32, usize>::new();
    for q in &table.indir {
        *per_queue.entry(*q).or_default() += 1;
    }
    let mut parts: Vec<String> = per_queue
        .iter()
        .take(SHOW)
        .map(|(q, n)| format!("{q} ({n})"))
        .collect();
    if per_queue.len() > SHOW {
        parts.push(format!("… {} more queues", per_queue.len() - SHOW));
    }
    format!(
        "custom table of {len} entries using queues {}",
        parts.join(", ")
    )
}

/// Why a location an ntuple rule insert reported cannot be ours, if it cannot: a special
/// location (`RX_CLS_LOC_ANY`/`FIRST`/`LAST`), one past the rule table (`table_size` > 0;
/// 0 = the driver did not say), or one that held a rule before the insert.
pub fn bad_rule_location(
    loc: RuleLocation,
    before: &[RuleLocation],
    table_size: u32,
) -> Option<String> {
    let special = match loc {
        0xffff_ffff => Some("RX_CLS_LOC_ANY"),
        0xffff_fffe => Some("RX_CLS_LOC_FIRST"),
        0xffff_fffd => Some("RX_CLS_LOC_LAST"),
        _ => None,
    };
    if let Some(name) = special {
        return Some(format!("{name}, a request value, not a rule location"));
    }
    if table_size > 0 && loc >= table_size {
        return Some(format!("past the rule table of {table_size} locations"));
    }
    if before.contains(&loc) {
        return Some("a location that already held another rule before the insert".into());
    }
    None
}

/// The RSS indirection table spread over queues `[0, start)` so that queues `start..` get no
/// RSS traffic (only what a flow rule steers there). Restores the ORIGINAL table, not the
/// driver default (ncdevmem.c runs `ethtool -X IF default`, which loses a custom table) —
/// except that a table which WAS the driver default (the even spread over the RX queues of
/// the time) is restored by a reset to the default (SRSSH with `indir_size` 0), the only
/// write that also clears the kernel's "user configured" mark (`IFF_RXFH_CONFIGURED`);
/// writing the same table explicitly would leave the NIC marked, so later channel changes
/// would be checked against it and the driver would no longer re-spread it.
///
/// Whether the old table was the default does not depend on reading the channel counts:
/// when they cannot be read (a driver with RSS but no channels support, a transient error),
/// an even spread may be the default, so the restore resets and re-reads; a table that then
/// differs was someone's own spread and is written back. When the mark may have been left
/// set (the reset was refused, or a known default did not come back), the table is written
/// back and the restore fails naming `ethtool -X IF default`: the NIC is not as it was.
#[derive(Debug)]
pub struct RssGuard {
    nic: SharedNic,
    old: RssTable,
    /// Whether `old` was the driver default, and how sure that is.
    default: RssDefault,
    changed: bool,
    armed: bool,
}

/// Whether a saved RSS table was the driver default (the even spread over the RX queues).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RssDefault {
    /// It was the even spread over the `n` RX queues the channels reported: restore by reset.
    Yes(u32),
    /// It is an even spread, but the RX queue count could not be read: reset and compare; a
    /// different table means it was not the default and is written back.
    Maybe,
    /// It was not the default (a custom table, or a spread over fewer queues than the NIC
    /// has): written back.
    No,
}

/// The outcome of [`RssGuard::spread_if_table`].
#[derive(Debug)]
pub enum RssSpread {
    /// The table was read and spread (or already was).
    Spread(RssGuard),
    /// The driver has no RSS indirection table (GRSSH answered EOPNOTSUPP, or an empty
    /// table); nothing was changed. Holds the kernel's answer (errno EOPNOTSUPP).
    NoTable(Error),
}

impl RssGuard {
    /// Reads the table and writes `equal_table(len, start)`, taking queues `[start, …)` out of
    /// RSS; a driver without an RSS indirection table (GRSSH EOPNOTSUPP, or an empty table)
    /// is `Ok(RssSpread::NoTable)`, not an error. Also reads the channel counts, to know
    /// whether the table is the driver default.
    ///
    /// Errors: `Error::Usage` for `start == 0` (queue 0 cannot leave RSS); other kernel errors
    /// from the read; any error from the write (including EOPNOTSUPP: a table that exists but
    /// cannot be written).
    pub fn spread_if_table(nic: &SharedNic, start: u32) -> Result<RssSpread> {
        if start == 0 {
            return Err(Error::Usage(
                "-t: queue 0 cannot be taken out of RSS; the first bound queue must be >= 1".into(),
            ));
        }
        let old = match nic.with(|n| n.rss_get()) {
            Ok(t) if t.indir.is_empty() => {
                return Ok(RssSpread::NoTable(Error::sys(
                    format!(
                        "ETHTOOL_GRSSH on {}: the driver reports an empty RSS indirection table \
                         (indir_size 0)",
                        nic.ifname()
                    ),
                    libc::EOPNOTSUPP,
                )))
            }
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => return Ok(RssSpread::NoTable(e)),
            r => r?,
        };
        let default = match nic.with(|n| n.channels_get()).map(|c| c.rx_queues()) {
            Ok(n) if n > 0 && equal_table(old.indir.len(), n) == old => RssDefault::Yes(n),
            Ok(n) if n > 0 => RssDefault::No,
            // Channels unknown (not supported, a read error, no counts): an even spread may
            // be the default.
            _ if equal_spread_of(&old).is_some() => RssDefault::Maybe,
            _ => RssDefault::No,
        };
        let new = equal_table(old.indir.len(), start);
        let changed = new != old;
        if changed {
            nic.with(|n| n.rss_set(&new))?;
        }
        Ok(RssSpread::Spread(RssGuard {
            nic: nic.clone(),
            old,
            default,
            changed,
            armed: true,
        }))
    }

    /// The table before [`spread_if_table`](Self::spread_if_table).
    pub fn old(&self) -> &RssTable {
        &self.old
    }

    /// Whether `spread` changed the table.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Whether the old table was the driver default (restored by a reset): `Some(true)` known
    /// to be, `Some(false)` known not to be, `None` when the RX queue count could not be read
    /// and the table is an even spread (the restore then resets and compares). For tests (test
    /// builds and the `testing` feature only).
    #[cfg(any(test, feature = "testing"))]
    #[cfg(test)]
    pub(crate) fn was_default(&self) -> Option<bool> {
        match self.default {
            RssDefault::Yes(_) => Some(true),
            RssDefault::No => Some(false),
            RssDefault::Maybe => None,
        }
    }

    /// The command that puts the old table back by hand: `ethtool -X IF default` when it was
    /// the driver default, `ethtool -X IF equal N` when it was another even spread, else
    /// `ethtool -X IF default` (with a summary of the old table in the message).
    pub fn fix_command(&self) -> String {
        match (self.default, equal_spread_of(&self.old)) {
            (RssDefault::No, Some(n)) => format!("ethtool -X {} equal {n}", self.nic.ifname()),
            _ => format!("ethtool -X {} default", self.nic.ifname()),
        }
    }

    fn was(&self) -> String {
        let d = describe_rss(&self.old);
        match self.default {
            RssDefault::Yes(_) => format!("the driver default, {d}"),
            RssDefault::Maybe => format!("{d}, possibly the driver default"),
            RssDefault::No => d,
        }
    }

    fn undo(&self) -> Result<()> {
        if !self.changed {
            return Ok(());
        }
        let old = &self.old;
        let fail = |e: &Error| {
            let what = "the RSS indirection table";
            leftover(what, &self.nic, &self.was(), e, &self.fix_command())
        };
        if self.default == RssDefault::No {
            return self.nic.with(|n| n.rss_set(old)).map_err(|e| fail(&e));
        }
        // Reset to the driver default (this also clears the user-configured mark), then
        // confirm it is the table we saved.
        let reset = self.nic.with(|n| n.rss_reset());
        let now = reset.as_ref().ok().map(|()| self.nic.with(|n| n.rss_get()));
        if matches!(&now, Some(Ok(t)) if t == old) {
            return Ok(());
        }
        // Not the default after all, or the reset (or the re-read) failed: the saved table
        // goes back explicitly, which marks it user-configured.
        self.nic.with(|n| n.rss_set(old)).map_err(|e| fail(&e))?;
        let why = match (reset, now) {
            (Err(e), _) | (Ok(()), Some(Err(e))) => Some(e),
            // An even spread of someone's that is not the default: written back, as it was.
            _ if self.default == RssDefault::Maybe => None,
            (Ok(()), _) => Some(Error::Failure(match self.default {
                RssDefault::Yes(n) => format!(
                    "the driver default is no longer the saved even spread over {n} RX queues"
                ),
                _ => "the driver default is no longer the saved table".into(),
            })),
        };
        match why {
            None => Ok(()),
            Some(e) => Err(Error::Failure(format!(
                "RSS indirection table on {} written back, but the reset to the driver default \
                 failed ({e}), so the kernel keeps it marked user-configured (it was {}); run \
                 `ethtool -X {} default`",
                self.nic.ifname(),
                self.was(),
                self.nic.ifname()
            ))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ntuple feature
// ---------------------------------------------------------------------------------------------

/// The `rx-ntuple-filter` feature turned on, only if it was off; restored to off only then.
#[derive(Debug)]
pub struct NtupleFeatureGuard {
    nic: SharedNic,
    was_on: bool,
    armed: bool,
}

impl NtupleFeatureGuard {
    /// Reads the feature and turns it on when it is off.
    ///
    /// Errors: as [`NicOps::ntuple_get`]/[`NicOps::ntuple_set`]; EOPNOTSUPP means the
    /// driver has no ntuple filters.
    pub fn enable(nic: &SharedNic) -> Result<NtupleFeatureGuard> {
        let was_on = nic.with(|n| n.ntuple_get())?;
        if !was_on {
            nic.with(|n| n.ntuple_set(true))?;
        }
        Ok(NtupleFeatureGuard {
            nic: nic.clone(),
            was_on,
            armed: true,
        })
    }

    /// Whether `enable` turned the feature on (false: it was already on).
    pub fn changed(&self) -> bool {
        !self.was_on
    }

    /// The command that turns the feature off again by hand.
    pub fn fix_command(&self) -> String {
        format!("ethtool -K {} ntuple off", self.nic.ifname())
    }

    fn undo(&self) -> Result<()> {
        if self.was_on {
            return Ok(());
        }
        self.nic.with(|n| n.ntuple_set(false)).map_err(|e| {
            leftover(
                "the ntuple feature",
                &self.nic,
                "off",
                &e,
                &self.fix_command(),
            )
        })
    }
}

// ---------------------------------------------------------------------------------------------
// ntuple flow rule
// ---------------------------------------------------------------------------------------------

/// `tcp4 src 192.0.2.2:5201 dst 192.0.2.1:5201 -> queue 7` (for messages and journals).
pub fn describe_rule(rule: &FlowRule) -> String {
    describe_rule_to(rule, None)
}

/// [`describe_rule`], or with `Some(ctx)` a `FLOW_RSS` rule: `tcp4 dst 192.0.2.1:5201 -> RSS
/// context 1` (`rule.queue` is then the queue offset, named only when not 0).
pub fn describe_rule_to(rule: &FlowRule, ctx: Option<RssContextId>) -> String {
    let kind = match rule.flow_type {
        FlowType::Tcp4 => "tcp4",
        FlowType::Tcp6 => "tcp6",
    };
    // `a.b.c.d:port` or `[v6]:port` (SocketAddr's Display; no scope id here).
    let ep = |ep: (std::net::IpAddr, u16)| std::net::SocketAddr::from(ep);
    let src = rule.src.map(|s| format!(" src {}", ep(s)));
    let (dst, queue) = (ep(rule.dst), rule.queue);
    let action = match ctx {
        None => format!("queue {queue}"),
        Some(c) if queue == 0 => format!("RSS context {c}"),
        Some(c) => format!("RSS context {c} + queue offset {queue}"),
    };
    format!("{kind}{} dst {dst} -> {action}", src.unwrap_or_default())
}

/// An inserted ntuple rule (to a queue, or a `FLOW_RSS` rule to an RSS context); restore
/// deletes exactly the location the kernel returned, never anyone else's rule.
#[derive(Debug)]
pub struct FlowRuleGuard {
    nic: SharedNic,
    rule: FlowRule,
    context: Option<RssContextId>,
    loc: RuleLocation,
    armed: bool,
}

impl FlowRuleGuard {
    /// Reads the rule locations in use, inserts `rule` and records where the kernel put it.
    ///
    /// The location the driver reports is checked ([`bad_rule_location`]): a special value,
    /// one past the rule table, or one that held a rule before the insert cannot be ours.
    /// Then the rule list is read again: if exactly one new location appeared, that one is
    /// recorded (it is ours); otherwise the insert is a failure and nothing is deleted (the
    /// reported location may be someone else's rule).
    ///
    /// A driver that cannot list its rules (EOPNOTSUPP) still gets the insert; then only the
    /// special locations are refused.
    ///
    /// Errors: as [`NicOps::flow_rules`] and [`NicOps::flow_rule_insert`]; `Error::Failure`
    /// (no errno) naming the driver's answer when the location cannot be trusted.
    pub fn insert(nic: &SharedNic, rule: &FlowRule) -> Result<FlowRuleGuard> {
        FlowRuleGuard::insert_to(nic, rule, None)
    }

    /// As [`insert`](Self::insert), for a `FLOW_RSS` rule delivering to RSS context `ctx`
    /// ([`NicOps::flow_rule_insert_rss`]; `rule.queue` is the queue offset, 0).
    ///
    /// Errors: as [`NicOps::flow_rules`] and [`NicOps::flow_rule_insert_rss`];
    /// `Error::Failure` when the location cannot be trusted.
    pub(crate) fn insert_to_context(
        nic: &SharedNic,
        rule: &FlowRule,
        ctx: RssContextId,
    ) -> Result<FlowRuleGuard> {
        FlowRuleGuard::insert_to(nic, rule, Some(ctx))
    }

    fn insert_to(
        nic: &SharedNic,
        rule: &FlowRule,
        context: Option<RssContextId>,
    ) -> Result<FlowRuleGuard> {
        // A driver that cannot list its rules (EOPNOTSUPP) still gets the insert, so that the
        // error names the insert; only the special locations can be checked then.
        let (before, table_size) = match nic.with(|n| n.flow_rules()) {
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => (Vec::new(), 0),
            r => r?,
        };
        let reported = nic.with(|n| match context {
            None => n.flow_rule_insert(rule),
            Some(c) => n.flow_rule_insert_rss(rule, c),
        })?;
        let described = describe_rule_to(rule, context);
        let loc = match bad_rule_location(reported, &before, table_size) {
            None => reported,
            Some(why) => {
                let after = nic.with(|n| n.flow_rules()).map(|(l, _)| l);
                let new: Vec<RuleLocation> = after.as_ref().map_or_else(
                    |_| Vec::new(),
                    |l| l.iter().copied().filter(|l| !before.contains(l)).collect(),
                );
                match new.as_slice() {
                    [ours] => {
                        log_stderr(&format!(
                            "{}: ntuple rule insert ({described}) reported location \
                             {reported} ({why}); the rule list shows it at location {ours}, \
                             recording that one",
                            nic.ifname(),
                        ));
                        *ours
                    }
                    _ => {
                        let seen = match &after {
                            Ok(_) if new.is_empty() => "no new location in the rule list".into(),
                            Ok(_) => format!("new locations {new:?} in the rule list"),
                            Err(e) => format!("the rule list could not be read again: {e}"),
                        };
                        return Err(Error::Failure(format!(
                            "{ifname}: ntuple rule insert ({described}) returned location \
                             {reported}, {why}; {seen}, so our rule cannot be told apart and \
                             nothing was deleted. Look for it with `ethtool -n {ifname}` and \
                             delete it with `ethtool -N {ifname} delete LOC`",
                            ifname = nic.ifname(),
                        )));
                    }
                }
            }
        };
        Ok(FlowRuleGuard {
            nic: nic.clone(),
            rule: rule.clone(),
            context,
            loc,
            armed: true,
        })
    }

    /// Where the kernel put the rule.
    pub fn location(&self) -> RuleLocation {
        self.loc
    }

    /// The rule.
    pub fn rule(&self) -> &FlowRule {
        &self.rule
    }

    /// The RSS context a `FLOW_RSS` rule delivers to; `None` for a rule to a queue.
    pub fn context(&self) -> Option<RssContextId> {
        self.context
    }

    /// The rule as [`describe_rule_to`] words it.
    pub fn describe(&self) -> String {
        describe_rule_to(&self.rule, self.context)
    }

    /// The command that deletes the rule by hand.
    pub fn fix_command(&self) -> String {
        format!("ethtool -N {} delete {}", self.nic.ifname(), self.loc)
    }

    fn undo(&self) -> Result<()> {
        self.nic
            .with(|n| n.flow_rule_delete(self.loc))
            .map_err(|e| {
                Error::Failure(format!(
                    "could not delete our ntuple rule {} ({}) on {}: {e}; run `{}`",
                    self.loc,
                    self.describe(),
                    self.nic.ifname(),
                    self.fix_command()
                ))
            })
    }
}

// ---------------------------------------------------------------------------------------------
// Additional RSS context
// ---------------------------------------------------------------------------------------------

/// An additional RSS context this run created; restore deletes exactly that id (after the
/// rules naming it are gone: the kernel refuses, EBUSY, while one is left).
#[derive(Debug)]
pub struct RssContextGuard {
    nic: SharedNic,
    id: RssContextId,
    table: RssTable,
    armed: bool,
}

impl RssContextGuard {
    /// Creates an RSS context with `table` as its indirection table (the device's table
    /// size; see [`NicOps::rss_context_create`]) and records the id the kernel allocated.
    ///
    /// Errors: as [`NicOps::rss_context_create`] (EOPNOTSUPP: no additional contexts; EBUSY:
    /// all ids taken; EINVAL: a table the device refuses); nothing is left to undo then.
    pub fn create(nic: &SharedNic, table: &RssTable) -> Result<RssContextGuard> {
        let id = nic.with(|n| n.rss_context_create(table))?;
        Ok(RssContextGuard {
            nic: nic.clone(),
            id,
            table: table.clone(),
            armed: true,
        })
    }

    /// The context's id.
    pub fn id(&self) -> RssContextId {
        self.id
    }

    /// The indirection table the context was created with.
    pub fn table(&self) -> &RssTable {
        &self.table
    }

    /// The command that deletes the context by hand (after any rule naming it).
    pub fn fix_command(&self) -> String {
        format!(
            "ethtool -X {} context {} delete",
            self.nic.ifname(),
            self.id
        )
    }

    fn undo(&self) -> Result<()> {
        self.nic
            .with(|n| n.rss_context_delete(self.id))
            .map_err(|e| {
                Error::Failure(format!(
                    "could not delete our RSS context {} ({}) on {}: {e}; run `{}`",
                    self.id,
                    describe_rss(&self.table),
                    self.nic.ifname(),
                    self.fix_command()
                ))
            })
    }
}

/// For each guard: the explicit `restore(self)` (disarms, then undoes) and the `Drop` that
/// undoes an armed guard best-effort and logs what was left behind (never panics; `restore`
/// disarms first, so an explicit restore is not repeated).
macro_rules! undo_guards {
    ($($(#[$doc:meta])* $guard:ty;)+) => {$(
        impl $guard {
            $(#[$doc])*
            pub fn restore(mut self) -> Result<()> {
                self.armed = false;
                self.undo()
            }
        }

        impl Drop for $guard {
            fn drop(&mut self) {
                if self.armed {
                    self.armed = false;
                    if let Err(e) = self.undo() {
                        log_stderr(&e.to_string());
                    }
                }
            }
        }
    )+};
}

undo_guards! {
    /// Restores the old ring config.
    ///
    /// Errors: `Error::Failure` naming the old values, the kernel's answer and the
    /// `ethtool -G` command to run by hand.
    HdsGuard;
    /// Restores the old channel counts.
    ///
    /// Errors: `Error::Failure` with the `ethtool -L` command to run by hand.
    ChannelsGuard;
    /// Puts the original table back (by a reset when it was the driver default).
    ///
    /// Errors: `Error::Failure` with the `ethtool -X` command to run by hand.
    RssGuard;
    /// Turns the feature off again if `enable` turned it on.
    ///
    /// Errors: `Error::Failure` with the `ethtool -K` command to run by hand.
    NtupleFeatureGuard;
    /// Deletes the rule.
    ///
    /// Errors: `Error::Failure` with the `ethtool -N … delete` command to run by hand.
    FlowRuleGuard;
    /// Deletes the RSS context (delete the rules naming it first).
    ///
    /// Errors: `Error::Failure` with the `ethtool -X … context N delete` command to run by
    /// hand (EBUSY when a rule still names the context).
    RssContextGuard;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::scripted::{Op, ScriptedNic};

    /// [`RssGuard::spread_if_table`], with a driver without a table as its error.
    fn spread(nic: &SharedNic, start: u32) -> Result<RssGuard> {
        match RssGuard::spread_if_table(nic, start)? {
            RssSpread::Spread(g) => Ok(g),
            RssSpread::NoTable(e) => Err(e),
        }
    }

    fn shared(n: &ScriptedNic) -> SharedNic {
        SharedNic::new(Box::new(n.clone()))
    }

    #[test]
    fn equal_table_is_ethtool_equal() {
        assert_eq!(equal_table(6, 4).indir, vec![0, 1, 2, 3, 0, 1]);
        assert_eq!(equal_spread_of(&equal_table(128, 7)), Some(7));
        let custom = RssTable {
            indir: vec![1, 0, 1, 0],
        };
        assert_eq!(equal_spread_of(&custom), None);
        assert_eq!(equal_spread_of(&RssTable { indir: vec![] }), None);
        // A context's table: spread over 4..8, not from 0.
        let span = QueueSpan { start: 4, count: 4 };
        let t = span_table(6, span);
        assert_eq!(t.indir, vec![4, 5, 6, 7, 4, 5]);
        assert_eq!(span_of(&t), Some(span));
        assert_eq!(equal_spread_of(&t), None, "not an `equal N` table");
        assert_eq!(
            describe_rss(&span_table(128, span)),
            "128 entries spread over queues 4..8"
        );
        assert_eq!(
            span_of(&RssTable { indir: vec![5, 4] }),
            None,
            "not in order"
        );
    }

    #[test]
    fn rules_to_a_context_read_as_such() {
        let mut rule = FlowRule {
            flow_type: FlowType::Tcp6,
            src: None,
            dst: ("2001:db8::1".parse().unwrap(), 5201),
            queue: 0,
        };
        assert_eq!(
            describe_rule_to(&rule, Some(3)),
            "tcp6 dst [2001:db8::1]:5201 -> RSS context 3"
        );
        assert_eq!(
            describe_rule(&rule),
            "tcp6 dst [2001:db8::1]:5201 -> queue 0"
        );
        rule.queue = 2;
        assert_eq!(
            describe_rule_to(&rule, Some(3)),
            "tcp6 dst [2001:db8::1]:5201 -> RSS context 3 + queue offset 2"
        );
    }

    #[test]
    fn channels_for_follows_c() {
        let combined = Channels {
            combined_count: Some(8),
            combined_max: Some(8),
            ..Default::default()
        };
        assert_eq!(
            channels_for(&combined, 4, 4).unwrap(),
            ChannelsSet {
                rx: None,
                tx: None,
                combined: Some(4)
            }
        );
        let mixed = Channels {
            combined_count: Some(8),
            rx_count: Some(0),
            tx_count: Some(0),
            ..Default::default()
        };
        assert_eq!(
            channels_for(&mixed, 4, 2).unwrap(),
            ChannelsSet {
                rx: Some(2),
                tx: Some(0),
                combined: Some(2)
            }
        );
        assert_eq!(
            channels_for(&mixed, 1, 3).unwrap(),
            ChannelsSet {
                rx: Some(0),
                tx: Some(2),
                combined: Some(1)
            }
        );
        let veth = Channels {
            rx_count: Some(2),
            tx_count: Some(2),
            ..Default::default()
        };
        assert_eq!(
            channels_for(&veth, 1, 1).unwrap(),
            ChannelsSet {
                rx: Some(1),
                tx: Some(1),
                combined: None
            }
        );
        let e = channels_for(&Channels::default(), 1, 1).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP);
    }

    #[test]
    fn hds_guard_writes_enabled_even_when_already_reported_enabled() {
        // The bind-time check reads the configured value; a driver reporting "enabled" may be
        // configured "unknown", so the guard always writes ENABLED and restores the old state.
        let nic = ScriptedNic::good("eth0", 8);
        nic.edit(|s| {
            let h = s.hds.as_mut().unwrap();
            h.configured = TcpDataSplit::Enabled;
            h.thresh = Some(0);
        });
        let before = nic.state();
        let g = HdsGuard::enable(&shared(&nic)).unwrap();
        assert!(
            nic.changes()
                .iter()
                .any(|c| c.op == Op::HdsSet && c.args.starts_with("enabled")),
            "{:?}",
            nic.changes()
        );
        g.restore().unwrap();
        assert_eq!(nic.state(), before);
    }

    /// `--plain --hds-thresh N`: header split on with hds-thresh N, the old values back
    /// after; a driver without hds-thresh, or N over its hds-thresh-max, is a skip that
    /// changes nothing.
    #[test]
    fn hds_guard_sets_a_threshold_within_the_drivers_max() {
        let nic = ScriptedNic::good("eth0", 8);
        let before = nic.state();
        let g = HdsGuard::enable_with_thresh(&shared(&nic), 256).unwrap();
        let h = nic.state().hds.unwrap();
        assert_eq!((h.configured, h.thresh), (TcpDataSplit::Enabled, Some(256)));
        g.restore().unwrap();
        assert_eq!(nic.state(), before);

        let e = HdsGuard::enable_with_thresh(&shared(&nic), 1025).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_SKIP);
        assert_eq!(
            e.to_string(),
            "skip: eth0: driver does not support hds-thresh 1025: it is over the driver's \
             hds-thresh-max 1024 (ethtool rings-get)"
        );
        // Exactly the max is taken.
        HdsGuard::enable_with_thresh(&shared(&nic), 1024)
            .unwrap()
            .restore()
            .unwrap();
        assert_eq!(nic.state(), before);

        nic.edit(|s| s.hds.as_mut().unwrap().thresh = None);
        let before = nic.state();
        let e = HdsGuard::enable_with_thresh(&shared(&nic), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "skip: eth0: driver does not support hds-thresh 0: ethtool rings-get reports no \
             hds-thresh"
        );
        assert_eq!(nic.state(), before);
    }

    #[test]
    fn restore_failure_names_the_fix_command() {
        let nic = ScriptedNic::good("eth0", 8);
        let s = shared(&nic);
        let g = HdsGuard::enable(&s).unwrap();
        // The first set was #1; the restore's UNKNOWN set is #2.
        nic.fail_call(Op::HdsSet, 2, libc::EBUSY);
        let e = g.restore().unwrap_err().to_string();
        assert!(
            e.contains(
                "could not restore header split on eth0 (was: tcp-data-split off, hds-thresh 128)"
            ),
            "{e}"
        );
        assert!(
            e.contains("run `ethtool -G eth0 tcp-data-split off hds-thresh 128`"),
            "{e}"
        );
        assert!(e.contains("EBUSY"), "{e}");

        nic.edit(|st| st.ntuple = Some(true));
        let r = FlowRuleGuard::insert(
            &s,
            &FlowRule {
                flow_type: FlowType::Tcp4,
                src: None,
                dst: ("192.0.2.1".parse().unwrap(), 5201),
                queue: 7,
            },
        )
        .unwrap();
        let loc = r.location();
        nic.fail_call(Op::FlowRuleDelete, 1, libc::EIO);
        let e = r.restore().unwrap_err().to_string();
        assert!(
            e.contains(&format!("run `ethtool -N eth0 delete {loc}`")),
            "{e}"
        );
        assert!(e.contains("tcp4 dst 192.0.2.1:5201 -> queue 7"), "{e}");
    }

    #[test]
    fn drop_restores_every_guard() {
        let nic = ScriptedNic::good("eth0", 8);
        let before = nic.state();
        {
            let s = shared(&nic);
            let _h = HdsGuard::enable(&s).unwrap();
            let _r = spread(&s, 7).unwrap();
            let _n = NtupleFeatureGuard::enable(&s).unwrap();
            let _c = ChannelsGuard::apply(
                &s,
                ChannelsSet {
                    combined: Some(8),
                    ..Default::default()
                },
            )
            .unwrap();
            assert_ne!(nic.state(), before);
        }
        assert_eq!(nic.state(), before);
    }

    #[test]
    fn rss_restores_the_original_custom_table() {
        let nic = ScriptedNic::good("eth0", 4);
        let custom = RssTable {
            indir: vec![3, 3, 1, 0, 2, 2, 1, 0],
        };
        nic.edit(|s| {
            s.rss = Some(custom.indir.clone());
            s.rss_configured = true;
        });
        let s = shared(&nic);
        let g = spread(&s, 3).unwrap();
        assert_eq!(g.was_default(), Some(false));
        assert_eq!(
            nic.state().rss.unwrap(),
            vec![0, 1, 2, 0, 1, 2, 0, 1],
            "equal 3"
        );
        assert_eq!(g.fix_command(), "ethtool -X eth0 default");
        g.restore().unwrap();
        assert_eq!(nic.state().rss.unwrap(), custom.indir);
        assert!(spread(&s, 0).is_err());
    }

    #[test]
    fn rss_summary_never_prints_a_large_table() {
        assert_eq!(
            describe_rss(&equal_table(128, 8)),
            "128 entries spread over queues 0..8"
        );
        assert_eq!(
            describe_rss(&RssTable {
                indir: vec![1, 0, 1, 0]
            }),
            "custom table [1, 0, 1, 0]"
        );
        assert_eq!(describe_rss(&RssTable { indir: vec![] }), "empty table");
        // 40 queues in a 2048-entry table, reversed so it is not an even spread.
        let big = RssTable {
            indir: (0..2048u32).map(|i| 39 - i % 40).collect(),
        };
        let d = describe_rss(&big);
        assert!(
            d.starts_with("custom table of 2048 entries using queues 0 (51), 1 (51)"),
            "{d}"
        );
        assert!(d.ends_with("15 (51), … 24 more queues"), "{d}");
    }

    #[test]
    fn rule_locations_that_cannot_be_ours() {
        let before = [0, 5];
        assert_eq!(bad_rule_location(3, &before, 16), None);
        assert_eq!(bad_rule_location(3, &before, 0), None, "table size unknown");
        for (loc, want) in [
            (0xffff_ffff, "RX_CLS_LOC_ANY, a request value"),
            (0xffff_fffe, "RX_CLS_LOC_FIRST, a request value"),
            (0xffff_fffd, "RX_CLS_LOC_LAST, a request value"),
            (16, "past the rule table of 16 locations"),
            (5, "already held another rule before the insert"),
        ] {
            let why = bad_rule_location(loc, &before, 16).expect("refused");
            assert!(why.contains(want), "{loc}: {why}");
        }
    }
}
