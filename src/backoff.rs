//! Backing off from transient errors (`EINTR`, `EAGAIN`, `ECONNABORTED`, ...): a loop that
//! retries a call the kernel keeps refusing must not spin at 100% CPU until its timeout.
//!
//! [`Backoff`] allows a few immediate retries (a single `EINTR` from a signal, one spurious
//! wake-up), then sleeps 1 ms, 2 ms, 4 ms, ... up to a cap between tries; a success resets it.
//! Every retry loop of the tool (receive, zcrx, accept, connect, send, devmem TX completions,
//! netlink, dma-buf sync) uses one, so a kernel answering `EAGAIN` forever costs a few dozen
//! calls per second instead of millions.

use std::time::Duration;

/// Retries of a streak that go ahead at once, before the first pause.
pub(crate) const IMMEDIATE_RETRIES: u32 = 4;

/// The first pause, doubled on each further retry of the streak.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// The default longest pause between two tries.
pub(crate) const DEFAULT_MAX_PAUSE: Duration = Duration::from_millis(50);

/// The pauses of one retry loop; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Backoff {
    streak: u32,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(DEFAULT_MAX_PAUSE)
    }
}

impl Backoff {
    /// A backoff whose pauses never exceed `max` (at least [`FIRST_PAUSE`]).
    pub(crate) fn new(max: Duration) -> Backoff {
        Backoff {
            streak: 0,
            max: max.max(FIRST_PAUSE),
        }
    }

    /// Notes one more transient failure and returns the pause to take before the next try:
    /// zero for the first [`IMMEDIATE_RETRIES`] of a streak, then [`FIRST_PAUSE`] doubling up
    /// to the cap.
    pub(crate) fn next_pause(&mut self) -> Duration {
        self.streak = self.streak.saturating_add(1);
        if self.streak <= IMMEDIATE_RETRIES {
            return Duration::ZERO;
        }
        let doublings = (self.streak - IMMEDIATE_RETRIES - 1).min(20);
        FIRST_PAUSE
            .checked_mul(1 << doublings)
            .map_or(self.max, |p| p.min(self.max))
    }

    /// [`next_pause`](Self::next_pause), and sleeps it.
    pub(crate) fn pause(&mut self) {
        let p = self.next_pause();
        if !p.is_zero() {
            std::thread::sleep(p);
        }
    }

    /// A try succeeded: the next failure starts a new streak.
    pub(crate) fn reset(&mut self) {
        self.streak = 0;
    }

    /// Failures in the current streak.
    #[cfg(test)]
    pub(crate) fn streak(&self) -> u32 {
        self.streak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_then_doubling_up_to_the_cap_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(10));
        let ms = |b: &mut Backoff| b.next_pause().as_millis();
        let got: Vec<u128> = (0..10).map(|_| ms(&mut b)).collect();
        assert_eq!(got, vec![0, 0, 0, 0, 1, 2, 4, 8, 10, 10]);
        assert_eq!(b.streak(), 10);
        b.reset();
        assert_eq!(b.next_pause(), Duration::ZERO);
        // A very long streak stays at the cap and never overflows.
        let mut b = Backoff::default();
        for _ in 0..10_000 {
            assert!(b.next_pause() <= DEFAULT_MAX_PAUSE);
        }
        assert_eq!(b.next_pause(), DEFAULT_MAX_PAUSE);
        // A cap below the first pause is raised to it.
        assert_eq!(Backoff::new(Duration::ZERO).max, FIRST_PAUSE);
    }

    /// One second of failures costs a bounded number of tries.
    #[test]
    fn a_second_of_failures_is_a_few_dozen_tries() {
        let mut b = Backoff::default();
        let (mut tries, mut slept) = (0u32, Duration::ZERO);
        while slept < Duration::from_secs(1) {
            slept += b.next_pause();
            tries += 1;
        }
        assert!(tries < 40, "{tries} tries");
    }
}
