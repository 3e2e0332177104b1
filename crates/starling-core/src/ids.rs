//! Identifiers that must not be mixed up, each in its own newtype.

use std::fmt;

/// A dense integer id for an actor (a DID), assigned once, in order of first sight.
///
/// Dense ids let the graph hold sets of `u32` instead of 32-byte DID strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActorId(pub u32);

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "actor#{}", self.0)
    }
}

/// A Jetstream cursor: the `time_us` an instance stamped on an event, in microseconds.
///
/// Only comparable between events of the same Jetstream instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Cursor(pub u64);

impl Cursor {
    /// The cursor moved back by `micros`, saturating at zero; used when reconnecting.
    pub fn rewind(self, micros: u64) -> Cursor {
        Cursor(self.0.saturating_sub(micros))
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
