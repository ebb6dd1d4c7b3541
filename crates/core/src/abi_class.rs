//! Which ABI a build implements, as data: the ggml releases that share it and the exports
//! that tell it apart from its neighbours in a running process. `GGML_BACKEND_API_VERSION`
//! alone proves little (it is 2 for five different ABIs), so anything that meets a ggml it
//! was not built with (the plugin in a host) checks the host against this.

use std::ffi::CStr;

/// One ABI class: releases with the same backend ABI (layouts, vtables, op enum, exports).
#[derive(Debug)]
pub struct AbiClass {
    /// The class's letter in docs/abi-classes.md's table (A: 0.9.11, E: 0.24-0.25, F: 0.26).
    pub name: &'static str,
    /// Every ggml release of the class, as `ggml_version()` spells it.
    pub releases: &'static [&'static str],
    /// Exports a host of the class has and the neighbouring classes lack.
    pub has_exports: &'static [&'static CStr],
    /// Exports the neighbouring classes have and a host of this class lacks.
    pub lacks_exports: &'static [&'static CStr],
}

/// Why a host's ggml is not the ABI a build implements.
#[derive(Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// `ggml_version()` names another release.
    Release(String),
    /// The release matches, but an export says otherwise (a build with a patched ABI).
    Export { name: String, present: bool },
}

impl AbiClass {
    /// Checks a host: its `ggml_version()` and whether it defines each export this class
    /// is told apart by (`has`: does the host define that symbol). `unlisted` is one more
    /// release taken as the class's: a tree whose headers equal the class's but whose version
    /// the class does not list (accepted so at configure time, cmake/ggml-version.cmake).
    pub fn check(
        &self,
        version: &str,
        unlisted: Option<&str>,
        has: impl Fn(&CStr) -> bool,
    ) -> Result<(), Mismatch> {
        if !self.releases.contains(&version) && unlisted != Some(version) {
            return Err(Mismatch::Release(version.to_owned()));
        }
        for (list, present) in [(self.has_exports, true), (self.lacks_exports, false)] {
            if let Some(name) = list.iter().find(|n| has(n) != present) {
                return Err(Mismatch::Export {
                    name: name.to_string_lossy().into_owned(),
                    present: !present,
                });
            }
        }
        Ok(())
    }

    /// The releases as a reader would list them: `0.24.0 or 0.25.3`, with `unlisted` last.
    pub fn releases_text(&self, unlisted: Option<&str>) -> String {
        let mut all = self.releases.to_vec();
        all.extend(unlisted);
        all.join(" or ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: AbiClass = AbiClass {
        name: "E",
        releases: &["0.24.0", "0.25.3"],
        has_exports: &[c"ggml_backend_meta_alloc_ctx_tensors_from_buft"],
        lacks_exports: &[c"ggml_backend_buft_alloc_buffer_n"],
    };

    #[test]
    fn a_host_is_checked_by_release_then_by_exports() {
        let e_host = |n: &CStr| n == c"ggml_backend_meta_alloc_ctx_tensors_from_buft";
        assert_eq!(E.check("0.25.3", None, e_host), Ok(()));
        assert_eq!(E.check("0.24.0", None, e_host), Ok(()));
        assert_eq!(
            E.check("0.26.0", None, e_host),
            Err(Mismatch::Release("0.26.0".into()))
        );
        assert_eq!(
            E.check("0.25.3", None, |_| true),
            Err(Mismatch::Export {
                name: "ggml_backend_buft_alloc_buffer_n".into(),
                present: true
            })
        );
        assert_eq!(
            E.check("0.25.3", None, |_| false),
            Err(Mismatch::Export {
                name: "ggml_backend_meta_alloc_ctx_tensors_from_buft".into(),
                present: false
            })
        );
        assert_eq!(E.releases_text(None), "0.24.0 or 0.25.3");
    }

    #[test]
    fn an_unlisted_release_is_accepted_by_its_exports() {
        let e_host = |n: &CStr| n == c"ggml_backend_meta_alloc_ctx_tensors_from_buft";
        assert_eq!(E.check("0.25.9", Some("0.25.9"), e_host), Ok(()));
        assert_eq!(
            E.check("0.25.8", Some("0.25.9"), e_host),
            Err(Mismatch::Release("0.25.8".into()))
        );
        assert_eq!(
            E.check("0.25.9", Some("0.25.9"), |_| true),
            Err(Mismatch::Export {
                name: "ggml_backend_buft_alloc_buffer_n".into(),
                present: true
            })
        );
        assert_eq!(
            E.releases_text(Some("0.25.9")),
            "0.24.0 or 0.25.3 or 0.25.9"
        );
    }
}
