//! [`KernelEnv`]: the real [`Env`] of the release waits. It only forwards: netdev netlink for
//! queues and page pools ([`Netdev`]), the hugepage pool ([`HugepageStatus::read`]), the
//! deferred-free nudge ([`crate::sys::softirq`]), the monotonic clock and the stop flag
//! ([`crate::signals`]). Everything happens in the calling thread's network namespace.

use std::time::{Duration, Instant};

use super::Env;
use crate::error::Result;
use crate::netlink::netdev::{Netdev, PagePoolInfo, QueueInfo};
use crate::sys::softirq::CpuReach;
use crate::udmabuf::HugepageStatus;

/// The real kernel, for the device `ifindex` (queue readings; `None`: no device, no queues).
/// The netdev socket is opened at the first reading that needs it.
#[derive(Debug)]
pub(crate) struct KernelEnv {
    ifindex: Option<u32>,
    netdev: Option<Netdev>,
    origin: Instant,
}

impl KernelEnv {
    /// For the device `ifindex` (or none).
    pub(crate) fn new(ifindex: Option<u32>) -> KernelEnv {
        KernelEnv {
            ifindex,
            netdev: None,
            origin: Instant::now(),
        }
    }

    fn netdev(&mut self) -> Result<&mut Netdev> {
        let netdev = self.netdev.take().map_or_else(Netdev::open, Ok)?;
        Ok(self.netdev.insert(netdev))
    }
}

impl Env for KernelEnv {
    fn queues(&mut self) -> Result<Vec<QueueInfo>> {
        match self.ifindex {
            Some(i) => self.netdev()?.queue_get_dump(i),
            None => Ok(Vec::new()),
        }
    }

    fn page_pools(&mut self) -> Result<Vec<PagePoolInfo>> {
        self.netdev()?.page_pool_get_dump()
    }

    fn hugepages(&mut self) -> Result<HugepageStatus> {
        HugepageStatus::read()
    }

    fn return_deferred_buffers(&mut self) -> Result<CpuReach> {
        crate::sys::softirq::run_net_rx_on_each_cpu()
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }

    fn stop_requested(&self) -> Option<i32> {
        crate::signals::stop_requested()
    }
}
