//! The exported C functions, one file per API family. Each function only checks its
//! arguments, converts them to typed handles and calls the safe core; what upstream treats
//! as a violated contract (a NULL handle, an out-of-range index) aborts through ggml with a
//! message naming the function and argument, and what upstream reports as an error value
//! (NULL, false, a `ggml_status`) is reported the same way.
//!
//! Every export that takes a pointer or handle is an `unsafe extern "C" fn` whose `# Safety`
//! section states the caller's side of ggml's contract; C callers are bound by it just the same.
//! In those sections a *live* object is a pointer to an object of that type, made and filled
//! in as the ABI describes (vtable included) and not freed before the call returns (for
//! asynchronous calls: before the backend is synchronized); "NULL aborts" means the function
//! checks for NULL and aborts through ggml. Only the exports without pointer arguments (counts,
//! lookups by index or type, `ggml_backend_load_all`, ...) are safe functions.
//!
//! Panics cannot cross this boundary: every profile builds with `panic = "abort"`, a Rust
//! `extern "C"` function aborts rather than unwind in any case, and the panic hook this crate
//! installs at load time (`crate::abi::log::panic_hook`) sends the panic's message and location to
//! `ggml_abort`, like any other fatal error of the library.

mod backend;
mod buffer;
mod buffer_type;
mod device;
mod event;
mod graph;
// Exports that exist with one of the ABI facts (src/abi/facts/): this file and the gated items
// of meta.rs and buffer_type.rs.
#[cfg(feature = "list-alloc")]
mod list_alloc;
pub(crate) mod meta;
pub(crate) use meta::inspection_proc;
mod registry;
mod sched;
mod tensor;

use std::ffi::{c_char, CStr};

/// Converts a C handle argument into its typed handle, aborting when it is NULL.
///
/// Only for arguments of an `unsafe` exported function (or an `unsafe fn` helper of one)
/// whose `# Safety` section says that the argument, when not NULL, is a live object of that
/// type: that contract is what makes the handle sound.
macro_rules! handle_arg {
    ($ptr:expr, $handle:ident, $func:literal) => {
        // SAFETY: a non-NULL `$ptr` names a live object of this type for as long as the handle
        // is used: the `# Safety` contract of the enclosing function, which states it for
        // every argument this macro converts.
        match unsafe { $crate::abi::$handle::from_ptr($ptr as *mut _) } {
            Some(h) => h,
            None => $crate::ffi::null_argument($func, stringify!($ptr)),
        }
    };
}

/// Like [`handle_arg`], but NULL is allowed and yields `None`; the same contract applies.
macro_rules! optional_arg {
    ($ptr:expr, $handle:ident) => {
        // SAFETY: `$ptr` is NULL or names a live object of this type for as long as the
        // handle is used: the `# Safety` contract of the enclosing function, which states it
        // for every argument this macro converts.
        unsafe { $crate::abi::$handle::from_ptr($ptr as *mut _) }
    };
}

pub(crate) use {handle_arg, optional_arg};

#[cold]
pub(crate) fn null_argument(func: &str, arg: &str) -> ! {
    crate::abi::log::abort(
        file!(),
        line!(),
        &format!("{func}: argument `{arg}` is NULL"),
    )
}

/// Reads a C string argument; NULL yields `None`.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that outlives the call.
pub(crate) unsafe fn c_str_arg<'a>(s: *const c_char) -> Option<&'a CStr> {
    if s.is_null() {
        None
    } else {
        // SAFETY: `s` is non-NULL here, so a NUL-terminated string that outlives the call
        // (this function's contract).
        Some(unsafe { CStr::from_ptr(s) })
    }
}
