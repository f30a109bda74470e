//! io_uring zcrx against the real kernel: what registration answers on a veth queue, for an
//! unknown ifindex, on a ring without `DEFER_TASKRUN`, with `ZCRX_REG_NODEV` and without
//! `CAP_NET_ADMIN` — through the binary (exit 4 with the reason) and through the library (the
//! errno itself). Each test runs in a fresh network namespace (created here, always removed)
//! and sends traffic only to its loopback. Needs root; prints `skip: <test>: <reason>`
//! otherwise.
//!
//! Facts these tests pin (kernel 6.18, `docs/kernel-interface.md#zcrx-registration`): no device
//! here supports zcrx
//! (`EOPNOTSUPP`, and the device check comes before the queue range check), `ENODEV` for an
//! unknown ifindex, `EINVAL` for a ring without `DEFER_TASKRUN` and for the unknown flag
//! `ZCRX_REG_NODEV`, `EPERM` first of all without `CAP_NET_ADMIN`. On a kernel with
//! `ZCRX_REG_NODEV` (7.3) the device-less test instead receives a validated pattern stream.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::NetNs;
use ncdevmem::error::Error;
use ncdevmem::uring::{self, RingParams, Zcrx, ZcrxParams, ZcrxTarget};

const BIN: &str = env!("CARGO_BIN_EXE_ncdevmem-rs");
const PORT: &str = "5201";

fn netns(test: &str) -> Option<NetNs> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    Some(NetNs::with_veth("vz0", "vz1").expect("netns with veth"))
}

fn ns_cmd(ns: &NetNs, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name(), BIN]).args(args);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn device_params(ifindex: u32, rxq: u32) -> ZcrxParams {
    ZcrxParams {
        target: ZcrxTarget::Device {
            ifname: format!("ifindex{ifindex}"),
            ifindex,
            rxq,
        },
        area_len: 1 << 20,
        hugetlb: false,
        rq_entries: 256,
        rx_buf_len: None,
    }
}

/// The kernel's errno for a registration, through the library (no skip mapping).
fn register_errno(ring_params: &RingParams, p: &ZcrxParams) -> i32 {
    let ring = uring::create_ring(ring_params).expect("create io_uring");
    match Zcrx::register(ring, p) {
        Ok(z) => panic!("registration unexpectedly succeeded: {z:?}"),
        Err(e @ Error::Sys { .. }) => {
            assert!(
                e.to_string()
                    .starts_with("io_uring_register(IORING_REGISTER_ZCRX_IFQ) on "),
                "{e}"
            );
            e.errno().expect("errno")
        }
        Err(e) => panic!("expected a syscall error, got {e}"),
    }
}

fn assert_skip(out: &Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "missing {n:?} in: {err}");
    }
}

#[test]
fn veth_queue_is_a_skip_naming_eopnotsupp() {
    let Some(ns) = netns("veth_queue_is_a_skip_naming_eopnotsupp") else {
        return;
    };
    let out = ns_cmd(
        &ns,
        &[
            "-l", "--zcrx", "-f", "vz0", "-s", "::1", "-p", PORT, "-n", "-t", "0", "-q", "1",
        ],
    )
    .output()
    .expect("run ncdevmem-rs");
    assert_skip(
        &out,
        &[
            "device/queue does not support io_uring zcrx",
            "vz0 (ifindex",
            "EOPNOTSUPP",
        ],
    );
    // The device check comes before the queue range check: queue 99 gets the same answer.
    let _in = ns.enter().expect("enter netns");
    let ifindex = ns.ifindex("vz0").expect("ifindex");
    assert_eq!(
        register_errno(&RingParams::default(), &device_params(ifindex, 99)),
        libc::EOPNOTSUPP
    );
}

#[test]
fn unknown_ifindex_is_enodev_through_the_library() {
    let Some(ns) = netns("unknown_ifindex_is_enodev_through_the_library") else {
        return;
    };
    let _in = ns.enter().expect("enter netns");
    let p = device_params(9999, 0);
    assert_eq!(register_errno(&RingParams::default(), &p), libc::ENODEV);
    // ENODEV is a failure, not a "cannot here" skip.
    let ring = uring::create_ring(&RingParams::default()).expect("ring");
    let e = Zcrx::register(ring, &p).expect_err("no ifindex 9999");
    assert_eq!(uring::register_refusal(e, &p).exit_code(), 1);
}

#[test]
fn ring_without_defer_taskrun_is_einval_through_the_library() {
    let Some(ns) = netns("ring_without_defer_taskrun_is_einval_through_the_library") else {
        return;
    };
    let _in = ns.enter().expect("enter netns");
    let lo = ns.ifindex("lo").expect("ifindex of lo");
    let no_defer = RingParams {
        defer_taskrun: false,
        ..RingParams::default()
    };
    assert_eq!(
        register_errno(&no_defer, &device_params(lo, 0)),
        libc::EINVAL
    );
    // With DEFER_TASKRUN the same request reaches the device check.
    assert_eq!(
        register_errno(&RingParams::default(), &device_params(lo, 0)),
        libc::EOPNOTSUPP
    );
}

#[test]
fn probes_pass_as_root() {
    if let Some(reason) = common::skip_reason() {
        common::print_skip("probes_pass_as_root", &reason);
        return;
    }
    let ring = uring::create_ring(&RingParams::default()).expect("ring");
    uring::require_recv_zc(&ring).expect("RECV_ZC is supported (6.15+)");
    uring::require_net_admin(&ring).expect("root has CAP_NET_ADMIN");
}

/// Without `ZCRX_REG_NODEV` (6.18) the binary skips at registration, before it listens; with
/// it (7.3) it receives 8 MiB of the `-v 7` pattern over the namespace's loopback.
#[test]
fn nodev_skips_on_kernels_without_it_or_receives_over_loopback() {
    let Some(ns) = netns("nodev_skips_on_kernels_without_it_or_receives_over_loopback") else {
        return;
    };
    let json = std::env::temp_dir().join(format!("ncdevmem-zcrx-{}.json", std::process::id()));
    let json_s = json.to_str().expect("utf-8 temp path");
    let mut rx = ns_cmd(
        &ns,
        &[
            "-l",
            "--zcrx",
            "--zcrx-nodev",
            "-s",
            "::1",
            "-p",
            PORT,
            "-v",
            "7",
            "--expect-bytes",
            "8M",
            "--timeout",
            "20",
            "--json",
            json_s,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn receiver");
    // A kernel without NODEV answers at registration, before the receiver listens.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && rx.try_wait().expect("try_wait").is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    if rx.try_wait().expect("try_wait").is_some() {
        let out = rx.wait_with_output().expect("receiver output");
        assert_skip(&out, &["kernel has no ZCRX_REG_NODEV", "EINVAL"]);
        // A skip before the receive still writes its verdict.
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&json).expect("a skip writes its verdict to --json"),
        )
        .expect("one JSON object");
        std::fs::remove_file(&json).ok();
        assert_eq!(v["mode"], "io_uring zcrx", "{v}");
        assert_eq!(v["verdict"], "skip", "{v}");
        assert_eq!(v["ok"], false, "{v}");
        // The set-up's steps it finished: not the registration it was refused.
        assert_eq!(
            v["setup"],
            serde_json::json!([
                {"step": "start", "ms": v["setup"][0]["ms"]},
                {"step": "checks", "ms": v["setup"][1]["ms"]},
                {"step": "hugepages", "ms": v["setup"][2]["ms"]}
            ]),
            "{v}"
        );
        return;
    }
    let tx = ns_cmd(
        &ns,
        &[
            "--send-pattern",
            "8M",
            "-s",
            "::1",
            "-p",
            PORT,
            "-v",
            "7",
            "--timeout",
            "10",
        ],
    )
    .output()
    .expect("run sender");
    let out = rx.wait_with_output().expect("receiver output");
    assert!(tx.status.success(), "sender: {}", text(&tx.stderr));
    assert!(out.status.success(), "receiver: {}", text(&out.stderr));
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("summary")).expect("json");
    std::fs::remove_file(&json).ok();
    assert_eq!(j["mode"], "io_uring zcrx");
    assert_eq!(j["bytes"], 8u64 << 20);
    assert_eq!(j["validated_bytes"], 8u64 << 20);
    assert_eq!(j["mismatches"], 0);
    assert_eq!(j["zcrx_buffers_returned"], j["zcrx_chunks"]);
    // The set-up's steps of an ifq without a device, in order, each timed; and their line.
    let steps: Vec<&str> = j["setup"]
        .as_array()
        .expect("setup")
        .iter()
        .map(|s| s["step"].as_str().expect("step"))
        .collect();
    assert_eq!(
        steps,
        ["start", "checks", "hugepages", "register", "listen"],
        "{j}"
    );
    assert!(
        j["setup"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["ms"].as_f64().is_some_and(|ms| ms >= 0.0)),
        "{j}"
    );
    assert!(
        text(&out.stderr).contains("set-up before the listen "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn without_cap_net_admin_is_a_skip_naming_eperm() {
    if let Some(reason) = common::skip_reason() {
        common::print_skip("without_cap_net_admin_is_a_skip_naming_eperm", &reason);
        return;
    }
    let out = match Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["-l", "--zcrx", "--zcrx-nodev", "-s", "::1", "-p", PORT])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            common::print_skip(
                "without_cap_net_admin_is_a_skip_naming_eperm",
                &format!("setpriv (util-linux) cannot run: {e}"),
            );
            return;
        }
    };
    let err = text(&out.stderr);
    if !err.contains("ncdevmem-rs:") {
        // The binary never ran (e.g. busybox's setpriv in the VM guest lacks these options).
        common::print_skip(
            "without_cap_net_admin_is_a_skip_naming_eperm",
            &format!(
                "setpriv could not drop privileges here ({}): {err}",
                out.status
            ),
        );
        return;
    }
    if err.contains("io_uring is not permitted") || err.contains("io_uring is disabled") {
        // kernel.io_uring_disabled keeps unprivileged users out before CAP_NET_ADMIN matters.
        assert_eq!(out.status.code(), Some(4), "{err}");
        return;
    }
    assert_skip(&out, &["CAP_NET_ADMIN", "EPERM"]);
}
