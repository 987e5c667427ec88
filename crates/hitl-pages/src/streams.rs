//! How many `GET /api/approvals/events` streams are open: each holds a connection for
//! as long as it runs, so without a bound a few callers could take every connection
//! the server accepts. At most `per_principal` per person and `total` in all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The open event streams, by principal.
#[derive(Debug)]
pub(crate) struct EventStreams {
    per_principal: usize,
    total: usize,
    open: Arc<Mutex<Open>>,
}

#[derive(Debug, Default)]
struct Open {
    by_principal: HashMap<String, usize>,
    all: usize,
}

/// A stream's place, given back when it is dropped (the stream ended or its client
/// went away).
#[derive(Debug)]
pub(crate) struct Place {
    principal: String,
    open: Arc<Mutex<Open>>,
}

impl EventStreams {
    pub(crate) fn new(per_principal: usize, total: usize) -> Self {
        Self { per_principal, total, open: Arc::default() }
    }

    /// A place for one more stream of `principal`, or why there is none.
    pub(crate) fn open(&self, principal: &str) -> Result<Place, String> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.all >= self.total {
            return Err(format!("{} event streams are open, the most this server serves", self.total));
        }
        let mine = open.by_principal.get(principal).copied().unwrap_or(0);
        if mine >= self.per_principal {
            return Err(format!("you have {mine} event streams open, the most one principal may"));
        }
        open.all += 1;
        *open.by_principal.entry(principal.to_owned()).or_default() += 1;
        Ok(Place { principal: principal.to_owned(), open: self.open.clone() })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.all = open.all.saturating_sub(1);
        if let Some(mine) = open.by_principal.get_mut(&self.principal) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                open.by_principal.remove(&self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_principal_and_in_all_and_given_back() {
        let streams = EventStreams::new(2, 3);
        let a1 = streams.open("user:a").unwrap();
        let _a2 = streams.open("user:a").unwrap();
        assert!(streams.open("user:a").unwrap_err().contains("2 event streams open"));
        let _b1 = streams.open("user:b").unwrap();
        assert!(streams.open("user:c").unwrap_err().contains("3 event streams are open"));
        drop(a1);
        let _c1 = streams.open("user:c").unwrap();
        assert!(streams.open("user:a").is_err(), "the total is reached again");
    }
}
