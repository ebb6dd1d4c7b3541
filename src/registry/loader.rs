//! Loading backends from shared libraries: `ggml_backend_load` for one file, and the search
//! of `ggml_backend_load_all*` that picks, per backend name, the variant with the best score.

use std::ffi::c_int;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::abi::log::{log_debug, log_error, log_info};
use crate::abi::*;

/// Backend names tried by `ggml_backend_load_all`, in upstream's order.
pub const KNOWN_BACKENDS: [&str; 15] = [
    "blas", "zendnn", "cann", "cuda", "hip", "metal", "rpc", "sycl", "vulkan", "virtgpu", "opencl",
    "hexagon", "musa", "openvino", "cpu",
];

#[cfg(windows)]
const PREFIX: &str = "ggml-";
#[cfg(not(windows))]
const PREFIX: &str = "libggml-";
#[cfg(windows)]
const EXTENSION: &str = "dll";
#[cfg(not(windows))]
const EXTENSION: &str = "so";

/// Opens a library the way ggml does: symbols resolved now, kept local to the library.
fn open(path: &Path) -> Result<Library, libloading::Error> {
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
        // SAFETY: loading a library runs its initialisers; that is what the caller asked for.
        unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Library::from)
    }
    #[cfg(not(unix))]
    {
        // SAFETY: as above.
        unsafe { Library::new(path) }
    }
}

/// The library's `ggml_backend_score`, if it exports one.
fn score_fn(lib: &Library) -> Option<unsafe extern "C" fn() -> c_int> {
    // SAFETY: the symbol, where present, has the type ggml's backend ABI gives it.
    unsafe { lib.get::<unsafe extern "C" fn() -> c_int>(b"ggml_backend_score\0") }
        .ok()
        .map(|s| *s)
}

/// Loads one backend library and registers it. Errors are logged unless `silent`.
pub fn load(path: &Path, silent: bool) -> Option<Reg> {
    let shown = path.display();
    let lib = match open(path) {
        Ok(lib) => lib,
        Err(err) => {
            if !silent {
                log_error!("ggml_backend_load: failed to load {shown}: {err}");
            }
            return None;
        }
    };
    if let Some(score) = score_fn(&lib) {
        // SAFETY: a backend's score function takes no arguments and only inspects the system.
        if unsafe { score() } == 0 {
            if !silent {
                log_info!("ggml_backend_load: backend {shown} is not supported on this system");
            }
            return None;
        }
    }
    // SAFETY: as for the score function.
    let init = match unsafe {
        lib.get::<unsafe extern "C" fn() -> ggml_backend_reg_t>(b"ggml_backend_init\0")
    } {
        Ok(f) => *f,
        Err(_) => {
            if !silent {
                log_error!("ggml_backend_load: failed to find ggml_backend_init in {shown}");
            }
            return None;
        }
    };
    // SAFETY: the library is a ggml backend (it exports ggml_backend_init); the registry it
    // returns lives as long as the library stays loaded, which the registry entry ensures.
    let reg = match unsafe { Reg::from_ptr(init()) } {
        Some(reg) => reg,
        None => {
            if !silent {
                log_error!("ggml_backend_load: failed to initialize backend from {shown}: ggml_backend_init returned NULL");
            }
            return None;
        }
    };
    if reg.api_version() != crate::version::GGML_BACKEND_API_VERSION {
        if !silent {
            log_error!(
                "ggml_backend_load: failed to initialize backend from {shown}: incompatible API version (backend: {}, current: {})",
                reg.api_version(),
                crate::version::GGML_BACKEND_API_VERSION
            );
        }
        return None;
    }
    log_info!(
        "ggml_backend_load: loaded {} backend from {shown}",
        reg.name_string()
    );
    super::register(reg, Some(lib));
    Some(reg)
}

/// Directories searched when the caller names none: the build's backend directory (set at
/// build time through `GGML_BACKEND_DIR`), the executable's directory, the working directory.
fn default_search_paths() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(dir) = option_env!("GGML_BACKEND_DIR") {
        paths.push(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        paths.push(dir);
    }
    if let Ok(dir) = std::env::current_dir() {
        paths.push(dir);
    }
    paths
}

/// Whether `file_name` is a variant of backend `name`: `<prefix><name>-<anything>.<ext>`.
pub fn is_variant(file_name: &str, name: &str) -> bool {
    let Some(rest) = file_name
        .strip_prefix(PREFIX)
        .and_then(|r| r.strip_prefix(name))
        .and_then(|r| r.strip_prefix('-'))
    else {
        return false;
    };
    Path::new(rest).extension().is_some_and(|e| e == EXTENSION)
}

/// File name of the plain (variant-less) library of backend `name`.
pub fn base_file_name(name: &str) -> String {
    format!("{PREFIX}{name}.{EXTENSION}")
}

/// Loads the best variant of backend `name`: among `<prefix><name>-*.<ext>` files in the
/// search paths, the one whose `ggml_backend_score` is highest (and non-zero); without any,
/// the plain `<prefix><name>.<ext>`.
pub fn load_best(name: &str, silent: bool, search_path: Option<&Path>) -> Option<Reg> {
    let search_paths = match search_path {
        Some(p) => vec![p.to_path_buf()],
        None => default_search_paths(),
    };
    let mut best: Option<(c_int, PathBuf)> = None;
    for dir in &search_paths {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(err) => {
                log_debug!(
                    "ggml_backend_load_best: search path {} is not readable: {err}",
                    dir.display()
                );
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_file = std::fs::metadata(&path)
                .map(|m| m.is_file())
                .unwrap_or(false);
            let matches = path
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| is_variant(f, name));
            if !is_file || !matches {
                continue;
            }
            let lib = match open(&path) {
                Ok(lib) => lib,
                Err(err) => {
                    if !silent {
                        log_error!(
                            "ggml_backend_load_best: failed to load {}: {err}",
                            path.display()
                        );
                    }
                    continue;
                }
            };
            match score_fn(&lib) {
                Some(score) => {
                    // SAFETY: see `load`.
                    let s = unsafe { score() };
                    log_debug!("ggml_backend_load_best: {} score: {s}", path.display());
                    if s > best.as_ref().map_or(0, |(b, _)| *b) {
                        best = Some((s, path));
                    }
                }
                None => {
                    if !silent {
                        log_info!(
                            "ggml_backend_load_best: failed to find ggml_backend_score in {}",
                            path.display()
                        );
                    }
                }
            }
        }
    }
    match best {
        Some((_, path)) => load(&path, silent),
        None => search_paths
            .iter()
            .map(|dir| dir.join(base_file_name(name)))
            .find(|p| p.exists())
            .and_then(|p| load(&p, silent)),
    }
}

/// `ggml_backend_load_all_from_path`: every known backend, then `GGML_BACKEND_PATH`.
pub fn load_all(search_path: Option<&Path>) {
    // Release builds of ggml stay quiet about backends that are absent.
    let silent = !cfg!(debug_assertions);
    for name in KNOWN_BACKENDS {
        load_best(name, silent, search_path);
    }
    if let Some(path) = std::env::var_os("GGML_BACKEND_PATH") {
        load(Path::new(&path), false);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn variants_need_prefix_name_dash_and_extension() {
        assert!(is_variant("libggml-cpu-haswell.so", "cpu"));
        assert!(is_variant("libggml-cpu-x.y.so", "cpu"));
        assert!(!is_variant("libggml-cpu.so", "cpu"));
        assert!(!is_variant("libggml-cpux-haswell.so", "cpu"));
        assert!(!is_variant("libggml-cpu-haswell.so.1", "cpu"));
        assert!(!is_variant("ggml-cpu-haswell.so", "cpu"));
        assert!(!is_variant("libggml-cuda-12.so", "cpu"));
    }

    #[test]
    fn base_name_has_no_variant() {
        assert_eq!(base_file_name("cuda"), "libggml-cuda.so");
    }

    #[test]
    fn loading_a_missing_file_fails_cleanly() {
        assert!(open(Path::new("/nonexistent/libggml-none.so")).is_err());
    }
}
