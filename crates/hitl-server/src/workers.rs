//! How many threads serve requests: as asked, else one per core, but one fewer beside a
//! Redis store on this machine, which needs a core of its own for every command of
//! every round. On 2 cores shared with Redis and the load generator, one worker served
//! 13–34% more rounds than two (docs/performance.md, stops 53 and 55).

use std::num::NonZeroUsize;

/// The threads that serve requests, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workers {
    /// `--workers` (`HITL_WORKERS`, `[server] workers`).
    Asked(NonZeroUsize),
    /// One per core but the core left to a Redis store on this machine.
    BesideRedis { workers: NonZeroUsize, cores: usize },
    /// tokio's: one per core, or `TOKIO_WORKER_THREADS`.
    Default,
}

impl Workers {
    /// `asked`, else the rule for a `redis` store URL (`None` for a store that is not
    /// Redis), read against this machine: its cores, and whether a CPU limit (a
    /// cgroup's quota) made them fewer than the CPUs it may run on. Under a limit the
    /// core left may not be one Redis runs on (Redis outside the container, its own
    /// limit), so the rule keeps out; so it does with `TOKIO_WORKER_THREADS` set.
    pub(crate) fn choose(asked: Option<NonZeroUsize>, redis: Option<&str>) -> Self {
        if let Some(asked) = asked {
            return Self::Asked(asked);
        }
        let beside_redis = redis.is_some_and(hitl_store_redis::on_this_machine);
        if !beside_redis || std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
            return Self::Default;
        }
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let allowed = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| cpus_allowed(&s));
        Self::beside_redis(cores, allowed)
    }

    /// The rule for `cores` (as `available_parallelism` gives them) of the `allowed`
    /// CPUs (`None` when unknown: no limit is assumed).
    fn beside_redis(cores: usize, allowed: Option<usize>) -> Self {
        if allowed.is_some_and(|allowed| cores < allowed) {
            return Self::Default;
        }
        match NonZeroUsize::new(cores.saturating_sub(1)) {
            Some(workers) => Self::BesideRedis { workers, cores },
            None => Self::Default,
        }
    }

    /// The count to build the runtime with; `None` for tokio's own.
    pub(crate) fn count(self) -> Option<NonZeroUsize> {
        match self {
            Self::Asked(n) | Self::BesideRedis { workers: n, .. } => Some(n),
            Self::Default => None,
        }
    }
}

/// The CPUs this process may run on, from `/proc/self/status`'s `Cpus_allowed_list`
/// (`0-3,6`).
fn cpus_allowed(status: &str) -> Option<usize> {
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?.trim();
    list.split(',').try_fold(0, |n, range| {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
        Some(n + last.checked_sub(first)? + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    #[test]
    fn a_core_is_left_to_redis_only_where_the_cores_are_all_there_and_none_was_asked_for() {
        assert_eq!(Workers::beside_redis(2, Some(2)), Workers::BesideRedis { workers: n(1), cores: 2 });
        assert_eq!(Workers::beside_redis(16, None), Workers::BesideRedis { workers: n(15), cores: 16 });
        assert_eq!(Workers::beside_redis(1, Some(1)), Workers::Default, "one core: nothing to leave");
        assert_eq!(Workers::beside_redis(2, Some(8)), Workers::Default, "a CPU limit: Redis may not share it");
        assert_eq!(Workers::choose(Some(n(3)), Some("redis://127.0.0.1")), Workers::Asked(n(3)));
        assert_eq!(Workers::choose(None, None), Workers::Default, "the memory store");
        assert_eq!(Workers::choose(None, Some("redis://10.1.2.3:6379")), Workers::Default, "a Redis elsewhere");
        assert_eq!(Workers::BesideRedis { workers: n(1), cores: 2 }.count(), Some(n(1)));
        assert_eq!(Workers::Default.count(), None);
    }

    #[test]
    fn the_cpus_allowed_are_counted_from_the_status_list() {
        let status =
            |list: &str| format!("Name:\thitl\nCpus_allowed:\tff\nCpus_allowed_list:\t{list}\nMems_allowed:\t1\n");
        assert_eq!(cpus_allowed(&status("0-1")), Some(2));
        assert_eq!(cpus_allowed(&status("0")), Some(1));
        assert_eq!(cpus_allowed(&status("0-3,6,8-9")), Some(7));
        assert_eq!(cpus_allowed(&status("3-1")), None, "a range backwards");
        assert_eq!(cpus_allowed(&status("x")), None);
        assert_eq!(cpus_allowed("Name:\thitl\n"), None, "no list (not Linux)");
    }
}
