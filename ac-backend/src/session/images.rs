//! Module images sessions loaded, kept by content (`ac_proto::backend::image_digest`), so that
//! a program's next process (another MPI rank, the next step of a job) loads the same image
//! without sending it again (`Request::ModuleLoadCached`). Entries belong to an owner: the
//! capability a session was opened with (the processes of one grant, which reach the same
//! accelerator anyway), or the session itself without one, so that a program learns nothing of
//! another job's images. The least recently used go first when the cache is over its budget.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;

/// Who may load an image from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The sessions of one capability.
    Capability(u64),
    /// One session opened without a capability.
    Session(u64),
}

/// The image cache of a backend.
#[derive(Debug)]
pub struct ImageCache {
    budget: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    images: HashMap<(Owner, [u8; 32]), (Bytes, u64)>,
    bytes: usize,
    clock: u64,
}

/// The cache's budget unless told otherwise: 256 MiB of host memory.
pub const DEFAULT_BUDGET: usize = 256 << 20;

impl Default for ImageCache {
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET)
    }
}

impl ImageCache {
    /// A cache holding at most `budget` bytes of images.
    pub fn new(budget: usize) -> Self {
        Self { budget, inner: Mutex::default() }
    }

    /// The image `digest` of `owner`, if held.
    pub fn get(&self, owner: Owner, digest: &[u8; 32]) -> Option<Bytes> {
        let mut e = self.inner.lock().expect("image cache poisoned");
        e.clock += 1;
        let now = e.clock;
        let (image, used) = e.images.get_mut(&(owner, *digest))?;
        *used = now;
        Some(image.clone())
    }

    /// Keeps `image` for `owner`, making room by dropping the least recently used; an image
    /// larger than the whole budget is not kept.
    pub fn put(&self, owner: Owner, digest: [u8; 32], image: Bytes) {
        if image.len() > self.budget {
            return;
        }
        let mut e = self.inner.lock().expect("image cache poisoned");
        e.clock += 1;
        let now = e.clock;
        if let Some((_, used)) = e.images.get_mut(&(owner, digest)) {
            *used = now;
            return;
        }
        while e.bytes + image.len() > self.budget {
            let Some(oldest) = e.images.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| *k) else { break };
            if let Some((gone, _)) = e.images.remove(&oldest) {
                e.bytes -= gone.len();
            }
        }
        e.bytes += image.len();
        e.images.insert((owner, digest), (image, now));
    }

    /// Drops every image of `owner` (its capability was revoked).
    pub fn forget(&self, owner: Owner) {
        let mut e = self.inner.lock().expect("image cache poisoned");
        let gone: usize = e.images.iter().filter(|((o, _), _)| *o == owner).map(|(_, (i, _))| i.len()).sum();
        e.images.retain(|(o, _), _| *o != owner);
        e.bytes -= gone;
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().expect("image cache poisoned").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_finds_only_its_own_images() {
        let cache = ImageCache::new(1 << 20);
        cache.put(Owner::Capability(1), [1; 32], Bytes::from_static(b"image"));
        assert_eq!(cache.get(Owner::Capability(1), &[1; 32]).as_deref(), Some(&b"image"[..]));
        assert!(cache.get(Owner::Capability(2), &[1; 32]).is_none());
        assert!(cache.get(Owner::Session(1), &[1; 32]).is_none());
        cache.forget(Owner::Capability(1));
        assert!(cache.get(Owner::Capability(1), &[1; 32]).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_budget_holds() {
        let cache = ImageCache::new(10);
        let owner = Owner::Session(1);
        cache.put(owner, [1; 32], Bytes::from(vec![0u8; 4]));
        cache.put(owner, [2; 32], Bytes::from(vec![0u8; 4]));
        cache.get(owner, &[1; 32]);
        cache.put(owner, [3; 32], Bytes::from(vec![0u8; 4]));
        assert!(cache.get(owner, &[2; 32]).is_none(), "the least recently used went");
        assert!(cache.get(owner, &[1; 32]).is_some() && cache.get(owner, &[3; 32]).is_some());
        assert_eq!(cache.bytes(), 8);
        cache.put(owner, [4; 32], Bytes::from(vec![0u8; 11]));
        assert!(cache.get(owner, &[4; 32]).is_none(), "larger than the budget: not kept");
    }
}
