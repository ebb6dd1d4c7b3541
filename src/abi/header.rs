//! Tensor headers that Rust owns and C reads by address: the per-device tensors of meta
//! buffers, and the slot and add-node headers of AllReduce plans.
//!
//! Each header is allocated once and never moves while its owner lives, because ggml graphs
//! and other headers (`src`, `view_src`) hold its address. No `Box` is kept: a `Box` asserts
//! unique access, which the addresses held by C contradict; the owner keeps raw non-null
//! pointers instead and frees them in `Drop`. Headers are changed only through
//! [`Headers::update`], whose `&mut` lives for the call.

use std::ptr::NonNull;

use super::ggml::ggml_tensor;
use super::handle::Tensor;

pub struct Headers(Vec<NonNull<ggml_tensor>>);

// SAFETY: plain heap objects without thread affinity; their owners (a meta buffer's entry, a
// plan) are used under their own locks, and ggml reads the headers only inside calls that the
// owner's user makes.
unsafe impl Send for Headers {}
// SAFETY: as above; shared access only reads addresses (`tensor`).
unsafe impl Sync for Headers {}

impl Headers {
    pub const fn new() -> Headers {
        Headers(Vec::new())
    }

    /// `n` zeroed headers.
    pub fn zeroed(n: usize) -> Headers {
        let mut h = Headers::new();
        for _ in 0..n {
            h.push(ggml_tensor::zeroed());
        }
        h
    }

    /// Stores `h` and returns its index and its handle (valid while `self` lives).
    pub fn push(&mut self, h: ggml_tensor) -> (usize, Tensor) {
        let p = NonNull::from(Box::leak(Box::new(h)));
        self.0.push(p);
        (self.0.len() - 1, Self::handle(p))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The handle of header `i` (valid while `self` lives).
    pub fn tensor(&self, i: usize) -> Tensor {
        Self::handle(self.0[i])
    }

    /// Handles of all headers, in order.
    pub fn tensors(&self) -> impl Iterator<Item = Tensor> + '_ {
        self.0.iter().map(|&p| Self::handle(p))
    }

    /// Changes header `i` in place.
    pub fn update<R>(&mut self, i: usize, f: impl FnOnce(&mut ggml_tensor) -> R) -> R {
        // SAFETY: our allocation, alive until Drop. C reads these headers only inside calls
        // that the owner's user makes (graph computations, tensor transfers), never during an
        // update, which `&mut self` serialises; the reference lives for the call only.
        f(unsafe { &mut *self.0[i].as_ptr() })
    }

    fn handle(p: NonNull<ggml_tensor>) -> Tensor {
        // SAFETY: a live header owned by `self`; the handle's users are bound by the owner's
        // lifetime (documented on every method that returns one).
        unsafe { Tensor::from_ptr(p.as_ptr()) }.expect("NonNull is never null")
    }
}

impl Default for Headers {
    fn default() -> Self {
        Headers::new()
    }
}

impl Drop for Headers {
    fn drop(&mut self) {
        for p in self.0.drain(..) {
            // SAFETY: allocated by `push` with Box and not freed since; whoever used its
            // address (graphs, other headers) goes with the owner.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}
