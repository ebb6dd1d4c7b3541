//! Rust values behind the C objects this library makes (meta buffers, meta backends, and the
//! buffer extensions of `buffer`): one registry per kind, mapping the C object's address to
//! the shared Rust value.
//!
//! A C object of ours is identified by its address, which ggml hands back to every vtable
//! entry and API call. Instead of casting the object's `context` pointer back to a Rust type
//! (and picking a lifetime for the reference), code asks the kind's [`Registry`]: an object
//! that is not of that kind, or no longer alive, is simply not found, and what is found is an
//! [`Arc`], so the value outlives every use that started before the object was freed. Nothing
//! here is `unsafe`.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Locks `m`, carrying on past a panic of another holder: the state behind the library's
/// mutexes stays consistent between statements, and a C caller gets no unwinding anyway.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hasher for addresses, where the default SipHash costs more than the rest of a lookup
/// (addresses come from this process's allocator, not from an adversary). A multiplication
/// mixes the bits upwards; `finish` rotates the well-mixed high bits down, because hash tables
/// take their bucket from the low bits, which alignment leaves zero in an address.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, i: usize) {
        self.0 = (i as u64 ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by addresses.
pub type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;
/// A set of addresses.
pub type AddrSet = HashSet<usize, BuildHasherDefault<AddrHasher>>;

/// Live objects of one kind: C address → Rust value.
pub struct Registry<T: ?Sized> {
    /// Whether anything was ever registered: programs that never make an object of this kind
    /// (no meta device) answer every lookup without touching the lock.
    used: AtomicBool,
    map: RwLock<Option<AddrMap<Arc<T>>>>,
}

impl<T: ?Sized> Registry<T> {
    pub const fn new() -> Registry<T> {
        Registry {
            used: AtomicBool::new(false),
            map: RwLock::new(None),
        }
    }

    /// Registers the value of the C object at `addr`, replacing any earlier one.
    pub fn insert(&self, addr: usize, value: Arc<T>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.get_or_insert_with(AddrMap::default).insert(addr, value);
        self.used.store(true, Ordering::Release);
    }

    /// The value of the C object at `addr`, if it is a live object of this kind.
    pub fn get(&self, addr: usize) -> Option<Arc<T>> {
        self.lookup(addr, |map| map.get(&addr).cloned())
    }

    pub fn contains(&self, addr: usize) -> bool {
        self.lookup(addr, |map| map.contains_key(&addr).then_some(()))
            .is_some()
    }

    /// `f` over the live objects, unless `addr` is NULL or nothing was ever registered.
    fn lookup<R>(&self, addr: usize, f: impl FnOnce(&AddrMap<Arc<T>>) -> Option<R>) -> Option<R> {
        if addr == 0 || !self.used.load(Ordering::Acquire) {
            return None;
        }
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        f(map.as_ref()?)
    }

    /// Unregisters the C object at `addr` (when it is freed) and hands back its value, which
    /// lives on while other holders keep it.
    pub fn remove(&self, addr: usize) -> Option<Arc<T>> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.as_mut()?.remove(&addr)
    }
}

impl<T: ?Sized> Default for Registry<T> {
    fn default() -> Self {
        Registry::new()
    }
}

impl<T: ?Sized> std::fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let n = map.as_ref().map_or(0, |m| m.len());
        write!(f, "Registry({n} live)")
    }
}
