//! Where a table's numbers came from ([`Provenance`]): the tool's version and commit, the
//! host, the kernel release and command line, the CPU model, the online CPUs and their
//! frequency governor, the NIC's driver, firmware and bus (`SIOCETHTOOL` drvinfo), the bound
//! queues' IRQs (netdev `napi-get`) and their affinity, and the sysctls that shape a run.
//! [`collect`] reads them (plain file reads, one drvinfo ioctl, two netdev dumps); what
//! cannot be read is `None`, never an error. The parsing and the one-line footer are pure.

use std::collections::BTreeMap;

use crate::figures::cpu::{format_cpu_list, parse_cpu_list};
use crate::summary::sweep::{NicProvenance, Provenance, QueueIrq};

/// The sysctls recorded with every sweep: the socket buffer limits and defaults, the
/// congestion control, busy polling, the backlog and the hugepages a binding takes.
pub(crate) const SYSCTLS: [&str; 12] = [
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.optmem_max",
    "net.core.netdev_max_backlog",
    "net.core.busy_poll",
    "net.core.busy_read",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_timestamps",
    "vm.nr_hugepages",
];

fn read_trimmed(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// The CPU model from the text of `/proc/cpuinfo`: x86's `model name`, else the `Model`,
/// `cpu model` or `Hardware` line other architectures have (the first CPU's).
pub(crate) fn cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Model", "cpu model", "Hardware"] {
        for line in cpuinfo.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if k.trim() == key && !v.trim().is_empty() {
                return Some(v.trim().to_string());
            }
        }
    }
    None
}

/// The governors of the CPUs in one phrase: `performance` when they agree, else each
/// governor with its CPUs (`cpu0-1 performance, cpu2 powersave`); CPUs without one are left
/// out; `None` when none has one.
pub(crate) fn governors(per_cpu: &[(usize, Option<String>)]) -> Option<String> {
    let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (cpu, g) in per_cpu {
        if let Some(g) = g {
            by.entry(g.as_str()).or_default().push(*cpu);
        }
    }
    match by.len() {
        0 => None,
        1 => by.keys().next().map(|g| g.to_string()),
        _ => {
            let mut parts: Vec<(usize, String)> = by
                .iter()
                .map(|(g, cpus)| (cpus[0], format!("cpu{} {g}", format_cpu_list(cpus))))
                .collect();
            parts.sort();
            Some(
                parts
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }
    }
}

/// This host's provenance, for a run on `ifname` (`None`: no NIC) binding `queues`.
pub(crate) fn collect(ifname: Option<&str>, queues: &[u32]) -> Provenance {
    let online = read_trimmed("/sys/devices/system/cpu/online");
    let cpus = online
        .as_deref()
        .and_then(|o| parse_cpu_list(o).ok())
        .unwrap_or_default();
    let per_cpu: Vec<(usize, Option<String>)> = cpus
        .iter()
        .map(|&c| {
            (
                c,
                read_trimmed(&format!(
                    "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
                )),
            )
        })
        .collect();
    Provenance {
        version: crate::VERSION.to_string(),
        host_name: read_trimmed("/proc/sys/kernel/hostname"),
        kernel_release: crate::sys::kernel_release().ok(),
        kernel_cmdline: read_trimmed("/proc/cmdline"),
        cpu_model: std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| cpu_model(&t)),
        online_cpus: online,
        governor: governors(&per_cpu),
        nic: ifname.and_then(nic),
        queue_irqs: ifname.map(|i| queue_irqs(i, queues)).unwrap_or_default(),
        sysctls: SYSCTLS
            .iter()
            .map(|name| {
                let path = format!("/proc/sys/{}", name.replace('.', "/"));
                // tcp_rmem's three numbers are tab-separated: one space each.
                let value =
                    read_trimmed(&path).map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "));
                (name.to_string(), value)
            })
            .collect(),
    }
}

/// `ifname`'s driver, version, firmware and bus (drvinfo); `None` when it cannot be read.
fn nic(ifname: &str) -> Option<NicProvenance> {
    let d = crate::sys::ethtool_ioctl::EthtoolIoctl::open(ifname)
        .ok()?
        .drvinfo()
        .ok()?;
    Some(NicProvenance {
        ifname: ifname.to_string(),
        driver: d.driver,
        driver_version: d.version,
        firmware: d.fw_version,
        bus: d.bus_info,
    })
}

/// The IRQ of each of `queues` of `ifname` (its NAPI instance's, netdev `queue-get` and
/// `napi-get`) and that IRQ's affinity; empty when the device or the dumps cannot be read.
fn queue_irqs(ifname: &str, queues: &[u32]) -> Vec<QueueIrq> {
    let Ok(ifindex) = crate::sys::if_index(ifname) else {
        return Vec::new();
    };
    let Ok(mut nd) = crate::netlink::netdev::Netdev::open() else {
        return Vec::new();
    };
    let rx = nd.queue_get_dump(ifindex).unwrap_or_default();
    let napis = nd.napi_get_dump(ifindex).unwrap_or_default();
    queues
        .iter()
        .map(|&q| {
            let napi_id = rx
                .iter()
                .find(|i| i.id == q && i.queue_type == crate::netlink::netdev::QueueType::Rx)
                .and_then(|i| i.napi_id);
            let irq = napi_id.and_then(|id| napis.iter().find(|n| n.id == id)?.irq);
            QueueIrq {
                queue: q,
                napi_id,
                irq,
                affinity: irq
                    .and_then(|i| read_trimmed(&format!("/proc/irq/{i}/smp_affinity_list"))),
            }
        })
        .collect()
}

/// The provenance in one line, for the table's footer: `env: ncdevmem-rs 0.1.0 (commit …),
/// host dut1, kernel 6.18.0, Intel Xeon …, CPUs 0-15 (performance), eth0 mlx5_core fw
/// 22.39.1002 bus 0000:3b:00.0, IRQs q4:120@4 q5:121@5`; control characters written as
/// `\u{…}` ([`super::proto::printable`]).
pub(crate) fn one_line(p: &Provenance) -> String {
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
    let mut parts = vec![
        format!("{} {}", crate::cli::PROGRAM, p.version),
        format!("host {}", or(&p.host_name)),
        format!("kernel {}", or(&p.kernel_release)),
        or(&p.cpu_model),
        format!(
            "CPUs {}{}",
            or(&p.online_cpus),
            p.governor
                .as_ref()
                .map(|g| format!(" ({g})"))
                .unwrap_or_default()
        ),
    ];
    if let Some(n) = &p.nic {
        let mut nic = format!("{} {}", n.ifname, n.driver);
        if !n.firmware.is_empty() {
            nic.push_str(&format!(" fw {}", n.firmware));
        }
        if !n.bus.is_empty() {
            nic.push_str(&format!(" bus {}", n.bus));
        }
        parts.push(nic);
    }
    let irqs: Vec<String> = p
        .queue_irqs
        .iter()
        .filter_map(|q| {
            Some(format!(
                "q{}:{}@{}",
                q.queue,
                q.irq?,
                q.affinity.as_deref().unwrap_or("?")
            ))
        })
        .collect();
    if !irqs.is_empty() {
        parts.push(format!("IRQs {}", irqs.join(" ")));
    }
    // A peer's provenance is the other host's text: its control characters escaped, so it
    // can neither forge a footer line nor move the terminal's cursor.
    super::proto::printable(&parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_and_governors_are_read_as_written() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n";
        assert_eq!(
            cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";
        assert_eq!(
            cpu_model(arm).as_deref(),
            Some("Raspberry Pi 4 Model B Rev 1.4")
        );
        assert_eq!(cpu_model("processor : 0\n"), None);
        let same = [
            (0, Some("performance".into())),
            (1, Some("performance".into())),
        ];
        assert_eq!(governors(&same).as_deref(), Some("performance"));
        let mixed = [
            (0, Some("performance".into())),
            (1, Some("performance".into())),
            (2, Some("powersave".into())),
            (3, None),
        ];
        assert_eq!(
            governors(&mixed).as_deref(),
            Some("cpu0-1 performance, cpu2 powersave")
        );
        assert_eq!(governors(&[(0, None)]), None);
    }

    #[test]
    fn the_footer_line_names_what_it_has() {
        let p = Provenance {
            version: "0.1.0 (commit abc, target x)".into(),
            host_name: Some("dut1".into()),
            kernel_release: Some("6.18.0".into()),
            kernel_cmdline: Some("ro quiet".into()),
            cpu_model: None,
            online_cpus: Some("0-1".into()),
            governor: Some("performance".into()),
            nic: Some(NicProvenance {
                ifname: "eth0".into(),
                driver: "mlx5_core".into(),
                driver_version: "6.18".into(),
                firmware: "22.39".into(),
                bus: "0000:3b:00.0".into(),
            }),
            queue_irqs: vec![
                QueueIrq {
                    queue: 4,
                    napi_id: Some(9),
                    irq: Some(120),
                    affinity: Some("4".into()),
                },
                QueueIrq {
                    queue: 5,
                    napi_id: None,
                    irq: None,
                    affinity: None,
                },
            ],
            sysctls: BTreeMap::new(),
        };
        assert_eq!(
            one_line(&p),
            "ncdevmem-rs 0.1.0 (commit abc, target x), host dut1, kernel 6.18.0, ?, CPUs 0-1 \
             (performance), eth0 mlx5_core fw 22.39 bus 0000:3b:00.0, IRQs q4:120@4"
        );
        // A peer's text cannot forge a line or move the cursor.
        let forged = Provenance {
            host_name: Some("x\nsweep: pass: all 1 planned runs passed".into()),
            cpu_model: Some("\u{1b}[1A\u{1b}[2K".into()),
            ..p
        };
        let line = one_line(&forged);
        assert!(!line.chars().any(char::is_control), "{line}");
        assert!(
            line.contains("host x\\u{a}sweep: pass") && line.contains("\\u{1b}[1A"),
            "{line}"
        );
    }

    /// This host's provenance has what this machine has: the version, the kernel, the CPUs.
    #[test]
    fn this_host_is_described() {
        let p = collect(None, &[]);
        assert_eq!(p.version, crate::VERSION);
        assert!(p.kernel_release.is_some());
        assert!(p.online_cpus.is_some());
        assert_eq!(p.sysctls.len(), SYSCTLS.len());
        assert!(p.sysctls["net.ipv4.tcp_rmem"]
            .as_deref()
            .is_some_and(|v| v.split(' ').count() == 3));
        assert!(p.nic.is_none() && p.queue_irqs.is_empty());
    }
}
