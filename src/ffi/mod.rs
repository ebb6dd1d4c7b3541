//! The exported C functions, one file per API family. Each function only checks its
//! arguments, converts them to typed handles and calls the safe core; what upstream treats
//! as a violated contract (a NULL handle, an out-of-range index) aborts through ggml with a
//! message naming the function and argument, and what upstream reports as an error value
//! (NULL, false, a `ggml_status`) is reported the same way.
//!
//! Panics cannot cross this boundary: every profile builds with `panic = "abort"`, and a
//! Rust `extern "C"` function aborts rather than unwind in any case.

mod backend;
mod buffer;
mod buffer_type;
mod device;
mod event;
mod graph;
pub(crate) mod meta;
pub(crate) use meta::inspection_proc;
mod registry;
mod sched;
mod tensor;

use std::ffi::{c_char, CStr};

/// Converts a C handle argument into its typed handle, aborting when it is NULL.
///
/// The caller of the C API vouches that a non-NULL handle names a live object: that is
/// the ABI's contract, and the only unsafe assumption the exported functions make.
macro_rules! handle_arg {
    ($ptr:expr, $handle:ident, $func:literal) => {
        // SAFETY: see the macro's documentation.
        match unsafe { $crate::abi::$handle::from_ptr($ptr as *mut _) } {
            Some(h) => h,
            None => $crate::ffi::null_argument($func, stringify!($ptr)),
        }
    };
}

/// Like [`handle_arg`], but NULL is allowed and yields `None`.
macro_rules! optional_arg {
    ($ptr:expr, $handle:ident) => {
        // SAFETY: see `handle_arg`.
        unsafe { $crate::abi::$handle::from_ptr($ptr as *mut _) }
    };
}

pub(crate) use {handle_arg, optional_arg};

#[cold]
pub(crate) fn null_argument(func: &str, arg: &str) -> ! {
    crate::log::abort(
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
