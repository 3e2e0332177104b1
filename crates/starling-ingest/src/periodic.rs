//! Background threads that run a task every interval, and once more when stopped: `serve`'s
//! graph snapshots ([`crate::graph_sync::start_snapshots`]) and timeline cache refreshes
//! ([`crate::timeline_sync::start_refresh`]).

use std::sync::mpsc;
use std::time::Duration;

use crate::IngestError;

/// A thread that runs a task every interval, and once more when stopped. A failed run ends
/// the thread; [`Periodic::stop`] reports it.
pub struct Periodic {
    what: &'static str,
    /// Sending (or dropping) stops the thread after one last run.
    stop_tx: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Result<(), IngestError>>,
}

impl Periodic {
    /// Starts a thread named `what` that runs `task` every `interval`.
    pub fn start(
        what: &'static str,
        interval: Duration,
        mut task: impl FnMut() -> Result<(), IngestError> + Send + 'static,
    ) -> Result<Periodic, IngestError> {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(what.to_owned())
            .spawn(move || {
                loop {
                    let stopping = !matches!(
                        stop_rx.recv_timeout(interval),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    );
                    task()?;
                    if stopping {
                        return Ok(());
                    }
                }
            })
            .map_err(|err| IngestError::Task {
                what,
                reason: format!("starting the thread: {err}"),
            })?;
        Ok(Periodic {
            what,
            stop_tx,
            thread,
        })
    }

    /// Runs the task once more, stops the thread, and reports the first failed run.
    pub fn stop(self) -> Result<(), IngestError> {
        let _ = self.stop_tx.send(());
        match self.thread.join() {
            Ok(res) => res.map_err(|error| IngestError::Background {
                thread: self.what,
                error: Box::new(error),
            }),
            Err(_) => Err(IngestError::Task {
                what: self.what,
                reason: "the thread panicked".to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    // Checks the stop protocol: a thread with an interval far longer than the test still runs
    // its task exactly once more when stopped, and a failed run is reported by `stop` with the
    // thread's name.
    #[test]
    fn stop_runs_the_task_once_more_and_reports_a_failure() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let periodic = Periodic::start("test-periodic", Duration::from_secs(3600), move || {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        periodic.stop().unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 1);

        let failing = Periodic::start("test-failing", Duration::from_secs(3600), || {
            Err(IngestError::ChangeLog(
                starling_store::StoreError::Unavailable {
                    what: "test".into(),
                },
            ))
        })
        .unwrap();
        let err = failing.stop().unwrap_err();
        assert!(
            matches!(
                &err,
                IngestError::Background { thread: "test-failing", error }
                    if matches!(**error, IngestError::ChangeLog(_))
            ),
            "{err}"
        );
    }
}
