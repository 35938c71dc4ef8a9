//! The buffers a latency responder shares with the initiator of the same process: the responder registers them
//! under a number its offer names, the initiator finds them there. Weak, so that the two ends alone keep them
//! alive; the buffers leave the registry when dropped.

use anyhow::{anyhow, bail, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Buffers that hold messages up to some size.
pub(super) trait Holds {
    /// The largest message they hold, in bytes.
    fn max(&self) -> u64;
}

/// One kind of shared buffers, by number.
pub(super) struct Live<T> {
    map: OnceLock<Mutex<HashMap<u64, Weak<T>>>>,
    next: AtomicU64,
}

impl<T: Holds> Live<T> {
    pub(super) const fn new() -> Self {
        Live { map: OnceLock::new(), next: AtomicU64::new(1) }
    }

    /// A number no other buffers of this kind have had in this process.
    pub(super) fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn insert(&self, id: u64, shared: &Arc<T>) {
        self.map.get_or_init(Default::default).lock().unwrap().insert(id, Arc::downgrade(shared));
    }

    pub(super) fn remove(&self, id: u64) {
        if let Some(m) = self.map.get() {
            m.lock().unwrap().remove(&id);
        }
    }

    /// The buffers numbered `id` by the responder of process `pid`, for messages up to `max` bytes: a usage error
    /// saying `one_process` when that is another process (the buffers cannot cross), an error when they are gone
    /// or too small.
    pub(super) fn find(&self, pid: u32, id: u64, max: u64, one_process: &str) -> Result<Arc<T>> {
        if pid != std::process::id() {
            return Err(crate::error::usage(one_process.to_string()));
        }
        let shared = self
            .map
            .get_or_init(Default::default)
            .lock()
            .unwrap()
            .get(&id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| anyhow!("the GPU end's buffers ({id}) are gone before the host end connected"))?;
        if shared.max() < max {
            bail!("the GPU end holds messages up to {} bytes, {max} asked", shared.max());
        }
        Ok(shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Buffers(u64);

    impl Holds for Buffers {
        fn max(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn the_initiator_finds_live_buffers_of_its_own_process_only() {
        static LIVE: Live<Buffers> = Live::new();
        let shared = Arc::new(Buffers(4096));
        let id = LIVE.number();
        assert_ne!(id, LIVE.number(), "numbers are not reused");
        LIVE.insert(id, &shared);
        let found = LIVE.find(std::process::id(), id, 4096, "one process").unwrap();
        let small = LIVE.find(std::process::id(), id, 4097, "one process").unwrap_err();
        assert!(small.to_string().contains("up to 4096 bytes, 4097 asked"), "{small}");
        assert!(Arc::ptr_eq(&found, &shared));
        let other = LIVE.find(std::process::id() + 1, id, 8, "runs in one process; leave out --peer").unwrap_err();
        assert_eq!(crate::error::exit_code(&other), 2, "{other}");
        assert!(other.to_string().contains("leave out --peer"), "{other}");
        drop((found, shared));
        let gone = LIVE.find(std::process::id(), id, 8, "one process").unwrap_err();
        assert!(gone.to_string().contains("are gone"), "{gone}");
        LIVE.remove(id);
        assert!(LIVE.find(std::process::id(), id, 8, "one process").is_err());
    }
}
