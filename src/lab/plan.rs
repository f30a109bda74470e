//! What a sweep runs: `--sweep KEY=V1,V2,...` (one key, its values checked), `--runs R`, and
//! the order of the runs — interleaved, run 1 of every point, then run 2 of every point, … —
//! so that the drift of a shared machine (another job starting, a thermal limit) spreads over
//! all points instead of landing on the last ones. Pure: no syscalls.

/// What a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepKey {
    /// `rx-page-size`: the devmem server's `-b` (the niov size of the binding), bytes.
    RxPageSize,
    /// `rx-buf-len`: the zcrx server's `--rx-buf-len`, bytes.
    RxBufLen,
    /// `autorelease`: the devmem server's `-a` (bind-rx autorelease), 0 or 1.
    Autorelease,
    /// `flows`: `--flows`, 1..=64.
    Flows,
    /// `dmabuf-size`: `--dmabuf-size` (the devmem server's udmabuf, the zcrx server's
    /// area), bytes, a non-zero multiple of the page size.
    DmabufSize,
    /// `write-size`: the peer's `--write-size` (its write, or devmem TX piece, size), bytes,
    /// 1..=64 MiB.
    WriteSize,
    /// `tcp-cc`: the receiver's `--tcp-cc` (`TCP_CONGESTION` of every flow; the peer sends
    /// with the same), a congestion control's name per point. Its values are the names'
    /// positions in [`Sweep::names`] (0, 1, ...), the names the points' labels.
    TcpCc,
    /// `hds-thresh`: the receiver's `--hds-thresh` (the NIC's header split threshold),
    /// bytes. Only the plain receiver (`--plain -f IF`) takes a non-zero point: a devmem or
    /// zcrx server's memory provider needs hds-thresh 0 (the command line refuses others).
    HdsThresh,
}

/// The keys, in the order the help text names them.
pub(crate) const KEYS: [SweepKey; 8] = [
    SweepKey::RxPageSize,
    SweepKey::RxBufLen,
    SweepKey::Autorelease,
    SweepKey::Flows,
    SweepKey::DmabufSize,
    SweepKey::WriteSize,
    SweepKey::TcpCc,
    SweepKey::HdsThresh,
];

/// Most values one `--sweep` takes.
pub(crate) const MAX_POINTS: usize = 64;

impl SweepKey {
    /// The key as `--sweep` takes it.
    pub fn name(self) -> &'static str {
        match self {
            SweepKey::RxPageSize => "rx-page-size",
            SweepKey::RxBufLen => "rx-buf-len",
            SweepKey::Autorelease => "autorelease",
            SweepKey::Flows => "flows",
            SweepKey::DmabufSize => "dmabuf-size",
            SweepKey::WriteSize => "write-size",
            SweepKey::TcpCc => "tcp-cc",
            SweepKey::HdsThresh => "hds-thresh",
        }
    }

    /// The table's first column: the seeds' names (`niov` for the rx-page-size series).
    pub fn column(self) -> &'static str {
        match self {
            SweepKey::RxPageSize => "niov",
            SweepKey::RxBufLen => "rx-buf-len",
            SweepKey::Autorelease => "autorelease",
            SweepKey::Flows => "flows",
            SweepKey::DmabufSize => "dmabuf-size",
            SweepKey::WriteSize => "write-size",
            SweepKey::TcpCc => "tcp-cc",
            SweepKey::HdsThresh => "hds-thresh",
        }
    }

    /// A value as the table shows it: sizes as `4K`, `64K`, `2M` (binary units) where exact,
    /// autorelease as `off`/`on`, flows and hds-thresh as the number; a tcp-cc value (a name's
    /// position) as the number, its name being the plan's ([`Plan::show`]).
    pub fn show(self, value: u64) -> String {
        match self {
            SweepKey::RxPageSize
            | SweepKey::RxBufLen
            | SweepKey::DmabufSize
            | SweepKey::WriteSize => show_size(value),
            SweepKey::Autorelease => match value {
                0 => "off".into(),
                _ => "on".into(),
            },
            SweepKey::Flows | SweepKey::TcpCc | SweepKey::HdsThresh => value.to_string(),
        }
    }

    fn by_name(name: &str) -> Option<SweepKey> {
        KEYS.into_iter().find(|k| k.name() == name)
    }

    /// The largest value of a size key, as the option it stands for takes (`-b`,
    /// `--rx-buf-len`); `None` for the other keys.
    fn max_size(self) -> Option<u64> {
        match self {
            SweepKey::RxPageSize => Some(u64::from(crate::cli::limits::MAX_RX_PAGE_SIZE)),
            SweepKey::RxBufLen => Some(u64::from(crate::cli::limits::MAX_RX_BUF_LEN)),
            SweepKey::WriteSize => Some(crate::cli::limits::MAX_WRITE_SIZE),
            SweepKey::HdsThresh => Some(crate::cli::limits::MAX_HDS_THRESH),
            SweepKey::DmabufSize | SweepKey::Autorelease | SweepKey::Flows | SweepKey::TcpCc => {
                None
            }
        }
    }

    /// One value of this key, checked; `page_size` bounds the sizes. Sizes are read as the
    /// options' byte sizes are (a suffix K, M or G allowed), the other keys as decimals.
    fn parse_value(self, text: &str, page_size: usize) -> Result<u64, String> {
        let n = match self {
            SweepKey::Autorelease | SweepKey::Flows => crate::cli::limits::dec_u64(text),
            _ => crate::cli::limits::size(text),
        };
        let ok = match (self, self.max_size(), n) {
            (SweepKey::DmabufSize, _, Some(v)) => v > 0 && v % page_size.max(1) as u64 == 0,
            (SweepKey::WriteSize, Some(max), Some(v)) => (1..=max).contains(&v),
            (SweepKey::HdsThresh, Some(max), Some(v)) => v <= max,
            (_, Some(max), Some(v)) => v.is_power_of_two() && v >= page_size as u64 && v <= max,
            (SweepKey::Autorelease, _, Some(v)) => v <= 1,
            (SweepKey::Flows, _, Some(v)) => {
                (1..=u64::from(crate::cli::limits::MAX_FLOWS)).contains(&v)
            }
            (_, _, _) => false,
        };
        match (ok, n) {
            (true, Some(v)) => Ok(v),
            _ => Err(format!(
                "invalid {} value '{text}' (expected {})",
                self.name(),
                self.expect(page_size)
            )),
        }
    }

    fn expect(self, page_size: usize) -> String {
        match self {
            SweepKey::RxPageSize | SweepKey::RxBufLen => format!(
                "a power of two in {page_size}..={} bytes, optional suffix K, M or G",
                self.max_size().unwrap_or_default()
            ),
            SweepKey::Autorelease => "0 or 1".into(),
            SweepKey::Flows => format!("1..={}", crate::cli::limits::MAX_FLOWS),
            SweepKey::DmabufSize => format!(
                "a non-zero multiple of the page size ({page_size} bytes), optional suffix K, \
                 M or G"
            ),
            SweepKey::WriteSize => "1..=64M bytes, optional suffix K, M or G".into(),
            SweepKey::HdsThresh => "0..=4294967295 bytes, optional suffix K, M or G".into(),
            SweepKey::TcpCc => "a congestion control name such as dctcp, cubic or reno: 1 to \
                                15 of A-Z a-z 0-9 _ -"
                .into(),
        }
    }

    /// Whether this key's points are names ([`Sweep::names`]) rather than numbers.
    pub fn named(self) -> bool {
        self == SweepKey::TcpCc
    }
}

/// A congestion control's name as `--tcp-cc` takes it: 1 to 15 (`TCP_CA_NAME_MAX` less its
/// NUL) of `A-Z a-z 0-9 _ -`.
pub(crate) fn tcp_cc_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `4096` → `4K`, `65536` → `64K`, `2097152` → `2M`; other values in bytes.
fn show_size(v: u64) -> String {
    match v {
        0 => "0".into(),
        v if v % (1 << 20) == 0 => format!("{}M", v >> 20),
        v if v % (1 << 10) == 0 => format!("{}K", v >> 10),
        v => v.to_string(),
    }
}

/// `--sweep KEY=V1,V2,...` as typed, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// The key.
    pub key: SweepKey,
    /// Its values, in the order given (no repeats, 1..=[`MAX_POINTS`] of them); a named
    /// key's are its names' positions, 0, 1, ...
    pub values: Vec<u64>,
    /// A named key's ([`SweepKey::named`]) names, in the order given; empty for the others.
    pub names: Vec<String>,
}

impl Sweep {
    /// Parses `KEY=V1,V2,...`; `page_size` (bytes) bounds the sizes.
    ///
    /// Errors: why, naming the key or value (the caller prefixes `--sweep: `).
    pub fn parse(text: &str, page_size: usize) -> Result<Sweep, String> {
        let keys = || KEYS.map(SweepKey::name).join(", ");
        let Some((name, list)) = text.split_once('=') else {
            return Err(format!(
                "'{text}' is not KEY=V1,V2,... (KEY one of {})",
                keys()
            ));
        };
        let key = SweepKey::by_name(name)
            .ok_or_else(|| format!("unknown key '{name}' (expected one of {})", keys()))?;
        if list.is_empty() {
            return Err(format!("{name}= has no values (expected {name}=V1,V2,...)"));
        }
        if key.named() {
            let mut names: Vec<String> = Vec::new();
            for v in list.split(',') {
                if !tcp_cc_name_ok(v) {
                    return Err(format!(
                        "invalid {name} value '{v}' (expected {})",
                        key.expect(page_size)
                    ));
                }
                if names.iter().any(|n| n == v) {
                    return Err(format!("{name}: value {v} is given twice"));
                }
                names.push(v.to_string());
            }
            if names.len() > MAX_POINTS {
                return Err(format!(
                    "{name}: {} values (at most {MAX_POINTS})",
                    names.len()
                ));
            }
            return Ok(Sweep {
                key,
                values: (0..names.len() as u64).collect(),
                names,
            });
        }
        let mut values = Vec::new();
        for v in list.split(',') {
            let v = key.parse_value(v, page_size)?;
            if values.contains(&v) {
                return Err(format!("{name}: value {v} is given twice"));
            }
            values.push(v);
        }
        if values.len() > MAX_POINTS {
            return Err(format!(
                "{name}: {} values (at most {MAX_POINTS})",
                values.len()
            ));
        }
        Ok(Sweep {
            key,
            values,
            names: Vec::new(),
        })
    }
}

/// One run of the plan: the `index`-th (0-based) of all runs, run `run` (0-based) of point
/// `point`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Position among all runs.
    pub index: usize,
    /// The point (index into [`Plan::points`]).
    pub point: usize,
    /// The run of that point.
    pub run: u32,
}

/// The points of a sweep and how often each runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The swept key; `None`: one configuration, repeated.
    pub key: Option<SweepKey>,
    /// The points: the key's values, or one `None` point.
    pub points: Vec<Option<u64>>,
    /// Runs of every point (≥ 1).
    pub runs: u32,
    /// A named key's names, by value ([`Sweep::names`]); empty for the others.
    pub names: Vec<String>,
}

impl Plan {
    /// The plan of `sweep` (or of one configuration) with `runs` runs per point.
    pub(crate) fn new(sweep: Option<&Sweep>, runs: u32) -> Plan {
        match sweep {
            Some(s) => Plan {
                key: Some(s.key),
                points: s.values.iter().copied().map(Some).collect(),
                runs: runs.max(1),
                names: s.names.clone(),
            },
            None => Plan {
                key: None,
                points: vec![None],
                runs: runs.max(1),
                names: Vec::new(),
            },
        }
    }

    /// Every run, interleaved: run 0 of every point in order, then run 1, ….
    pub(crate) fn order(&self) -> Vec<Slot> {
        (0..self.runs)
            .flat_map(|run| (0..self.points.len()).map(move |point| (run, point)))
            .enumerate()
            .map(|(index, (run, point))| Slot { index, point, run })
            .collect()
    }

    /// How many runs in all.
    pub(crate) fn total(&self) -> usize {
        self.points.len() * self.runs as usize
    }

    /// A point as the progress lines name it: `rx-page-size=16384`, `tcp-cc=dctcp`, or `one
    /// configuration`.
    pub(crate) fn label(&self, point: usize) -> String {
        match (self.key, self.points.get(point).copied().flatten()) {
            (Some(k), Some(v)) => format!("{}={}", k.name(), self.value_text(point, v)),
            _ => "one configuration".into(),
        }
    }

    /// A point's first-column text in the table: the value as the key shows it (a named
    /// key's: the name).
    pub(crate) fn show(&self, point: usize) -> String {
        match (self.key, self.points.get(point).copied().flatten()) {
            (Some(k), Some(v)) if k.named() => self.value_text(point, v),
            (Some(k), Some(v)) => k.show(v),
            _ => "-".into(),
        }
    }

    /// A named key's name at `point` (`None`: no named key, or no such point).
    pub(crate) fn name(&self, point: usize) -> Option<&str> {
        let k = self.key?;
        let v = self.points.get(point).copied().flatten()?;
        k.named()
            .then(|| self.names.get(usize::try_from(v).ok()?).map(String::as_str))
            .flatten()
    }

    /// Value `v` of `point` as the option takes it: the name of a named key, else the number.
    fn value_text(&self, point: usize, v: u64) -> String {
        self.name(point)
            .map_or_else(|| v.to_string(), str::to_string)
    }

    /// The point's value as the option takes it (`None`: one configuration): what the
    /// hooks are told.
    pub(crate) fn value(&self, point: usize) -> Option<String> {
        let v = self.points.get(point).copied().flatten()?;
        Some(self.value_text(point, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_parse_with_checked_values() {
        let s = Sweep::parse("rx-page-size=4096,16384,65536", 4096).unwrap();
        assert_eq!(s.key, SweepKey::RxPageSize);
        assert_eq!(s.values, vec![4096, 16384, 65536]);
        assert_eq!(Sweep::parse("flows=1,2", 4096).unwrap().values, vec![1, 2]);
        assert_eq!(
            Sweep::parse("autorelease=0,1", 4096).unwrap().values,
            vec![0, 1]
        );
        assert_eq!(
            Sweep::parse("rx-buf-len=4096,32768", 4096).unwrap().key,
            SweepKey::RxBufLen
        );
        let bad = [
            ("rx-page-size=12288", "invalid rx-page-size value '12288' (expected a power of two in 4096..=2147483648 bytes, optional suffix K, M or G)"),
            ("rx-page-size=2048", "invalid rx-page-size value '2048' (expected a power of two in 4096..=2147483648 bytes, optional suffix K, M or G)"),
            ("rx-page-size=", "rx-page-size= has no values (expected rx-page-size=V1,V2,...)"),
            ("rx-page-size=4096,", "invalid rx-page-size value '' (expected a power of two in 4096..=2147483648 bytes, optional suffix K, M or G)"),
            ("nosuchkey=1", "unknown key 'nosuchkey' (expected one of rx-page-size, rx-buf-len, autorelease, flows, dmabuf-size, write-size, tcp-cc, hds-thresh)"),
            ("flows", "'flows' is not KEY=V1,V2,... (KEY one of rx-page-size, rx-buf-len, autorelease, flows, dmabuf-size, write-size, tcp-cc, hds-thresh)"),
            ("tcp-cc=cubic,", "invalid tcp-cc value '' (expected a congestion control name such as dctcp, cubic or reno: 1 to 15 of A-Z a-z 0-9 _ -)"),
            ("tcp-cc=a b", "invalid tcp-cc value 'a b' (expected a congestion control name such as dctcp, cubic or reno: 1 to 15 of A-Z a-z 0-9 _ -)"),
            ("tcp-cc=abcdefghijklmnop", "invalid tcp-cc value 'abcdefghijklmnop' (expected a congestion control name such as dctcp, cubic or reno: 1 to 15 of A-Z a-z 0-9 _ -)"),
            ("tcp-cc=reno,cubic,reno", "tcp-cc: value reno is given twice"),
            ("tcp-cc=", "tcp-cc= has no values (expected tcp-cc=V1,V2,...)"),
            ("flows=0", "invalid flows value '0' (expected 1..=64)"),
            ("flows=65", "invalid flows value '65' (expected 1..=64)"),
            ("flows=+1", "invalid flows value '+1' (expected 1..=64)"),
            ("autorelease=2", "invalid autorelease value '2' (expected 0 or 1)"),
            ("flows=2,2", "flows: value 2 is given twice"),
            ("rx-page-size=99999999999999999999999", "invalid rx-page-size value '99999999999999999999999' (expected a power of two in 4096..=2147483648 bytes, optional suffix K, M or G)"),
        ];
        for (text, why) in bad {
            assert_eq!(Sweep::parse(text, 4096), Err(why.to_string()), "{text}");
        }
        // Sizes are read as -b and --rx-buf-len read them: suffixes, and rx-buf-len's own
        // bound of 2 MiB (before: decimals only, rx-buf-len up to 2 GiB).
        assert_eq!(
            Sweep::parse("rx-page-size=4K,64K,2M", 4096).unwrap().values,
            vec![4096, 65536, 2 << 20]
        );
        assert_eq!(
            Sweep::parse("rx-buf-len=2M", 4096).unwrap().values,
            vec![2 << 20]
        );
        assert_eq!(
            Sweep::parse("rx-buf-len=4M", 4096),
            Err(
                "invalid rx-buf-len value '4M' (expected a power of two in 4096..=2097152 \
                 bytes, optional suffix K, M or G)"
                    .to_string()
            )
        );
        assert!(Sweep::parse("flows=1K", 4096).is_err());
        let many: Vec<String> = (1..=65).map(|v| v.to_string()).collect();
        let e = Sweep::parse(&format!("flows={}", many[..64].join(",")), 4096);
        assert_eq!(e.map(|s| s.values.len()), Ok(64));
        let e = Sweep::parse(&format!("flows={},1", many[1..65].join(",")), 4096);
        assert!(e.is_err());
    }

    /// tcp-cc's points are names: values are their positions, the plan shows and labels
    /// them by name.
    #[test]
    fn tcp_cc_points_are_names() {
        let s = Sweep::parse("tcp-cc=dctcp,cubic,reno", 4096).unwrap();
        assert_eq!(s.key, SweepKey::TcpCc);
        assert_eq!(s.values, vec![0, 1, 2]);
        assert_eq!(s.names, ["dctcp", "cubic", "reno"]);
        let plan = Plan::new(Some(&s), 2);
        assert_eq!(plan.show(1), "cubic");
        assert_eq!(plan.label(2), "tcp-cc=reno");
        assert_eq!(plan.name(0), Some("dctcp"));
        assert_eq!(plan.value(0).as_deref(), Some("dctcp"));
        assert_eq!(plan.name(3), None);
        assert_eq!(SweepKey::TcpCc.column(), "tcp-cc");
        // Numbers stay numbers.
        let f = Plan::new(Some(&Sweep::parse("flows=1,2", 4096).unwrap()), 1);
        assert_eq!(
            (f.name(0), f.value(1).as_deref(), f.label(1)),
            (None, Some("2"), "flows=2".into())
        );
        assert_eq!(Plan::new(None, 1).value(0), None);
        let many: Vec<String> = (0..65).map(|v| format!("c{v}")).collect();
        assert!(Sweep::parse(&format!("tcp-cc={}", many[..64].join(",")), 4096).is_ok());
        assert_eq!(
            Sweep::parse(&format!("tcp-cc={}", many.join(",")), 4096),
            Err("tcp-cc: 65 values (at most 64)".to_string())
        );
    }

    /// Run 1 of every point, then run 2 of every point.
    #[test]
    fn runs_are_interleaved_over_the_points() {
        let s = Sweep::parse("rx-page-size=4096,16384,65536", 4096).unwrap();
        let plan = Plan::new(Some(&s), 2);
        let order: Vec<(usize, u32)> = plan.order().iter().map(|s| (s.point, s.run)).collect();
        assert_eq!(order, vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]);
        assert_eq!(plan.order()[4].index, 4);
        assert_eq!(plan.total(), 6);
        assert_eq!(plan.label(1), "rx-page-size=16384");
        assert_eq!(plan.show(2), "64K");
        let one = Plan::new(None, 3);
        assert_eq!(one.order().len(), 3);
        assert_eq!(one.label(0), "one configuration");
        assert_eq!(one.show(0), "-");
    }

    #[test]
    fn values_show_as_the_seeds_write_them() {
        assert_eq!(SweepKey::RxPageSize.show(4096), "4K");
        assert_eq!(SweepKey::RxPageSize.show(2 << 20), "2M");
        assert_eq!(SweepKey::WriteSize.show(1448), "1448");
        assert_eq!(SweepKey::DmabufSize.show(64 << 20), "64M");
        assert_eq!(SweepKey::RxBufLen.show(32768), "32K");
        assert_eq!(SweepKey::Autorelease.show(0), "off");
        assert_eq!(SweepKey::Autorelease.show(1), "on");
        assert_eq!(SweepKey::Flows.show(4), "4");
        assert_eq!(SweepKey::RxPageSize.column(), "niov");
    }
}
