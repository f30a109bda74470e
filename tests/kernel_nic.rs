//! NIC setup against the real kernel: the undo machinery, probe mode and the capability report
//! with `RealNic` on a veth pair in a fresh namespace (created here, always removed). veth has
//! channels but no ring parameters, RSS or ntuple, so setup must skip with "driver does not
//! support …" having changed nothing. Needs root; prints `skip: <test>: <reason>` otherwise.

mod common;

use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use common::{NetNs, NetNsPair, VETH_A};
use ncdevmem::error::Error;
use ncdevmem::netlink::netdev::BindRxRequest;
use ncdevmem::nic::guards::{ChannelsGuard, SharedNic};
use ncdevmem::nic::probe::{run_probe, ProbeParams};
use ncdevmem::nic::real::RealNic;
use ncdevmem::nic::report::{HostCaps, NicReport};
use ncdevmem::nic::setup::{run_with_setup, FlowTarget, ServerPlan};
use ncdevmem::nic::snapshot::NicSnapshot;
use ncdevmem::nic::ChannelsSet;

const BIN: &str = env!("CARGO_BIN_EXE_ncdevmem-rs");

fn veth(test: &str) -> Option<NetNs> {
    if let Some(reason) = common::skip_reason() {
        common::print_skip(test, &reason);
        return None;
    }
    Some(NetNs::with_veth("vx0", "vx1").expect("netns with veth"))
}

/// Any open descriptor serves as the "dma-buf": on veth the kernel refuses the device before
/// it looks at the fd (`docs/kernel-interface.md#bind-rx-and-bind-tx`).
fn memfd() -> std::fs::File {
    std::fs::File::open("/dev/null").expect("open /dev/null")
}

fn snapshot(nic: &SharedNic) -> NicSnapshot {
    nic.with(|n| Ok(NicSnapshot::take(n))).expect("snapshot")
}

#[test]
fn server_setup_on_veth_skips_and_changes_nothing() {
    let Some(ns) = veth("server_setup_on_veth_skips_and_changes_nothing") else {
        return;
    };
    let _in = ns.enter().expect("enter netns");
    let nic = SharedNic::new(Box::new(RealNic::open("vx0").expect("open vx0")));
    let before = snapshot(&nic);
    let buf = memfd();
    let plan = ServerPlan {
        start_queue: 1,
        num_queues: 1,
        flow: FlowTarget {
            server: "198.51.100.1".parse::<IpAddr>().unwrap(),
            client: None,
            port: 5201,
        },
        flows: 1,
        skip_nic_config: false,
    };
    let mut req = BindRxRequest::new(nic.ifindex(), std::os::fd::AsFd::as_fd(&buf), &[1]);
    req = req.ifname("vx0");
    let mut body_ran = false;
    let r = run_with_setup(&nic, &plan, &req, true, Duration::from_millis(200), |_| {
        body_ran = true;
        Ok(())
    });
    let e = r.expect_err("veth cannot be configured for devmem");
    assert!(matches!(e, Error::Skip(_)), "{e}");
    assert!(e.to_string().contains("does not support"), "{e}");
    assert!(!body_ran);
    assert_eq!(before, snapshot(&nic), "{:?}", before.diff(&snapshot(&nic)));
}

#[test]
fn channel_change_on_veth_is_applied_and_restored() {
    let Some(ns) = veth("channel_change_on_veth_is_applied_and_restored") else {
        return;
    };
    let _in = ns.enter().expect("enter netns");
    let nic = SharedNic::new(Box::new(RealNic::open("vx0").expect("open vx0")));
    let before = snapshot(&nic);
    let rx_queues = |nic: &SharedNic| {
        nic.with(|n| n.queues())
            .expect("queue-get dump")
            .iter()
            .filter(|q| q.queue_type == ncdevmem::netlink::netdev::QueueType::Rx)
            .count()
    };
    assert_eq!(rx_queues(&nic), 1);
    {
        let _g = ChannelsGuard::apply(
            &nic,
            ChannelsSet {
                rx: Some(2),
                tx: Some(2),
                combined: None,
            },
        )
        .expect("veth takes rx=2 tx=2");
        assert_eq!(rx_queues(&nic), 2);
    } // dropped: restored best-effort
    assert_eq!(rx_queues(&nic), 1);
    let g = ChannelsGuard::apply(
        &nic,
        ChannelsSet {
            rx: Some(2),
            tx: Some(2),
            combined: None,
        },
    )
    .expect("apply again");
    g.restore().expect("explicit restore");
    assert_eq!(before, snapshot(&nic));
}

#[test]
fn probe_on_veth_is_a_skip_with_a_reason() {
    let Some(ns) = veth("probe_on_veth_is_a_skip_with_a_reason") else {
        return;
    };
    let _in = ns.enter().expect("enter netns");
    let nic = SharedNic::new(Box::new(RealNic::open("vx0").expect("open vx0")));
    let before = snapshot(&nic);
    let buf = memfd();
    let mut out = Vec::new();
    let outcome = run_probe(
        &nic,
        &ProbeParams {
            start: 1,
            num: 1,
            dmabuf_fd: buf.as_raw_fd() as u32,
            rx_page_size: None,
            quiet: true,
            teardown_wait: Duration::from_millis(200),
            memory: None,
        },
        &mut out,
    );
    let e = outcome.verdict().expect_err("veth has no devmem");
    assert_eq!(e.exit_code(), 4, "{e}");
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("skip"), "{text}");
    assert_eq!(before, snapshot(&nic));
}

#[test]
fn report_parses_real_netdev_and_ethtool_answers() {
    let Some(ns) = veth("report_parses_real_netdev_and_ethtool_answers") else {
        return;
    };
    let _in = ns.enter().expect("enter netns");
    let mut nic = RealNic::open("vx0").expect("open vx0");
    let report = NicReport::gather(&mut nic, HostCaps::probe(None, None), true);
    let text = report.render_text();
    assert!(text.contains("capability report for vx0"), "{text}");
    assert!(text.contains("rx 0:"), "{text}");
    assert!(text.contains("no   devmem RX driver support"), "{text}");
    assert!(text.contains("EOPNOTSUPP"), "{text}");
    // The host's dma-buf heaps: none on 6.18 (no CONFIG_DMABUF_HEAPS), the system heap in the
    // 7.3 VM.
    let heaps = if std::path::Path::new("/dev/dma_heap/system").exists() {
        "yes  dma-buf heaps: system"
    } else {
        "no   dma-buf heaps: no /dev/dma_heap (ENOENT (No such file or directory)); the kernel \
         needs CONFIG_DMABUF_HEAPS"
    };
    assert!(text.contains(heaps), "{text}");
    // The driver (ETHTOOL_GDRVINFO) and the kernel release (uname -r) are named.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let release = release.trim();
    assert!(text.contains("\n  driver:    veth"), "{text}");
    assert!(
        text.contains(&format!("\n  kernel:    {release}\n")),
        "{text}"
    );
    let json = serde_json::to_value(report.figure()).expect("the report serializes");
    assert!(json.is_object(), "{json}");
    assert_eq!(json["driver"]["name"], "veth", "{json}");
    assert_eq!(json["host"]["kernel_release"], release, "{json}");
}

#[test]
fn report_mode_of_the_binary_on_veth() {
    if let Some(reason) = common::skip_reason() {
        common::print_skip("report_mode_of_the_binary_on_veth", &reason);
        return;
    }
    let p = NetNsPair::new().expect("pair");
    let out = Command::new("ip")
        .args(["netns", "exec", p.a.name(), BIN, "--report", "-f", VETH_A])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("capability report for {VETH_A}")),
        "{stdout}"
    );
}
