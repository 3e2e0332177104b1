//! The signal that a batch's background engine write has finished (see `InFlight`).

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::StoreError;
use crate::locks::lock;

/// Set when a batch's write has finished: `Ok`, or the engine's error as text.
#[derive(Default)]
pub(super) struct Done {
    finished: Mutex<Option<Result<(), String>>>,
    signal: Condvar,
}

impl Done {
    pub(super) fn set(&self, res: &Result<(), fjall::Error>) {
        *lock(&self.finished) = Some(res.as_ref().map(|_| ()).map_err(ToString::to_string));
        self.signal.notify_all();
    }

    /// Whether the write has finished, waiting up to `timeout` for it to.
    pub(super) fn finished_within(&self, timeout: Duration) -> bool {
        let finished = lock(&self.finished);
        let (finished, _) = self
            .signal
            .wait_timeout_while(finished, timeout, |finished| finished.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        finished.is_some()
    }

    pub(super) fn wait(&self) -> Result<(), StoreError> {
        let mut finished = lock(&self.finished);
        loop {
            match &*finished {
                Some(res) => return res.clone().map_err(StoreError::Writer),
                None => {
                    finished = self
                        .signal
                        .wait(finished)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}
