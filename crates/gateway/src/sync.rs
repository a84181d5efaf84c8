//! The one way the gateway takes a `std::sync::Mutex`.
//!
//! Invariant: no lock is held across an `.await`, and a poisoned lock (a panic while it was
//! held) is taken anyway: every guarded value here stays consistent between statements.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, recovering it if a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
