//! Running the NET_RX softirq on every CPU, so sk_buffs whose free was deferred to another CPU
//! are freed now.
//!
//! A socket that consumes a received sk_buff on a CPU other than the one that allocated it
//! (TCP `recvmsg`, also the devmem and io_uring zcrx paths) does not free it there: since 6.1
//! `skb_attempt_defer_free` (net/core/skbuff.c) queues it to the allocating CPU, which frees it
//! the next time it runs `net_rx_action` (net/core/dev.c `skb_defer_free_flush`), or when its
//! list reaches half of `net.core.skb_defer_max`. Until then the sk_buff keeps its frags — for
//! devmem, the niovs of the binding, so the page pool cannot be destroyed and the dma-buf's
//! pages (the udmabuf's hugepages) stay pinned. On an idle CPU that can take a minute (measured
//! in the VM suite's guest: up to 78 s; see docs/kernel-7.3-devmem-nic.md).
//!
//! [`run_net_rx_on_each_cpu`] makes each CPU the calling thread may run on process one loopback
//! datagram: loopback delivers on the sending CPU (`loopback_xmit` → `__netif_rx` → that CPU's
//! backlog), and the softirq that delivers it flushes that CPU's deferred frees first.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use nix::unistd::{sysconf, SysconfVar};

use crate::error::{Error, Result};
use crate::sys::cpu;

/// Which CPUs ran the softirq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuReach {
    /// CPUs that processed a datagram (those of the thread's affinity mask).
    pub reached: usize,
    /// Online CPUs (`_SC_NPROCESSORS_ONLN`); more than `reached` when the thread may not run
    /// on all of them (taskset, cpusets): deferred frees on the others wait.
    pub online: usize,
}

/// Pins the calling thread to each CPU of its affinity mask in turn and sends one UDP datagram
/// to itself over IPv4 loopback on each (the datagram stays in the socket's receive queue and is
/// dropped with it), then restores the thread's affinity. Returns how many CPUs ran the
/// softirq, of how many are online.
///
/// Errors: `Error::Sys` from `sched_getaffinity`/`sched_setaffinity` ([`cpu`]), or from the
/// socket when the namespace's loopback cannot carry the datagram (`lo` down: no route to
/// 127.0.0.1). The affinity is restored before any error is returned.
pub fn run_net_rx_on_each_cpu() -> Result<CpuReach> {
    let original = cpu::allowed_cpus()?;
    let sock = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .map_err(|e| Error::io("bind(UDP 127.0.0.1:0)", &e))?;
    let to = sock
        .local_addr()
        .map_err(|e| Error::io("getsockname(UDP)", &e))?;
    let mut kicked = 0;
    let mut first_error = None;
    for &c in &original {
        let sent = cpu::pin_current_thread(c).and_then(|()| {
            sock.send_to(&[0], to)
                .map_err(|e| Error::io(format!("sendto(UDP {to}) on cpu {c}"), &e))
        });
        match sent {
            Ok(_) => kicked += 1,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let restored = cpu::set_affinity(&original);
    match (first_error, restored) {
        (_, Err(e)) => Err(e),
        (Some(e), Ok(())) if kicked == 0 => Err(e),
        _ => Ok(CpuReach {
            reached: kicked,
            online: online_cpus().max(kicked),
        }),
    }
}

/// Online CPUs (`sysconf(_SC_NPROCESSORS_ONLN)`; 1 when it cannot tell).
pub fn online_cpus() -> usize {
    match sysconf(SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => usize::try_from(n).unwrap_or(1),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;

    /// On this machine's loopback every allowed CPU gets its datagram, and the thread's
    /// affinity is what it was.
    #[test]
    fn every_allowed_cpu_runs_the_softirq_and_affinity_is_restored() {
        const TEST: &str = "every_allowed_cpu_runs_the_softirq_and_affinity_is_restored";
        let me = Pid::from_raw(0);
        let before = sched_getaffinity(me).expect("sched_getaffinity");
        let allowed = (0..CpuSet::count())
            .filter(|&c| before.is_set(c).unwrap_or(false))
            .count();
        match run_net_rx_on_each_cpu() {
            Ok(r) => {
                assert_eq!(r.reached, allowed);
                assert!(r.online >= r.reached, "{r:?}");
            }
            // A test namespace without an IPv4 loopback: nothing to check here.
            Err(e) if e.errno() == Some(libc::EADDRNOTAVAIL) => {
                eprintln!("skip: {TEST}: no 127.0.0.1 here: {e}");
            }
            Err(e) => panic!("{e}"),
        }
        let after = sched_getaffinity(me).expect("sched_getaffinity");
        assert!(
            (0..CpuSet::count()).all(|c| before.is_set(c).ok() == after.is_set(c).ok()),
            "affinity not restored"
        );
    }
}
