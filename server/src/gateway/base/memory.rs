//! One memory budget for the whole process (`penstock run --memory-limit`).
//!
//! Two mechanisms hold the process under the limit. Admission accounting: every request byte
//! admitted by any source (OTLP bodies once inflated, OTAP batches for the larger of their
//! message and their decoded size) is charged [`CHARGE_PER_BYTE`] bytes (a batch in flight
//! exists as its request, its decoded Arrow tables, what the pipeline made of them and the
//! sink's encoding) against a process-wide budget of [`ADMITTED_SHARE`] of the limit, given
//! back when the batch is acknowledged. Requests being received before admission are bounded
//! too: each worker receives at most [`RECEIVING_SHARE`] of the limit in largest messages at
//! once. The budget follows the memory that is not batches in flight (the RSS less what is
//! charged: allocator slack, stream state, windows): each sample resizes it to what fits
//! beside that under [`HIGH_WATER`], down to [`FLOOR_SHARE`] of the limit. Resident memory:
//! the process's RSS is sampled every [`SAMPLE`]; from [`HIGH_WATER`]
//! of the limit on, the sources admit nothing more (waiting or refusing, as each source's
//! `admission` says) until it is back under [`LOW_WATER`], except what keeps the gateway
//! moving: while less than [`PROGRESS_SHARE`] of the budget is in flight, batches are still
//! admitted (memory that is not batches in flight does not shrink by refusing more). That
//! covers what accounting does not see: OTAP stream state, aggregation windows, live-query
//! buffers, allocator slack. Rows held for trace decisions (acknowledged, so no longer
//! charged) are bounded apart: each worker holds at most its part of [`HELD_SHARE`] of the
//! limit, and decides its oldest traces early past it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Why the budget did not take a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetRefusal {
    /// No room, and the source refuses rather than waits.
    Full,
    /// The gateway is stopping.
    ShuttingDown,
}

/// The part of the limit batches in flight may take (as charged).
pub const ADMITTED_SHARE: f64 = 0.6;
/// Memory charged per admitted request byte.
pub const CHARGE_PER_BYTE: u64 = 4;
/// The part of the limit the budget keeps however much other memory grows.
pub const FLOOR_SHARE: f64 = 0.1;
/// The part of the budget that is admitted even under pressure, so the gateway keeps moving.
pub const PROGRESS_SHARE: f64 = 0.1;
/// The part of the limit each worker's requests being received (not yet admitted) may take,
/// counted in largest messages.
pub const RECEIVING_SHARE: f64 = 0.05;
/// RSS, as a part of the limit, from which nothing more is admitted.
pub const HIGH_WATER: f64 = 0.8;
/// RSS, as a part of the limit, under which admission resumes.
pub const LOW_WATER: f64 = 0.7;
/// How often RSS is read.
pub const SAMPLE: Duration = Duration::from_millis(50);
/// The part of the limit rows held for trace decisions may take, over all workers: past it,
/// the oldest traces are decided early.
pub const HELD_SHARE: f64 = 0.25;

/// The process's memory budget; without a limit, it admits everything.
#[derive(Debug)]
pub struct Memory {
    limit: Option<u64>,
    admitted: Arc<Semaphore>,
    share: u64,
    /// Permits the budget holds now (in use or not): [`ADMITTED_SHARE`] of the limit at most,
    /// less when memory other than batches in flight grows (see [`Memory::sample`]).
    capacity: std::sync::Mutex<u64>,
    pressure: watch::Sender<bool>,
    /// The last RSS read, in bytes.
    pub rss: AtomicU64,
    /// The highest RSS read.
    pub peak_rss: AtomicU64,
    /// Request bytes admitted against the budget now.
    pub admitted_bytes: AtomicU64,
    /// Admissions refused, or held, because of the budget or the RSS.
    pub refusals: AtomicU64,
}

/// Budget bytes taken by one admission, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: u64,
    memory: Arc<Memory>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.admitted_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

impl Memory {
    /// The bytes each of `workers` workers may hold for trace decisions: its part of
    /// [`HELD_SHARE`] of the limit (None without a limit).
    pub fn held_cap(&self, workers: usize) -> Option<usize> {
        self.limit
            .map(|limit| (limit as f64 * HELD_SHARE / workers.max(1) as f64) as usize)
    }

    /// A budget of `limit` bytes (`None`: no limit).
    pub fn new(limit: Option<u64>) -> Memory {
        let share = limit.map_or(0, |l| (l as f64 * ADMITTED_SHARE) as u64);
        let permits = (share as usize).min(Semaphore::MAX_PERMITS);
        Memory {
            limit,
            admitted: Arc::new(Semaphore::new(permits)),
            share,
            capacity: std::sync::Mutex::new(permits as u64),
            pressure: watch::channel(false).0,
            rss: AtomicU64::new(0),
            peak_rss: AtomicU64::new(0),
            admitted_bytes: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// The limit, if there is one.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Whether RSS is over the high water mark (nothing is admitted).
    pub fn under_pressure(&self) -> bool {
        *self.pressure.borrow()
    }

    /// Takes `bytes` of the budget for a request: at once or refused (`refuse`), or once the
    /// budget has room and RSS is under the low water mark.
    pub async fn admit(
        self: &Arc<Self>,
        bytes: usize,
        refuse: bool,
    ) -> Result<Charge, BudgetRefusal> {
        if self.limit.is_none() {
            return Ok(self.charge(None, 0));
        }
        let charged = (bytes as u64).saturating_mul(CHARGE_PER_BYTE);
        // Never more than the least the budget shrinks to, so every request can get in.
        let wanted = charged.clamp(1, self.floor()).min(u64::from(u32::MAX)) as u32;
        if refuse {
            if self.held_back() {
                self.refusals.fetch_add(1, Relaxed);
                return Err(BudgetRefusal::Full);
            }
            let permit = Arc::clone(&self.admitted)
                .try_acquire_many_owned(wanted)
                .map_err(|_| {
                    self.refusals.fetch_add(1, Relaxed);
                    BudgetRefusal::Full
                })?;
            return Ok(self.charge(Some(permit), u64::from(wanted)));
        }
        if self.held_back() || self.admitted.available_permits() < wanted as usize {
            self.refusals.fetch_add(1, Relaxed);
        }
        let mut pressure = self.pressure.subscribe();
        loop {
            while self.held_back() {
                // Woken when the pressure clears, or every sample to see whether the batches
                // in flight fell under the share that keeps the gateway moving.
                let _ = tokio::time::timeout(SAMPLE, pressure.wait_for(|p| !*p)).await;
            }
            // A wait for permits gives way when pressure comes: queued waiters would
            // otherwise get every permit given back, whatever the resident memory.
            tokio::select! {
                permit = Arc::clone(&self.admitted).acquire_many_owned(wanted) => {
                    let permit = permit.map_err(|_| BudgetRefusal::ShuttingDown)?;
                    return Ok(self.charge(Some(permit), u64::from(wanted)));
                }
                _ = pressure.changed() => {}
            }
        }
    }

    /// The least the budget holds, however much other memory grows.
    fn floor(&self) -> u64 {
        (self.limit.unwrap_or(0) as f64 * FLOOR_SHARE).max(1.0) as u64
    }

    /// Resizes the budget to what fits under the high water mark beside the memory that is
    /// not batches in flight (the RSS less what is charged), between the floor and the
    /// share.
    fn resize(&self, rss: u64, limit: u64) {
        let admitted = self.admitted_bytes.load(Relaxed);
        let other = rss.saturating_sub(admitted);
        let room = (limit as f64 * HIGH_WATER) as u64;
        let desired = room
            .saturating_sub(other)
            .clamp(self.floor(), self.share.max(1));
        let mut capacity = self.capacity.lock().unwrap_or_else(|e| e.into_inner());
        if desired > *capacity {
            self.admitted.add_permits((desired - *capacity) as usize);
            *capacity = desired;
        } else if desired < *capacity {
            let forgotten = self.admitted.forget_permits((*capacity - desired) as usize);
            *capacity -= forgotten as u64;
        }
    }

    /// Whether admission waits or refuses for the RSS: under pressure, with more than the
    /// share that keeps the gateway moving in flight.
    fn held_back(&self) -> bool {
        self.under_pressure()
            && self.admitted_bytes.load(Relaxed) as f64 >= self.share as f64 * PROGRESS_SHARE
    }

    /// How many requests of up to `max_message_bytes` a worker may receive at once under the
    /// limit (None: no limit); at least `least`.
    pub fn receiving_places(&self, max_message_bytes: usize, least: usize) -> Option<usize> {
        let limit = self.limit?;
        let room = (limit as f64 * RECEIVING_SHARE) as usize / max_message_bytes.max(1);
        Some(room.max(least))
    }

    fn charge(self: &Arc<Self>, permit: Option<OwnedSemaphorePermit>, bytes: u64) -> Charge {
        self.admitted_bytes.fetch_add(bytes, Relaxed);
        Charge {
            _permit: permit,
            bytes,
            memory: Arc::clone(self),
        }
    }

    /// Takes a reading of RSS and sets or clears the pressure.
    pub fn sample(&self) {
        let Some(rss) = resident_bytes() else {
            return;
        };
        self.rss.store(rss, Relaxed);
        self.peak_rss.fetch_max(rss, Relaxed);
        let Some(limit) = self.limit else {
            return;
        };
        self.resize(rss, limit);
        let pressed = self.under_pressure();
        if !pressed && rss as f64 >= limit as f64 * HIGH_WATER {
            self.pressure.send_replace(true);
            crate::gateway::base::report::throttled(
                tracing::Level::WARN,
                "memory",
                "pressure",
                format_args!(
                    "resident memory {} MiB is past {:.0}% of the limit ({} MiB): admitting \
                     nothing until it is under {:.0}%",
                    rss >> 20,
                    HIGH_WATER * 100.0,
                    limit >> 20,
                    LOW_WATER * 100.0
                ),
            );
        } else if pressed && (rss as f64) < limit as f64 * LOW_WATER {
            self.pressure.send_replace(false);
        }
    }

    /// Samples RSS every [`SAMPLE`] (every second without a limit) until `shutdown`.
    pub async fn watch(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let every = if self.limit.is_some() {
            SAMPLE
        } else {
            Duration::from_secs(1)
        };
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sample(),
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

impl Memory {
    /// Writes the budget's gauges and counters (nothing without a limit but RSS).
    pub fn write_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let gauges = [
            (
                "penstock_memory_rss_bytes",
                "resident memory of the process",
                self.rss.load(Relaxed),
            ),
            (
                "penstock_memory_peak_rss_bytes",
                "the highest resident memory read",
                self.peak_rss.load(Relaxed),
            ),
            (
                "penstock_memory_limit_bytes",
                "the memory limit (0: none)",
                self.limit.unwrap_or(0),
            ),
            (
                "penstock_memory_admitted_bytes",
                "request bytes in flight charged to the memory budget",
                self.admitted_bytes.load(Relaxed),
            ),
            (
                "penstock_memory_pressure",
                "1 while resident memory is past the high water mark",
                u64::from(self.under_pressure()),
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        let name = "penstock_memory_refusals_total";
        let _ = writeln!(
            out,
            "# HELP {name} admissions refused or held by the memory budget\n# TYPE {name} counter\n{name} {}",
            self.refusals.load(Relaxed)
        );
    }
}

/// The process's resident set size, from `/proc/self/statm` (Linux; far cheaper for the
/// kernel to answer than `/proc/self/status`).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

#[cfg(target_os = "linux")]
fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> u64 {
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_held_for_trace_decisions_share_a_quarter_of_the_limit_over_the_workers() {
        let memory = Memory::new(Some(8_000_000));
        assert_eq!(memory.held_cap(1), Some(2_000_000));
        assert_eq!(memory.held_cap(4), Some(500_000));
        assert_eq!(Memory::new(None).held_cap(2), None);
    }

    #[tokio::test]
    async fn the_budget_refuses_past_its_share_and_gives_back_what_is_acknowledged() {
        // A share of 6000 bytes, each request byte charged 4.
        let memory = Arc::new(Memory::new(Some(10_000)));
        let mut held = Vec::new();
        for _ in 0..6 {
            held.push(memory.admit(250, true).await.expect("fits"));
        }
        assert_eq!(memory.admitted_bytes.load(Relaxed), 6000);
        assert!(memory.admit(1, true).await.is_err(), "the share is spent");
        held.pop();
        held.push(memory.admit(200, true).await.expect("room again"));
        held.clear();
        assert_eq!(memory.admitted_bytes.load(Relaxed), 0);
        assert_eq!(memory.refusals.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn the_budget_shrinks_as_other_memory_grows_and_grows_back() {
        let memory = Arc::new(Memory::new(Some(10_000)));
        // 9000 bytes resident, none of them batches in flight: the budget falls to its floor.
        memory.resize(9000, 10_000);
        let held = memory.admit(250, true).await.expect("the floor is 1000");
        assert!(memory.admit(1, true).await.is_err());
        // Resident memory falls back: the whole share again.
        memory.resize(1000, 10_000);
        let more = memory.admit(1000, true).await.expect("fits");
        drop((held, more));
    }

    #[tokio::test]
    async fn pressure_refuses_and_holds_waiters_until_it_clears() {
        // A budget of 644 MB; under pressure, batches are admitted up to 64 MB in flight.
        let memory = Arc::new(Memory::new(Some(1 << 30)));
        memory.pressure.send_replace(true);
        let moving = memory.admit(1 << 20, true).await.expect("admitted");
        let big = memory.admit(100 << 20, false).await.expect("admitted");
        assert!(memory.admit(10, true).await.is_err());
        drop(moving);
        let waiting = tokio::spawn({
            let memory = Arc::clone(&memory);
            async move { memory.admit(10, false).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        memory.pressure.send_replace(false);
        assert!(waiting.await.expect("joins").is_ok());
        drop(big);
    }

    #[test]
    fn resident_memory_is_read_in_bytes() {
        let rss = resident_bytes().expect("read");
        // The kernel's own figure in KiB, read just after: the same up to what moved between.
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS");
        let status_bytes = kib * 1024;
        assert!(
            rss > status_bytes / 2 && rss < status_bytes * 2,
            "statm says {rss} bytes, status {status_bytes}"
        );
    }
}
