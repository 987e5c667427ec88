//! Typed values a caller gives one run beside its input, one per type (like
//! `http::Extensions`): the MCP server puts the client's capabilities there, and a step
//! that knows their type reads them. Generic, so that this crate names no protocol.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

/// A map from a type to one value of it. A run carries a handful of them: kept in a
/// vector searched in order, which is cheaper than hashing each type (and than the hash
/// table's allocations as it grows) for so few.
#[derive(Clone, Default)]
pub struct Extensions {
    values: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
}

impl Extensions {
    /// Puts `value` in, replacing the value of its type that was there.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.insert_shared(Arc::new(value));
    }

    /// Puts in `value`, already shared: the run holds the caller's `Arc`, not a copy.
    pub fn insert_shared<T: Send + Sync + 'static>(&mut self, value: Arc<T>) {
        let id = TypeId::of::<T>();
        match self.values.iter_mut().find(|(kept, _)| *kept == id) {
            Some((_, kept)) => *kept = value,
            None => {
                if self.values.capacity() == 0 {
                    // Room for what a call's run is given, in one allocation.
                    self.values.reserve_exact(4);
                }
                self.values.push((id, value));
            }
        }
    }

    /// The value of type `T`, when there is one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.values.iter().find(|(kept, _)| *kept == id).and_then(|(_, value)| value.downcast_ref())
    }

    /// Whether there is no value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions").field("len", &self.values.len()).finish()
    }
}

#[cfg(test)]
mod tests;
