//! The command line: C ncdevmem's short options (getopt string `"Lls:c:p:v:q:t:f:z:nb:"` plus
//! `-A`) with the same meanings and mode selection, and long options for ncdevmem-rs's own
//! features.
//!
//! Two layers, both pure (no syscalls; the page size is a parameter):
//! * `Typed::parse`: what was typed. Every value is checked here (decimal numbers, ranges,
//!   powers of two, sizes, seconds); addresses stay text.
//! * `resolve`: which [`Mode`] runs and which options apply to it; addresses are
//!   parsed into [`HostAddr`]. Interface name → ifindex and the default queue choice need the
//!   kernel, so they are left to the app: queues stay `Option<u32>` start and count.
//!
//! [`parse`] does both and returns [`Command::Help`] for `-h`/`--help`. Every error is
//! [`Error::Usage`] (exit 2) with a message that names the flag and the accepted values, e.g.
//! `-p: invalid port 'x' (expected 1..=65535)`; the caller prints it after `ncdevmem-rs: `.
//!
//! Option semantics follow kernel `tools/testing/selftests/drivers/net/hw/ncdevmem.c` `main()`
//! (net-next, 2026-08) as summarised in `docs/kernel-interface.md#ncdevmem-options`.

use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
pub use crate::rx::UnbindMode;

/// The binary's name, as used in messages and in the usage text.
pub const PROGRAM: &str = "ncdevmem-rs";

/// Largest interface name the kernel accepts, in bytes, without the NUL (`IFNAMSIZ` − 1).
pub const IFNAME_MAX_LEN: usize = 15;

/// Largest `-v` period. The C checker's counter is one byte wide, so a period of 256
/// (`01 … FF 0A`) is the longest that wraps where it should
/// (`docs/kernel-interface.md#the-validation-pattern`).
pub const VALIDATE_MAX: u32 = 256;

/// One option: its names, whether it takes a value, and what the value must be (used in the
/// "missing value" message).
struct Spec {
    /// Short name (one character) or `""`.
    short: &'static str,
    /// Long name (without `--`) or `""`.
    long: &'static str,
    /// Placeholder for the value, or `""` for a flag.
    hint: &'static str,
    /// Accepted values, as shown in error messages.
    expect: &'static str,
}

impl Spec {
    fn takes_value(&self) -> bool {
        !self.hint.is_empty()
    }

    /// `-p: missing value PORT (expected 1..=65535)`.
    fn missing_value(&self) -> String {
        format!(
            "{}: missing value {} (expected {})",
            self.display(),
            self.hint,
            self.expect
        )
    }

    /// How the user spells it: `-p`, `--timeout`.
    fn display(&self) -> String {
        if self.short.is_empty() {
            format!("--{}", self.long)
        } else {
            format!("-{}", self.short)
        }
    }
}

const EXPECT_PORT: &str = "1..=65535";
const EXPECT_VALIDATE: &str = "0 or 2..=256";
const EXPECT_SEED: &str =
    "a number in 0..=18446744073709551615 (decimal or 0x hex), or 'random' (senders)";
const EXPECT_QUEUE: &str = "0..=4294967295";
const EXPECT_NUM_QUEUES: &str = "1..=4096";
/// Most RX queues one bind-rx may name (one `queues` nest each; the netlink request must fit).
pub const MAX_NUM_QUEUES: u32 = 4096;
const EXPECT_CHUNK: &str = "1..=4294967295 bytes";
const EXPECT_AUTORELEASE: &str = "0 or 1";
const EXPECT_UNBIND: &str = "0, 1 or 2";
const EXPECT_SECONDS: &str = "decimal seconds in 0..=31536000 (one year), e.g. 2 or 0.5; 0 = none";
/// Largest accepted `--write-size`, bytes (64 MiB): one buffer of that size is allocated.
pub const MAX_WRITE_SIZE: u64 = 64 << 20;
/// Longest accepted `--timeout`/`--progress`: one year, in seconds.
pub const MAX_SECONDS: f64 = 31_536_000.0;
const EXPECT_SIZE: &str = "decimal bytes, optional suffix K, M or G (KiB, MiB, GiB)";
const EXPECT_RCVBUF: &str =
    "0 (the kernel's default) or 4096..=1073741824 bytes, optional suffix K, M or G";
const EXPECT_OFFSET: &str = "decimal byte offset, optional suffix K, M or G (KiB, MiB, GiB)";
const EXPECT_POW2: &str = "a power of two >= the page size that fits in 32 bits, in bytes";
const EXPECT_ADDR: &str = "an IPv4, IPv6 or IPv4-mapped IPv6 address";
const EXPECT_IFNAME: &str = "an interface name of 1..=15 bytes";
const EXPECT_PATH: &str = "a file path";

/// Every option we accept. C ncdevmem's letters have no long names (except the optional
/// `--fail-on-linear` alias of `-L`); new behaviour has only long names (`-V` is the one new
/// short letter; `docs/architecture.md#command-line`).
#[rustfmt::skip]
const SPECS: &[Spec] = &[
    Spec { short: "h",  long: "help",            hint: "",       expect: "" },
    Spec { short: "",   long: "version",         hint: "",       expect: "" },
    Spec { short: "l",  long: "",                hint: "",       expect: "" },
    Spec { short: "s",  long: "",                hint: "ADDR",   expect: EXPECT_ADDR },
    Spec { short: "c",  long: "",                hint: "ADDR",   expect: EXPECT_ADDR },
    Spec { short: "p",  long: "",                hint: "PORT",   expect: EXPECT_PORT },
    Spec { short: "v",  long: "",                hint: "N",      expect: EXPECT_VALIDATE },
    Spec { short: "q",  long: "",                hint: "N",      expect: EXPECT_NUM_QUEUES },
    Spec { short: "t",  long: "",                hint: "N",      expect: EXPECT_QUEUE },
    Spec { short: "f",  long: "",                hint: "IFNAME", expect: EXPECT_IFNAME },
    Spec { short: "z",  long: "",                hint: "BYTES",  expect: EXPECT_CHUNK },
    Spec { short: "n",  long: "",                hint: "",       expect: "" },
    Spec { short: "L",  long: "fail-on-linear",  hint: "",       expect: "" },
    Spec { short: "b",  long: "",                hint: "BYTES",  expect: EXPECT_POW2 },
    Spec { short: "A",  long: "",                hint: "0|1",    expect: EXPECT_AUTORELEASE },
    Spec { short: "a",  long: "",                hint: "0|1",    expect: EXPECT_AUTORELEASE },
    Spec { short: "U",  long: "",                hint: "0|1|2",  expect: EXPECT_UNBIND },
    Spec { short: "V",  long: "verbose",         hint: "",       expect: "" },
    Spec { short: "",   long: "quiet",           hint: "",       expect: "" },
    Spec { short: "",   long: "plain",           hint: "",       expect: "" },
    Spec { short: "",   long: "send-pattern",    hint: "BYTES",  expect: EXPECT_SIZE },
    Spec { short: "",   long: "write-size",      hint: "BYTES",  expect: EXPECT_SIZE },
    Spec { short: "",   long: "corrupt-offset",  hint: "OFFSET", expect: EXPECT_OFFSET },
    Spec { short: "",   long: "seed",            hint: "SEED",   expect: EXPECT_SEED },
    Spec { short: "",   long: "expect-bytes",    hint: "BYTES",  expect: EXPECT_SIZE },
    Spec { short: "",   long: "rcvbuf",          hint: "BYTES",  expect: EXPECT_RCVBUF },
    Spec { short: "",   long: "timeout",         hint: "SECS",   expect: EXPECT_SECONDS },
    Spec { short: "",   long: "json",            hint: "FILE",   expect: EXPECT_PATH },
    Spec { short: "",   long: "progress",        hint: "SECS",   expect: EXPECT_SECONDS },
    Spec { short: "",   long: "dmabuf-size",     hint: "BYTES",  expect: EXPECT_SIZE },
    Spec { short: "",   long: "zcrx",            hint: "",       expect: "" },
    Spec { short: "",   long: "rx-buf-len",      hint: "BYTES",  expect: EXPECT_POW2 },
    Spec { short: "",   long: "zcrx-nodev",      hint: "",       expect: "" },
    Spec { short: "",   long: "report",          hint: "",       expect: "" },
    Spec { short: "",   long: "verify-restore",  hint: "",       expect: "" },
];

/// Finds a spec by short or long name.
fn spec_by_name(name: &str) -> Option<&'static Spec> {
    SPECS
        .iter()
        .find(|s| !name.is_empty() && (s.short == name || s.long == name))
}

fn usage_err(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}

/// `"{flag}: invalid {what} '{text}' (expected {expect})"`.
fn invalid(flag: &str, what: &str, text: &str, expect: &str) -> Error {
    usage_err(format!(
        "{flag}: invalid {what} '{text}' (expected {expect})"
    ))
}

// ---------------------------------------------------------------------------------------------
// Value parsers (pure; each names the flag in its error).
// ---------------------------------------------------------------------------------------------

/// Parses a decimal number: ASCII digits only (no sign, no spaces, no `0x`; leading zeros are
/// read as decimal, not octal). `None` for anything else, including overflow of `u64`.
fn dec_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok()
}

/// A decimal number in `min..=max`.
fn ranged(flag: &str, what: &str, text: &str, min: u64, max: u64, expect: &str) -> Result<u64> {
    match dec_u64(text) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(invalid(flag, what, text, expect)),
    }
}

/// A byte count: decimal digits with an optional binary suffix `K`/`M`/`G` (either case) for
/// KiB/MiB/GiB. `None` for garbage or overflow of `u64`.
fn size_bytes(text: &str) -> Option<u64> {
    let (digits, mult) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1u64 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1u64 << 30),
        _ => (text, 1),
    };
    dec_u64(digits)?.checked_mul(mult)
}

/// Seconds: `DIGITS` or `DIGITS.DIGITS` (no sign, exponent, `inf` or `nan`). `Some(ZERO)` for 0.
/// A positive value too small to represent in nanoseconds, or too large for [`Duration`], is
/// refused (`None`).
fn seconds(text: &str) -> Option<Duration> {
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

/// A power of two ≥ `page_size` that fits in `u32` (bytes), as `-b` and `--rx-buf-len` need.
fn pow2_u32(flag: &str, what: &str, text: &str, page_size: usize) -> Result<u32> {
    let max = 1u64 << 31;
    let expect = format!("a power of two in {page_size}..={max} bytes (page size {page_size})");
    match dec_u64(text) {
        Some(v) if v.is_power_of_two() && v >= page_size as u64 && v <= max => Ok(v as u32),
        _ => Err(invalid(flag, what, text, &expect)),
    }
}

/// `--seed` as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// This seed (any 64-bit value).
    Value(u64),
    /// `random`: the sender draws one and prints it.
    Random,
}

/// `random`, a decimal number or `0x` hex (either case), fitting `u64`.
fn parse_seed(text: &str) -> Option<Seed> {
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

fn seconds_opt(flag: &str, what: &str, text: &str) -> Result<Duration> {
    seconds(text).ok_or_else(|| invalid(flag, what, text, EXPECT_SECONDS))
}

// ---------------------------------------------------------------------------------------------
// Low layer: what was typed.
// ---------------------------------------------------------------------------------------------

/// The command line as typed, every value checked for syntax and range: the values that need
/// no resolving already in their [`Config`] fields (`-v 0`, `--timeout 0` and `--progress 0`
/// stored as `None`), the mode selectors and the addresses as text beside them. Nothing here
/// decides the mode or whether an option applies to it; that is [`resolve`].
///
/// A repeated option keeps its last value (getopt behaviour); repeated flags are the same as
/// one.
#[derive(Default)]
struct Typed {
    /// Every value but `mode`, `server`, `client` and `verbosity`.
    c: Config,
    /// `-h`, `--help`; `--version`. When set, [`Typed::parse`] stops there and leaves every
    /// other value field unparsed.
    help: bool,
    version: bool,
    /// `-l`, `--plain`, `--zcrx`, `--report`: the mode selectors.
    listen: bool,
    plain: bool,
    zcrx: bool,
    report: bool,
    /// `-V`/`--verbose`, `--quiet`.
    verbose: bool,
    quiet: bool,
    /// `-s ADDR`, `-c ADDR` as typed (syntax checked in [`resolve`]).
    server: Option<String>,
    client: Option<String>,
}

/// Whether `arg` is spelled like one of our options (`--json`, `--json=x`, `-l`, `-ls`, `-p80`):
/// as the separate value of an option it means the value was forgotten.
fn names_an_option(arg: &str) -> bool {
    if let Some(tail) = arg.strip_prefix("--") {
        let name = tail.split_once('=').map_or(tail, |(n, _)| n);
        return name.len() > 1 && spec_by_name(name).is_some();
    }
    let mut chars = arg.strip_prefix('-').unwrap_or_default().chars();
    chars.next().is_some_and(|c| {
        let mut buf = [0u8; 4];
        c.is_ascii_alphabetic() && spec_by_name(c.encode_utf8(&mut buf)).is_some()
    })
}

/// The error for an option whose separate value is another option (`--json --verify-restore`
/// would otherwise write a file named `--verify-restore`).
fn value_is_an_option(spec: &Spec, value: &str) -> Error {
    usage_err(format!("{}: '{value}' is an option", spec.missing_value()))
}

/// Walks the arguments the way getopts does, before getopts sees them, so values (`-s --x`)
/// are not mistaken for options:
/// * getopts treats `--x` (a one-letter long name) as `-x`; only new features have long
///   names, so those spellings are refused;
/// * an option whose value is given as the next argument and that argument is spelled like
///   one of our options (`--json --verify-restore`, `-f -l`) is refused: the value was
///   forgotten, and taking the option as the value would be a silent surprise.
fn refuse_one_letter_long(argv: &[String]) -> Result<()> {
    let separate_value = |spec: &'static Spec, at: usize| -> Result<()> {
        match argv.get(at) {
            Some(v) if names_an_option(v) => Err(value_is_an_option(spec, v)),
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
            if let Some(spec) = spec_by_name(name).filter(|s| !inline && s.takes_value()) {
                separate_value(spec, i + 1)?;
                i += 1;
            }
        } else if arg.len() > 1 && arg.starts_with('-') {
            for (j, ch) in arg.char_indices().skip(1) {
                let mut buf = [0u8; 4];
                match spec_by_name(ch.encode_utf8(&mut buf)) {
                    Some(s) if s.takes_value() => {
                        if j + ch.len_utf8() == arg.len() {
                            separate_value(s, i + 1)?;
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
        Fail::ArgumentMissing(n) => match spec_by_name(&n) {
            Some(s) => usage_err(s.missing_value()),
            None => usage_err(format!("option '{n}': missing value")),
        },
        Fail::UnexpectedArgument(n) => match spec_by_name(&n) {
            Some(s) => usage_err(format!("{}: takes no value", s.display())),
            None => usage_err(format!("option '{n}': takes no value")),
        },
        // Every option is registered as "multi" and none as required, so getopts cannot
        // return these; map them anyway rather than panic.
        other => usage_err(other.to_string()),
    }
}

impl Typed {
    /// Parses `argv` (without `argv[0]`) into typed values.
    ///
    /// `page_size` is the system page size in bytes (`sysconf(_SC_PAGESIZE)`, passed in so
    /// this stays pure); it bounds `-b`, `--rx-buf-len` and `--dmabuf-size`.
    ///
    /// Errors: [`Error::Usage`] for an unknown option, a missing or bad value, or a
    /// positional argument. The message names the flag and the accepted values.
    fn parse(argv: &[String], page_size: usize) -> Result<Typed> {
        refuse_one_letter_long(argv)?;
        let mut opts = getopts::Options::new();
        for s in SPECS {
            if s.takes_value() {
                opts.optmulti(s.short, s.long, "", s.hint);
            } else {
                opts.optflagmulti(s.short, s.long, "");
            }
        }
        let m = opts.parse(argv).map_err(map_getopts_fail)?;
        if let Some(free) = m.free.first() {
            return Err(usage_err(format!(
                "unexpected argument '{free}' (positional arguments are not accepted; see {PROGRAM} --help)"
            )));
        }
        let last = |key: &str| m.opt_strs(key).pop();
        let flag = |key: &str| m.opt_present(key);

        let mut a = Typed {
            help: flag("h"),
            version: flag("version"),
            listen: flag("l"),
            verbose: flag("V"),
            quiet: flag("quiet"),
            plain: flag("plain"),
            zcrx: flag("zcrx"),
            report: flag("report"),
            c: Config {
                skip_nic_config: flag("n"),
                fail_on_linear: flag("L"),
                zcrx_nodev: flag("zcrx-nodev"),
                verify_restore: flag("verify-restore"),
                ..Config::default()
            },
            ..Typed::default()
        };
        // Help wins over every value check (not over an unknown option, which getopts has
        // already refused).
        if a.help || a.version {
            return Ok(a);
        }
        a.server = last("s");
        a.client = last("c");
        let c = &mut a.c;
        if let Some(t) = last("p") {
            c.port = Some(ranged("-p", "port", &t, 1, 65535, EXPECT_PORT)? as u16);
        }
        if let Some(t) = last("v") {
            let v = dec_u64(&t)
                .filter(|&v| v == 0 || (2..=u64::from(VALIDATE_MAX)).contains(&v))
                .ok_or_else(|| invalid("-v", "validation period", &t, EXPECT_VALIDATE))?;
            c.validate = Some(v as u32).filter(|&v| v != 0);
        }
        if let Some(t) = last("seed") {
            c.seed =
                Some(parse_seed(&t).ok_or_else(|| invalid("--seed", "seed", &t, EXPECT_SEED))?);
        }
        if let Some(t) = last("q") {
            let max = u64::from(MAX_NUM_QUEUES);
            let v = ranged("-q", "number of queues", &t, 1, max, EXPECT_NUM_QUEUES)?;
            c.num_queues = Some(v as u32);
        }
        if let Some(t) = last("t") {
            let max = u64::from(u32::MAX);
            c.start_queue = Some(ranged("-t", "start queue", &t, 0, max, EXPECT_QUEUE)? as u32);
        }
        if let Some(t) = last("f") {
            if t.starts_with('-') {
                return Err(invalid(
                    "-f",
                    "interface name",
                    &t,
                    "an interface name that does not start with '-' (it looks like an option)",
                ));
            }
            if t.is_empty() || t.len() > IFNAME_MAX_LEN || t.contains('\0') {
                return Err(invalid(
                    "-f",
                    "interface name",
                    &t,
                    "1..=15 bytes, the kernel's IFNAMSIZ limit",
                ));
            }
            c.ifname = Some(t);
        }
        if let Some(t) = last("z") {
            let max = u64::from(u32::MAX);
            c.tx_chunk = Some(ranged("-z", "chunk size", &t, 1, max, EXPECT_CHUNK)? as u32);
        }
        if let Some(t) = last("b") {
            c.rx_page_size = Some(pow2_u32("-b", "rx-page-size", &t, page_size)?);
        }
        let zero_one = |flag: &str, t: String| match t.as_str() {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(invalid(flag, "autorelease value", &t, EXPECT_AUTORELEASE)),
        };
        if let Some(t) = last("A") {
            c.autorelease = Some(zero_one("-A", t)?);
        }
        if let Some(t) = last("a") {
            c.bind_autorelease = Some(zero_one("-a", t)?);
        }
        if let Some(t) = last("U") {
            c.unbind = match t.as_str() {
                "0" => UnbindMode::Normal,
                "1" => UnbindMode::BeforeRecv,
                "2" => UnbindMode::AfterRecv,
                _ => return Err(invalid("-U", "unbind mode", &t, EXPECT_UNBIND)),
            };
        }
        let size = |flag: &str, what: &str, t: &str, expect: &str| {
            size_bytes(t).ok_or_else(|| invalid(flag, what, t, expect))
        };
        if let Some(t) = last("send-pattern") {
            c.pattern_bytes = Some(size("--send-pattern", "byte count", &t, EXPECT_SIZE)?);
        }
        if let Some(t) = last("write-size") {
            let v = size_bytes(&t)
                .filter(|&v| (1..=MAX_WRITE_SIZE).contains(&v))
                .ok_or_else(|| {
                    invalid(
                        "--write-size",
                        "write size",
                        &t,
                        &format!("{EXPECT_SIZE}, 1..=64M"),
                    )
                })?;
            c.write_size = Some(v as usize);
        }
        if let Some(t) = last("expect-bytes") {
            c.expect_bytes = Some(size("--expect-bytes", "byte count", &t, EXPECT_SIZE)?);
        }
        if let Some(t) = last("rcvbuf") {
            let v = size_bytes(&t)
                .filter(|&v| v == 0 || (4096..=1 << 30).contains(&v))
                .ok_or_else(|| invalid("--rcvbuf", "receive buffer size", &t, EXPECT_RCVBUF))?;
            c.rcvbuf = Some(v);
        }
        if let Some(t) = last("corrupt-offset") {
            let what = "stream offset";
            c.corrupt_offset = Some(size("--corrupt-offset", what, &t, EXPECT_OFFSET)?);
        }
        if let Some(t) = last("timeout") {
            c.timeout = Some(seconds_opt("--timeout", "timeout", &t)?).filter(|d| !d.is_zero());
        }
        if let Some(t) = last("progress") {
            c.progress = Some(seconds_opt("--progress", "interval", &t)?).filter(|d| !d.is_zero());
        }
        if let Some(t) = last("json") {
            if t.is_empty() {
                return Err(invalid("--json", "file name", &t, "a non-empty path"));
            }
            if t.starts_with('-') {
                return Err(invalid(
                    "--json",
                    "file name",
                    &t,
                    &format!(
                        "a path that does not start with '-' (it looks like an option; \
                              write ./{t} for a file of that name)"
                    ),
                ));
            }
            c.json = Some(PathBuf::from(t));
        }
        if let Some(t) = last("dmabuf-size") {
            let page = page_size.max(1) as u64;
            let v = size_bytes(&t)
                .filter(|&v| v > 0 && v % page == 0)
                .ok_or_else(|| {
                    invalid(
                        "--dmabuf-size",
                        "dmabuf size",
                        &t,
                        &format!("{EXPECT_SIZE}; a non-zero multiple of the page size ({page_size} bytes)"),
                    )
                })?;
            c.dmabuf_size = Some(v);
        }
        if let Some(t) = last("rx-buf-len") {
            c.rx_buf_len = Some(pow2_u32("--rx-buf-len", "rx buffer length", &t, page_size)?);
        }
        Ok(a)
    }
}

// ---------------------------------------------------------------------------------------------
// High layer: mode and configuration.
// ---------------------------------------------------------------------------------------------

/// An address given with `-s` or `-c`: the text as typed and what it parses to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddr {
    /// The argument exactly as typed, for messages.
    pub text: String,
    /// The parsed address (an IPv4-mapped IPv6 address stays [`IpAddr::V6`]).
    pub ip: IpAddr,
}

impl HostAddr {
    /// Parses an IPv4 (`192.0.2.1`), IPv6 (`2001:db8::1`) or IPv4-mapped IPv6
    /// (`::ffff:192.0.2.1`) address with `std::net`. No brackets, ports or zone ids. The
    /// address must be one a TCP socket can listen on, bind to or connect to: multicast and
    /// broadcast addresses are refused (a receiver would wait forever for a connection that
    /// cannot come).
    ///
    /// Errors: [`Error::Usage`] naming `flag`.
    pub fn parse(flag: &str, what: &str, text: &str) -> Result<HostAddr> {
        let ip = text
            .parse::<IpAddr>()
            .map_err(|_| invalid(flag, what, text, EXPECT_ADDR))?;
        if let Some(kind) = not_for_tcp(ip) {
            return Err(invalid(
                flag,
                what,
                text,
                &format!("a unicast address; {kind} addresses cannot carry a TCP connection"),
            ));
        }
        Ok(HostAddr {
            text: text.to_string(),
            ip,
        })
    }

    /// The address for an `AF_INET6` socket: IPv4 becomes `::ffff:a.b.c.d`, as C ncdevmem's
    /// `parse_address` does (its sockets are always `AF_INET6`).
    pub fn socket_ip(&self) -> Ipv6Addr {
        match self.ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        }
    }

    /// The address for an ntuple flow rule: IPv4 (plain or v4-mapped) gives an
    /// [`IpAddr::V4`] (rule `flow-type tcp4`), anything else [`IpAddr::V6`] (`tcp6`).
    pub fn flow_ip(&self) -> IpAddr {
        self.ip.to_canonical()
    }
}

/// Why `ip` cannot be a TCP endpoint, if it cannot: `"multicast"` (224.0.0.0/4, ff00::/8, and
/// their IPv4-mapped forms) or `"broadcast"` (255.255.255.255).
fn not_for_tcp(ip: IpAddr) -> Option<&'static str> {
    let ip = ip.to_canonical();
    if ip.is_multicast() {
        Some("multicast")
    } else if matches!(ip, IpAddr::V4(v4) if v4.is_broadcast()) {
        Some("broadcast")
    } else {
        None
    }
}

impl HostAddr {
    /// `Err(Error::Usage)` when a socket is to use this address and it is link-local IPv6
    /// (`fe80::/10`): a socket needs its zone, which no flag takes, and the kernel refuses it
    /// without one (`EINVAL`).
    pub fn refuse_unscoped_link_local(&self, flag: &str) -> Result<()> {
        if !matches!(self.ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80) {
            return Ok(());
        }
        Err(usage_err(format!(
            "{flag}: link-local IPv6 address '{}' cannot be used: a socket needs its zone \
             (fe80::1%eth0), which {flag} does not take, and the kernel refuses it without \
             one (EINVAL); use a global or unique-local address",
            self.text
        )))
    }
}

/// What the run does. Selection follows C ncdevmem for the devmem modes; the other modes
/// are chosen by their long option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// `-f IF` with neither `-s` nor `-c` (and no `-l`): the devmem self-test of the kernel
    /// contract (C's `run_devmem_tests`).
    #[default]
    Probe,
    /// `-l -f IF -s ADDR -p PORT`: devmem RX server.
    Server,
    /// `-f IF -s ADDR -p PORT` without `-l` (also `-c` without `-l`, which then needs `-s`):
    /// devmem TX client sending stdin; with `--send-pattern BYTES` (and `-v N`) it sends that
    /// many bytes of the pattern instead ([`Config::pattern_bytes`] is then `Some`).
    Client,
    /// `-l --plain -s ADDR -p PORT`: plain-TCP receive (no devmem, no NIC changes).
    PlainServer,
    /// `--send-pattern BYTES -s ADDR -p PORT -v N` without `-f`: plain-TCP sender of the `-v`
    /// pattern.
    PatternSender,
    /// `-l --zcrx -f IF -s ADDR -p PORT`: io_uring zero-copy receive on one RX queue of IF
    /// (with [`Config::zcrx_nodev`]: without a device, `-f` not given).
    ZcrxServer,
    /// `--report -f IF`: read-only capability report (text; JSON with `--json`).
    Report,
}

impl Mode {
    /// True for the modes that need `-f` and a devmem/zcrx-capable queue range.
    pub fn uses_queues(self) -> bool {
        matches!(
            self,
            Mode::Probe | Mode::Server | Mode::Client | Mode::ZcrxServer
        )
    }
}

/// How much the run logs to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verbosity {
    /// `--quiet`: errors and the final verdict only.
    Quiet,
    /// Default: one line per event, no per-frag lines.
    #[default]
    Normal,
    /// `-V`/`--verbose`: also a line per frag, like C ncdevmem.
    Verbose,
}

/// Everything a run needs, resolved from the command line. Invariants after [`parse`]:
/// * `ifname` is `Some` in `Probe`, `Server`, `Client`, `ZcrxServer` (unless `zcrx_nodev`,
///   then it is `None`, and so are `start_queue` and `num_queues`) and `Report`;
/// * `server` and `port` are `Some` in `Server`, `Client`, `PlainServer`, `PatternSender`
///   and `ZcrxServer`;
/// * in the modes where [`Mode::uses_queues`], `start_queue` and `num_queues` are both
///   `Some` or both `None` (then the app picks them as C does: probe `N/2` and `N/2`,
///   otherwise queue `N−1` alone, N = rx + combined channels), and `start + num − 1` fits
///   `u32`;
/// * in `PatternSender`, `validate` and `pattern_bytes` are `Some`;
/// * in `Client`, `pattern_bytes` is `Some` (pattern source) or `None` (stdin); when `Some`,
///   `validate` is `Some` too.
///
/// Options C ncdevmem ignores in a mode (e.g. `-z` on a server, `-t/-q/-b` with `--plain`)
/// are kept here and ignored by the app, so a C command line keeps working and a devmem
/// command line can be rerun as plain TCP by adding `--plain`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The selected mode.
    pub mode: Mode,
    /// `-f`: interface name (the app resolves it to an ifindex).
    pub ifname: Option<String>,
    /// `-s`: server address (server: local bind address and flow-rule dst-ip; client and
    /// pattern sender: address to connect to).
    pub server: Option<HostAddr>,
    /// `-c`: client address (server: flow-rule src-ip with src-port = port; client and
    /// pattern sender: local address to bind, with the same port).
    pub client: Option<HostAddr>,
    /// `-p`: TCP port.
    pub port: Option<u16>,
    /// `-v N`: pattern period `N` in bytes (stream `01 02 … N−1 0A` repeating); `None` for
    /// no validation (absent or `-v 0`). Never set together with [`Config::seed`].
    pub validate: Option<u32>,
    /// `--seed`: senders send, receivers validate the keyed stream of this seed
    /// ([`crate::validate`]); [`Seed::Random`] only for senders (the app draws it).
    pub seed: Option<Seed>,
    /// `-t`: first RX queue index (queue id, not a count).
    pub start_queue: Option<u32>,
    /// `-q`: number of RX queues (a count, ≥ 1).
    pub num_queues: Option<u32>,
    /// `-z`: client: split each send into iovs of at most this many bytes.
    pub tx_chunk: Option<u32>,
    /// `-n`: skip NIC configuration (rings/HDS, RSS, flow rule) and its teardown.
    pub skip_nic_config: bool,
    /// `-L`: fail when a `SCM_DEVMEM_LINEAR` cmsg arrives (header split did not work).
    pub fail_on_linear: bool,
    /// `-b`: rx-page-size in bytes for bind-rx (`NETDEV_A_DMABUF_RX_PAGE_SIZE`); power of two
    /// ≥ page size, fits `u32`. Also applies in probe mode.
    pub rx_page_size: Option<u32>,
    /// `-A`: `SO_DEVMEM_AUTORELEASE` value to set (proposed socket option 85;
    /// `docs/kernel-interface.md#so_devmem_autorelease`); `None` leaves the kernel default.
    pub autorelease: Option<bool>,
    /// `-a`: bind-rx autorelease (`NETDEV_A_DMABUF_AUTORELEASE`, u8; unmerged series
    /// v7–v10, `docs/kernel-harness.md`, "The autorelease series"). `Some(b)` sends `b` when
    /// the kernel's bind-rx policy has the attribute; without it, `Some(false)` runs unchanged (the series' default, which
    /// the harness passes on every run; C ncdevmem of the series would send the attribute
    /// anyway and fail bind-rx with EINVAL "Unknown attribute type") and `Some(true)` is a
    /// skip. `None` sends nothing.
    pub bind_autorelease: Option<bool>,
    /// `-U`: when the devmem server unbinds (series v10's ncdevmem `unbind_mode`); `Normal`
    /// when not given.
    pub unbind: UnbindMode,
    /// `--timeout`: accept, first-byte and idle timeout; `None` = wait forever. Devmem TX
    /// client: the connect window and the longest wait without a zerocopy completion (`None`
    /// = the client's defaults).
    pub timeout: Option<Duration>,
    /// `--json`: where to write the summary as one JSON object.
    pub json: Option<PathBuf>,
    /// `-V`/`--quiet`.
    pub verbosity: Verbosity,
    /// `--progress`: interval between progress lines; `None` = no progress lines.
    pub progress: Option<Duration>,
    /// `--dmabuf-size`: udmabuf size in bytes (multiple of the page size); `None` = the app's
    /// default (16000 pages, as C). With `--zcrx`: the zcrx area size (default 8192 pages).
    pub dmabuf_size: Option<u64>,
    /// `--send-pattern`: number of pattern bytes to send (plain pattern sender, or the devmem
    /// client's pattern source when `-f` is given).
    pub pattern_bytes: Option<u64>,
    /// `--write-size`: plain pattern sender: fixed bytes per `write`, and `TCP_NODELAY` so each
    /// write leaves as its own segment. Devmem client with `--send-pattern`: bytes per piece
    /// copied into the dma-buf and sent (capped at the dma-buf size).
    pub write_size: Option<usize>,
    /// `--expect-bytes`: receivers: the stream must carry exactly this many bytes (a sender
    /// that stopped early is a failure, not a short success).
    pub expect_bytes: Option<u64>,
    /// `--rcvbuf`: receivers: `SO_RCVBUF` in bytes before `listen` (`Some(0)`: leave the
    /// kernel's default). `None`: devmem and zcrx servers size it from the binding
    /// ([`crate::rcvbuf`]), the plain receiver leaves the kernel's default.
    pub rcvbuf: Option<u64>,
    /// `--corrupt-offset`: test aid for the validator: the sender flips every bit of the byte
    /// at this stream offset (bytes from the start of the connection).
    pub corrupt_offset: Option<u64>,
    /// `--rx-buf-len`: zcrx `rx_buf_len` in bytes (`io_uring_zcrx_ifq_reg.rx_buf_len`, 7.0+);
    /// the zcrx area is then backed by 2 MiB hugepages.
    pub rx_buf_len: Option<u32>,
    /// `--zcrx-nodev` (test aid): register the zcrx instance with `ZCRX_REG_NODEV` (no net
    /// device; the kernel copies received data into the area), so a real zcrx receive runs over
    /// loopback on kernels that have it. No NIC setup; `-f`, `-t`, `-q` are refused.
    pub zcrx_nodev: bool,
    /// `--verify-restore`: after unwinding, re-read the NIC state and compare it with the
    /// snapshot taken before the run; any difference fails the run (exit 1).
    pub verify_restore: bool,
}

/// What [`parse`] asks the caller to do.
// `Run` is much larger than `Help`; one value per process, so no boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Print this text to stdout and exit 0 (`--help`: the usage; `--version`: the version).
    Help(String),
    /// Run with this configuration.
    Run(Config),
}

fn require<T>(v: Option<T>, msg: impl FnOnce() -> String) -> Result<T> {
    v.ok_or_else(|| usage_err(msg()))
}

/// Picks the mode and checks which options it needs and allows.
///
/// Mode selection, in order:
/// 1. at most one of `--send-pattern`, `--plain`, `--zcrx`, `--report`;
/// 2. `--send-pattern` (not with `-l`; needs `-s`, `-p`, `-v N`) → with `-f IF`,
///    [`Mode::Client`] sending the pattern through devmem TX; without `-f`,
///    [`Mode::PatternSender`] (plain TCP);
/// 3. `--plain` → [`Mode::PlainServer`] (needs `-l`, `-s`, `-p`);
/// 4. `--zcrx` → [`Mode::ZcrxServer`] (needs `-l`, `-f`, `-s`, `-p`; with `--zcrx-nodev`
///    no `-f`, `-t` or `-q`);
/// 5. `--report` → [`Mode::Report`] (needs `-f`; not with `-l`, `-s`, `-c`);
/// 6. otherwise C's rules: `-f` required ("missing -f argument"); neither `-s` nor `-c`
///    and no `-l` → [`Mode::Probe`]; `-l` → [`Mode::Server`]; else [`Mode::Client`].
///    Server and client need `-s` and `-p`.
///
/// Differs from C: `-l` without `-s` is refused (C would run the probe, which changes the
/// NIC, and ignore `-l`).
///
/// Errors: [`Error::Usage`] naming the flag.
fn resolve(a: Typed) -> Result<Config> {
    if a.verbose && a.quiet {
        return Err(usage_err("-V/--verbose and --quiet exclude each other"));
    }
    let mode = select_mode(&a)?;
    check_queue_range(&a, mode)?;
    check_sender_flags(&a)?;
    check_receiver_flags(&a, mode)?;
    check_seed(&a, mode)?;
    check_zcrx_flags(&a, mode)?;
    check_verify_restore(&a, mode)?;
    let (server, client) = resolve_addrs(&a, mode)?;
    let verbosity = if a.verbose {
        Verbosity::Verbose
    } else if a.quiet {
        Verbosity::Quiet
    } else {
        Verbosity::Normal
    };
    Ok(Config {
        mode,
        server,
        client,
        verbosity,
        ..a.c
    })
}

fn need_s(what: &str) -> String {
    format!("-s: missing -s ADDR ({what})")
}

fn need_p(what: &str) -> String {
    format!("-p: missing -p PORT ({what}; expected {EXPECT_PORT})")
}

fn need_f(what: &str) -> String {
    format!("-f: missing -f argument (the interface to use; required for {what})")
}

/// True for the modes that receive (`-l`).
fn is_receiver(mode: Mode) -> bool {
    matches!(mode, Mode::Server | Mode::PlainServer | Mode::ZcrxServer)
}

/// Step 1 of [`resolve`]: at most one mode selector, then that mode's own rules.
fn select_mode(a: &Typed) -> Result<Mode> {
    let selectors: Vec<&str> = [
        (a.c.pattern_bytes.is_some(), "--send-pattern"),
        (a.plain, "--plain"),
        (a.zcrx, "--zcrx"),
        (a.report, "--report"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    if selectors.len() > 1 {
        return Err(usage_err(format!(
            "{}: these select different modes; give at most one",
            selectors.join(", ")
        )));
    }
    if a.c.pattern_bytes.is_some() {
        pattern_sender_mode(a)
    } else if a.plain {
        plain_server_mode(a)
    } else if a.zcrx {
        zcrx_server_mode(a)
    } else if a.report {
        report_mode(a)
    } else {
        devmem_mode(a)
    }
}

/// `--send-pattern`: [`Mode::Client`] (devmem TX) with `-f`, else [`Mode::PatternSender`].
fn pattern_sender_mode(a: &Typed) -> Result<Mode> {
    if a.listen {
        return Err(usage_err(
            "--send-pattern: sends to -s/-p and cannot be combined with -l",
        ));
    }
    require(a.server.as_ref(), || {
        need_s("the receiver --send-pattern connects to")
    })?;
    require(a.c.port, || need_p("the receiver's port"))?;
    if a.c.seed.is_none() {
        require(a.c.validate, || {
            format!(
                "--send-pattern: missing -v N (the pattern period to send; expected \
                 2..={VALIDATE_MAX}) or --seed SEED (the keyed stream)"
            )
        })?;
    }
    // -f selects devmem TX, as in C's client mode; the pattern replaces stdin.
    Ok(if a.c.ifname.is_some() {
        Mode::Client
    } else {
        Mode::PatternSender
    })
}

/// `--plain`: [`Mode::PlainServer`].
fn plain_server_mode(a: &Typed) -> Result<Mode> {
    if !a.listen {
        return Err(usage_err(
            "--plain: plain-TCP receive needs -l (to send a pattern, use --send-pattern)",
        ));
    }
    require(a.server.as_ref(), || {
        need_s("local address --plain listens on")
    })?;
    require(a.c.port, || need_p("port to listen on"))?;
    Ok(Mode::PlainServer)
}

/// `--zcrx`: [`Mode::ZcrxServer`], on a device queue or (`--zcrx-nodev`) without one.
fn zcrx_server_mode(a: &Typed) -> Result<Mode> {
    if !a.listen {
        return Err(usage_err("--zcrx: zero-copy receive needs -l"));
    }
    if a.c.zcrx_nodev {
        if a.c.ifname.is_some() || a.c.start_queue.is_some() || a.c.num_queues.is_some() {
            return Err(usage_err(
                "--zcrx-nodev: registers without a device; -f, -t and -q do not apply",
            ));
        }
    } else {
        require(a.c.ifname.as_ref(), || need_f("--zcrx"))?;
    }
    require(a.server.as_ref(), || {
        need_s("local address --zcrx listens on")
    })?;
    require(a.c.port, || need_p("port to listen on"))?;
    Ok(Mode::ZcrxServer)
}

/// `--report`: [`Mode::Report`].
fn report_mode(a: &Typed) -> Result<Mode> {
    if a.listen || a.server.is_some() || a.client.is_some() {
        return Err(usage_err(
            "--report: the capability report takes only -f IF (not -l, -s or -c)",
        ));
    }
    require(a.c.ifname.as_ref(), || need_f("--report"))?;
    if a.quiet && a.c.json.is_none() {
        return Err(usage_err(
            "--report: with --quiet the report is only written to --json FILE, so give \
             --json (or drop --quiet)",
        ));
    }
    Ok(Mode::Report)
}

/// C ncdevmem's own modes: [`Mode::Server`] (`-l`), [`Mode::Client`] (`-s`/`-c`), else
/// [`Mode::Probe`]; all need `-f`.
fn devmem_mode(a: &Typed) -> Result<Mode> {
    require(a.c.ifname.as_ref(), || {
        need_f("probe, server and client modes; --plain and --send-pattern do not need it")
    })?;
    if a.listen {
        require(a.server.as_ref(), || {
            need_s("server mode: the local address to listen on")
        })?;
        require(a.c.port, || need_p("server mode"))?;
        Ok(Mode::Server)
    } else if a.server.is_some() || a.client.is_some() {
        require(a.server.as_ref(), || {
            need_s("client mode: the address to connect to")
        })?;
        require(a.c.port, || need_p("client mode"))?;
        Ok(Mode::Client)
    } else {
        Ok(Mode::Probe)
    }
}

/// `-t`/`-q`: both or neither, and the range inside `u32` queue ids.
fn check_queue_range(a: &Typed, mode: Mode) -> Result<()> {
    if !mode.uses_queues() {
        return Ok(());
    }
    match (a.c.start_queue, a.c.num_queues) {
        (Some(_), None) | (None, Some(_)) => Err(usage_err(
            "-t/-q: Both -t and -q are required (or neither, to let ncdevmem-rs pick the queues)",
        )),
        (Some(start), Some(num)) if start.checked_add(num - 1).is_none() => {
            Err(usage_err(format!(
                "-t/-q: queues {start}..{start}+{num} run past the largest queue id {}",
                u32::MAX
            )))
        }
        _ => Ok(()),
    }
}

/// The pattern sender's own flags (`--write-size`, `--corrupt-offset`), plain or through
/// devmem TX (`-f`).
fn check_sender_flags(a: &Typed) -> Result<()> {
    let sends_pattern = a.c.pattern_bytes.is_some();
    if a.c.write_size.is_some() && !sends_pattern {
        return Err(usage_err("--write-size: only applies to --send-pattern"));
    }
    if a.c.corrupt_offset.is_some() && !sends_pattern {
        return Err(usage_err(
            "--corrupt-offset: only applies to --send-pattern",
        ));
    }
    if let (Some(off), Some(total)) = (a.c.corrupt_offset, a.c.pattern_bytes) {
        if off >= total {
            return Err(usage_err(format!(
                "--corrupt-offset: invalid stream offset '{off}' (expected 0..{total}, \
                 inside the --send-pattern stream)"
            )));
        }
    }
    Ok(())
}

/// The receivers' own flags (`--expect-bytes`, `--rcvbuf`).
fn check_receiver_flags(a: &Typed, mode: Mode) -> Result<()> {
    if a.c.expect_bytes.is_some() && !is_receiver(mode) {
        return Err(usage_err("--expect-bytes: only applies to receivers (-l)"));
    }
    if a.c.rcvbuf.is_some() && !is_receiver(mode) {
        return Err(usage_err("--rcvbuf: only applies to receivers (-l)"));
    }
    Ok(())
}

/// `--seed`: instead of `-v N`, on a sender or a receiver; only a sender draws `random`.
fn check_seed(a: &Typed, mode: Mode) -> Result<()> {
    let Some(seed) = a.c.seed else {
        return Ok(());
    };
    if a.c.validate.is_some() {
        return Err(usage_err(
            "--seed: selects the keyed stream instead of the -v N pattern; give one of them",
        ));
    }
    let receiver = is_receiver(mode);
    if !receiver && a.c.pattern_bytes.is_none() {
        return Err(usage_err(
            "--seed: only applies to --send-pattern and to receivers (-l)",
        ));
    }
    if receiver && seed == Seed::Random {
        return Err(usage_err(
            "--seed random: only a sender draws a seed; give the receiver the seed the \
             sender printed",
        ));
    }
    Ok(())
}

/// `--zcrx-nodev` and `--rx-buf-len`: only with `--zcrx`.
fn check_zcrx_flags(a: &Typed, mode: Mode) -> Result<()> {
    if a.c.zcrx_nodev && mode != Mode::ZcrxServer {
        return Err(usage_err("--zcrx-nodev: only applies to --zcrx"));
    }
    if a.c.zcrx_nodev && a.c.verify_restore {
        return Err(usage_err(
            "--verify-restore: --zcrx-nodev changes no NIC, so there is nothing to verify",
        ));
    }
    if a.c.rx_buf_len.is_some() && mode != Mode::ZcrxServer {
        return Err(usage_err("--rx-buf-len: only applies to --zcrx"));
    }
    Ok(())
}

/// `--verify-restore`: only where the run changes the NIC.
fn check_verify_restore(a: &Typed, mode: Mode) -> Result<()> {
    if !a.c.verify_restore {
        return Ok(());
    }
    if !matches!(mode, Mode::Probe | Mode::Server | Mode::ZcrxServer) {
        return Err(usage_err(
            "--verify-restore: only applies to modes that change the NIC (probe, -l, --zcrx)",
        ));
    }
    if a.c.skip_nic_config && mode != Mode::Probe {
        return Err(usage_err(
            "--verify-restore: -n skips NIC configuration, so there is nothing to verify",
        ));
    }
    Ok(())
}

/// `-s` and `-c` parsed: no unscoped link-local address where a socket uses it, and both of
/// one family.
fn resolve_addrs(a: &Typed, mode: Mode) -> Result<(Option<HostAddr>, Option<HostAddr>)> {
    let server = a
        .server
        .as_deref()
        .map(|t| HostAddr::parse("-s", "server address", t))
        .transpose()?;
    let client = a
        .client
        .as_deref()
        .map(|t| HostAddr::parse("-c", "client address", t))
        .transpose()?;
    // A socket bound or connected to a link-local IPv6 address needs its zone (the
    // interface), which these flags cannot carry: the kernel answers EINVAL. -s is always
    // a socket address; -c only where the sender binds it (a server puts it in the flow
    // rule, where it needs no zone).
    let binds_client = matches!(mode, Mode::Client | Mode::PatternSender);
    for (flag, addr, used) in [("-s", &server, true), ("-c", &client, binds_client)] {
        if let Some(h) = addr.as_ref().filter(|_| used) {
            h.refuse_unscoped_link_local(flag)?;
        }
    }
    if let (Some(s), Some(c)) = (&server, &client) {
        // Sockets are AF_INET6 with v4-mapped IPv4, so both must be IPv4 or both IPv6.
        let v4 = |h: &HostAddr| h.flow_ip().is_ipv4();
        if v4(s) != v4(c) {
            return Err(usage_err(format!(
                "-c: client address '{}' is not of the same family as -s '{}' \
                 (both IPv4 or both IPv6)",
                c.text, s.text
            )));
        }
    }
    Ok((server, client))
}

/// Parses a command line (`argv` without `argv[0]`): [`Command::Help`] for `-h`/`--help`,
/// otherwise the resolved [`Config`].
///
/// `page_size` is the system page size in bytes (`crate::sys::page_size()`), a parameter so
/// the parser stays free of syscalls.
///
/// Errors: [`Error::Usage`] (exit 2) whose message names the flag and the accepted values.
pub fn parse(argv: &[String], page_size: usize) -> Result<Command> {
    let args = Typed::parse(argv, page_size)?;
    if args.help {
        return Ok(Command::Help(usage()));
    }
    if args.version {
        return Ok(Command::Help(format!(
            "{PROGRAM} {}\n",
            env!("CARGO_PKG_VERSION")
        )));
    }
    Ok(Command::Run(resolve(args)?))
}

/// The full `--help` text.
pub fn usage() -> String {
    format!(
        "\
Usage:
  {p} -f IF [-t N -q N] [-b BYTES] [-n]                     probe (devmem self-test)
  {p} -l -f IF -s ADDR -p PORT [-c ADDR] [-v N] [-L] ...    devmem RX server
  {p} -f IF -s ADDR -p PORT [-c ADDR] [-z BYTES] ...        devmem TX client (sends stdin)
  {p} -f IF -s ADDR -p PORT --send-pattern BYTES -v N ...   devmem TX client (sends a pattern)
  {p} -l --zcrx -f IF -s ADDR -p PORT [-v N] [-t N -q 1] ... io_uring zcrx RX server
  {p} -l --plain -s ADDR -p PORT [-v N] ...                 plain-TCP RX server
  {p} --report -f IF [--json FILE]                          capability report (read-only)
  {p} --send-pattern BYTES -s ADDR -p PORT -v N ...         plain-TCP pattern sender
  {p} -h | --help | --version

A port of the kernel selftest ncdevmem (devmem TCP). The short options are C ncdevmem's, with
the same meanings; ncdevmem-rs's own features have long options.

Modes (as C ncdevmem picks them):
  -f IF and neither -s nor -c    probe: bind with an empty queue list must fail, bind with
                                 header split off must fail, bind with header split on must
                                 succeed, shrinking channels below a bound queue must fail;
                                 everything is restored. Exit 0 means devmem works on IF.
  -l                             devmem RX server: configure the NIC (unless -n), bind-rx,
                                 accept one connection, receive with MSG_SOCK_DEVMEM, validate
                                 (-v N) or print the payload to stdout, release tokens, undo.
  -s without -l                  devmem TX client: bind-tx, connect, send each line of stdin
                                 from the dmabuf with MSG_ZEROCOPY, wait for the zerocopy
                                 completions (at most --timeout, default 2 s, without any).
                                 With --send-pattern BYTES -v N: send the pattern instead.

Options from C ncdevmem:
  -l              listen: RX server mode
  -s ADDR         server address. Server: local address and flow-rule dst-ip. Client:
                  address to connect to. IPv4, IPv6 or IPv4-mapped IPv6 (::ffff:a.b.c.d)
  -c ADDR         client address. Server: flow-rule src-ip (src-port = PORT, a 5-tuple
                  rule). Client: bind to ADDR and PORT before connecting
  -p PORT         TCP port, 1..=65535 (required for server and client)
  -v N            validate received bytes against 01 02 .. N-1 0A repeating; N is 0 (no
                  validation: print the payload to stdout) or 2..=256
  -t N            first RX queue to bind (a queue index)
  -q N            number of RX queues to bind (>= 1). Give both -t and -q or neither;
                  with neither, probe uses the upper half of the queues and server/client
                  the last queue
  -f IF           interface (required for probe, server and client: \"missing -f argument\")
  -z BYTES        client: split each send into iovs of at most BYTES bytes (>= 1)
  -n              skip all NIC configuration and its undo (ring/HDS, RSS, flow rule)
  -L, --fail-on-linear
                  server: fail if any SCM_DEVMEM_LINEAR (non-header-split) data arrives
  -b BYTES        rx-page-size for bind-rx: a power of two >= the page size that fits in
                  32 bits (the udmabuf then uses 2 MiB hugepages); also applies to probe
  -A 0|1          set SO_DEVMEM_AUTORELEASE (proposed socket option; a kernel without it
                  makes the run skip)
  -a 0|1          server: bind-rx autorelease attribute (autorelease series v7-v10): 1 =
                  tokens still held at close are released then, 0 = they stay pinned until
                  unbind. Sent only to a kernel whose bind-rx has it; without it, -a 0 runs
                  as before and -a 1 skips
  -U 0|1|2        server: 0 unbind at the end (default); 1 unbind once data is queued,
                  before the first recvmsg (ENODEV from recvmsg then ends the run cleanly:
                  binding gone); 2 unbind after the first recvmsg (the socket must go on
                  receiving)

Options of ncdevmem-rs:
  --plain         with -l: receive over plain TCP (no devmem, no NIC changes, -f not needed);
                  checks the TCP path and the pattern. Devmem-only options are accepted and
                  ignored, so a devmem command line can be rerun by adding --plain
  --send-pattern BYTES
                  connect to -s/-p (binding to -c and PORT if given) and send BYTES bytes of
                  the -v N pattern (or of the --seed stream; one of them required), then
                  close. Over plain TCP without -f; with -f IF through devmem TX (the client
                  mode, with the pattern instead of stdin)
  --seed SEED     senders (--send-pattern) send, receivers (-l) validate the keyed stream
                  instead of the -v pattern: each flow has its own key, and the 8 bytes at
                  stream offsets 8i..8i+7 are, little-endian, SplitMix64's output i from
                  state 0 XOR that key (docs/validation.md). Every 8-byte word names its
                  position and no other seed or flow passes for this one, so no misplaced,
                  stale or duplicated data passes (a -v pattern misses data moved by a
                  multiple of its period), and a bad frag is diagnosed: where its bytes
                  belong, and whether they are stale, a duplicate, reordered, shifted,
                  another flow's, of no stream of this seed or corrupt. SEED: 0..=2^64-1,
                  decimal or 0x hex; senders also take 'random' (drawn and printed, for a
                  replay). Not with -v N
  --write-size BYTES
                  with --send-pattern: write exactly BYTES per write and set TCP_NODELAY
                  (segment-size sweeps); with -f: bytes per piece copied into the dmabuf
  --expect-bytes BYTES
                  with -l: fail unless the peer sent exactly BYTES (catches a sender that
                  stopped early; without it, a -v receiver still fails on an empty stream)
  --rcvbuf BYTES  with -l: the socket's receive buffer (SO_RCVBUF, set before listen; the
                  kernel doubles it). Default for devmem and zcrx: sized from the binding
                  (buffer count x min(buffer size, MSS) / 4), so the TCP window cannot ask
                  the NIC for more buffers than the dmabuf has (a small dmabuf would stall);
                  left alone when the kernel's tcp_rmem max already fits. 0 = the kernel's
                  default
  --corrupt-offset OFFSET
                  with --send-pattern: flip the byte at stream offset OFFSET (a test aid: the
                  receiver must report exactly that offset and exit 1)
  --timeout SECS  give up on accept, first byte or an idle connection after SECS seconds
                  (fractions allowed, e.g. 0.5; 0 = wait forever, the receivers' default).
                  Senders (devmem TX client, --send-pattern): the connect retry window
                  (default 5 s); devmem TX client: also the longest wait without a
                  zerocopy completion (default 2 s); there 0 means these defaults
  --json FILE     also write the final summary to FILE as one JSON object
  -V, --verbose   log every frag (as C ncdevmem does)
  --quiet         log only errors and the verdict (no capability report on stdout; with
                  --report the report then goes only to --json FILE)
  --progress SECS print a progress line every SECS seconds (0 = never, the default)
  --dmabuf-size BYTES
                  udmabuf size: a multiple of the page size (default 16000 pages); with
                  --zcrx the zcrx area size (default 8192 pages)
  --zcrx          with -l: receive through io_uring zero-copy receive (zcrx) instead of
                  devmem: NIC setup as the devmem server (unless -n), one zcrx ifq on
                  queue -t (one queue: -q 1; default the last RX queue), multishot RECV_ZC,
                  validate (-v N) or print the payload, return buffers through the refill
                  ring. The area is --dmabuf-size bytes (default 8192 pages)
  --rx-buf-len BYTES
                  with --zcrx: rx buffer length, a power of two >= the page size and at
                  most 2 MiB (the area then uses 2 MiB hugepages; kernel 7.0+)
  --zcrx-nodev    with --zcrx, a test aid: register without a device (ZCRX_REG_NODEV, newer
                  kernels; the kernel copies into the area), no NIC setup, no -f/-t/-q, so
                  a real zcrx receive runs over loopback
  --report        with -f only: print the device's capability report (read-only; with
                  --json also as JSON)
  --verify-restore
                  after undoing NIC changes, compare the NIC with its state before the run
                  (rings, channels, RSS table, ntuple feature and rules); a difference is exit 1
  -h, --help      print this text and exit 0

Values:
  Numbers are decimal digits only (no sign, no 0x except --seed; leading zeros are decimal).
  Every receiver and sender prints the CRC-32 (as zlib.crc32) of the stream in its summary
  and --json, validated or not, so any two tools can be compared end to end. BYTES values
  of --send-pattern, --write-size and --dmabuf-size accept a suffix K, M or G (KiB, MiB,
  GiB), e.g. 1G. A repeated option keeps its last value. Short options bundle (-ls ::1) and
  take values attached or separate (-q4, -q 4). A separate value spelled like one of the
  options (--json --verify-restore) is refused as a forgotten value, and -f and --json values
  never start with '-' (write ./-name for such a file). -s and -c take unicast addresses
  (no link-local IPv6 where a socket uses them: it needs a zone, which they do not take).

Differences from C ncdevmem:
  Unknown options and positional arguments are refused with exit 2 (C prints \"unknown
  option\" and continues). Bad values are refused with exit 2 before anything is changed.
  -l without -s is refused (C ignores -l then and runs the probe).

Exit status:
  0 success, 1 test failure, 2 usage error, 4 skip (the environment lacks a capability).
",
        p = PROGRAM
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn usage_msg(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn decimal_numbers_only() {
        assert_eq!(dec_u64("0"), Some(0));
        assert_eq!(dec_u64("0080"), Some(80));
        assert_eq!(dec_u64("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "+1",
            "-1",
            " 1",
            "1 ",
            "0x10",
            "7x",
            "1e3",
            "18446744073709551616",
        ] {
            assert_eq!(dec_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(size_bytes("0"), Some(0));
        assert_eq!(size_bytes("1K"), Some(1024));
        assert_eq!(size_bytes("4k"), Some(4096));
        assert_eq!(size_bytes("2M"), Some(2 << 20));
        assert_eq!(size_bytes("1G"), Some(1 << 30));
        assert_eq!(size_bytes("16000"), Some(16000));
        for bad in ["", "K", "1KB", "1T", "1.5G", "-1K", "17179869184G"] {
            assert_eq!(size_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn seconds_are_plain_decimals() {
        assert_eq!(seconds("0"), Some(Duration::ZERO));
        assert_eq!(seconds("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(seconds("2"), Some(Duration::from_secs(2)));
        assert_eq!(seconds("0.000"), Some(Duration::ZERO));
        for bad in [
            "",
            "-1",
            "+1",
            "nan",
            "NaN",
            "inf",
            "1e3",
            ".5",
            "1.",
            "1.2.3",
            "0.0000000001",
            "1e400",
            "99999999999999999999999",
        ] {
            assert_eq!(seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pow2_bounds_follow_the_page_size() {
        assert_eq!(pow2_u32("-b", "x", "4096", 4096).unwrap(), 4096);
        assert_eq!(pow2_u32("-b", "x", "2147483648", 4096).unwrap(), 1 << 31);
        assert_eq!(pow2_u32("-b", "x", "16384", 16384).unwrap(), 16384);
        for bad in ["2048", "4097", "12288", "0", "4294967296", "4294971392"] {
            assert!(pow2_u32("-b", "x", bad, 4096).is_err(), "{bad}");
        }
        // A 16 KiB-page system refuses 4096 and 8192.
        assert!(pow2_u32("-b", "x", "8192", 16384).is_err());
    }

    #[test]
    fn one_letter_long_names_are_unknown() {
        let m = usage_msg(parse(&argv("--p 80 -f eth0"), 4096));
        assert!(m.contains("unknown option '--p'"), "{m}");
        let m = usage_msg(parse(&argv("--V -f eth0"), 4096));
        assert!(m.contains("unknown option '--V'"), "{m}");
        // As a value, "--x" is just text: here an invalid address.
        let m = usage_msg(parse(&argv("-f eth0 -s --x -p 1"), 4096));
        assert!(m.starts_with("-s: invalid server address '--x'"), "{m}");
        // After "--" everything is positional, and refused as such.
        let m = usage_msg(parse(&argv("-f eth0 -- --p"), 4096));
        assert!(m.starts_with("unexpected argument '--p'"), "{m}");
    }

    #[test]
    fn host_addr_maps_for_sockets_and_rules() {
        let v4 = HostAddr::parse("-s", "server address", "192.0.2.1").unwrap();
        assert_eq!(
            v4.socket_ip(),
            "::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(v4.flow_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
        let mapped = HostAddr::parse("-s", "server address", "::ffff:192.0.2.1").unwrap();
        assert_eq!(mapped.text, "::ffff:192.0.2.1");
        assert!(mapped.ip.is_ipv6());
        assert_eq!(mapped.flow_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
        let v6 = HostAddr::parse("-s", "server address", "2001:db8::1").unwrap();
        assert_eq!(v6.flow_ip(), v6.ip);
        assert_eq!(IpAddr::V6(v6.socket_ip()), v6.ip);
        for bad in ["[::1]", "::1%lo", "1.2.3", "localhost", "", "1.2.3.4:80"] {
            assert!(
                HostAddr::parse("-s", "server address", bad).is_err(),
                "{bad:?}"
            );
        }
    }

    /// The address table sys::socket's parse_addr had (before it was removed as a copy of
    /// HostAddr): the socket address, and IPv4 (tcp4 rules) for v4 and v4-mapped input only.
    #[test]
    fn host_addr_table() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("192.0.2.1", "::ffff:192.0.2.1", Some("192.0.2.1")),
            ("127.0.0.1", "::ffff:127.0.0.1", Some("127.0.0.1")),
            ("0.0.0.0", "::ffff:0.0.0.0", Some("0.0.0.0")),
            (
                "::ffff:198.51.100.7",
                "::ffff:198.51.100.7",
                Some("198.51.100.7"),
            ),
            (
                "::ffff:c633:6407",
                "::ffff:198.51.100.7",
                Some("198.51.100.7"),
            ),
            ("2001:db8::1", "2001:db8::1", None),
            ("::1", "::1", None),
            ("::", "::", None),
            // v4-compatible (deprecated) is not v4-mapped: stays IPv6.
            ("::192.0.2.1", "::192.0.2.1", None),
        ];
        for (input, ip, v4) in cases {
            let a = HostAddr::parse("-s", "server address", input)
                .unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(a.socket_ip(), ip.parse::<Ipv6Addr>().unwrap(), "{input}");
            let flow_v4 = match a.flow_ip() {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            };
            assert_eq!(flow_v4, v4.map(|s| s.parse().unwrap()), "{input}");
        }
        for bad in [
            "",
            "localhost",
            "256.1.1.1",
            "1.2.3",
            "01.2.3.4",
            "[::1]",
            "::1%lo",
            "1.2.3.4:80",
            " 1.2.3.4",
            "::ffff:1.2.3.4.5",
            "224.0.0.1",
            "ff02::1",
            "::ffff:239.1.2.3",
            "255.255.255.255",
        ] {
            let e = HostAddr::parse("-c", "client address", bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
            let msg = e.to_string();
            assert!(
                msg.starts_with("-c: invalid client address"),
                "{bad:?}: {msg}"
            );
            assert!(msg.contains(&format!("'{bad}'")), "{bad:?}: {msg}");
        }
    }

    /// An option whose separate value is another of our options is refused (the value was
    /// forgotten: `--json --verify-restore` wrote a file named `--verify-restore`), for every
    /// option that takes a value and every option spelling; free-text values (`-f`, `--json`)
    /// never start with '-'; negative numbers keep their range message (issue 14 item 15).
    #[test]
    fn a_forgotten_value_is_never_taken_from_the_next_option() {
        for (line, want) in [
            (
                "-f lo --json --verify-restore",
                "--json: missing value FILE (expected a file path): '--verify-restore' is an option",
            ),
            (
                "-f -l -s ::1 -p 1",
                "-f: missing value IFNAME (expected an interface name of 1..=15 bytes): '-l' is an option",
            ),
            (
                "-l --plain -s ::1 -p -v 7",
                "-p: missing value PORT (expected 1..=65535): '-v' is an option",
            ),
            (
                "-l --plain -s --timeout=1 -p 1",
                "-s: missing value ADDR (expected an IPv4, IPv6 or IPv4-mapped IPv6 address): '--timeout=1' is an option",
            ),
            (
                "-lf -ls -s ::1 -p 1",
                "-f: missing value IFNAME (expected an interface name of 1..=15 bytes): '-ls' is an option",
            ),
        ] {
            assert_eq!(usage_msg(parse(&argv(line), 4096)), want, "{line}");
        }
        for spec in SPECS.iter().filter(|s| s.takes_value()) {
            for other in SPECS {
                for name in [
                    (!other.short.is_empty()).then(|| format!("-{}", other.short)),
                    (!other.long.is_empty()).then(|| format!("--{}", other.long)),
                ]
                .into_iter()
                .flatten()
                {
                    let line = format!("-f lo {} {name} 1", spec.display());
                    let m = usage_msg(parse(&argv(&line), 4096));
                    assert!(
                        m.ends_with(&format!("'{name}' is an option")),
                        "{line}: {m}"
                    );
                    assert!(m.starts_with(&spec.display()), "{line}: {m}");
                }
            }
        }
        for (line, want) in [
            (
                "-f lo --json=--x",
                "--json: invalid file name '--x' (expected a path that does not start with '-'",
            ),
            ("-f -x", "-f: invalid interface name '-x'"),
            ("-f-x", "-f: invalid interface name '-x'"),
            (
                "-l --plain -s ::1 -p -1 -v 7",
                "-p: invalid port '-1' (expected 1..=65535)",
            ),
            (
                "-l --plain -s ::1 -p 1 --timeout -1",
                "--timeout: invalid timeout '-1'",
            ),
        ] {
            let m = usage_msg(parse(&argv(line), 4096));
            assert!(m.starts_with(want), "{line}: {m}");
        }
        // A value that only looks odd is still a value.
        let Command::Run(c) = parse(&argv("-f lo --json ./--verify-restore"), 4096).unwrap() else {
            panic!("not run");
        };
        assert_eq!(c.json, Some(PathBuf::from("./--verify-restore")));
    }

    /// Addresses no TCP connection can use are usage errors for -s and -c, in every spelling
    /// (issue 14 item 14).
    #[test]
    fn multicast_and_broadcast_addresses_are_refused() {
        for (bad, kind) in [
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("ff02::1", "multicast"),
            ("ff05::2", "multicast"),
            ("::ffff:224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
        ] {
            for (line, flag) in [
                (format!("-l --plain -s {bad} -p 5201 -v 7"), "-s"),
                (format!("--send-pattern 1M -s {bad} -p 5201 -v 7"), "-s"),
                (format!("-l -f eth0 -s 192.0.2.1 -c {bad} -p 5201"), "-c"),
            ] {
                if flag == "-c" && bad.contains(':') {
                    continue; // a v6 client with a v4 server is refused for that already
                }
                let m = usage_msg(parse(&argv(&line), 4096));
                assert!(m.starts_with(&format!("{flag}: invalid ")), "{line}: {m}");
                assert!(
                    m.contains(&format!("'{bad}' (expected a unicast address; {kind}")),
                    "{line}: {m}"
                );
            }
        }
        for good in ["192.0.2.1", "::1", "223.255.255.255", "0.0.0.0", "::"] {
            assert!(
                HostAddr::parse("-s", "server address", good).is_ok(),
                "{good}"
            );
        }
    }

    /// A link-local IPv6 address without a zone (none of the flags takes one) was refused only
    /// by the kernel, after setup: `bind([fe80::1]:5201): EINVAL`, exit 1. It is a usage error
    /// wherever a socket uses it; a server's -c only goes into the flow rule and stays allowed.
    #[test]
    fn link_local_ipv6_socket_addresses_are_usage_errors() {
        for (line, flag) in [
            ("-l --plain -s fe80::1 -p 5201", "-s"),
            ("-l -f eth0 -s febf::1 -p 5201", "-s"),
            ("-l --zcrx -f eth0 -s fe80::1 -p 5201", "-s"),
            ("--send-pattern 1K -s fe80::1 -p 5201 -v 7", "-s"),
            (
                "--send-pattern 1K -s 2001:db8::1 -c fe80::2 -p 5201 -v 7",
                "-c",
            ),
            ("-f eth0 -s 2001:db8::1 -c fe80::2 -p 5201", "-c"),
        ] {
            let m = usage_msg(parse(&argv(line), 4096));
            assert!(
                m.starts_with(&format!("{flag}: link-local IPv6 address 'fe")),
                "{line}: {m}"
            );
            assert!(m.contains("zone"), "{line}: {m}");
            assert!(!m.contains("  "), "one space between words: {line}: {m}");
        }
        assert_eq!(
            usage_msg(parse(&argv("-l --plain -s fe80::1 -p 5201"), 4096)),
            "-s: link-local IPv6 address 'fe80::1' cannot be used: a socket needs its zone \
             (fe80::1%eth0), which -s does not take, and the kernel refuses it without one \
             (EINVAL); use a global or unique-local address"
        );
        for line in [
            "-l -f eth0 -s 2001:db8::1 -c fe80::2 -p 5201",
            "-l --plain -s fec0::1 -p 5201",
            "-l --plain -s 169.254.1.1 -p 5201",
        ] {
            assert!(parse(&argv(line), 4096).is_ok(), "{line}");
        }
    }

    #[test]
    fn help_wins_over_bad_values_and_documents_every_option() {
        let Command::Help(text) = parse(&argv("-p x -h"), 4096).unwrap() else {
            panic!("-h must give help");
        };
        for s in SPECS {
            if !s.short.is_empty() {
                assert!(
                    text.contains(&format!("  -{}", s.short)),
                    "help lacks -{}",
                    s.short
                );
            }
            if !s.long.is_empty() {
                assert!(
                    text.contains(&format!("--{}", s.long)),
                    "help lacks --{}",
                    s.long
                );
            }
        }
        assert!(text.contains("Unknown options and positional arguments are refused with exit 2"));
    }

    #[test]
    fn missing_value_names_flag_and_range() {
        let m = usage_msg(parse(&argv("-f eth0 -p"), 4096));
        assert_eq!(m, "-p: missing value PORT (expected 1..=65535)");
        let m = usage_msg(parse(&argv("--timeout"), 4096));
        assert!(m.starts_with("--timeout: missing value SECS"), "{m}");
        let m = usage_msg(parse(&argv("--plain=1"), 4096));
        assert_eq!(m, "--plain: takes no value");
    }

    #[test]
    fn queue_range_must_fit_u32() {
        let m = usage_msg(parse(&argv("-f eth0 -t 4294967295 -q 2"), 4096));
        assert!(m.starts_with("-t/-q: "), "{m}");
        let Command::Run(c) = parse(&argv("-f eth0 -t 4294967295 -q 1"), 4096).unwrap() else {
            panic!("not run");
        };
        assert_eq!((c.start_queue, c.num_queues), (Some(u32::MAX), Some(1)));
    }

    #[test]
    fn zcrx_nodev_needs_no_device_and_refuses_device_options() {
        let Command::Run(c) =
            parse(&argv("-l --zcrx --zcrx-nodev -s ::1 -p 5201 -v 7"), 4096).unwrap()
        else {
            panic!("not run");
        };
        assert_eq!(c.mode, Mode::ZcrxServer);
        assert!(c.zcrx_nodev);
        assert_eq!((c.ifname, c.start_queue, c.num_queues), (None, None, None));
        let Command::Run(c) = parse(&argv("-l --zcrx -f eth0 -s ::1 -p 1"), 4096).unwrap() else {
            panic!("not run");
        };
        assert!(!c.zcrx_nodev);
        for (line, want) in [
            (
                "-l --zcrx --zcrx-nodev -f eth0 -s ::1 -p 1",
                "--zcrx-nodev: registers without a device; -f, -t and -q do not apply",
            ),
            (
                "-l --zcrx --zcrx-nodev -t 1 -q 1 -s ::1 -p 1",
                "--zcrx-nodev: registers without a device; -f, -t and -q do not apply",
            ),
            (
                "-l --plain --zcrx-nodev -s ::1 -p 1",
                "--zcrx-nodev: only applies to --zcrx",
            ),
            (
                "-l --zcrx --zcrx-nodev -s ::1 -p 1 --verify-restore",
                "--verify-restore: --zcrx-nodev changes no NIC, so there is nothing to verify",
            ),
        ] {
            assert_eq!(usage_msg(parse(&argv(line), 4096)), want, "{line}");
        }
        assert!(usage().contains("--zcrx-nodev    with --zcrx, a test aid"));
    }
}
