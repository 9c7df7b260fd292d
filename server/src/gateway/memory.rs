//! One memory budget for the whole process (`penstock run --memory-limit`).
//!
//! Two mechanisms hold the process under the limit. Admission accounting: every request byte
//! admitted by any source (OTLP bodies once inflated, OTAP batches for the larger of their
//! message and their decoded size) also takes its share of a process-wide budget of
//! [`ADMITTED_SHARE`] of the limit, and gives it back when the batch is acknowledged, so the
//! batches in sources, worker queues, pipelines and sinks never add up to more than that.
//! Resident memory: the process's RSS is sampled every [`SAMPLE`]; from [`HIGH_WATER`] of the
//! limit on, the sources admit nothing more (waiting or refusing, as each source's
//! `admission` says) until it is back under [`LOW_WATER`]. That covers what accounting does
//! not see: OTAP stream state, aggregation windows, live-query buffers, allocator slack.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::sources::listener::AdmissionError;

/// The part of the limit request bytes in flight may take.
pub const ADMITTED_SHARE: f64 = 0.4;
/// RSS, as a part of the limit, from which nothing more is admitted.
pub const HIGH_WATER: f64 = 0.9;
/// RSS, as a part of the limit, under which admission resumes.
pub const LOW_WATER: f64 = 0.8;
/// How often RSS is read.
pub const SAMPLE: Duration = Duration::from_millis(50);

/// The process's memory budget; without a limit, it admits everything.
#[derive(Debug)]
pub struct Memory {
    limit: Option<u64>,
    admitted: Arc<Semaphore>,
    share: u64,
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
    /// A budget of `limit` bytes (`None`: no limit).
    pub fn new(limit: Option<u64>) -> Memory {
        let share = limit.map_or(0, |l| (l as f64 * ADMITTED_SHARE) as u64);
        let permits = (share as usize).min(Semaphore::MAX_PERMITS);
        Memory {
            limit,
            admitted: Arc::new(Semaphore::new(permits)),
            share,
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
    ) -> Result<Charge, AdmissionError> {
        if self.limit.is_none() {
            return Ok(self.charge(None, 0));
        }
        let wanted = (bytes as u64)
            .clamp(1, self.share.max(1))
            .min(u64::from(u32::MAX)) as u32;
        if refuse {
            if self.under_pressure() {
                self.refusals.fetch_add(1, Relaxed);
                return Err(AdmissionError::Full);
            }
            let permit = Arc::clone(&self.admitted)
                .try_acquire_many_owned(wanted)
                .map_err(|_| {
                    self.refusals.fetch_add(1, Relaxed);
                    AdmissionError::Full
                })?;
            return Ok(self.charge(Some(permit), u64::from(wanted)));
        }
        if self.under_pressure() || self.admitted.available_permits() < wanted as usize {
            self.refusals.fetch_add(1, Relaxed);
        }
        let mut pressure = self.pressure.subscribe();
        let _ = pressure.wait_for(|p| !*p).await;
        let permit = Arc::clone(&self.admitted)
            .acquire_many_owned(wanted)
            .await
            .map_err(|_| AdmissionError::ShuttingDown)?;
        Ok(self.charge(Some(permit), u64::from(wanted)))
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
        let pressed = self.under_pressure();
        if !pressed && rss as f64 >= limit as f64 * HIGH_WATER {
            self.pressure.send_replace(true);
            super::report::throttled(
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

/// Sizes the live-query buffers to fit under `limit`: recent batches at most an eighth of
/// it, the memory of all queries at once at most a quarter.
pub fn fit_queries(limit: u64, query: &mut crate::query::QueryOptions) {
    let recent = (limit / 8) as usize;
    let per_query = (limit / 4) as usize / query.max_queries.max(1);
    if query.recent_bytes > recent || query.memory_bytes > per_query {
        query.recent_bytes = query.recent_bytes.min(recent);
        query.memory_bytes = query.memory_bytes.min(per_query);
        tracing::info!(
            "memory limit {} MiB: live queries keep {} MiB of recent batches and use at most {} \
             MiB each",
            limit >> 20,
            query.recent_bytes >> 20,
            query.memory_bytes >> 20
        );
    }
}

/// The process's resident set size, from `/proc/self/status` (Linux).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_refuses_past_its_share_and_gives_back_what_is_acknowledged() {
        let memory = Arc::new(Memory::new(Some(1000)));
        let first = memory.admit(300, true).await.expect("fits");
        let second = memory.admit(100, true).await.expect("fits");
        assert_eq!(memory.admitted_bytes.load(Relaxed), 400);
        assert!(memory.admit(1, true).await.is_err(), "the share is 400");
        drop(first);
        let third = memory.admit(250, true).await.expect("room again");
        drop((second, third));
        assert_eq!(memory.admitted_bytes.load(Relaxed), 0);
        assert_eq!(memory.refusals.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn pressure_refuses_and_holds_waiters_until_it_clears() {
        let memory = Arc::new(Memory::new(Some(1 << 40)));
        memory.pressure.send_replace(true);
        assert!(memory.admit(10, true).await.is_err());
        let waiting = tokio::spawn({
            let memory = Arc::clone(&memory);
            async move { memory.admit(10, false).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        memory.pressure.send_replace(false);
        assert!(waiting.await.expect("joins").is_ok());
    }

    #[test]
    fn resident_memory_is_read() {
        assert!(resident_bytes().is_some_and(|b| b > 0));
    }
}
