//! The control protocol between a sweep (the device under test) and `--peer-server` (the host
//! that sends each run's traffic): JSON lines over one TCP connection, the sweep asking and the
//! peer answering, one message per line.
//!
//! Every line is one JSON object whose first member is the protocol version, `"v":1`, and
//! whose second is the message kind, `"type"`; then the kind's own members in any order, all
//! required (an absent optional value is `null`), none unknown, none twice (at any depth: a
//! member given twice is refused, never read as its first or last value). At most
//! [`MAX_LINE`] bytes, not counting the `\n`. The exchange, in this order:
//!
//! ```text
//! sweep -> peer   {"v":1,"type":"hello","tool":"ncdevmem-rs","version":"0.1.0"}
//! peer  -> sweep  {"v":1,"type":"welcome","tool":"ncdevmem-rs","version":"0.1.0","max_duration_s":600.0,"max_bytes":274877906944}
//!   for each run:
//! sweep -> peer   {"v":1,"type":"send","run":1,"port":4242,"flows":4,"duration_s":7.0,"stream":{"seed":7},"write_size":null,"tcp_cc":"dctcp","devmem_tx":false}
//! peer  -> sweep  {"v":1,"type":"started","run":1,"duration_s":7.0,"bytes_per_flow":68719476736}
//! peer  -> sweep  {"v":1,"type":"done","run":1,"figures":{...}}
//!   between runs, any number of times (a sweep asks once, after the welcome):
//! sweep -> peer   {"v":1,"type":"about"}
//! peer  -> sweep  {"v":1,"type":"host","host":{"version":…,"host_name":…,…}}
//!   at the end:
//! sweep -> peer   {"v":1,"type":"bye"}
//! ```
//!
//! Either side answers a message it cannot take — not JSON, not an object, another version,
//! a kind it does not know or does not expect now, `"v"` and `"type"` not the first two
//! members, a member missing, repeated, of the wrong type or unknown, a line over
//! [`MAX_LINE`] — with `{"v":1,"type":"error","code":…,"message":…}`
//! where it can, and closes the connection; the peer then serves the next client. A peer that
//! cannot start a run (busy with another client, a limit, the send failed) answers `error`
//! instead of `started` or `done`. Nothing here panics on what a peer sent: every failure is
//! a [`ProtoError`].
//!
//! The peer sends test traffic only to the address the control connection came from, at the
//! port `send` names; the request names no address.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// The protocol version this build speaks (`"v"` of every line).
pub(crate) const VERSION: u32 = 1;

/// Longest accepted line, in bytes, not counting its `\n` (64 KiB: a `done` of 64 flows is
/// ~10 KiB): a line of 65,536 bytes and its newline is taken, one of 65,537 is refused as
/// longer than 65536 bytes.
pub(crate) const MAX_LINE: usize = 64 << 10;

/// An optional member that must still be present (`null` when absent): serde takes a missing
/// `Option` as `None`, which would let a line without it pass.
fn required<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// The stream a run's flows carry: `{"seed":N}` (flow k: the keyed stream of N and k) or
/// `{"period":N}` (the `-v N` pattern on every flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Stream {
    /// `--seed N`.
    Seed(u64),
    /// `-v N`.
    Period(u32),
}

/// What the peer measured of one run's send, and its CPU shares: typed with the sweep's
/// JSON, whose runs carry them (`crate::summary::sweep`).
pub(crate) use crate::summary::sweep::{PeerCpu, PeerFigures};

/// One control message (the `"type"` names the kind; `"v"` is added and checked by
/// [`encode`] and [`decode`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Msg {
    /// Sweep → peer, first: who asks.
    Hello {
        /// The asking tool (`ncdevmem-rs`).
        tool: String,
        /// Its version.
        version: String,
    },
    /// Peer → sweep, the answer to `hello`: the peer's limits.
    Welcome {
        /// The serving tool.
        tool: String,
        /// Its version.
        version: String,
        /// `--max-duration`: the longest send of one run, seconds.
        max_duration_s: f64,
        /// `--max-bytes`: the most bytes of one run over all flows.
        max_bytes: u64,
    },
    /// Sweep → peer: send run `run`'s traffic now.
    Send {
        /// The run's number in the sweep (1-based, increasing).
        run: u32,
        /// The receiver's TCP port, on the address the control connection came from.
        port: u16,
        /// Connections (1..=64).
        flows: u32,
        /// Send for this long (seconds, > 0), or until the receiver closes.
        duration_s: f64,
        /// The stream.
        stream: Stream,
        /// Bytes per `write` (and `TCP_NODELAY`); `None`: the sender's default.
        #[serde(deserialize_with = "required")]
        write_size: Option<u64>,
        /// `TCP_CONGESTION` of every flow; `None`: the peer's default.
        #[serde(deserialize_with = "required")]
        tcp_cc: Option<String>,
        /// Send through devmem TX (the peer needs a devmem NIC).
        devmem_tx: bool,
    },
    /// Peer → sweep: run `run` is being sent, with these bounds.
    Started {
        /// The run.
        run: u32,
        /// The send's duration after the peer's limit, seconds.
        duration_s: f64,
        /// The most bytes each flow sends.
        bytes_per_flow: u64,
    },
    /// Peer → sweep: run `run` was sent.
    Done {
        /// The run.
        run: u32,
        /// What the peer measured.
        figures: PeerFigures,
    },
    /// Either way: the request or message could not be taken (see the module docs).
    Error {
        /// What kind of refusal: one of the [`ErrorCode`] names.
        code: String,
        /// Why, for a person.
        message: String,
    },
    /// Sweep → peer, between runs: describe your host (`host` answers).
    About {},
    /// Peer → sweep, the answer to `about`: the peer's provenance
    /// ([`crate::summary::sweep::Provenance`]: its version, host, kernel, CPUs, governor, the
    /// NIC of its `-f`, its sysctls).
    Host {
        /// The peer's provenance.
        host: Box<crate::summary::sweep::Provenance>,
    },
    /// Sweep → peer: the sweep is over. (A struct variant without members, so that a
    /// member that does not belong is refused as for every other kind.)
    Bye {},
}

/// The refusals an `error` message names (its `"code"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorCode {
    /// Not JSON, not an object, a member missing, unknown or of the wrong type.
    Malformed,
    /// A line over [`MAX_LINE`].
    Oversized,
    /// Another protocol version.
    Version,
    /// A kind not expected now (`send` before `hello`, `done` before `started`, a run
    /// number out of sequence).
    Order,
    /// The peer serves another client's sweep.
    Busy,
    /// A request outside the peer's limits or abilities.
    Refused,
}

impl ErrorCode {
    /// The name in `"code"`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed",
            ErrorCode::Oversized => "oversized",
            ErrorCode::Version => "version",
            ErrorCode::Order => "order",
            ErrorCode::Busy => "busy",
            ErrorCode::Refused => "refused",
        }
    }
}

/// Why a control exchange failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ProtoError {
    /// What was read is not a message of this protocol: [`ErrorCode::Malformed`],
    /// [`ErrorCode::Oversized`] or [`ErrorCode::Version`], and why.
    Bad(ErrorCode, String),
    /// A valid message of a kind not expected now: what was expected, and what came.
    Unexpected {
        /// What was expected (`"welcome"`, `"started for run 3"`).
        expected: String,
        /// The kind that came (its `"type"`).
        got: String,
    },
    /// The other side refused with an `error` message.
    Refused {
        /// Its `"code"`.
        code: String,
        /// Its `"message"`.
        message: String,
    },
    /// The connection closed (`None`: cleanly, between lines) or failed (`Some`: the I/O
    /// error, or a line cut off).
    Closed(Option<String>),
    /// No line within this long.
    Timeout(Duration),
    /// A line begun but not finished within `limit` (a client that dribbles): `bytes` came
    /// without a newline.
    SlowLine {
        /// How long a line may take from its first byte.
        limit: Duration,
        /// The bytes of the unfinished line.
        bytes: usize,
    },
    /// The wait was given up for a stop signal.
    Stopped,
}

/// `text` (from the other side of a control connection, or a file name) fit for a log line:
/// every control character (a newline, an escape sequence's ESC, NUL) and every [`hidden`]
/// one written as `\u{…}`, so a peer can
/// neither forge log lines nor send the terminal commands: `"a\u{1b}[2J\nb"` is written
/// `a\u{1b}[2J\u{a}b` (the test `printable_escapes_what_a_terminal_would_act_on`).
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` would not show as itself on a terminal or in a mail: a control character, or a
/// line or paragraph separator, zero-width or direction-changing format character (U+2028,
/// U+2029, U+200B..U+200F, U+202A..U+202E, U+2066..U+2069, U+FEFF), which [`printable`] and
/// the sweep's `command:` footer escape.
pub(crate) fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtoError::Bad(code, why) => {
                write!(f, "{} control message: {}", code.name(), printable(why))
            }
            ProtoError::Unexpected { expected, got } => {
                write!(
                    f,
                    "control message out of order: expected {expected}, got '{got}'"
                )
            }
            ProtoError::Refused { code, message } => {
                write!(f, "refused ({}): {}", printable(code), printable(message))
            }
            ProtoError::Closed(None) => f.write_str("the control connection closed"),
            ProtoError::Closed(Some(why)) => write!(f, "the control connection failed: {why}"),
            ProtoError::Timeout(d) => {
                write!(f, "no control message within {:.1} s", d.as_secs_f64())
            }
            ProtoError::SlowLine { limit, bytes } => write!(
                f,
                "a control line not finished within {:.1} s of its first byte ({bytes} bytes \
                 without a newline)",
                limit.as_secs_f64()
            ),
            ProtoError::Stopped => f.write_str("stopped by a signal"),
        }
    }
}

impl ProtoError {
    /// The `error` message that answers this failure to the other side, if one does: a bad
    /// or unexpected message is answered, and a stop (`refused`: the peer server is
    /// stopping); a refusal, a closed connection, a timeout or a slow line is not.
    pub(crate) fn answer(&self) -> Option<Msg> {
        let (code, message) = match self {
            ProtoError::Bad(code, why) => (*code, why.clone()),
            ProtoError::Unexpected { expected, got } => (
                ErrorCode::Order,
                format!("expected {expected}, got '{got}'"),
            ),
            ProtoError::Stopped => (
                ErrorCode::Refused,
                "the peer server is stopping (a stop signal)".to_string(),
            ),
            _ => return None,
        };
        Some(Msg::Error {
            code: code.name().to_string(),
            message,
        })
    }
}

impl Msg {
    /// The `"type"` of this message.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "hello",
            Msg::Welcome { .. } => "welcome",
            Msg::Send { .. } => "send",
            Msg::Started { .. } => "started",
            Msg::Done { .. } => "done",
            Msg::Error { .. } => "error",
            Msg::About {} => "about",
            Msg::Host { .. } => "host",
            Msg::Bye {} => "bye",
        }
    }

    /// An `error` message.
    pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> Msg {
        Msg::Error {
            code: code.name().to_string(),
            message: message.into(),
        }
    }
}

/// The line of `msg`: `{"v":1,"type":…,…}` and `\n`, members in declaration order.
pub(crate) fn encode(msg: &Msg) -> String {
    // Serializing these types cannot fail (string keys, finite or null numbers: serde_json
    // writes a non-finite f64 as null); a failure would still give a valid `error` line.
    let body = serde_json::to_string(msg).unwrap_or_else(|e| {
        format!(
            "{{\"type\":\"error\",\"code\":\"malformed\",\"message\":{}}}",
            serde_json::Value::from(e.to_string())
        )
    });
    // `body` is a JSON object: `{` then the members.
    let members = body.strip_prefix('{').unwrap_or(&body);
    format!("{{\"v\":{VERSION},{members}\n")
}

/// The message of one line (without or with its `\n`).
///
/// Errors: [`ProtoError::Bad`]: [`ErrorCode::Oversized`] over [`MAX_LINE`],
/// [`ErrorCode::Version`] for a `"v"` other than [`VERSION`], [`ErrorCode::Malformed`] for
/// anything else that is not a message (naming what).
pub(crate) fn decode(line: &[u8]) -> Result<Msg, ProtoError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err(oversized());
    }
    let bad = |why: String| ProtoError::Bad(ErrorCode::Malformed, why);
    let text = std::str::from_utf8(line).map_err(|e| bad(format!("not UTF-8 ({e})")))?;
    let Top::Object(members) =
        serde_json::from_str::<Top>(text).map_err(|e| bad(format!("not JSON ({e})")))?
    else {
        return Err(bad("not a JSON object".into()));
    };
    match members.iter().find(|(k, _)| k == "v").map(|(_, v)| v) {
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(VERSION)) => {}
        Some(other) => {
            return Err(ProtoError::Bad(
                ErrorCode::Version,
                format!("protocol version {other}, this side speaks {VERSION}"),
            ))
        }
        None => return Err(bad(format!("no \"v\" member (protocol version {VERSION})"))),
    }
    let keys: Vec<&str> = members.iter().take(2).map(|(k, _)| k.as_str()).collect();
    if keys != ["v", "type"] {
        return Err(bad(format!(
            "the first members are {}, expected \"v\" then \"type\"",
            keys.iter()
                .map(|k| format!("\"{}\"", printable(k)))
                .collect::<Vec<_>>()
                .join(" then ")
        )));
    }
    let object: serde_json::Map<String, serde_json::Value> = members.into_iter().skip(1).collect();
    serde_json::from_value(serde_json::Value::Object(object)).map_err(|e| bad(e.to_string()))
}

fn oversized() -> ProtoError {
    ProtoError::Bad(
        ErrorCode::Oversized,
        format!("line longer than {MAX_LINE} bytes (its newline not counted)"),
    )
}

/// A line's JSON as [`decode`] reads it: a top-level object's members in the order written,
/// or anything else. A member given twice, in the object or in any value inside it, is an
/// error (serde_json would keep the last).
enum Top {
    /// The object's members, in order.
    Object(Vec<(String, serde_json::Value)>),
    /// Not an object.
    Other,
}

/// A JSON value read like [`serde_json::Value`], but refusing an object with a member twice.
struct Strict(serde_json::Value);

/// The visitor of [`Top`] (`top`) and [`Strict`] (not `top`).
struct StrictVisitor {
    top: bool,
}

/// What [`StrictVisitor`] makes: the top level's ordered members, or a value.
enum Visited {
    Members(Vec<(String, serde_json::Value)>),
    Value(serde_json::Value),
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Visited;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Visited, E> {
        Ok(Visited::Value(v.into()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Visited, E> {
        Ok(Visited::Value(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Visited, E> {
        Ok(Visited::Value(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Visited, E> {
        Ok(Visited::Value(v.into()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Visited, E> {
        Ok(Visited::Value(v.into()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Visited, E> {
        Ok(Visited::Value(v.into()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Visited, E> {
        Ok(Visited::Value(serde_json::Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Visited, E> {
        Ok(Visited::Value(serde_json::Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Visited, D::Error> {
        Strict::deserialize(d).map(|v| Visited::Value(v.0))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Visited, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Visited::Value(items.into()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Visited, A::Error> {
        let mut members: Vec<(String, serde_json::Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!(
                    "member \"{}\" given twice",
                    printable(&key)
                )));
            }
            let Strict(value) = map.next_value()?;
            members.push((key, value));
        }
        Ok(match self.top {
            true => Visited::Members(members),
            false => Visited::Value(serde_json::Value::Object(members.into_iter().collect())),
        })
    }
}

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(StrictVisitor { top: false })? {
            Visited::Value(v) => Ok(Strict(v)),
            Visited::Members(m) => Ok(Strict(serde_json::Value::Object(m.into_iter().collect()))),
        }
    }
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(StrictVisitor { top: true })? {
            Visited::Members(m) => Ok(Top::Object(m)),
            Visited::Value(_) => Ok(Top::Other),
        }
    }
}

/// How long [`Conn::recv_patiently`] waits: for a line to begin, and for a begun line to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Patience {
    /// For the first byte of the next line (the other side's silence between messages).
    pub idle: Duration,
    /// For the rest of a line from its first byte (a side that sends a byte now and then
    /// does not keep the connection for longer).
    pub line: Duration,
}

/// How a read waits: once for the stream's own read timeout, or in ticks of it until a
/// [`Patience`] runs out or a stop is asked for.
#[derive(Clone, Copy)]
enum Wait<'a> {
    #[cfg(test)]
    Once(Duration),
    Ticking(Patience, &'a dyn Fn() -> bool),
}

/// One side of a control connection: lines in and out over any byte stream, a line at most
/// [`MAX_LINE`] bytes.
#[derive(Debug)]
pub(crate) struct Conn<S> {
    stream: S,
    /// Bytes read after the last complete line.
    pending: Vec<u8>,
    /// When the first of `pending` came.
    pending_since: Option<Instant>,
}

impl<S: Read + Write> Conn<S> {
    /// A connection over `stream` (its read timeout, if any, is the caller's).
    pub(crate) fn new(stream: S) -> Self {
        Conn {
            stream,
            pending: Vec::new(),
            pending_since: None,
        }
    }

    /// The stream (to set timeouts).
    pub(crate) fn stream(&self) -> &S {
        &self.stream
    }

    /// Writes `msg`'s line.
    ///
    /// Errors: [`ProtoError::Closed`] with the write's error.
    pub(crate) fn send(&mut self, msg: &Msg) -> Result<(), ProtoError> {
        self.stream
            .write_all(encode(msg).as_bytes())
            .and_then(|()| self.stream.flush())
            .map_err(|e| ProtoError::Closed(Some(e.to_string())))
    }

    /// Reads the next message. A read that times out (`WouldBlock`/`TimedOut` from a stream
    /// with a read timeout) is [`ProtoError::Timeout`] of `waited`, the caller's timeout.
    ///
    /// Errors: as [`decode`]; [`ProtoError::Closed`] at the end of the stream (with the cut
    /// line, if one was cut) or on a read error; [`ProtoError::Timeout`].
    #[cfg(test)]
    pub(crate) fn recv(&mut self, waited: Duration) -> Result<Msg, ProtoError> {
        let line = self.read_line(Wait::Once(waited))?;
        decode(&line)
    }

    /// Reads the next message over a stream whose read timeout is a short tick (the caller
    /// sets it, e.g. 100 ms): waits up to `patience.idle` for a line's first byte and up to
    /// `patience.line` from it for its newline, and gives up at the next tick once `stopping`
    /// says so.
    ///
    /// Errors: as [`recv`](Self::recv); [`ProtoError::Timeout`] of `patience.idle`;
    /// [`ProtoError::SlowLine`]; [`ProtoError::Stopped`].
    pub(crate) fn recv_patiently(
        &mut self,
        patience: Patience,
        stopping: &dyn Fn() -> bool,
    ) -> Result<Msg, ProtoError> {
        let line = self.read_line(Wait::Ticking(patience, stopping))?;
        decode(&line)
    }

    /// Reads the next message and takes an `error` message as [`ProtoError::Refused`].
    ///
    /// Errors: as [`recv`](Self::recv), and [`ProtoError::Refused`].
    #[cfg(test)]
    pub(crate) fn recv_answer(&mut self, waited: Duration) -> Result<Msg, ProtoError> {
        match self.recv(waited)? {
            Msg::Error { code, message } => Err(ProtoError::Refused { code, message }),
            other => Ok(other),
        }
    }

    // Outside the tests a wait only ticks.
    #[cfg_attr(not(test), allow(irrefutable_let_patterns))]
    fn read_line(&mut self, wait: Wait<'_>) -> Result<Vec<u8>, ProtoError> {
        let mut buf = [0u8; 4096];
        let started = Instant::now();
        loop {
            if let Some(at) = self.pending.iter().position(|&b| b == b'\n') {
                // `at` bytes before the newline.
                if at > MAX_LINE {
                    return Err(oversized());
                }
                let rest = self.pending.split_off(at + 1);
                self.pending_since = (!rest.is_empty()).then(Instant::now);
                return Ok(std::mem::replace(&mut self.pending, rest));
            }
            if self.pending.len() > MAX_LINE {
                return Err(oversized());
            }
            if let Wait::Ticking(patience, stopping) = wait {
                if stopping() {
                    return Err(ProtoError::Stopped);
                }
                if self
                    .pending_since
                    .is_some_and(|t| t.elapsed() >= patience.line)
                {
                    return Err(ProtoError::SlowLine {
                        limit: patience.line,
                        bytes: self.pending.len(),
                    });
                }
            }
            match self.stream.read(&mut buf) {
                Ok(0) if self.pending.is_empty() => return Err(ProtoError::Closed(None)),
                Ok(0) => {
                    return Err(ProtoError::Closed(Some(format!(
                        "closed in the middle of a line ({} bytes without a newline)",
                        self.pending.len()
                    ))))
                }
                Ok(n) => {
                    if self.pending.is_empty() {
                        self.pending_since = Some(Instant::now());
                    }
                    self.pending.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    match wait {
                        #[cfg(test)]
                        Wait::Once(waited) => return Err(ProtoError::Timeout(waited)),
                        Wait::Ticking(patience, _) => {
                            if self.pending.is_empty() && started.elapsed() >= patience.idle {
                                return Err(ProtoError::Timeout(patience.idle));
                            }
                        }
                    }
                }
                Err(e) => return Err(ProtoError::Closed(Some(e.to_string()))),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn printable_escapes_what_a_terminal_would_act_on() {
        assert_eq!(printable("a\u{1b}[2J\nb"), "a\\u{1b}[2J\\u{a}b");
        assert_eq!(printable("ncdevmem-rs 0.1.0"), "ncdevmem-rs 0.1.0");
    }

    /// A byte stream that yields `input` in pieces of `chunk` bytes and records what is
    /// written (one side of a control connection, for the tests of both sides).
    pub(crate) struct Pipe {
        input: Vec<u8>,
        /// Bytes read so far.
        pub(crate) at: usize,
        chunk: usize,
        /// What was written.
        pub(crate) out: Vec<u8>,
    }

    impl Pipe {
        pub(crate) fn new(input: &[u8], chunk: usize) -> Pipe {
            Pipe {
                input: input.to_vec(),
                at: 0,
                chunk,
                out: Vec::new(),
            }
        }
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.chunk.min(buf.len()).min(self.input.len() - self.at);
            buf[..n].copy_from_slice(&self.input[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn send_msg() -> Msg {
        Msg::Send {
            run: 3,
            port: 4242,
            flows: 4,
            duration_s: 7.0,
            stream: Stream::Seed(7),
            write_size: None,
            tcp_cc: Some("dctcp".into()),
            devmem_tx: false,
        }
    }

    /// Every kind, byte for byte as it goes on the wire (the module docs show the same
    /// lines), and back.
    #[test]
    fn every_kind_encodes_byte_exact_and_roundtrips() {
        let figures = PeerFigures {
            bytes: 3000,
            elapsed_s: 2.5,
            gbit_per_s: 0.0000096,
            flow_bytes: vec![1000, 2000],
            cpu: Some(PeerCpu {
                usr: 1.5,
                sys: 20.0,
                softirq: 3.25,
                idle: 75.25,
            }),
            error: None,
        };
        let cases: Vec<(Msg, &str)> = vec![
            (
                Msg::Hello {
                    tool: "ncdevmem-rs".into(),
                    version: "0.1.0".into(),
                },
                r#"{"v":1,"type":"hello","tool":"ncdevmem-rs","version":"0.1.0"}"#,
            ),
            (
                Msg::Welcome {
                    tool: "ncdevmem-rs".into(),
                    version: "0.1.0".into(),
                    max_duration_s: 600.0,
                    max_bytes: 1 << 38,
                },
                r#"{"v":1,"type":"welcome","tool":"ncdevmem-rs","version":"0.1.0","max_duration_s":600.0,"max_bytes":274877906944}"#,
            ),
            (
                send_msg(),
                r#"{"v":1,"type":"send","run":3,"port":4242,"flows":4,"duration_s":7.0,"stream":{"seed":7},"write_size":null,"tcp_cc":"dctcp","devmem_tx":false}"#,
            ),
            (
                Msg::Started {
                    run: 3,
                    duration_s: 7.0,
                    bytes_per_flow: 1 << 36,
                },
                r#"{"v":1,"type":"started","run":3,"duration_s":7.0,"bytes_per_flow":68719476736}"#,
            ),
            (
                Msg::Done { run: 3, figures },
                r#"{"v":1,"type":"done","run":3,"figures":{"bytes":3000,"elapsed_s":2.5,"gbit_per_s":9.6e-6,"flow_bytes":[1000,2000],"cpu":{"usr":1.5,"sys":20.0,"softirq":3.25,"idle":75.25},"error":null}}"#,
            ),
            (
                Msg::error(ErrorCode::Busy, "another sweep"),
                r#"{"v":1,"type":"error","code":"busy","message":"another sweep"}"#,
            ),
            (Msg::About {}, r#"{"v":1,"type":"about"}"#),
            (
                Msg::Host {
                    host: Box::new(crate::summary::sweep::Provenance {
                        version: "0.1.0".into(),
                        host_name: Some("peer1".into()),
                        kernel_release: Some("6.18.0".into()),
                        kernel_cmdline: None,
                        cpu_model: None,
                        online_cpus: Some("0-1".into()),
                        governor: None,
                        nic: None,
                        queue_irqs: vec![],
                        sysctls: [("vm.nr_hugepages".to_string(), Some("0".to_string()))]
                            .into_iter()
                            .collect(),
                    }),
                },
                r#"{"v":1,"type":"host","host":{"version":"0.1.0","host_name":"peer1","kernel_release":"6.18.0","kernel_cmdline":null,"cpu_model":null,"online_cpus":"0-1","governor":null,"nic":null,"queue_irqs":[],"sysctls":{"vm.nr_hugepages":"0"}}}"#,
            ),
            (Msg::Bye {}, r#"{"v":1,"type":"bye"}"#),
        ];
        // A host without one of its members, or with one more, is malformed.
        for bad in [
            r#"{"v":1,"type":"host","host":{"version":"0.1.0","kernel_release":"6.18.0","kernel_cmdline":null,"cpu_model":null,"online_cpus":"0-1","governor":null,"nic":null,"queue_irqs":[],"sysctls":{}}}"#,
            r#"{"v":1,"type":"host","host":{"version":"0.1.0","host_name":null,"kernel_release":"6.18.0","kernel_cmdline":null,"cpu_model":null,"online_cpus":"0-1","governor":null,"nic":null,"queue_irqs":[],"sysctls":{},"extra":1}}"#,
        ] {
            assert!(
                matches!(
                    decode(bad.as_bytes()),
                    Err(ProtoError::Bad(ErrorCode::Malformed, _))
                ),
                "{bad}"
            );
        }
        for (msg, wire) in cases {
            let line = encode(&msg);
            assert_eq!(line, format!("{wire}\n"), "{}", msg.kind());
            assert_eq!(decode(line.as_bytes()), Ok(msg.clone()), "{wire}");
            assert_eq!(decode(wire.as_bytes()), Ok(msg), "without the newline");
        }
        let periodic = Msg::Send {
            run: 1,
            port: 4242,
            flows: 1,
            duration_s: 1.5,
            stream: Stream::Period(9),
            write_size: Some(1448),
            tcp_cc: None,
            devmem_tx: false,
        };
        assert!(
            encode(&periodic).contains(r#""stream":{"period":9},"write_size":1448,"tcp_cc":null"#)
        );
    }

    /// A run asking for devmem TX with a write size: both members on the wire, byte exact,
    /// and back; each is required and typed (a missing `devmem_tx`, a string or negative
    /// `write_size`, a `devmem_tx` of 1 are malformed, not defaults).
    #[test]
    fn devmem_tx_and_write_size_are_required_typed_members_of_send() {
        let msg = Msg::Send {
            run: 2,
            port: 5201,
            flows: 4,
            duration_s: 3.0,
            stream: Stream::Seed(64),
            write_size: Some(65536),
            tcp_cc: None,
            devmem_tx: true,
        };
        let wire = r#"{"v":1,"type":"send","run":2,"port":5201,"flows":4,"duration_s":3.0,"stream":{"seed":64},"write_size":65536,"tcp_cc":null,"devmem_tx":true}"#;
        assert_eq!(encode(&msg), format!("{wire}\n"));
        assert_eq!(decode(wire.as_bytes()), Ok(msg));
        let head = r#"{"v":1,"type":"send","run":1,"port":7,"flows":1,"duration_s":1.0,"stream":{"seed":1},"#;
        for tail in [
            r#""write_size":null,"tcp_cc":null}"#,
            r#""tcp_cc":null,"devmem_tx":false}"#,
            r#""write_size":"1448","tcp_cc":null,"devmem_tx":false}"#,
            r#""write_size":-1,"tcp_cc":null,"devmem_tx":false}"#,
            r#""write_size":null,"tcp_cc":null,"devmem_tx":1}"#,
            r#""write_size":null,"tcp_cc":null,"devmem_tx":"yes"}"#,
            r#""write_size":null,"tcp_cc":null,"devmem_tx":true,"ifname":"eth0"}"#,
        ] {
            let line = format!("{head}{tail}");
            assert_eq!(
                code_of(decode(line.as_bytes())),
                ErrorCode::Malformed,
                "{line}"
            );
        }
    }

    fn code_of(r: Result<Msg, ProtoError>) -> ErrorCode {
        match r {
            Err(ProtoError::Bad(code, _)) => code,
            other => panic!("not a bad message: {other:?}"),
        }
    }

    /// Hostile and broken lines are errors with their code, never a panic or a message.
    #[test]
    fn malformed_lines_are_refused_with_their_code() {
        use ErrorCode::*;
        let cases: &[(&[u8], ErrorCode)] = &[
            (b"", Malformed),
            (b"\n", Malformed),
            (b"hello\n", Malformed),
            (b"[1,2]\n", Malformed),
            (b"\xff\xfe{}\n", Malformed),
            (b"{\"type\":\"bye\"}\n", Malformed),
            (b"{\"v\":2,\"type\":\"bye\"}\n", Version),
            (b"{\"v\":\"1\",\"type\":\"bye\"}\n", Version),
            (b"{\"v\":1}\n", Malformed),
            (b"{\"v\":1,\"type\":\"launch\"}\n", Malformed),
            (b"{\"v\":1,\"type\":\"bye\",\"extra\":1}\n", Malformed),
            (b"{\"v\":1,\"type\":\"hello\",\"tool\":\"x\"}\n", Malformed),
            (b"{\"v\":1,\"type\":\"hello\",\"tool\":1,\"version\":\"x\"}\n", Malformed),
            // A port out of u16, a negative flow count, a stream of two kinds.
            (br#"{"v":1,"type":"send","run":1,"port":70000,"flows":1,"duration_s":1.0,"stream":{"seed":1},"write_size":null,"tcp_cc":null,"devmem_tx":false}"#, Malformed),
            (br#"{"v":1,"type":"send","run":1,"port":7,"flows":-1,"duration_s":1.0,"stream":{"seed":1},"write_size":null,"tcp_cc":null,"devmem_tx":false}"#, Malformed),
            (br#"{"v":1,"type":"send","run":1,"port":7,"flows":1,"duration_s":1.0,"stream":{"seed":1,"period":2},"write_size":null,"tcp_cc":null,"devmem_tx":false}"#, Malformed),
            (br#"{"v":1,"type":"send","run":1,"port":7,"flows":1,"duration_s":1.0,"stream":{"address":"192.0.2.1"},"write_size":null,"tcp_cc":null,"devmem_tx":false}"#, Malformed),
            // Deeply nested input is refused by the parser's recursion limit, not a stack overflow.
            (&[b'['; 10_000], Malformed),
        ];
        for (line, code) in cases {
            assert_eq!(
                code_of(decode(line)),
                *code,
                "{:?}",
                String::from_utf8_lossy(&line[..line.len().min(80)])
            );
        }
        let mut long = encode(&Msg::Bye {}).into_bytes();
        long.splice(1..1, std::iter::repeat_n(b' ', MAX_LINE));
        assert_eq!(code_of(decode(&long)), Oversized);
    }

    /// A stream that gives one byte of `input` per read every `every`, and `WouldBlock` (a
    /// read timeout of `every`) once it has none.
    struct Drip {
        input: Vec<u8>,
        at: usize,
        every: Duration,
    }

    impl Read for Drip {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(self.every);
            if self.at == self.input.len() {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            buf[0] = self.input[self.at];
            self.at += 1;
            Ok(1)
        }
    }

    impl Write for Drip {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A patient read: a silent stream times out after `idle`, a line that keeps coming a
    /// byte at a time ends with `SlowLine` after `line` (each byte does not restart it), a
    /// whole line in time is read, and a stop ends the wait at the next tick.
    #[test]
    fn a_patient_read_bounds_silence_and_dribbling_and_sees_a_stop() {
        let tick = Duration::from_millis(2);
        let patience = Patience {
            idle: Duration::from_millis(40),
            line: Duration::from_millis(60),
        };
        let drip = |input: &[u8]| {
            Conn::new(Drip {
                input: input.to_vec(),
                at: 0,
                every: tick,
            })
        };
        let bye = encode(&Msg::Bye {});
        let started = Instant::now();
        assert_eq!(
            drip(b"").recv_patiently(patience, &|| false),
            Err(ProtoError::Timeout(patience.idle))
        );
        assert!(started.elapsed() >= patience.idle);
        // Over 200 bytes a tick (2 ms) apart: never within the 60 ms line limit.
        let slow = format!("{}{}", " ".repeat(200), bye);
        let started = Instant::now();
        match drip(slow.as_bytes()).recv_patiently(patience, &|| false) {
            Err(ProtoError::SlowLine { limit, bytes }) => {
                assert_eq!(limit, patience.line);
                assert!(bytes > 0 && bytes < slow.len(), "{bytes}");
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() >= patience.line);
        let mut whole = Conn::new(Pipe::new(bye.as_bytes(), 4096));
        assert_eq!(whole.recv_patiently(patience, &|| false), Ok(Msg::Bye {}));
        let looks = std::cell::Cell::new(0);
        let stop_at_third = || {
            looks.set(looks.get() + 1);
            looks.get() >= 3
        };
        assert_eq!(
            drip(bye.as_bytes()).recv_patiently(patience, &stop_at_third),
            Err(ProtoError::Stopped),
            "mid-line"
        );
        assert_eq!(
            ProtoError::SlowLine {
                limit: Duration::from_secs(10),
                bytes: 3
            }
            .to_string(),
            "a control line not finished within 10.0 s of its first byte (3 bytes without a newline)"
        );
    }

    /// A line of MAX_LINE bytes and its newline is taken, one byte more is refused as longer
    /// than MAX_LINE bytes, by `decode` and by the reader alike (the limit counts what the
    /// message says it counts). Before: the newline was counted, so a 65,536-byte line was
    /// refused as "longer than 65536 bytes".
    #[test]
    fn the_line_limit_counts_the_line_without_its_newline() {
        let padded = |len: usize| {
            let bye = encode(&Msg::Bye {});
            let body = bye.trim_end_matches('\n');
            let mut line = format!(
                "{}{}",
                &body[..body.len() - 1],
                " ".repeat(len - body.len())
            );
            line.push_str("}\n");
            assert_eq!(line.len(), len + 1);
            line
        };
        let at_limit = padded(MAX_LINE);
        assert_eq!(decode(at_limit.as_bytes()), Ok(Msg::Bye {}));
        let mut c = Conn::new(Pipe::new(at_limit.as_bytes(), 4096));
        assert_eq!(c.recv(Duration::ZERO), Ok(Msg::Bye {}));
        let over = padded(MAX_LINE + 1);
        let want = ProtoError::Bad(
            ErrorCode::Oversized,
            "line longer than 65536 bytes (its newline not counted)".into(),
        );
        assert_eq!(decode(over.as_bytes()), Err(want.clone()));
        let mut c = Conn::new(Pipe::new(over.as_bytes(), 4096));
        assert_eq!(c.recv(Duration::ZERO), Err(want.clone()));
        // Without a newline yet: refused once a byte more than the limit is pending.
        let mut c = Conn::new(Pipe::new(&over.as_bytes()[..MAX_LINE + 1], 4096));
        assert_eq!(c.recv(Duration::ZERO), Err(want));
    }

    /// What the parser takes is what lab.md says: `"v"` then `"type"` first, the kind's
    /// members after them in any order; a member given twice, at any depth, is refused
    /// (before: the order was not checked and serde_json kept the last of two members).
    #[test]
    fn members_come_in_the_documented_order_and_once() {
        let hello = r#"{"v":1,"type":"hello","version":"y","tool":"x"}"#;
        assert_eq!(
            decode(hello.as_bytes()),
            Ok(Msg::Hello {
                tool: "x".into(),
                version: "y".into()
            }),
            "the kind's own members in any order"
        );
        let send_tail = r#""port":7,"flows":1,"duration_s":1.0,"write_size":null,"tcp_cc":null,"devmem_tx":false}"#;
        for (line, why) in [
            (
                r#"{"type":"bye","v":1}"#.to_string(),
                r#"the first members are "type" then "v", expected "v" then "type""#,
            ),
            (
                r#"{"v":1,"tool":"x","type":"hello","version":"y"}"#.to_string(),
                r#"the first members are "v" then "tool", expected "v" then "type""#,
            ),
            (
                r#"{"v":1,"type":"bye","type":"bye"}"#.to_string(),
                r#"member "type" given twice"#,
            ),
            (
                r#"{"v":1,"v":1,"type":"bye"}"#.to_string(),
                r#"member "v" given twice"#,
            ),
            (
                r#"{"v":1,"type":"hello","tool":"x","tool":"y","version":"z"}"#.to_string(),
                r#"member "tool" given twice"#,
            ),
            (
                format!(
                    r#"{{"v":1,"type":"send","run":1,"stream":{{"seed":1,"seed":2}},{send_tail}"#
                ),
                r#"member "seed" given twice"#,
            ),
            (
                format!(
                    r#"{{"v":1,"type":"send","run":1,"run":2,"stream":{{"seed":1}},{send_tail}"#
                ),
                r#"member "run" given twice"#,
            ),
        ] {
            match decode(line.as_bytes()) {
                Err(ProtoError::Bad(ErrorCode::Malformed, m)) => {
                    assert!(m.contains(why), "{line}: {m}")
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        // A member name with control characters is named printably.
        let m = decode(b"{\"v\":1,\"type\":\"bye\",\"\\u001b\":1,\"\\u001b\":2}").unwrap_err();
        assert!(
            m.to_string().contains(r#"member "\u{1b}" given twice"#),
            "{m}"
        );
    }

    /// The reader splits lines however the bytes arrive, keeps what follows a line, and
    /// refuses a line over the limit before reading it all.
    #[test]
    fn the_reader_frames_lines_and_bounds_them() {
        let two = format!("{}{}", encode(&send_msg()), encode(&Msg::Bye {}));
        for chunk in [1, 7, 4096] {
            let mut c = Conn::new(Pipe::new(two.as_bytes(), chunk));
            assert_eq!(c.recv(Duration::ZERO), Ok(send_msg()));
            assert_eq!(c.recv(Duration::ZERO), Ok(Msg::Bye {}));
            assert_eq!(c.recv(Duration::ZERO), Err(ProtoError::Closed(None)));
        }
        let mut c = Conn::new(Pipe::new(b"{\"v\":1,\"ty", 3));
        assert!(
            matches!(c.recv(Duration::ZERO), Err(ProtoError::Closed(Some(why))) if why.contains("middle of a line"))
        );
        let endless = vec![b'x'; 3 * MAX_LINE];
        let mut c = Conn::new(Pipe::new(&endless, 4096));
        assert_eq!(code_of(c.recv(Duration::ZERO)), ErrorCode::Oversized);
        assert!(
            c.stream().at <= MAX_LINE + 4096,
            "read {} bytes",
            c.stream().at
        );
        let refused = encode(&Msg::error(ErrorCode::Busy, "one sweep at a time"));
        let mut c = Conn::new(Pipe::new(refused.as_bytes(), 4096));
        assert_eq!(
            c.recv_answer(Duration::ZERO),
            Err(ProtoError::Refused {
                code: "busy".into(),
                message: "one sweep at a time".into()
            })
        );
        c.send(&Msg::Bye {}).unwrap();
        assert_eq!(c.stream().out, b"{\"v\":1,\"type\":\"bye\"}\n");
    }

    /// A bad or out-of-order message is answered with an `error` of its code; a refusal or a
    /// closed connection is not answered.
    #[test]
    fn failures_answer_with_their_code() {
        let e = decode(b"{\"v\":9,\"type\":\"bye\"}").unwrap_err();
        assert_eq!(
            e.to_string(),
            "version control message: protocol version 9, this side speaks 1"
        );
        assert!(matches!(e.answer(), Some(Msg::Error { code, .. }) if code == "version"));
        let order = ProtoError::Unexpected {
            expected: "hello".into(),
            got: "send".into(),
        };
        assert_eq!(
            encode(&order.answer().unwrap()),
            "{\"v\":1,\"type\":\"error\",\"code\":\"order\",\"message\":\"expected hello, got 'send'\"}\n"
        );
        assert_eq!(ProtoError::Closed(None).answer(), None);
        assert_eq!(ProtoError::Timeout(Duration::from_secs(1)).answer(), None);
    }
}
