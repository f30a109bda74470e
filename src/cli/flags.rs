//! The option table: every option is one [`Flag`] row of [`FLAGS`] — its names, value hint,
//! accepted values, parser, the roles it applies to, what happens elsewhere, and its help
//! text. From the table come the getopts registration, the parse into [`Typed`], the
//! "only applies to" refusals, the `--help` option list and the table-driven tests.
//!
//! Adding an option is one row here, the [`Typed`] field its parser fills, and its use
//! (usually the field of a mode's argument struct in [`super`] that takes it over).
//!
//! Pure: no syscalls (the page size is a parameter).

use std::path::PathBuf;
use std::time::Duration;

use super::limits::{dec_u64, size, MAX_FLOWS, MAX_RCVLOWAT, MAX_RX_BUF_LEN, MAX_RX_PAGE_SIZE};
use super::{JsonTarget, Role, Seed, UnbindMode, PROGRAM};
use crate::error::{Error, Result};
use crate::memory::MemorySource;

/// Largest interface name the kernel accepts, in bytes, without the NUL (`IFNAMSIZ` − 1).
pub const IFNAME_MAX_LEN: usize = 15;

/// Largest `-v` period. The C checker's counter is one byte wide, so a period of 256
/// (`01 … FF 0A`) is the longest that wraps where it should
/// (`docs/kernel-interface.md#the-validation-pattern`).
pub const VALIDATE_MAX: u32 = 256;

/// Most RX queues one bind-rx may name (one `queues` nest each; the netlink request must fit).
pub const MAX_NUM_QUEUES: u32 = 4096;

/// Largest accepted `--write-size`, bytes (64 MiB): one buffer of that size is allocated.
pub use super::limits::MAX_WRITE_SIZE;

/// Longest accepted `--timeout`/`--progress`: one year, in seconds.
pub const MAX_SECONDS: f64 = 31_536_000.0;

const EXPECT_PORT: &str = "1..=65535";
const EXPECT_VALIDATE: &str = "0 or 2..=256";
const EXPECT_SEED: &str =
    "a number in 0..=18446744073709551615 (decimal or 0x hex), or 'random' (senders)";
const EXPECT_QUEUE: &str = "0..=4294967295";
const EXPECT_NUM_QUEUES: &str = "1..=4096";
const EXPECT_CHUNK: &str = "1..=4294967295 bytes, optional suffix K, M or G";
const EXPECT_AUTORELEASE: &str = "0 or 1";
const EXPECT_UNBIND: &str = "0, 1 or 2";
/// The accepted values of a SECS option, then what its 0 means (`expect_seconds!("0 = never")`).
macro_rules! expect_seconds {
    ($zero:literal) => {
        concat!(
            "decimal seconds in 0..=31536000 (one year), e.g. 2 or 0.5; ",
            $zero
        )
    };
}
const EXPECT_TIMEOUT: &str =
    expect_seconds!("0 = no timeout (receivers) or the defaults (senders)");
const EXPECT_PROGRESS: &str = expect_seconds!("0 = never");
const EXPECT_DURATION: &str = expect_seconds!("0 = until the peer closes");
const EXPECT_WARMUP: &str = expect_seconds!("0 = none");
const EXPECT_MAX_DURATION: &str = expect_seconds!("0 = the default, 600");
const EXPECT_FLOWS: &str = "1..=64";
const EXPECT_CPUS: &str = "a CPU list such as 0-3,8";
const EXPECT_TCP_CC: &str = "a congestion control name such as dctcp, cubic or reno";
const EXPECT_SIZE: &str = "decimal bytes, optional suffix K, M or G (KiB, MiB, GiB)";
const EXPECT_RCVBUF: &str =
    "0 (the kernel's default) or 4096..=1073741824 bytes, optional suffix K, M or G";
const EXPECT_RCVLOWAT: &str = "1..=1073741824 bytes, optional suffix K, M or G";
const EXPECT_OFFSET: &str = "decimal byte offset, optional suffix K, M or G (KiB, MiB, GiB)";
const EXPECT_POW2: &str =
    "a power of two >= the page size that fits in 32 bits, in bytes, optional suffix K, M or G";
const EXPECT_HDS_THRESH: &str = "0..=4294967295 bytes, optional suffix K, M or G";
const EXPECT_RX_BUF_LEN: &str =
    "a power of two >= the page size and at most 2 MiB, in bytes, optional suffix K or M";
pub(super) const EXPECT_ADDR: &str = "an IPv4, IPv6 or IPv4-mapped IPv6 address";
const EXPECT_IFNAME: &str = "an interface name of 1..=15 bytes";
const EXPECT_PATH: &str = "a file path";
const EXPECT_HOOK: &str = "a shell command (sh -c), non-empty, at most 4096 bytes";
const EXPECT_SWEEP: &str =
    "KEY=V1,V2,... with KEY one of rx-page-size, rx-buf-len, autorelease, flows";
const EXPECT_RUNS: &str = "1..=1000";
const EXPECT_PEER_SEND: &str = "plain or devmem";
const EXPECT_MAX_BYTES: &str = "decimal bytes, optional suffix K, M or G; at least 1";
const EXPECT_COLUMNS: &str =
    "column names, comma-separated, such as rx_dev_gbps,app_sys_pct,runs (the CSV's names)";
const EXPECT_FORMAT: &str = "text, markdown or csv";

/// The roles where an option has an effect: its value reaches the mode's arguments.
type Roles = &'static [Role];

const ALL: Roles = &[
    Role::Probe,
    Role::Report,
    Role::Server,
    Role::Zcrx,
    Role::TxStdin,
    Role::TxPattern,
    Role::Plain,
    Role::Sender,
    Role::PeerServer,
    Role::Compare,
];
/// A sweep's table options: the receivers (with `--peer`) and `--compare`.
const TABLES: Roles = &[Role::Server, Role::Zcrx, Role::Plain, Role::Compare];
const RECEIVERS: Roles = &[Role::Server, Role::Zcrx, Role::Plain];
const SENDERS: Roles = &[Role::TxPattern, Role::Sender];
const PROGRESS_ROLES: Roles = &[Role::Server, Role::Zcrx, Role::Plain, Role::Sender];
const FLOW_ROLES: Roles = &[
    Role::Server,
    Role::Zcrx,
    Role::Plain,
    Role::TxPattern,
    Role::Sender,
];
/// `--pid-file`: the modes that listen.
const PID_FILE_ROLES: Roles = &[Role::Server, Role::Zcrx, Role::Plain, Role::PeerServer];
const NIC_QUEUES: Roles = &[Role::Probe, Role::Server, Role::Zcrx];
const DMABUF: Roles = &[
    Role::Probe,
    Role::Report,
    Role::Server,
    Role::Zcrx,
    Role::TxStdin,
    Role::TxPattern,
    Role::PeerServer,
];
const DEVMEM_SERVER: Roles = &[Role::Server];
const NONE: Roles = &[];

/// Which section of `--help` lists an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    /// "Options from C ncdevmem": the letters and meanings of C's getopt string.
    C,
    /// "Options of ncdevmem-rs": new behaviour, long options (and `-V`).
    Ours,
    /// Not in the option list (`--version`, shown in the usage lines).
    Hidden,
}

/// Stores an option's value (the text as typed; `""` for an option without a value) into
/// [`Typed`], checked: `(typed, text, page_size)`.
type Set = fn(&mut Typed, &str, usize) -> Result<()>;

/// One command-line option.
pub(super) struct Flag {
    /// Short name (one character) or `""`.
    pub short: &'static str,
    /// Long name (without `--`) or `""`.
    pub long: &'static str,
    /// Placeholder for the value, or `""` for an option that takes none.
    pub hint: &'static str,
    /// Accepted values, as shown in the "missing value" message.
    pub expect: &'static str,
    /// Parses and stores the value.
    pub set: Set,
    /// Where the option has an effect.
    pub roles: Roles,
    /// Outside [`roles`](Flag::roles): `Some(text)` refuses the option with
    /// `"{flag}: only applies to {text}"`; `None` accepts and ignores it (as C ncdevmem
    /// ignores its options in modes that do not use them).
    pub only: Option<&'static str>,
    /// A valid value, for the table-driven tests (`""` for an option without a value).
    #[cfg_attr(not(test), allow(dead_code))] // read by the table-driven tests only
    pub example: &'static str,
    /// Help text: lines of at most 76 characters, the first beside the names.
    pub help: &'static str,
    /// The `--help` section.
    pub section: Section,
}

impl Flag {
    /// Whether the option takes a value.
    pub(super) fn takes_value(&self) -> bool {
        !self.hint.is_empty()
    }

    /// Whether the value is a byte size, read by [`size`] (decimal bytes, optional suffix K,
    /// M or G): every option whose hint is `BYTES` or `OFFSET`. `--help`'s "Values" section
    /// lists them ([`size_options`]).
    pub(super) fn takes_size(&self) -> bool {
        matches!(self.hint, "BYTES" | "OFFSET")
    }

    /// How the user spells it: `-p`, `--timeout`.
    pub(super) fn display(&self) -> String {
        if self.short.is_empty() {
            format!("--{}", self.long)
        } else {
            format!("-{}", self.short)
        }
    }

    /// The name getopts knows it by (short if it has one).
    fn key(&self) -> &'static str {
        if self.short.is_empty() {
            self.long
        } else {
            self.short
        }
    }

    /// `-p: missing value PORT (expected 1..=65535)`.
    pub(super) fn missing_value(&self) -> String {
        format!(
            "{}: missing value {} (expected {})",
            self.display(),
            self.hint,
            self.expect
        )
    }

    /// `Err` when given outside the roles it applies to and [`only`](Flag::only) refuses it.
    fn check_role(&self, role: Role) -> Result<()> {
        match self.only {
            Some(only) if !self.roles.contains(&role) => Err(usage_err(format!(
                "{}: only applies to {only}",
                self.display()
            ))),
            _ => Ok(()),
        }
    }

    /// The names as `--help` shows them: `-p PORT`, `-L, --fail-on-linear`, `--json FILE`.
    fn label(&self) -> String {
        let names = match (self.short, self.long) {
            ("", long) => format!("--{long}"),
            (short, "") => format!("-{short}"),
            (short, long) => format!("-{short}, --{long}"),
        };
        match self.hint {
            "" => names,
            hint => format!("{names} {hint}"),
        }
    }
}

/// What was typed, every value checked for syntax and range; addresses stay text. Nothing
/// here decides the mode or whether an option applies to it: that is [`super::resolve`].
/// A repeated option keeps its last value (getopt behaviour); a repeated flag is one flag.
/// `-v 0`, `--timeout 0` and `--progress 0` are stored as `None`.
#[derive(Debug, Default)]
pub(super) struct Typed {
    pub help: bool,
    pub version: bool,
    pub listen: bool,
    pub plain: bool,
    pub zcrx: bool,
    pub report: bool,
    pub verbose: bool,
    pub quiet: bool,
    pub server: Option<String>,
    pub client: Option<String>,
    pub port: Option<u16>,
    pub validate: Option<u32>,
    pub seed: Option<Seed>,
    pub num_queues: Option<u32>,
    pub start_queue: Option<u32>,
    pub ifname: Option<super::IfName>,
    pub tx_chunk: Option<u32>,
    pub skip_nic_config: bool,
    pub fail_on_linear: bool,
    pub rx_page_size: Option<u32>,
    pub autorelease: Option<bool>,
    pub bind_autorelease: Option<bool>,
    pub unbind: UnbindMode,
    pub pattern_bytes: Option<u64>,
    pub write_size: Option<usize>,
    pub expect_bytes: Option<u64>,
    pub rcvbuf: Option<u64>,
    pub rcvlowat: Option<u32>,
    pub corrupt_offset: Option<u64>,
    pub timeout: Option<Duration>,
    pub progress: Option<Duration>,
    pub flows: Option<u32>,
    pub duration: Option<Duration>,
    pub warmup: Option<Duration>,
    pub cpus: Option<Vec<usize>>,
    pub tcp_cc: Option<String>,
    pub json: Option<JsonTarget>,
    pub pid_file: Option<PathBuf>,
    pub dmabuf_size: Option<u64>,
    pub memory: MemorySource,
    pub zcrx_nodev: bool,
    pub rx_buf_len: Option<u32>,
    pub hds_thresh: Option<u32>,
    pub verify_restore: bool,
    pub require_spread: bool,
    pub peer_server: bool,
    pub max_duration: Option<Duration>,
    pub max_bytes: Option<u64>,
    pub peer: Option<String>,
    pub peer_port: Option<u16>,
    pub peer_send: Option<super::PeerSend>,
    pub sweep: Option<crate::lab::plan::Sweep>,
    pub runs: Option<u32>,
    pub csv: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub columns: Option<Vec<String>>,
    pub format: Option<crate::lab::table::Format>,
    pub compare: Option<(PathBuf, PathBuf)>,
    pub any_shape: bool,
    pub baseline: Option<PathBuf>,
    pub pre_run: Option<String>,
    pub post_run: Option<String>,
}

/// Every option we accept, one row each. Values are parsed in this order (so of two bad
/// values the first row's is reported) and the "only applies to" refusals are checked in it.
/// C ncdevmem's letters have no long names (except the `--fail-on-linear` alias of `-L`); new
/// behaviour has only long names (`-V` is the one new short letter;
/// `docs/architecture.md#command-line`).
pub(super) const FLAGS: &[Flag] = &[
    Flag {
        short: "l",
        long: "",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.listen, true),
        roles: RECEIVERS,
        only: None,
        example: "",
        help: "listen: RX server mode",
        section: Section::C,
    },
    Flag {
        short: "s",
        long: "",
        hint: "ADDR",
        expect: EXPECT_ADDR,
        set: |t, v, _| set(&mut t.server, Some(v.to_string())),
        roles: &[
            Role::Server,
            Role::Zcrx,
            Role::TxStdin,
            Role::TxPattern,
            Role::Plain,
            Role::Sender,
            Role::PeerServer,
        ],
        only: None,
        example: "2001:db8::9",
        help: "server address. Server: local address and flow-rule dst-ip. Client:\n\
               address to connect to. IPv4, IPv6 or IPv4-mapped IPv6 (::ffff:a.b.c.d)",
        section: Section::C,
    },
    Flag {
        short: "c",
        long: "",
        hint: "ADDR",
        expect: EXPECT_ADDR,
        set: |t, v, _| set(&mut t.client, Some(v.to_string())),
        roles: &[
            Role::Server,
            Role::Zcrx,
            Role::TxStdin,
            Role::TxPattern,
            Role::Sender,
        ],
        only: None,
        example: "2001:db8::8",
        help: "client address. Server: flow-rule src-ip (src-port = PORT, a 5-tuple\n\
               rule). Client: bind to ADDR and PORT before connecting",
        section: Section::C,
    },
    Flag {
        short: "p",
        long: "",
        hint: "PORT",
        expect: EXPECT_PORT,
        set: |t, v, _| {
            // 0 (the kernel picks a free port) is taken here and refused in check_rules for
            // every mode but the ones that listen and say where.
            let port = ranged("-p", "port", v, 0, 65535, EXPECT_PORT)?;
            set(&mut t.port, Some(port as u16))
        },
        roles: &[
            Role::Server,
            Role::Zcrx,
            Role::TxStdin,
            Role::TxPattern,
            Role::Plain,
            Role::Sender,
            Role::PeerServer,
        ],
        only: None,
        example: "4242",
        help: "TCP port, 1..=65535 (required for server and client; --peer-server: the\n\
               control port, default 4343). 0, for -l --plain (not a sweep) and\n\
               --peer-server only: the kernel picks a free port, named in the\n\
               \"listening on\" (\"control on\") line",
        section: Section::C,
    },
    Flag {
        short: "v",
        long: "",
        hint: "N",
        expect: EXPECT_VALIDATE,
        set: |t, v, _| {
            let n = dec_u64(v)
                .filter(|&n| n == 0 || (2..=u64::from(VALIDATE_MAX)).contains(&n))
                .ok_or_else(|| invalid("-v", "validation period", v, EXPECT_VALIDATE))?;
            set(&mut t.validate, Some(n as u32).filter(|&n| n != 0))
        },
        roles: &[
            Role::Server,
            Role::Zcrx,
            Role::TxPattern,
            Role::Plain,
            Role::Sender,
        ],
        only: None,
        example: "9",
        help: "validate received bytes against 01 02 .. N-1 0A repeating; N is 0 (no\n\
               validation: print the payload to stdout) or 2..=256",
        section: Section::C,
    },
    Flag {
        short: "",
        long: "seed",
        hint: "SEED",
        expect: EXPECT_SEED,
        set: |t, v, _| {
            let seed = parse_seed(v).ok_or_else(|| invalid("--seed", "seed", v, EXPECT_SEED))?;
            set(&mut t.seed, Some(seed))
        },
        roles: &[
            Role::Server,
            Role::Zcrx,
            Role::TxPattern,
            Role::Plain,
            Role::Sender,
        ],
        only: Some("--send-pattern and to receivers (-l)"),
        example: "42",
        help: "senders (--send-pattern) send, receivers (-l) validate the keyed stream\n\
               instead of the -v pattern: each flow has its own key K and odd step S,\n\
               and the 8 bytes at stream offsets 8i..8i+7 are, little-endian, K + i*S\n\
               mod 2^64 (docs/validation.md). Every 8-byte word\n\
               names its position and no other seed or flow passes for this one, so no\n\
               misplaced, stale or duplicated data passes (a -v pattern misses data moved\n\
               by a multiple of its period), and a bad frag is diagnosed: where its bytes\n\
               belong, and whether they are stale, a duplicate, reordered, shifted,\n\
               another flow's, of no stream of this seed or corrupt. SEED: 0..=2^64-1,\n\
               decimal or 0x hex; senders also take 'random' (drawn and printed, for a\n\
               replay). Not with -v N",
        section: Section::Ours,
    },
    Flag {
        short: "q",
        long: "",
        hint: "N",
        expect: EXPECT_NUM_QUEUES,
        set: |t, v, _| {
            let max = u64::from(MAX_NUM_QUEUES);
            let n = ranged("-q", "number of queues", v, 1, max, EXPECT_NUM_QUEUES)?;
            set(&mut t.num_queues, Some(n as u32))
        },
        roles: NIC_QUEUES,
        only: None,
        example: "1",
        help: "number of RX queues to bind (>= 1). Give both -t and -q or neither;\n\
               with neither, probe uses the upper half of the queues and server/client\n\
               the last queue",
        section: Section::C,
    },
    Flag {
        short: "t",
        long: "",
        hint: "N",
        expect: EXPECT_QUEUE,
        set: |t, v, _| {
            let max = u64::from(u32::MAX);
            let q = ranged("-t", "start queue", v, 0, max, EXPECT_QUEUE)?;
            set(&mut t.start_queue, Some(q as u32))
        },
        roles: NIC_QUEUES,
        only: None,
        example: "1",
        help: "first RX queue to bind (a queue index)",
        section: Section::C,
    },
    Flag {
        short: "f",
        long: "",
        hint: "IFNAME",
        expect: EXPECT_IFNAME,
        set: |t, v, _| set(&mut t.ifname, Some(super::IfName::parse(v)?)),
        roles: &[
            Role::Probe,
            Role::Report,
            Role::Server,
            Role::Zcrx,
            Role::TxStdin,
            Role::TxPattern,
            Role::PeerServer,
        ],
        only: None,
        example: "eth9",
        help: "interface (required for probe, server and client: \"missing -f argument\";\n\
               with --peer-server: the NIC runs asking for devmem TX send through)",
        section: Section::C,
    },
    Flag {
        short: "z",
        long: "",
        hint: "BYTES",
        expect: EXPECT_CHUNK,
        set: |t, v, _| {
            let n = sized("-z", "chunk size", v, 1, u64::from(u32::MAX), EXPECT_CHUNK)?;
            set(&mut t.tx_chunk, Some(n as u32))
        },
        roles: &[Role::TxStdin, Role::TxPattern],
        only: None,
        example: "3",
        help: "client: split each send into iovs of at most BYTES bytes (>= 1)",
        section: Section::C,
    },
    Flag {
        short: "n",
        long: "",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.skip_nic_config, true),
        roles: NIC_QUEUES,
        only: None,
        example: "",
        help: "skip all NIC configuration and its undo (ring/HDS, RSS, flow rule)",
        section: Section::C,
    },
    Flag {
        short: "L",
        long: "fail-on-linear",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.fail_on_linear, true),
        roles: &[Role::Server, Role::Plain],
        only: None,
        example: "",
        help: "server: fail if any SCM_DEVMEM_LINEAR (non-header-split) data arrives",
        section: Section::C,
    },
    Flag {
        short: "b",
        long: "",
        hint: "BYTES",
        expect: EXPECT_POW2,
        set: |t, v, page| {
            let n = pow2_u32("-b", "rx-page-size", v, page, MAX_RX_PAGE_SIZE)?;
            set(&mut t.rx_page_size, Some(n))
        },
        roles: &[Role::Probe, Role::Report, Role::Server],
        only: None,
        example: "16384",
        help: "rx-page-size for bind-rx: a power of two >= the page size that fits in\n\
               32 bits (the udmabuf then uses 2 MiB hugepages); also applies to probe",
        section: Section::C,
    },
    Flag {
        short: "A",
        long: "",
        hint: "0|1",
        expect: EXPECT_AUTORELEASE,
        set: |t, v, _| set(&mut t.autorelease, Some(zero_one("-A", v)?)),
        roles: DEVMEM_SERVER,
        only: None,
        example: "1",
        help: "set SO_DEVMEM_AUTORELEASE (proposed socket option; a kernel without it\n\
               makes the run skip)",
        section: Section::C,
    },
    Flag {
        short: "a",
        long: "",
        hint: "0|1",
        expect: EXPECT_AUTORELEASE,
        set: |t, v, _| set(&mut t.bind_autorelease, Some(zero_one("-a", v)?)),
        roles: DEVMEM_SERVER,
        only: None,
        example: "1",
        help: "server: bind-rx autorelease attribute (autorelease series v7-v10): 1 =\n\
               tokens still held at close are released then, 0 = they stay pinned until\n\
               unbind. Sent only to a kernel whose bind-rx has it; without it, -a 0 runs\n\
               as before and -a 1 skips",
        section: Section::C,
    },
    Flag {
        short: "U",
        long: "",
        hint: "0|1|2",
        expect: EXPECT_UNBIND,
        set: |t, v, _| {
            let mode = match v {
                "0" => UnbindMode::Normal,
                "1" => UnbindMode::BeforeRecv,
                "2" => UnbindMode::AfterRecv,
                _ => return Err(invalid("-U", "unbind mode", v, EXPECT_UNBIND)),
            };
            set(&mut t.unbind, mode)
        },
        roles: DEVMEM_SERVER,
        only: None,
        example: "2",
        help: "server: 0 unbind at the end (default); 1 unbind once data is queued,\n\
               before the first recvmsg (ENODEV from recvmsg then ends the run cleanly:\n\
               binding gone); 2 unbind after the first recvmsg (the socket must go on\n\
               receiving)",
        section: Section::C,
    },
    Flag {
        short: "",
        long: "plain",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.plain, true),
        roles: &[Role::Plain],
        only: None,
        example: "",
        help: "with -l: receive over plain TCP (no devmem; no NIC changes and -f not\n\
               needed, but for --hds-thresh); checks the TCP path and the pattern.\n\
               Devmem-only options are accepted and ignored, so a devmem command line can\n\
               be rerun by adding --plain; those that would change the verdict\n\
               (--require-spread) are refused",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "send-pattern",
        hint: "BYTES",
        expect: EXPECT_SIZE,
        set: |t, v, _| {
            let n =
                size(v).ok_or_else(|| invalid("--send-pattern", "byte count", v, EXPECT_SIZE))?;
            set(&mut t.pattern_bytes, Some(n))
        },
        roles: SENDERS,
        only: None,
        example: "1M",
        help: "connect to -s/-p (binding to -c and PORT if given) and send BYTES bytes of\n\
               the -v N pattern (or of the --seed stream; one of them required), then\n\
               close. Over plain TCP without -f; with -f IF through devmem TX (the client\n\
               mode, with the pattern instead of stdin)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "write-size",
        hint: "BYTES",
        expect: EXPECT_SIZE,
        set: |t, v, _| {
            let expect = format!("{EXPECT_SIZE}, 1..=64M");
            let n = sized("--write-size", "write size", v, 1, MAX_WRITE_SIZE, &expect)?;
            set(&mut t.write_size, Some(n as usize))
        },
        roles: &[
            Role::TxPattern,
            Role::Sender,
            Role::Server,
            Role::Zcrx,
            Role::Plain,
        ],
        only: Some("--send-pattern and a sweep's peer (-l --peer)"),
        example: "1448",
        help: "with --send-pattern: write exactly BYTES per write and set TCP_NODELAY\n\
               (segment-size sweeps); with -f: bytes per piece copied into the dmabuf;\n\
               a sweep (-l --peer): the write size the peer sends each run with",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "expect-bytes",
        hint: "BYTES",
        expect: EXPECT_SIZE,
        set: |t, v, _| {
            let n =
                size(v).ok_or_else(|| invalid("--expect-bytes", "byte count", v, EXPECT_SIZE))?;
            set(&mut t.expect_bytes, Some(n))
        },
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "1G",
        help: "with -l: fail unless the peer sent exactly BYTES (catches a sender that\n\
               stopped early; without it, a -v receiver still fails on an empty stream);\n\
               with --flows N: every flow must carry BYTES (as the pattern sender sends)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "rcvbuf",
        hint: "BYTES",
        expect: EXPECT_RCVBUF,
        set: |t, v, _| {
            let n = size(v)
                .filter(|&n| n == 0 || (4096..=1 << 30).contains(&n))
                .ok_or_else(|| invalid("--rcvbuf", "receive buffer size", v, EXPECT_RCVBUF))?;
            set(&mut t.rcvbuf, Some(n))
        },
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "64K",
        help: "with -l: the socket's receive buffer (SO_RCVBUF, set before listen; the\n\
               kernel doubles it). Default for devmem and zcrx: sized from the binding\n\
               (buffer count x min(buffer size, MSS) / 4), so the TCP window cannot ask\n\
               the NIC for more buffers than the dmabuf has (a small dmabuf would stall);\n\
               left alone when the kernel's tcp_rmem max already fits. 0 = the kernel's\n\
               default",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "rcvlowat",
        hint: "BYTES",
        expect: EXPECT_RCVLOWAT,
        set: |t, v, _| {
            let what = "receive low-water mark";
            let n = sized("--rcvlowat", what, v, 1, MAX_RCVLOWAT, EXPECT_RCVLOWAT)?;
            set(&mut t.rcvlowat, Some(n as u32))
        },
        roles: &[Role::Plain],
        only: Some("the plain receiver (-l --plain)"),
        example: "512K",
        help: "with -l --plain: SO_RCVLOWAT on each accepted connection: the receiver is\n\
               woken once BYTES are queued (or by the end of the stream, memory pressure\n\
               or a closed window), so fewer wake-ups and system calls per byte. The\n\
               kernel caps it at half the receive buffer (--rcvbuf N: at N; else half of\n\
               tcp_rmem's max); the log says what it kept. Default: the kernel's, 1 byte",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "corrupt-offset",
        hint: "OFFSET",
        expect: EXPECT_OFFSET,
        set: |t, v, _| {
            let n = size(v)
                .ok_or_else(|| invalid("--corrupt-offset", "stream offset", v, EXPECT_OFFSET))?;
            set(&mut t.corrupt_offset, Some(n))
        },
        roles: SENDERS,
        only: Some("--send-pattern"),
        example: "100",
        help: "with --send-pattern: flip the byte at stream offset OFFSET (a test aid: the\n\
               receiver must report exactly that offset and exit 1)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "timeout",
        hint: "SECS",
        expect: EXPECT_TIMEOUT,
        set: |t, v, _| set(&mut t.timeout, seconds_or_off("--timeout", "timeout", v, EXPECT_TIMEOUT)?),
        roles: &[
            Role::Server,
            Role::Zcrx,
            Role::TxStdin,
            Role::TxPattern,
            Role::Plain,
            Role::Sender,
        ],
        only: None,
        example: "3",
        help: "give up on accept, first byte or an idle connection after SECS seconds\n\
               (fractions allowed, e.g. 0.5; 0 = wait forever, the receivers' default).\n\
               Senders (devmem TX client, --send-pattern): the connect retry window\n\
               (default 5 s); devmem TX client: also the longest wait without a\n\
               zerocopy completion (default 2 s); there 0 means these defaults",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "progress",
        hint: "SECS",
        expect: EXPECT_PROGRESS,
        set: |t, v, _| {
            set(
                &mut t.progress,
                seconds_or_off("--progress", "interval", v, EXPECT_PROGRESS)?,
            )
        },
        roles: PROGRESS_ROLES,
        only: None,
        example: "1.5",
        help: "print a progress line every SECS seconds (0 = never, the default);\n\
               receivers and --send-pattern without -f",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "flows",
        hint: "N",
        expect: EXPECT_FLOWS,
        set: |t, v, _| {
            let n = ranged(
                "--flows",
                "number of flows",
                v,
                1,
                u64::from(MAX_FLOWS),
                EXPECT_FLOWS,
            )?;
            set(&mut t.flows, Some(n as u32))
        },
        roles: FLOW_ROLES,
        only: Some("receivers (-l) and --send-pattern"),
        example: "4",
        help: "receivers: accept N connections (1..=64, default 1), each received by its own\n\
               worker thread (zcrx: by its queue's ifq worker) over the bound queues; -t START -q NUM with NUM > 1 steers them\n\
               over the queues through an RSS context. Senders: open N connections, each\n\
               sending its own flow's stream (--seed: flow k's keyed stream); with -f\n\
               through devmem TX, each flow from its own window of the one dma-buf",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "duration",
        hint: "SECS",
        expect: EXPECT_DURATION,
        set: |t, v, _| {
            set(
                &mut t.duration,
                seconds_or_off("--duration", "duration", v, EXPECT_DURATION)?,
            )
        },
        roles: FLOW_ROLES,
        only: Some("receivers (-l) and --send-pattern"),
        example: "5",
        help: "receivers: receive for SECS seconds, then close every flow and report (the\n\
               peers see a clean close); the seconds include --warmup's. Senders: send\n\
               until then or until the receiver closes. 0 = until the peer closes (the\n\
               default)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "warmup",
        hint: "SECS",
        expect: EXPECT_WARMUP,
        set: |t, v, _| set(&mut t.warmup, seconds_or_off("--warmup", "warm-up", v, EXPECT_WARMUP)?),
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "1",
        help: "receivers: the first SECS seconds are received and validated but left out of\n\
               the figures (Gbit/s, CPU %), as iperf3 -O; part of --duration, and shorter\n\
               than it",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "cpus",
        hint: "LIST",
        expect: EXPECT_CPUS,
        set: |t, v, _| {
            let cpus = crate::figures::cpu::parse_cpu_list(v).map_err(|why| {
                invalid("--cpus", "CPU list", v, &format!("{EXPECT_CPUS}; {why}"))
            })?;
            set(&mut t.cpus, Some(cpus))
        },
        roles: FLOW_ROLES,
        only: Some("receivers (-l) and --send-pattern"),
        example: "0-1",
        help: "pin flow k's worker to the k-th CPU of LIST, in the order written (round\n\
               robin; e.g. 2-5,8; 1,0 puts flow 0 on CPU 1; a CPU written twice takes a\n\
               flow each time); the figures count these CPUs, once each, as the app CPUs",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "tcp-cc",
        hint: "NAME",
        expect: EXPECT_TCP_CC,
        set: |t, v, _| {
            let ok = !v.is_empty()
                && v.len() < 16
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(invalid("--tcp-cc", "congestion control", v, EXPECT_TCP_CC));
            }
            set(&mut t.tcp_cc, Some(v.to_string()))
        },
        roles: FLOW_ROLES,
        only: Some("receivers (-l) and --send-pattern"),
        example: "reno",
        help: "TCP congestion control of every flow (TCP_CONGESTION, e.g. dctcp, cubic,\n\
               reno); an unknown name is refused naming the available ones",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "json",
        hint: "FILE",
        expect: EXPECT_PATH,
        set: |t, v, _| {
            let target = match v {
                "-" => JsonTarget::Stdout,
                _ => JsonTarget::File(file_path("--json", v)?),
            };
            set(&mut t.json, Some(target))
        },
        roles: ALL,
        only: None,
        example: "out.json",
        help: "also write the final summary to FILE as one JSON object (docs/json.md);\n\
               - writes it to stdout, and what would go to stdout goes to stderr",
        section: Section::Ours,
    },
    Flag {
        short: "V",
        long: "verbose",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.verbose, true),
        roles: ALL,
        only: None,
        example: "",
        help: "log every frag (as C ncdevmem does)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "quiet",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.quiet, true),
        roles: ALL,
        only: None,
        example: "",
        help: "log only errors and the verdict (one line when the run passes; no\n\
               capability report on stdout; with --report the report then goes only to\n\
               --json FILE)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "dmabuf-size",
        hint: "BYTES",
        expect: EXPECT_SIZE,
        set: |t, v, page| {
            let page_bytes = page.max(1) as u64;
            let n = size(v)
                .filter(|&n| n > 0 && n % page_bytes == 0)
                .ok_or_else(|| {
                    let expect = format!(
                        "{EXPECT_SIZE}; a non-zero multiple of the page size ({page} bytes)"
                    );
                    invalid("--dmabuf-size", "dmabuf size", v, &expect)
                })?;
            set(&mut t.dmabuf_size, Some(n))
        },
        roles: DMABUF,
        only: None,
        example: "64M",
        help: "udmabuf size: a multiple of the page size (default 16000 pages); with\n\
               --zcrx the zcrx area size (default 8192 pages); with --peer-server -f the\n\
               dma-buf of each devmem TX run",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "hds-thresh",
        hint: "BYTES",
        expect: EXPECT_HDS_THRESH,
        set: |t, v, _| {
            let max = u64::from(u32::MAX);
            let n = sized("--hds-thresh", "hds-thresh", v, 0, max, EXPECT_HDS_THRESH)?;
            set(&mut t.hds_thresh, Some(n as u32))
        },
        // Its value reaches only the plain receiver's arguments: a devmem or zcrx server
        // takes 0 (what it sets anyway) and refuses any other value; the modes that set no
        // NIC's receive (senders, the probe, --report, the peer server) refuse it.
        roles: &[Role::Plain, Role::Server, Role::Zcrx],
        only: Some("receivers (-l)"),
        example: "0",
        help: "the NIC's hds-thresh (header split threshold) for the run. With --plain -f\n\
               IF: header split is turned on with this hds-thresh and both are restored at\n\
               the end; a driver without hds-thresh, or a value over its hds-thresh-max,\n\
               is a skip. Devmem and zcrx servers take only 0: the kernel installs no\n\
               memory provider while hds-thresh is not 0",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "memory",
        hint: "SRC",
        expect: MemorySource::EXPECTED,
        set: |t, v, _| {
            let source = MemorySource::parse(v)
                .ok_or_else(|| invalid("--memory", "memory source", v, MemorySource::EXPECTED))?;
            set(&mut t.memory, source)
        },
        roles: &[Role::Probe, Role::Server, Role::TxStdin, Role::TxPattern],
        only: Some("the devmem server (-l), the devmem TX client and the probe"),
        example: "dma-heap",
        help: "where the dma-buf comes from: udmabuf (default; a memfd exported by\n\
               /dev/udmabuf, hugetlb for -b above the page size), dma-heap (the system\n\
               dma-buf heap, /dev/dma_heap/system) or dma-heap:NAME (/dev/dma_heap/NAME)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "zcrx",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.zcrx, true),
        roles: &[Role::Zcrx],
        only: None,
        example: "",
        help: "with -l: receive through io_uring zero-copy receive (zcrx) instead of\n\
               devmem: NIC setup as the devmem server (unless -n), one zcrx ifq on\n\
               queue -t (default the last RX queue), multishot RECV_ZC, validate (-v N)\n\
               or print the payload, return buffers through the refill ring. With\n\
               --flows N -q NUM (N >= NUM): one ifq and one worker per bound queue, each\n\
               flow received by the worker of the queue it arrived on. Each area is\n\
               --dmabuf-size bytes (default 8192 pages)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "zcrx-nodev",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.zcrx_nodev, true),
        roles: &[Role::Zcrx],
        only: Some("--zcrx"),
        example: "",
        help: "with --zcrx, a test aid: register without a device (ZCRX_REG_NODEV, newer\n\
               kernels; the kernel copies into the area), no NIC setup, no -f/-t/-q, so\n\
               a real zcrx receive runs over loopback",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "rx-buf-len",
        hint: "BYTES",
        expect: EXPECT_RX_BUF_LEN,
        set: |t, v, page| {
            let n = pow2_u32("--rx-buf-len", "rx buffer length", v, page, MAX_RX_BUF_LEN)?;
            set(&mut t.rx_buf_len, Some(n))
        },
        roles: &[Role::Zcrx],
        only: Some("--zcrx"),
        example: "32768",
        help: "with --zcrx: rx buffer length, a power of two >= the page size and at\n\
               most 2 MiB (the area then uses 2 MiB hugepages; kernel 7.0+)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "report",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.report, true),
        roles: &[Role::Report],
        only: None,
        example: "",
        help: "with -f only: print the device's capability report (with --json also as\n\
               JSON); changes nothing, but sends one bind-rx with an invalid dma-buf fd to\n\
               learn whether the driver has queue management ops",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "verify-restore",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.verify_restore, true),
        roles: NIC_QUEUES,
        only: Some("modes that change the NIC (probe, -l, --zcrx)"),
        example: "",
        help: "after undoing NIC changes, compare the NIC with its state before the run\n\
               (rings, channels, RSS table and contexts, ntuple feature and rules); a\n\
               difference is exit 1",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "require-spread",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.require_spread, true),
        roles: &[Role::Server, Role::Zcrx],
        only: Some("receivers with bound queues (-l with devmem, --zcrx; --plain binds none)"),
        example: "",
        help: "fail the run (exit 1) when its flows did not reach every bound queue: a\n\
               bound queue whose rx-bytes (qstats) did not grow over the measured\n\
               interval (without queue stats: no flow arrived on it); the run is then\n\
               measured as with --flows",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "peer-server",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.peer_server, true),
        roles: &[Role::PeerServer],
        only: None,
        example: "",
        help: "serve sweeps (the sender side, as iperf3 -s): listen for control\n\
               connections on -p CTRL (default 4343; -s ADDR: only on that address), one\n\
               client at a time; send each run's flows as the client asks, only to the\n\
               address the client connected from, within --max-duration and --max-bytes;\n\
               answer with the send's figures and CPU. Runs until a stop signal (SIGINT,\n\
               SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "max-duration",
        hint: "SECS",
        expect: EXPECT_MAX_DURATION,
        set: |t, v, _| {
            set(
                &mut t.max_duration,
                seconds_or_off("--max-duration", "duration", v, EXPECT_MAX_DURATION)?,
            )
        },
        roles: &[Role::PeerServer],
        only: Some("--peer-server"),
        example: "60",
        help: "with --peer-server: the longest send of one run, whatever a client asks\n\
               (default 600; 0 = the default)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "max-bytes",
        hint: "BYTES",
        expect: EXPECT_MAX_BYTES,
        set: |t, v, _| {
            let n = sized("--max-bytes", "byte count", v, 1, u64::MAX, EXPECT_MAX_BYTES)?;
            set(&mut t.max_bytes, Some(n))
        },
        roles: &[Role::PeerServer],
        only: Some("--peer-server"),
        example: "1G",
        help: "with --peer-server: the most bytes one run sends over all its flows\n\
               (default 1099511627776, 1 TiB)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "pid-file",
        hint: "FILE",
        expect: EXPECT_PATH,
        set: |t, v, _| set(&mut t.pid_file, Some(file_path("--pid-file", v)?)),
        roles: PID_FILE_ROLES,
        only: Some("receivers (-l) and --peer-server"),
        example: "ncdevmem.pid",
        help: "write this process's id to FILE once it listens (after the 'listening on'\n\
               or 'control on' line; a sweep: when its first run listens), and remove it\n\
               when it ends, also on a stop signal (as iperf3 --pidfile): to stop a tool\n\
               started in the background where $! is not its id (ip netns exec, sudo).\n\
               A FILE that cannot be written is refused before anything starts",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "sweep",
        hint: "KEY=V1,V2,...",
        expect: EXPECT_SWEEP,
        set: |t, v, page| {
            let sweep = crate::lab::plan::Sweep::parse(v, page)
                .map_err(|why| usage_err(format!("--sweep: {why}")))?;
            set(&mut t.sweep, Some(sweep))
        },
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "flows=1,2",
        help: "with --peer: run the receive once per value (and --runs times each), KEY\n\
               one of rx-page-size (devmem -b: each run binds afresh), rx-buf-len (--zcrx),\n\
               autorelease (devmem -a; a kernel without it skips that point), flows,\n\
               dmabuf-size (devmem, zcrx), write-size (the peer's --write-size),\n\
               tcp-cc (names: each run's --tcp-cc, e.g. tcp-cc=cubic,dctcp),\n\
               hds-thresh (--plain -f IF; devmem and zcrx: 0 only); then\n\
               print the table (mean +/- sample sd per value) on stdout",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "runs",
        hint: "R",
        expect: EXPECT_RUNS,
        set: |t, v, _| {
            let n = ranged("--runs", "number of runs", v, 1, 1000, EXPECT_RUNS)?;
            set(&mut t.runs, Some(n as u32))
        },
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "2",
        help: "with --peer: runs of every point (default 3), interleaved: run 1 of every\n\
               point, then run 2, ... so drift of the machine spreads over all points",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "csv",
        hint: "FILE",
        expect: EXPECT_PATH,
        set: |t, v, _| set(&mut t.csv, Some(file_path("--csv", v)?)),
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "runs.csv",
        help: "with --peer: also write one CSV row per run (a header row first)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "plot",
        hint: "FILE",
        expect: EXPECT_PATH,
        set: |t, v, _| set(&mut t.plot, Some(file_path("--plot", v)?)),
        roles: TABLES,
        only: Some("a sweep (-l --peer) and --compare"),
        example: "sweep.svg",
        help: "with --peer: also draw the swept value against RX Gbit/s and app sys %\n\
               (mean +/- sd error bars); with --compare: base and new as two series;\n\
               FILE.svg or FILE.png (the name says which)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "columns",
        hint: "LIST",
        expect: EXPECT_COLUMNS,
        set: |t, v, _| {
            let names: Vec<String> = v.split(',').map(|n| n.trim().to_string()).collect();
            if names.iter().any(String::is_empty) {
                return Err(invalid("--columns", "column list", v, EXPECT_COLUMNS));
            }
            set(&mut t.columns, Some(names))
        },
        roles: TABLES,
        only: Some("a sweep's table (-l --peer) and --compare"),
        example: "rx_dev_gbps,app_sys_pct,runs",
        help: "with --peer or --compare: the table's columns, in this order, by their CSV\n\
               names (rx_dev_gbps, rx_flow_avg_gbps, app_sys_pct, frags_per_gib,\n\
               rx_q4_bytes, runs, ...; the headers as printed work too)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "format",
        hint: "FMT",
        expect: EXPECT_FORMAT,
        set: |t, v, _| {
            let f = crate::lab::table::Format::parse(v)
                .ok_or_else(|| invalid("--format", "table format", v, EXPECT_FORMAT))?;
            set(&mut t.format, Some(f))
        },
        roles: TABLES,
        only: Some("a sweep's table (-l --peer) and --compare"),
        example: "markdown",
        help: "with --peer or --compare: the table on stdout as text (the default: the\n\
               series' columns within 72 characters, the tool's own in blocks after\n\
               them), markdown or csv",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "compare",
        hint: "BASE.json",
        expect: EXPECT_PATH,
        set: |t, v, _| {
            let base = file_path("--compare", v)?;
            let new = t.compare.take().map(|(_, n)| n).unwrap_or_default();
            set(&mut t.compare, Some((base, new)))
        },
        roles: &[Role::Compare],
        only: None,
        example: "base.json",
        help: "--compare BASE.json NEW.json: compare two sweeps' (or repeated runs') --json\n\
               files point by point: mean +/- sd (n) of each, the change in %, the 95% CI\n\
               of the difference and Welch's t-test p, * where p < 0.05; files of another\n\
               shape (mode, flows, duration, queues, write size, ...) are refused naming\n\
               the difference; environment differences (kernel, CPU, ...) are listed",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "any-shape",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.any_shape, true),
        roles: TABLES,
        only: Some("--compare and a sweep's --baseline"),
        example: "",
        help: "with --compare or --baseline: compare files of different shape (the\n\
               differences are listed)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "baseline",
        hint: "FILE",
        expect: EXPECT_PATH,
        set: |t, v, _| set(&mut t.baseline, Some(file_path("--baseline", v)?)),
        roles: RECEIVERS,
        only: Some("a sweep (-l --peer)"),
        example: "base.json",
        help: "with --peer: after the table, compare this sweep with the sweep's --json\n\
               FILE (as --compare FILE this-sweep.json does)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "pre-run",
        hint: "CMD",
        expect: EXPECT_HOOK,
        set: |t, v, _| set(&mut t.pre_run, Some(hook("--pre-run", v)?)),
        roles: RECEIVERS,
        only: Some("a sweep (-l --peer)"),
        example: "true",
        help: "with --peer: run CMD (sh -c) before every run; NCDEVMEM_RUN, _RUNS,\n\
               _POINT, _KEY, _VALUE, _POINT_RUN and _OUT_DIR in its environment; a\n\
               non-zero exit fails the run (named) and the run is not made",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "post-run",
        hint: "CMD",
        expect: EXPECT_HOOK,
        set: |t, v, _| set(&mut t.post_run, Some(hook("--post-run", v)?)),
        roles: RECEIVERS,
        only: Some("a sweep (-l --peer)"),
        example: "true",
        help: "with --peer: run CMD (sh -c) after every run that was made, the same\n\
               environment with NCDEVMEM_OUTCOME (ok, fail, skip); a non-zero exit fails\n\
               the run (named)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "peer-port",
        hint: "PORT",
        expect: EXPECT_PORT,
        set: |t, v, _| {
            let port = ranged("--peer-port", "port", v, 1, 65535, EXPECT_PORT)?;
            set(&mut t.peer_port, Some(port as u16))
        },
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "4344",
        help: "with --peer: the peer's control port (default 4343)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "peer-send",
        hint: "HOW",
        expect: EXPECT_PEER_SEND,
        set: |t, v, _| {
            let how = super::PeerSend::parse(v)
                .ok_or_else(|| invalid("--peer-send", "way to send", v, EXPECT_PEER_SEND))?;
            set(&mut t.peer_send, Some(how))
        },
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "devmem",
        help: "with --peer: how the peer sends each run, plain (TCP, the default) or devmem\n\
               (devmem TX through the NIC the peer was started with, --peer-server -f IF;\n\
               a peer without -f refuses the run)",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "peer",
        hint: "ADDR",
        expect: EXPECT_ADDR,
        set: |t, v, _| set(&mut t.peer, Some(v.to_string())),
        roles: RECEIVERS,
        only: Some("receivers (-l)"),
        example: "2001:db8::2",
        help: "with -l: a sweep, driven over a control connection to the --peer-server at\n\
               ADDR, which sends each run's flows to this host's -s address: every run\n\
               is this receive for --duration (default 10 s; -v N or --seed SEED, default\n\
               --seed 1), then the table on stdout; with --json FILE every run's figures\n\
               and the environment",
        section: Section::Ours,
    },
    Flag {
        short: "h",
        long: "help",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.help, true),
        roles: NONE,
        only: None,
        example: "",
        help: "print this text and exit 0",
        section: Section::Ours,
    },
    Flag {
        short: "",
        long: "version",
        hint: "",
        expect: "",
        set: |t, _, _| set(&mut t.version, true),
        roles: NONE,
        only: None,
        example: "",
        help: "",
        section: Section::Hidden,
    },
];

/// Stores `value` in `field`; `Ok` so that a row's parser ends in one expression.
fn set<T>(field: &mut T, value: T) -> Result<()> {
    *field = value;
    Ok(())
}

/// A file path as `--json`, `--csv` and `--plot` take it: not empty, not starting with `-`.
///
/// Errors: [`Error::Usage`] naming `flag`.
/// A hook's command (`--pre-run`, `--post-run`): non-empty, at most 4096 bytes.
fn hook(flag: &str, v: &str) -> Result<String> {
    if v.trim().is_empty() || v.len() > 4096 || v.contains('\0') {
        return Err(invalid(flag, "command", v, EXPECT_HOOK));
    }
    Ok(v.to_string())
}

fn file_path(flag: &str, v: &str) -> Result<PathBuf> {
    if v.is_empty() {
        return Err(invalid(flag, "file name", v, "a non-empty path"));
    }
    if v.starts_with('-') {
        let expect = format!(
            "a path that does not start with '-' (it looks like an option; write ./{v} for a \
             file of that name)"
        );
        return Err(invalid(flag, "file name", v, &expect));
    }
    Ok(PathBuf::from(v))
}

/// The options whose value is a byte size ([`Flag::takes_size`]), in table order:
/// `-z, -b, --send-pattern, ...`.
pub(super) fn size_options() -> String {
    FLAGS
        .iter()
        .filter(|f| f.takes_size())
        .map(Flag::display)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Finds a row by short or long name.
pub(super) fn by_name(name: &str) -> Option<&'static Flag> {
    FLAGS
        .iter()
        .find(|f| !name.is_empty() && (f.short == name || f.long == name))
}

/// The "only applies to" refusals of every option given outside the roles it applies to,
/// in table order.
///
/// Errors: [`Error::Usage`] `"{flag}: only applies to {where}"`.
pub(super) fn check_roles(given: &[&'static Flag], role: Role) -> Result<()> {
    FLAGS
        .iter()
        .filter(|f| given.iter().any(|g| std::ptr::eq(*g, *f)))
        .try_for_each(|f| f.check_role(role))
}

fn usage_err(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}

/// `"{flag}: invalid {what} '{text}' (expected {expect})"`.
pub(super) fn invalid(flag: &str, what: &str, text: &str, expect: &str) -> Error {
    usage_err(format!(
        "{flag}: invalid {what} '{text}' (expected {expect})"
    ))
}

// ---------------------------------------------------------------------------------------------
// Value parsers (pure; each names the flag in its error).
// ---------------------------------------------------------------------------------------------

/// A decimal number in `min..=max`.
fn ranged(flag: &str, what: &str, text: &str, min: u64, max: u64, expect: &str) -> Result<u64> {
    match dec_u64(text) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(invalid(flag, what, text, expect)),
    }
}

/// A byte size ([`size`]: decimal, optional suffix K, M or G) in `min..=max`.
fn sized(flag: &str, what: &str, text: &str, min: u64, max: u64, expect: &str) -> Result<u64> {
    match size(text) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(invalid(flag, what, text, expect)),
    }
}

/// Seconds: `DIGITS` or `DIGITS.DIGITS` (no sign, exponent, `inf` or `nan`). `Some(ZERO)` for 0.
/// A positive value too small to represent in nanoseconds, or too large for [`Duration`], is
/// refused (`None`).
pub(super) fn seconds(text: &str) -> Option<Duration> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !frac.is_none_or(digits) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    if value > MAX_SECONDS {
        return None;
    }
    let d = Duration::try_from_secs_f64(value).ok()?;
    if d.is_zero() && value != 0.0 {
        return None;
    }
    Some(d)
}

/// [`seconds`] for `flag`, with 0 stored as `None` (what 0 then means is the option's own,
/// said in `expect`).
fn seconds_or_off(flag: &str, what: &str, text: &str, expect: &str) -> Result<Option<Duration>> {
    let d = seconds(text).ok_or_else(|| invalid(flag, what, text, expect))?;
    Ok(Some(d).filter(|d| !d.is_zero()))
}

/// A power of two in `page_size..=max` bytes ([`size`]: suffixes allowed), as `-b` (`max`
/// [`MAX_RX_PAGE_SIZE`]) and `--rx-buf-len` ([`MAX_RX_BUF_LEN`]) need.
pub(super) fn pow2_u32(
    flag: &str,
    what: &str,
    text: &str,
    page_size: usize,
    max: u32,
) -> Result<u32> {
    let largest = match max {
        m if m >= 1 << 30 => format!("{} GiB", m >> 30),
        m => format!("{} MiB", m >> 20),
    };
    let expect = format!(
        "a power of two in {page_size}..={max} bytes (page size {page_size} to {largest}), \
         optional suffix K, M or G"
    );
    match size(text) {
        Some(v) if v.is_power_of_two() && v >= page_size as u64 && v <= u64::from(max) => {
            Ok(v as u32)
        }
        _ => Err(invalid(flag, what, text, &expect)),
    }
}

/// `0` or `1` for `flag` (`-A`, `-a`).
fn zero_one(flag: &str, text: &str) -> Result<bool> {
    match text {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(invalid(flag, "autorelease value", text, EXPECT_AUTORELEASE)),
    }
}

/// `random`, a decimal number or `0x` hex (either case), fitting `u64`.
pub(super) fn parse_seed(text: &str) -> Option<Seed> {
    if text == "random" {
        return Some(Seed::Random);
    }
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok().map(Seed::Value)
        }
        Some(_) => None,
        None => dec_u64(text).map(Seed::Value),
    }
}

// ---------------------------------------------------------------------------------------------
// getopts over the table.
// ---------------------------------------------------------------------------------------------

/// Whether `arg` is spelled like one of our options (`--json`, `--json=x`, `-l`, `-ls`, `-p80`):
/// as the separate value of an option it means the value was forgotten.
fn names_an_option(arg: &str) -> bool {
    if let Some(tail) = arg.strip_prefix("--") {
        let name = tail.split_once('=').map_or(tail, |(n, _)| n);
        return name.len() > 1 && by_name(name).is_some();
    }
    let mut chars = arg.strip_prefix('-').unwrap_or_default().chars();
    chars.next().is_some_and(|c| {
        let mut buf = [0u8; 4];
        c.is_ascii_alphabetic() && by_name(c.encode_utf8(&mut buf)).is_some()
    })
}

/// The error for an option whose separate value is another option (`--json --verify-restore`
/// would otherwise write a file named `--verify-restore`).
fn value_is_an_option(flag: &Flag, value: &str) -> Error {
    usage_err(format!("{}: '{value}' is an option", flag.missing_value()))
}

/// Walks the arguments the way getopts does, before getopts sees them, so values (`-s --x`)
/// are not mistaken for options:
/// * getopts treats `--x` (a one-letter long name) as `-x`; only new features have long
///   names, so those spellings are refused;
/// * an option whose value is given as the next argument and that argument is spelled like
///   one of our options (`--json --verify-restore`, `-f -l`) is refused: the value was
///   forgotten, and taking the option as the value would be a silent surprise.
fn refuse_one_letter_long(argv: &[String]) -> Result<()> {
    let separate_value = |flag: &'static Flag, at: usize| -> Result<()> {
        match argv.get(at) {
            Some(v) if names_an_option(v) => Err(value_is_an_option(flag, v)),
            _ => Ok(()),
        }
    };
    let mut i = 0;
    while i < argv.len() {
        let arg = &argv[i];
        if arg == "--" {
            break;
        }
        if let Some(tail) = arg.strip_prefix("--") {
            let (name, inline) = match tail.split_once('=') {
                Some((n, _)) => (n, true),
                None => (tail, false),
            };
            if name.len() == 1 {
                return Err(unknown_option(name, true));
            }
            if let Some(flag) = by_name(name).filter(|f| !inline && f.takes_value()) {
                separate_value(flag, i + 1)?;
                i += 1;
            }
        } else if arg.len() > 1 && arg.starts_with('-') {
            for (j, ch) in arg.char_indices().skip(1) {
                let mut buf = [0u8; 4];
                match by_name(ch.encode_utf8(&mut buf)) {
                    Some(f) if f.takes_value() => {
                        if j + ch.len_utf8() == arg.len() {
                            separate_value(f, i + 1)?;
                            i += 1;
                        }
                        break;
                    }
                    Some(_) => {}
                    // getopts reports it.
                    None => break,
                }
            }
        }
        i += 1;
    }
    Ok(())
}

/// `long`: spelled with `--` (getopts reports only the name, so a one-character name from
/// getopts is a short option).
fn unknown_option(name: &str, long: bool) -> Error {
    let shown = if !long && name.chars().count() == 1 {
        format!("-{name}")
    } else {
        format!("--{name}")
    };
    usage_err(format!(
        "unknown option '{shown}' (unknown options are refused; see {PROGRAM} --help)"
    ))
}

fn map_getopts_fail(f: getopts::Fail) -> Error {
    use getopts::Fail;
    match f {
        Fail::UnrecognizedOption(n) => unknown_option(&n, false),
        Fail::ArgumentMissing(n) => match by_name(&n) {
            Some(f) => usage_err(f.missing_value()),
            None => usage_err(format!("option '{n}': missing value")),
        },
        Fail::UnexpectedArgument(n) => match by_name(&n) {
            Some(f) => usage_err(format!("{}: takes no value", f.display())),
            None => usage_err(format!("option '{n}': takes no value")),
        },
        // Every option is registered as "multi" and none as required, so getopts cannot
        // return these; map them anyway rather than panic.
        other => usage_err(other.to_string()),
    }
}

impl Typed {
    /// Parses `argv` (without `argv[0]`) into typed values, and names the options given.
    ///
    /// `page_size` is the system page size in bytes (`sysconf(_SC_PAGESIZE)`, passed in so
    /// this stays pure); it bounds `-b`, `--rx-buf-len` and `--dmabuf-size`. Options without
    /// a value are read first; `-h`/`--help` and `--version` then win over every value check
    /// (not over an unknown option, which getopts has already refused), and the values are
    /// parsed in table order.
    ///
    /// Errors: [`Error::Usage`] for an unknown option, a missing or bad value, or a
    /// positional argument. The message names the flag and the accepted values.
    pub(super) fn parse(argv: &[String], page_size: usize) -> Result<(Typed, Vec<&'static Flag>)> {
        refuse_one_letter_long(argv)?;
        let mut opts = getopts::Options::new();
        for f in FLAGS {
            if f.takes_value() {
                opts.optmulti(f.short, f.long, "", f.hint);
            } else {
                opts.optflagmulti(f.short, f.long, "");
            }
        }
        let m = opts.parse(argv).map_err(map_getopts_fail)?;
        // `--compare BASE.json NEW.json`: NEW is the one positional argument there is.
        let compare_new = match (m.opt_present("compare"), &m.free[..]) {
            (true, [new]) => Some(file_path("--compare", new)?),
            (true, []) => {
                return Err(usage_err(
                    "--compare: missing NEW.json (expected --compare BASE.json NEW.json)",
                ))
            }
            (true, [_, extra, ..]) => {
                return Err(usage_err(format!(
                    "--compare: unexpected argument '{extra}' (expected --compare BASE.json \
                     NEW.json)"
                )))
            }
            _ => None,
        };
        if let (Some(free), None) = (m.free.first(), &compare_new) {
            return Err(usage_err(format!(
                "unexpected argument '{free}' (positional arguments are not accepted; see {PROGRAM} --help)"
            )));
        }
        let given: Vec<&'static Flag> = FLAGS.iter().filter(|f| m.opt_present(f.key())).collect();
        let mut t = Typed::default();
        if let Some(new) = compare_new {
            t.compare = Some((PathBuf::new(), new));
        }
        for f in given.iter().filter(|f| !f.takes_value()) {
            (f.set)(&mut t, "", page_size)?;
        }
        if t.help || t.version {
            return Ok((t, given));
        }
        for f in given.iter().filter(|f| f.takes_value()) {
            if let Some(value) = m.opt_strs(f.key()).pop() {
                (f.set)(&mut t, &value, page_size)?;
            }
        }
        Ok((t, given))
    }
}

/// The option list of `--help`: every row of `section` in table order, its names in a
/// 16-column field (a longer label gets a line of its own) and its help text beside them.
pub(super) fn help_list(section: Section) -> String {
    const INDENT: &str = "                  ";
    let mut out = String::new();
    for f in FLAGS.iter().filter(|f| f.section == section) {
        let label = f.label();
        if label.len() <= 15 {
            out.push_str(&format!("  {label:<15} "));
        } else {
            out.push_str(&format!("  {label}\n{INDENT}"));
        }
        out.push_str(&f.help.replace('\n', &format!("\n{INDENT}")));
        out.push('\n');
    }
    out
}
