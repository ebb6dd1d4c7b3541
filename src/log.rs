//! Logging and fatal errors through ggml's own logger, so messages reach whatever callback
//! the application installed with `ggml_log_set` and aborts run ggml's abort callback.

use std::ffi::{c_char, CString};

use crate::abi::{ggml_abort, ggml_log_internal, ggml_log_level};

/// Sends one message to ggml's logger. Interior NUL bytes are replaced so the message is
/// never silently truncated.
pub fn log(level: ggml_log_level, message: &str) {
    let text = c_string(message);
    // SAFETY: the format is a literal "%s" and its one argument a valid NUL-terminated string.
    unsafe { ggml_log_internal(level, c"%s".as_ptr(), text.as_ptr()) }
}

/// Reports a violated contract and aborts the process, like ggml's `GGML_ABORT`: the message
/// goes through `ggml_abort`, which calls the application's abort callback and then `abort()`.
#[cold]
pub fn abort(file: &str, line: u32, message: &str) -> ! {
    let file = c_string(file);
    let text = c_string(message);
    // SAFETY: "%s" with one valid C string; ggml_abort never returns.
    unsafe {
        ggml_abort(
            file.as_ptr(),
            line as i32,
            c"%s".as_ptr(),
            text.as_ptr() as *const c_char,
        )
    }
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\\0")).unwrap_or_default()
}

macro_rules! log_error {
    ($($arg:tt)*) => { $crate::log::log($crate::abi::GGML_LOG_LEVEL_ERROR, &format!("{}\n", format_args!($($arg)*))) };
}
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log::log($crate::abi::GGML_LOG_LEVEL_INFO, &format!("{}\n", format_args!($($arg)*))) };
}
/// Debug messages are compiled into debug builds only, as upstream's (`#ifndef NDEBUG`).
macro_rules! log_debug {
    ($($arg:tt)*) => {
        if cfg!(debug_assertions) {
            $crate::log::log($crate::abi::GGML_LOG_LEVEL_DEBUG, &format!("{}\n", format_args!($($arg)*)))
        }
    };
}

/// `ggml_assert!(cond, "fmt", args..)`: abort through ggml with the message when `cond` is false.
macro_rules! ggml_assert {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            $crate::log::abort(file!(), line!(), &format!($($arg)*))
        }
    };
}

pub(crate) use {ggml_assert, log_debug, log_error, log_info};
