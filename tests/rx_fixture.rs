//! Keeps the receive-side test double honest: replays real `recvmsg(MSG_SOCK_DEVMEM)` and
//! `SO_DEVMEM_DONTNEED` answers, recorded by the VM suite on the devmem_nic software NIC
//! (`tests/fixtures/devmem_nic_recvmsg.txt`, format in `tests/fixtures/README.md`), through
//! the tool's cmsg parser, through [`ScriptedSocket`] (which must answer byte for byte the
//! same: control bytes, token numbering, where a call is cut, DONTNEED counts and errors) and
//! through the receive loop, which must validate the recorded stream.
//!
//! The VM suite runs this binary once more inside the guest against the recording it has just
//! made (`NCDEVMEM_FIXTURE_DIR`), so every VM run compares the double with the kernel of the
//! day.

use std::path::PathBuf;
use std::sync::atomic::AtomicI32;

use ncdevmem::rx::testing::{Piece, ScriptedSocket, Step, VecMemory};
use ncdevmem::rx::{cmsgs, receive_logged, Cmsg, RxConfig, RxSocket};
use ncdevmem::sys::uapi::dmabuf_token;

const FILE: &str = "devmem_nic_recvmsg.txt";

/// One recorded `recvmsg`.
#[derive(Debug)]
struct Call {
    /// iov length and control-buffer length passed.
    iov: usize,
    control_cap: usize,
    /// Return value, `msg_flags`, and the control bytes written (`msg_controllen` of them).
    ret: usize,
    flags: i32,
    control: Vec<u8>,
    /// The linear bytes at the start of the iov (all `SCM_DEVMEM_LINEAR` pieces, in order).
    linear: Vec<u8>,
    /// Each `SCM_DEVMEM_DMABUF` frag: dma-buf offset and the bytes found there.
    frags: Vec<(u64, Vec<u8>)>,
}

/// One recorded `SO_DEVMEM_DONTNEED`: the ranges and the answer (count or errno).
#[derive(Debug)]
struct Dontneed {
    ranges: Vec<dmabuf_token>,
    answer: Result<usize, i32>,
}

#[derive(Debug)]
struct Fixture {
    binding: u32,
    stream: usize,
    period: u32,
    calls: Vec<Call>,
    dontneeds: Vec<Dontneed>,
}

fn fixture_path() -> PathBuf {
    match std::env::var_os("NCDEVMEM_FIXTURE_DIR") {
        Some(dir) => PathBuf::from(dir).join(FILE),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(FILE),
    }
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length {}", s.len());
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn load() -> Fixture {
    let path = fixture_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read the recording {}: {e}", path.display()));
    let mut f = Fixture {
        binding: 0,
        stream: 0,
        period: 0,
        calls: Vec::new(),
        dontneeds: Vec::new(),
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "kernel" => {}
            "binding" => f.binding = w[1].parse().unwrap(),
            "stream" => {
                f.stream = w[1].parse().unwrap();
                assert_eq!(w[2], "-v");
                f.period = w[3].parse().unwrap();
            }
            // recvmsg IOV CONTROL -> RET FLAGS CONTROLLEN
            "recvmsg" => f.calls.push(Call {
                iov: w[1].parse().unwrap(),
                control_cap: w[2].parse().unwrap(),
                ret: w[4].parse().unwrap(),
                flags: i32::from_str_radix(w[5].trim_start_matches("0x"), 16).unwrap(),
                control: Vec::with_capacity(w[6].parse().unwrap()),
                linear: Vec::new(),
                frags: Vec::new(),
            }),
            "control" => f.calls.last_mut().unwrap().control = unhex(w.get(1).unwrap_or(&"")),
            "linear" => f.calls.last_mut().unwrap().linear = unhex(w.get(1).unwrap_or(&"")),
            "frag" => f
                .calls
                .last_mut()
                .unwrap()
                .frags
                .push((w[1].parse().unwrap(), unhex(w[2]))),
            // dontneed START+COUNT,... -> N | errno E
            "dontneed" => {
                let ranges = w[1]
                    .split(',')
                    .map(|r| {
                        let (s, c) = r.split_once('+').unwrap();
                        dmabuf_token {
                            token_start: s.parse().unwrap(),
                            token_count: c.parse().unwrap(),
                        }
                    })
                    .collect();
                let answer = match w[3] {
                    "errno" => Err(w[4].parse().unwrap()),
                    n => Ok(n.parse().unwrap()),
                };
                f.dontneeds.push(Dontneed { ranges, answer });
            }
            other => panic!("{}: unknown record {other:?}", path.display()),
        }
    }
    assert!(
        f.binding > 0 && f.stream > 0 && !f.calls.is_empty(),
        "{}: incomplete recording",
        path.display()
    );
    f
}

/// The `-v N` stream: 1, 2, …, N-1, `\n`, repeated.
fn pattern(period: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let r = (i % period as usize) as u8;
            if r as u32 == period - 1 {
                b'\n'
            } else {
                r + 1
            }
        })
        .collect()
}

/// The cmsgs of one recorded call, decoded by the tool's own parser.
fn decoded(call: &Call) -> Vec<Cmsg> {
    cmsgs(&call.control)
        .collect::<ncdevmem::Result<Vec<_>>>()
        .expect("the tool's parser accepts what the kernel wrote")
}

/// The pieces the kernel had queued, rebuilt from the recorded calls: a piece cut by a call's
/// byte budget (the call returned exactly its iov length) and finished by the next call is one
/// piece again. Returns the pieces and the dma-buf contents they point into.
fn pieces(f: &Fixture) -> (Vec<Piece>, VecMemory) {
    let end = f
        .calls
        .iter()
        .flat_map(|c| c.frags.iter())
        .map(|(off, b)| *off as usize + b.len())
        .max()
        .unwrap_or(0);
    let mut mem = VecMemory::new(end.next_multiple_of(4096));
    let mut out: Vec<Piece> = Vec::new();
    let mut cut_by_bytes = false;
    for call in &f.calls {
        let (mut lin, mut frag) = (0usize, 0usize);
        for (i, c) in decoded(call).into_iter().enumerate() {
            let continues = i == 0 && cut_by_bytes;
            match c {
                Cmsg::Linear { frag_size } => {
                    let bytes = call.linear[lin..lin + frag_size as usize].to_vec();
                    lin += frag_size as usize;
                    match out.last_mut() {
                        Some(Piece::Linear(prev)) if continues => prev.extend(bytes),
                        _ => out.push(Piece::Linear(bytes)),
                    }
                }
                Cmsg::Dmabuf(d) => {
                    let (off, bytes) = &call.frags[frag];
                    frag += 1;
                    assert_eq!(*off, d.frag_offset);
                    mem.write(*off, bytes);
                    match out.last_mut() {
                        Some(Piece::Dmabuf {
                            frag_offset, size, ..
                        }) if continues && *frag_offset + u64::from(*size) == d.frag_offset => {
                            *size += d.frag_size
                        }
                        _ => out.push(Piece::Dmabuf {
                            frag_offset: d.frag_offset,
                            size: d.frag_size,
                            dmabuf_id: d.dmabuf_id,
                            token: None,
                        }),
                    }
                }
                Cmsg::Other { level, ty, len } => panic!("cmsg {level}/{ty} ({len} bytes)"),
            }
        }
        cut_by_bytes = call.ret == call.iov;
    }
    (out, mem)
}

#[test]
fn the_tool_parses_every_real_control_buffer() {
    let f = load();
    let mut next_token = 1;
    for (n, call) in f.calls.iter().enumerate() {
        let cm = decoded(call);
        assert_eq!(
            cm.len() * 40,
            call.control.len(),
            "call {n}: 40 bytes a cmsg"
        );
        assert_eq!(
            call.flags, 0,
            "call {n}: a full control buffer is no MSG_CTRUNC"
        );
        let (mut linear, mut total) = (0usize, 0usize);
        for c in &cm {
            match c {
                Cmsg::Linear { frag_size } => {
                    linear += *frag_size as usize;
                    total += *frag_size as usize;
                }
                Cmsg::Dmabuf(d) => {
                    total += d.frag_size as usize;
                    assert_eq!(d.dmabuf_id, f.binding, "call {n}");
                    assert_eq!(d.flags, 0, "call {n}");
                    // No DONTNEED between the calls: tokens count up from 1.
                    assert_eq!(d.frag_token, next_token, "call {n}: lowest free token");
                    next_token += 1;
                }
                Cmsg::Other { .. } => panic!("call {n}: {c:?}"),
            }
        }
        assert_eq!(
            total, call.ret,
            "call {n}: the cmsgs account for every byte returned"
        );
        assert_eq!(linear, call.linear.len(), "call {n}");
        assert!(total <= call.iov, "call {n}");
    }
    // The raw bytes of a linear cmsg: offset, token, id and flags all zero.
    let first = &f.calls[0].control;
    let lin = first
        .chunks(40)
        .find(|c| i32::from_ne_bytes(c[12..16].try_into().unwrap()) == 78)
        .expect("a SCM_DEVMEM_LINEAR cmsg in the first call");
    assert_eq!(u64::from_ne_bytes(lin[0..8].try_into().unwrap()), 40);
    assert_eq!(&lin[16..24], &[0; 8], "frag_offset");
    assert_eq!(&lin[28..40], &[0; 12], "frag_token, dmabuf_id, flags");
}

#[test]
fn the_recording_is_the_pattern_stream_in_order() {
    let f = load();
    let mut stream = Vec::new();
    for call in &f.calls {
        let (mut lin, mut frag) = (0usize, 0usize);
        for c in decoded(call) {
            match c {
                Cmsg::Linear { frag_size } => {
                    stream.extend_from_slice(&call.linear[lin..lin + frag_size as usize]);
                    lin += frag_size as usize;
                }
                Cmsg::Dmabuf(_) => {
                    stream.extend_from_slice(&call.frags[frag].1);
                    frag += 1;
                }
                Cmsg::Other { .. } => unreachable!(),
            }
        }
    }
    assert_eq!(stream.len(), f.stream);
    assert!(
        stream == pattern(f.period, f.stream),
        "stream differs from -v {}",
        f.period
    );
}

#[test]
fn scripted_socket_answers_recvmsg_like_the_kernel() {
    let f = load();
    let (pieces, _) = pieces(&f);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    for (n, call) in f.calls.iter().enumerate() {
        let mut data = vec![0u8; call.iov];
        let mut control = vec![0u8; call.control_cap];
        let out = sock
            .recvmsg(&mut data, &mut control, true)
            .unwrap_or_else(|e| panic!("call {n}: errno {e}"));
        assert_eq!(
            (out.bytes, out.msg_flags, out.control_len),
            (call.ret, call.flags, call.control.len()),
            "call {n} (iov {}, control {}): return, flags, control length",
            call.iov,
            call.control_cap
        );
        assert_eq!(
            &control[..out.control_len],
            &call.control[..],
            "call {n}: control bytes (cmsgs, tokens)"
        );
        assert_eq!(
            &data[..call.linear.len()],
            &call.linear[..],
            "call {n}: linear bytes"
        );
    }
    let mut data = vec![0u8; 4096];
    let mut control = vec![0u8; 4096];
    assert_eq!(
        sock.recvmsg(&mut data, &mut control, true).unwrap().bytes,
        0
    );
}

#[test]
fn scripted_socket_answers_dontneed_like_the_kernel() {
    let f = load();
    let (pieces, _) = pieces(&f);
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    for call in &f.calls {
        let mut data = vec![0u8; call.iov];
        let mut control = vec![0u8; call.control_cap];
        sock.recvmsg(&mut data, &mut control, true).unwrap();
    }
    assert!(!f.dontneeds.is_empty());
    for (n, d) in f.dontneeds.iter().enumerate() {
        assert_eq!(
            sock.dontneed(&d.ranges),
            d.answer,
            "DONTNEED {n} ({} ranges from token {})",
            d.ranges.len(),
            d.ranges[0].token_start
        );
    }
    assert!(sock.outstanding_tokens().is_empty());
}

#[test]
fn receive_loop_validates_the_recorded_stream() {
    let f = load();
    let (pieces, mem) = pieces(&f);
    let linear = pieces
        .iter()
        .filter(|p| matches!(p, Piece::Linear(_)))
        .count() as u64;
    let dmabuf = pieces.len() as u64 - linear;
    let mut sock = ScriptedSocket::new(vec![Step::Data(pieces), Step::Eof]);
    let cfg = RxConfig {
        validate: Some(ncdevmem::validate::StreamSpec::Periodic(f.period)),
        ..RxConfig::devmem(f.binding, 4096)
    };
    let (mut out, mut log) = (Vec::new(), Vec::new());
    let (stats, result) = receive_logged(
        &mut sock,
        Some(&mem),
        &cfg,
        &AtomicI32::new(0),
        &mut out,
        &mut log,
    );
    result.unwrap_or_else(|e| panic!("{e}; log: {}", String::from_utf8_lossy(&log)));
    assert_eq!(stats.bytes, f.stream as u64);
    assert_eq!(stats.validated_bytes, f.stream as u64);
    assert_eq!(stats.mismatches, 0);
    assert_eq!((stats.linear_frags, stats.dmabuf_frags), (linear, dmabuf));
    assert_eq!(stats.tokens_released, dmabuf);
    assert!(sock.outstanding_tokens().is_empty());
}
