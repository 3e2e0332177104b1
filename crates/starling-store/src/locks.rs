//! Lock helpers. A panic while a lock is held leaves the data behind it as consistent as the
//! store's own checks make it (writes are batched and the batch is dropped), so a poisoned lock
//! is taken as it is rather than turned into a second panic.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

pub(crate) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
