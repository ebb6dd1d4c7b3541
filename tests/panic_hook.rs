//! The panic hook (src/log.rs): a panic anywhere in a process that links the library ends in
//! ggml's `ggml_abort`, with the panic's message and location, instead of Rust's own report.
//!
//! The hook is process-wide, so a panic of this test's own code goes through it like one of the
//! library's. The test runs itself again as a child process that panics on purpose; the child
//! installs nothing: the library's load-time constructor has to have done it. The parent demands
//! that the child died of SIGABRT and that its stderr holds the line ggml_abort writes
//! (`<file>:<line>: <message>`, see ggml.c), or, with an abort callback set
//! (`ggml_set_abort_callback`, how llama.cpp users take over aborts), what the callback was given.

// Without ggml to link (plain `cargo test`, see build.rs) there is nothing to run here.
#![cfg(not(ggml_backend_rs_unlinked))]

use std::ffi::{c_char, CStr};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

// A type of the crate's, so that the test binary links the library (and its constructor).
use ggml_backend_rs::abi::ggml_backend_dev_t;

/// Selects the child's part and says whether to set an abort callback ("plain", "callback").
const CHILD: &str = "GGML_BACKEND_RS_PANIC_HOOK_CHILD";
/// Precedes the location of the child's panic on its stdout.
const AT: &str = "panic site: ";
const MESSAGE: &str = "test panic: the hook must route this to ggml_abort";
const SIGABRT: i32 = 6;

type AbortCallback = Option<unsafe extern "C" fn(message: *const c_char)>;

extern "C" {
    fn ggml_set_abort_callback(callback: AbortCallback) -> AbortCallback;
    fn ggml_backend_dev_count() -> usize;
    fn ggml_backend_dev_get(index: usize) -> ggml_backend_dev_t;
}

unsafe extern "C" fn abort_callback(message: *const c_char) {
    // SAFETY: ggml_abort passes its NUL-terminated message buffer.
    let message = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    eprintln!("abort callback: {message}");
}

/// Prints where it is called from, then panics there (`#[track_caller]`: the panic's location
/// is the caller's too).
#[track_caller]
fn panic_here() -> ! {
    let at = std::panic::Location::caller();
    println!("{AT}{}:{}", at.file(), at.line());
    panic!("{MESSAGE}")
}

fn child(mode: &str) -> ! {
    if mode == "callback" {
        // SAFETY: a function of the right type that lives as long as the process.
        unsafe { ggml_set_abort_callback(Some(abort_callback)) };
    }
    // Use the library as a program would, then fail.
    // SAFETY: no arguments; an index below the count.
    let dev = unsafe { (ggml_backend_dev_count() > 0).then(|| ggml_backend_dev_get(0)) };
    assert!(dev.is_some_and(|d| !d.is_null()));
    panic_here()
}

#[test]
fn a_panic_ends_in_ggml_abort() {
    if let Ok(mode) = std::env::var(CHILD) {
        child(&mode);
    }
    for mode in ["plain", "callback"] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["a_panic_ends_in_ggml_abort", "--exact", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD, mode)
            // ggml_abort's backtrace (gdb attaching to the child) is not under test.
            .env("GGML_NO_BACKTRACE", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let report = format!("child ({mode}): {}\n{stdout}\n{stderr}", out.status);
        assert_eq!(out.status.signal(), Some(SIGABRT), "{report}");

        // (after libtest's "test <name> ... ", on the same line)
        let site = (stdout
            .split_once(AT)
            .and_then(|(_, rest)| rest.lines().next()))
        .unwrap_or_else(|| panic!("no panic site printed\n{report}"));
        assert!(site.starts_with(file!()), "{report}");
        // What ggml_abort formats: "%s:%d: " with the file and line it is given, then the message.
        let abort_line = format!("{site}: ggml-backend-rs panicked: {MESSAGE}");
        let expected = match mode {
            "plain" => abort_line.clone(),
            _ => format!("abort callback: {abort_line}"),
        };
        assert!(
            stderr.lines().any(|l| l == expected),
            "expected line `{expected}`\n{report}"
        );
        if mode == "callback" {
            // ggml_abort hands the message to the callback instead of printing it.
            assert!(!stderr.lines().any(|l| l == abort_line), "{report}");
        }
        // Rust's default hook ("thread '..' panicked at <file>:<line>:<col>:") did not run.
        assert!(!stderr.contains("panicked at"), "{report}");
        println!("{report}");
    }
}
