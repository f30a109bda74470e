//! The one flow engine. Every data mode — the devmem, plain and zcrx receivers, the pattern
//! sender, the devmem TX client, the peer server's sends and the `iou-zcrx` personality's
//! client and ifq workers — runs its workers through [`run`]: worker 0 on the calling thread (so a
//! one-flow run keeps what belongs to that thread: `-U`'s unbind hook, the payload on stdout),
//! every other worker on a scoped thread of its own, each pinned to its CPU of `--cpus`, and one
//! supervisor thread that keeps the clock: stop signals, the end of `--warmup` (the mark), the end
//! of `--duration` (a clean end), progress lines and the readings at both ends of the measured
//! interval. A worker is the receive loop of one flow, a zcrx ifq serving its flows, one flow's
//! sender, or the `iou-zcrx` personality's acceptor that hands each ifq its connections.
//!
//! The workers stop together: at the end of the duration, on a stop signal, or when one flow
//! fails ([`Shared::note_failure`]: the others stop within one poll tick). A worker that
//! panics (a bug) stops the others too, and its panic goes on unwinding on the calling thread
//! once every thread is joined, so the undo guards still run. One flow is `--flows 1`: there
//! is no other path.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::stats::CpuTime;
pub(crate) use crate::verdict::{DURATION_OVER, FLOW_FAILED};

/// How often the supervisor looks at the signals, the clock and the workers (it is also
/// woken at once when a worker ends). A run without a clock to keep (no duration, warm-up,
/// deadline or progress) waits without it when it can: on its wake-up fd (a worker's end)
/// and the stop signals' fd ([`crate::signals::stop_fd_of`]).
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// What a run is made of and how long it lasts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// Workers (worker 0 on the calling thread); as many as the flows, except for zcrx (one
    /// per ifq).
    pub(crate) workers: usize,
    /// `--duration`: the clock's end, a clean one.
    pub(crate) duration: Option<Duration>,
    /// `--warmup`: the measured interval starts this long after the clock.
    pub(crate) warmup: Option<Duration>,
    /// The run is over by then at the latest (the peer server's `--max-duration`): a clean
    /// end, as the duration's.
    pub(crate) deadline: Option<Instant>,
    /// `--progress`.
    pub(crate) progress: Option<Duration>,
    /// `--cpus`: worker w is pinned to the w-th CPU of the list (round robin).
    pub(crate) cpus: Option<Vec<usize>>,
    /// The clock starts with the run; `false`: when a worker says so
    /// ([`Ctx::start_clock`]), e.g. once the zcrx server has handed out its connections.
    pub(crate) clock_at_start: bool,
}

impl Plan {
    /// The CPU of worker `w`, if `--cpus` pins it.
    pub(crate) fn cpu_of(&self, w: usize) -> Option<usize> {
        self.cpus
            .as_deref()
            .and_then(|c| crate::figures::cpu::cpu_for_flow(c, w))
    }
}

/// The live figures of one flow, written by its worker and read by the supervisor (progress
/// lines, the warm-up mark).
#[derive(Default)]
pub(crate) struct Live {
    bytes: AtomicU64,
    /// Set by the supervisor at the end of the warm-up: the worker then notes its bytes, the
    /// time and its CPU time at its next step.
    mark: AtomicBool,
}

/// What a worker noted at the warm-up mark.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    /// When.
    pub(crate) at: Instant,
    /// The flow's bytes then.
    pub(crate) bytes: u64,
    /// The worker's CPU time then.
    pub(crate) cpu: Option<CpuTime>,
}

impl Live {
    /// The worker has moved `bytes` of the flow so far: the supervisor sees them, and the
    /// first call after the warm-up mark notes the mark in `mark` (the time, `bytes`, and the
    /// worker's CPU time from `cpu`).
    pub(crate) fn observe(
        &self,
        bytes: u64,
        mark: &mut Option<Mark>,
        cpu: impl FnOnce() -> Option<CpuTime>,
    ) {
        if mark.is_none() && self.mark.load(Ordering::Relaxed) {
            *mark = Some(Mark {
                at: Instant::now(),
                bytes,
                cpu: cpu(),
            });
        }
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// The warm-up is over and this flow has not noted it yet.
    pub(crate) fn mark_due(&self, mark: &Option<Mark>) -> bool {
        mark.is_none() && self.mark.load(Ordering::Relaxed)
    }

    /// The flow's bytes so far (for a worker that counts them itself).
    pub(crate) fn set_bytes(&self, bytes: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
    }
}

/// What the workers of a run share with the supervisor and with each other: each flow's live
/// figures, the run's stop flag (0: go on; a signal number; [`DURATION_OVER`];
/// [`FLOW_FAILED`]) and the clock.
pub(crate) struct Shared {
    live: Vec<Live>,
    run_stop: AtomicI32,
    /// When the clock started.
    started: OnceLock<Instant>,
    /// The clock's end: the duration's or the deadline's, whichever comes first.
    end: OnceLock<Option<Instant>>,
    workers_done: AtomicUsize,
    supervisor: OnceLock<std::thread::Thread>,
    /// Made readable by [`Shared::wake`], for a supervisor that waits in `poll` (`None`: no
    /// eventfd could be made; it parks with its tick).
    wake_fd: Option<std::os::fd::OwnedFd>,
}

impl Shared {
    /// For `flows` flows, nothing started.
    pub(crate) fn new(flows: usize) -> Shared {
        Shared {
            live: (0..flows).map(|_| Live::default()).collect(),
            run_stop: AtomicI32::new(0),
            started: OnceLock::new(),
            end: OnceLock::new(),
            workers_done: AtomicUsize::new(0),
            supervisor: OnceLock::new(),
            wake_fd: crate::sys::eventfd().ok(),
        }
    }

    /// Flow `k`'s live figures.
    ///
    /// Panics: `k` is not a flow of this run (a bug of the caller, not input).
    pub(crate) fn live(&self, k: usize) -> &Live {
        &self.live[k]
    }

    /// The run's stop flag, which the workers' loops watch.
    pub(crate) fn run_stop(&self) -> &AtomicI32 {
        &self.run_stop
    }

    /// A flow ended with `e`: unless that is a stop of the run's own (the duration, another
    /// flow's failure, a signal), the others stop too (one failed flow fails the run).
    pub(crate) fn note_failure(&self, e: &Error) {
        if !matches!(e, Error::Interrupted(_)) {
            let _ =
                self.run_stop
                    .compare_exchange(0, FLOW_FAILED, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// When the clock started (`None` before).
    pub(crate) fn started(&self) -> Option<Instant> {
        self.started.get().copied()
    }

    /// The clock's end (`None`: before it started, or no end).
    pub(crate) fn end(&self) -> Option<Instant> {
        self.end.get().copied().flatten()
    }

    fn wake(&self) {
        if let Some(fd) = &self.wake_fd {
            crate::sys::eventfd_add(fd.as_fd());
        }
        if let Some(t) = self.supervisor.get() {
            t.unpark();
        }
    }

    /// Starts the clock, once: `true` the first time.
    fn start_clock(&self, plan: &Plan) -> bool {
        let now = Instant::now();
        if self.started.set(now).is_err() {
            return false;
        }
        let by_duration = plan.duration.and_then(|d| now.checked_add(d));
        let end = match (by_duration, plan.deadline) {
            (Some(e), Some(d)) => Some(e.min(d)),
            (e, d) => e.or(d),
        };
        let _ = self.end.set(end);
        self.wake();
        true
    }
}

/// The clock of a run: the mode's callbacks, and whether the measured interval started.
struct Timing<'c> {
    clock: std::sync::Mutex<&'c mut (dyn Clock + 'c)>,
    interval_started: AtomicBool,
}

impl Timing<'_> {
    /// Starts the clock now, once; without a warm-up the measured interval starts with it,
    /// its first reading taken here, before any worker goes on.
    fn start(&self, plan: &Plan, shared: &Shared) {
        if shared.start_clock(plan) && plan.warmup.is_none() {
            self.interval_starts();
        }
    }

    fn interval_starts(&self) {
        if !self.interval_started.swap(true, Ordering::SeqCst) {
            if let Ok(mut c) = self.clock.lock() {
                c.interval_starts();
            }
        }
    }
}

/// What a worker sees of the run.
pub(crate) struct Ctx<'a> {
    /// The worker's number (0: the calling thread).
    pub(crate) worker: usize,
    /// The CPU it is pinned to.
    pub(crate) cpu: Option<usize>,
    /// The run's shared state.
    pub(crate) shared: &'a Shared,
    plan: &'a Plan,
    timing: &'a Timing<'a>,
}

impl Ctx<'_> {
    /// Starts the clock now (a run whose plan does not start it with the run); without a
    /// warm-up the measured interval's first reading is taken before this returns.
    pub(crate) fn start_clock(&self) {
        self.timing.start(self.plan, self.shared);
    }

    /// The run's stop flag.
    pub(crate) fn run_stop(&self) -> &AtomicI32 {
        &self.shared.run_stop
    }
}

/// The supervisor's callbacks into the mode: the readings at both ends of the measured
/// interval and the progress lines. Called on the supervisor's thread.
pub(crate) trait Clock: Send {
    /// The measured interval starts: at the clock's start, or at the end of the warm-up.
    fn interval_starts(&mut self) {}
    /// The clock's end came (the duration, the deadline), before the workers are told.
    fn clock_ends(&mut self) {}
    /// A progress line is due: `elapsed` since the clock started, `since` the last line,
    /// each flow's bytes at the last line (`before`) and now.
    fn progress(&mut self, _elapsed: Duration, _since: Duration, _before: &[u64], _now: &[u64]) {}
}

/// A clock with nothing to read or print.
pub(crate) struct NoClock;

impl Clock for NoClock {}

/// One worker other than worker 0: its work, run on a thread of its own.
pub(crate) type Worker<'env, T> = Box<dyn FnOnce(&Ctx<'_>) -> T + Send + 'env>;

/// Marks a worker done when it ends, also by a panic (which then stops the others).
struct Done<'a>(&'a Shared);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .note_failure(&Error::Failure("a worker panicked".into()));
        }
        self.0.workers_done.fetch_add(1, Ordering::SeqCst);
        self.0.wake();
    }
}

/// Runs `first` (worker 0) on the calling thread and each of `rest` (workers 1, 2, …) on a
/// thread of its own, supervised as the module docs say (`stop`: the stop signals' flag, a
/// signal number or 0), and returns their outputs in worker order. `plan.workers` must be
/// `1 + rest.len()`.
///
/// Errors: none of its own; a worker's panic resumes here.
pub(crate) fn run<'env, T: Send + 'env>(
    plan: &Plan,
    shared: &Shared,
    stop: &AtomicI32,
    clock: &mut (dyn Clock + 'env),
    first: impl FnOnce(&Ctx<'_>) -> T,
    rest: Vec<Worker<'env, T>>,
) -> Vec<T> {
    debug_assert_eq!(plan.workers, rest.len() + 1);
    let timing = Timing {
        clock: std::sync::Mutex::new(clock),
        interval_started: AtomicBool::new(false),
    };
    let timing = &timing;
    if plan.clock_at_start {
        timing.start(plan, shared);
    }
    std::thread::scope(|scope| {
        let supervisor = scope.spawn(|| supervise(plan, shared, stop, timing));
        let _ = shared.supervisor.set(supervisor.thread().clone());
        let handles: Vec<_> = rest
            .into_iter()
            .enumerate()
            .map(|(i, work)| {
                let w = i + 1;
                scope.spawn(move || {
                    let _done = Done(shared);
                    let cpu = plan.cpu_of(w);
                    let ctx = Ctx {
                        worker: w,
                        cpu,
                        shared,
                        plan,
                        timing,
                    };
                    if let Err(e) = pin(cpu) {
                        shared.note_failure(&e);
                    }
                    work(&ctx)
                })
            })
            .collect();
        let first_out = {
            let _done = Done(shared);
            let cpu = plan.cpu_of(0);
            let restore = match cpu {
                Some(_) => crate::sys::cpu::allowed_cpus().ok(),
                None => None,
            };
            if let Err(e) = pin(cpu) {
                shared.note_failure(&e);
            }
            let out = first(&Ctx {
                worker: 0,
                cpu,
                shared,
                plan,
                timing,
            });
            if let Some(mask) = restore {
                let _ = crate::sys::cpu::set_affinity(&mask);
            }
            out
        };
        let mut outs = vec![first_out];
        let mut panic = None;
        for h in handles {
            match h.join() {
                Ok(o) => outs.push(o),
                Err(p) => {
                    panic.get_or_insert(p);
                }
            }
        }
        let _ = supervisor.join();
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        outs
    })
}

/// Pins the calling thread to `cpu`, when one is given.
fn pin(cpu: Option<usize>) -> Result<()> {
    match cpu {
        Some(c) => crate::sys::cpu::pin_current_thread(c),
        None => Ok(()),
    }
}

/// The supervisor: signals into the run's stop flag, the warm-up mark, progress lines, the
/// clock's end; returns once every worker is done.
fn supervise(plan: &Plan, shared: &Shared, stop: &AtomicI32, timing: &Timing<'_>) {
    let n = shared.live.len();
    let mut ended = false;
    let clock = || timing.clock.lock().ok();
    let mut last_progress: Option<(Instant, Vec<u64>)> = None;
    let mut next_progress: Option<Instant> = None;
    loop {
        // A stop signal is passed on even before the clock starts (a zcrx worker waiting for
        // its connections).
        let sig = stop.load(Ordering::SeqCst);
        if sig != 0 {
            let _ = shared
                .run_stop
                .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        }
        if let Some(start) = shared.started() {
            let now = Instant::now();
            if !timing.interval_started.load(Ordering::SeqCst) {
                let due = plan.warmup.and_then(|w| start.checked_add(w));
                if due.is_none_or(|at| now >= at) {
                    if due.is_some() {
                        for l in &shared.live {
                            l.mark.store(true, Ordering::Relaxed);
                        }
                    }
                    timing.interval_starts();
                }
            }
            if next_progress.is_none() {
                next_progress = plan.progress.and_then(|p| start.checked_add(p));
                last_progress = Some((start, vec![0; n]));
            }
            if let (Some(at), Some(p)) = (next_progress, plan.progress) {
                if now >= at {
                    let bytes: Vec<u64> = shared
                        .live
                        .iter()
                        .map(|l| l.bytes.load(Ordering::Relaxed))
                        .collect();
                    if let (Some((prev_at, prev)), Some(mut c)) = (&last_progress, clock()) {
                        c.progress(now - start, now - *prev_at, prev, &bytes);
                    }
                    last_progress = Some((now, bytes));
                    next_progress = at.checked_add(p);
                }
            }
            if !ended && shared.end().is_some_and(|e| now >= e) {
                if let Some(mut c) = clock() {
                    c.clock_ends();
                }
                ended = true;
                let _ = shared.run_stop.compare_exchange(
                    0,
                    DURATION_OVER,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
        }
        if shared.workers_done.load(Ordering::SeqCst) >= plan.workers {
            return;
        }
        wait(plan, shared, stop, sig != 0);
    }
}

/// The supervisor's wait until its next look: until [`Shared::wake`] or a stop signal, when
/// the run has no clock to keep, a wake-up fd and, unless a stop signal was already passed
/// on (`stopped`), the stop signals' fd for `stop`; otherwise a park of at most [`TICK`].
fn wait(plan: &Plan, shared: &Shared, stop: &AtomicI32, stopped: bool) {
    let clocked = plan.duration.is_some()
        || plan.warmup.is_some()
        || plan.deadline.is_some()
        || plan.progress.is_some();
    let signal_fd = crate::signals::stop_fd_of(stop).map(|f| f.as_raw_fd());
    match &shared.wake_fd {
        Some(wake) if !clocked && (stopped || signal_fd.is_some()) => {
            let also = if stopped { None } else { signal_fd };
            // A wake after the workers were counted left the fd readable: no wake is lost.
            let _ =
                crate::sys::socket::poll_one_or_wake(wake.as_raw_fd(), libc::POLLIN, also, None);
            crate::sys::eventfd_drain(wake.as_fd());
        }
        _ => std::thread::park_timeout(TICK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(workers: usize) -> Plan {
        Plan {
            workers,
            clock_at_start: true,
            ..Plan::default()
        }
    }

    /// Worker 0 runs on the calling thread, the others on threads of their own; the outputs
    /// come back in worker order.
    #[test]
    fn worker_zero_is_the_calling_thread() {
        let me = std::thread::current().id();
        let p = plan(3);
        let shared = Shared::new(3);
        let rest: Vec<Worker<'_, (usize, bool)>> = (1..3)
            .map(|_| {
                Box::new(move |c: &Ctx<'_>| (c.worker, std::thread::current().id() == me))
                    as Worker<'_, _>
            })
            .collect();
        let outs = run(
            &p,
            &shared,
            &AtomicI32::new(0),
            &mut NoClock,
            |c| (c.worker, std::thread::current().id() == me),
            rest,
        );
        assert_eq!(outs, vec![(0, true), (1, false), (2, false)]);
    }

    /// A failure stops the others, once; the duration ends every worker with DURATION_OVER.
    #[test]
    fn a_failure_or_the_duration_stops_every_worker() {
        let p = plan(2);
        let shared = Shared::new(2);
        let wait = |c: &Ctx<'_>| {
            while c.run_stop().load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            c.run_stop().load(Ordering::SeqCst)
        };
        let rest: Vec<Worker<'_, i32>> = vec![Box::new(wait)];
        let outs = run(
            &p,
            &shared,
            &AtomicI32::new(0),
            &mut NoClock,
            |c| {
                c.shared.note_failure(&Error::Failure("x".into()));
                0
            },
            rest,
        );
        assert_eq!(outs, vec![0, FLOW_FAILED]);
        let p = Plan {
            duration: Some(Duration::from_millis(30)),
            ..plan(2)
        };
        let shared = Shared::new(2);
        let rest: Vec<Worker<'_, i32>> = vec![Box::new(wait)];
        let outs = run(&p, &shared, &AtomicI32::new(0), &mut NoClock, wait, rest);
        assert_eq!(outs, vec![DURATION_OVER, DURATION_OVER]);
    }

    /// A worker's panic stops the others and resumes on the calling thread after every
    /// thread is joined.
    #[test]
    fn a_panic_stops_the_others_and_resumes_here() {
        let p = plan(2);
        let shared = Shared::new(2);
        let stopped = AtomicBool::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let rest: Vec<Worker<'_, ()>> = vec![Box::new(|_| panic!("worker bug"))];
            run(
                &p,
                &shared,
                &AtomicI32::new(0),
                &mut NoClock,
                |c| {
                    while c.run_stop().load(Ordering::SeqCst) == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    stopped.store(true, Ordering::SeqCst);
                },
                rest,
            )
        }));
        assert!(r.is_err());
        assert!(stopped.load(Ordering::SeqCst));
    }

    /// The warm-up mark comes before the interval's first reading is asked for, and the
    /// clock's end before the stop.
    #[test]
    fn the_clock_marks_the_warmup_and_ends_the_run() {
        struct Seen(Vec<&'static str>);
        impl Clock for Seen {
            fn interval_starts(&mut self) {
                self.0.push("start");
            }
            fn clock_ends(&mut self) {
                self.0.push("end");
            }
        }
        let p = Plan {
            warmup: Some(Duration::from_millis(20)),
            duration: Some(Duration::from_millis(60)),
            ..plan(1)
        };
        let shared = Shared::new(1);
        let mut seen = Seen(Vec::new());
        let marked = run(
            &p,
            &shared,
            &AtomicI32::new(0),
            &mut seen,
            |c| {
                let mut mark = None;
                while c.run_stop().load(Ordering::SeqCst) == 0 {
                    c.shared.live(0).observe(1, &mut mark, || None);
                    std::thread::sleep(Duration::from_millis(1));
                }
                // A late supervisor (a loaded machine) may set the mark and the stop in one
                // tick: the mark, set before the stop, is seen by one more look.
                c.shared.live(0).observe(1, &mut mark, || None);
                mark.is_some()
            },
            Vec::new(),
        );
        assert_eq!(marked, vec![true]);
        assert_eq!(seen.0, vec!["start", "end"]);
    }

    /// The warm-up mark is noted once, at the first observation after the supervisor set it.
    #[test]
    fn the_mark_is_noted_once() {
        let live = Live::default();
        let mut mark = None;
        live.observe(10, &mut mark, || panic!("no CPU time before the mark"));
        assert!(mark.is_none());
        live.mark.store(true, Ordering::Relaxed);
        live.observe(20, &mut mark, || Some(CpuTime::default()));
        live.observe(30, &mut mark, || panic!("the mark is already noted"));
        assert_eq!(mark.map(|m| m.bytes), Some(20));
        assert_eq!(live.bytes.load(Ordering::Relaxed), 30);
    }
}
