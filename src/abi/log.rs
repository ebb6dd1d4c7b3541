//! Logging and fatal errors through ggml's own logger, so messages reach whatever callback
//! the application installed with `ggml_log_set` and aborts run ggml's abort callback. Panics
//! take the same way out: see [`panic_hook`].

use std::ffi::{c_char, CString};

use super::{ggml_abort, ggml_log_internal, ggml_log_level};

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

/// The process's panic hook: a panic ends like every other fatal error of the library, in
/// [`abort`], so its message and location reach ggml's abort callback (set with
/// `ggml_set_abort_callback`) or, without one, stderr with ggml's backtrace, and the process
/// aborts. Never returns, so nothing unwinds (every profile builds with `panic = "abort"`
/// anyway; test binaries, which unwind, abort here too).
fn panic_hook(info: &std::panic::PanicHookInfo<'_>) {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>");
    let (file, line) = info
        .location()
        .map_or(("<unknown>", 0), |l| (l.file(), l.line()));
    abort(file, line, &format!("ggml-backend-rs panicked: {message}"))
}

/// Installs [`panic_hook`]; run once, by the loader, through [`INSTALL_PANIC_HOOK`].
extern "C" fn install_panic_hook() {
    std::panic::set_hook(Box::new(panic_hook));
}

/// Installs the panic hook when the library is loaded, before any of its code can run: an
/// entry of the ELF `.init_array` (Linux, FreeBSD) or of Mach-O's `__DATA,__mod_init_func`
/// (macOS). The dynamic loader runs it when it loads the shared library, before `dlopen`
/// returns and before the constructors of anything that depends on the library; in a static
/// program the C runtime runs it before `main`, and its priority (101, the first one left to
/// programs; Rust's standard library uses 99) puts it ahead of the program's own C and C++
/// constructors, which could call into the library. So no entry point needs a check of its
/// own, and the crate has no other constructor that could panic first. `set_hook` needs nothing
/// that `main` sets up (a static lock and the allocator), so it is sound to call from there.
///
/// `#[used]` keeps the entry in its object file, and a linker keeps the `.init_array` entries
/// of every object it links (the default scripts KEEP them, under `--gc-sections` too). That
/// object is linked where the crate's archive is linked whole: CMake links it so into
/// `libggml-base` (shared builds) and into static programs. The plugin module links its
/// archive member by member: [`keep_panic_hook`], called by [`crate::plugin::init`], refers
/// to this static and so pulls its object in (today nearly every function of the crate calls
/// into this module, which pulls it in too; the reference keeps it so whatever objects rustc
/// splits the crate into).
///
/// The hook replaces Rust's default one in the library's own copy of the standard library (a
/// Rust program that links the rlib shares it and may set its own hook once `main` runs). The
/// crate's own unit-test binary (`cfg(test)`) keeps libtest's per-test panic reports.
#[used]
#[cfg_attr(
    all(
        not(test),
        any(target_os = "linux", target_os = "android", target_os = "freebsd")
    ),
    link_section = ".init_array.00101"
)]
#[cfg_attr(
    all(not(test), target_os = "macos"),
    link_section = "__DATA,__mod_init_func"
)]
static INSTALL_PANIC_HOOK: extern "C" fn() = install_panic_hook;

/// Makes sure the linker keeps [`INSTALL_PANIC_HOOK`] where it links the crate's archive
/// member by member (the plugin module): the reference pulls in the static's object file.
pub(crate) fn keep_panic_hook() {
    std::hint::black_box(&INSTALL_PANIC_HOOK);
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\\0")).unwrap_or_default()
}

macro_rules! log_error {
    ($($arg:tt)*) => { $crate::abi::log::log($crate::abi::GGML_LOG_LEVEL_ERROR, &format!("{}\n", format_args!($($arg)*))) };
}
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::abi::log::log($crate::abi::GGML_LOG_LEVEL_INFO, &format!("{}\n", format_args!($($arg)*))) };
}
/// Debug messages are compiled into debug builds only, as upstream's (`#ifndef NDEBUG`).
macro_rules! log_debug {
    ($($arg:tt)*) => {
        if cfg!(debug_assertions) {
            $crate::abi::log::log($crate::abi::GGML_LOG_LEVEL_DEBUG, &format!("{}\n", format_args!($($arg)*)))
        }
    };
}

/// `ggml_assert!(cond, "fmt", args..)`: abort through ggml with the message when `cond` is false.
macro_rules! ggml_assert {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            $crate::abi::log::abort(file!(), line!(), &format!($($arg)*))
        }
    };
}

pub(crate) use {ggml_assert, log_debug, log_error, log_info};
