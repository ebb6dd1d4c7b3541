//! Fact `mmap-caps`: a device says whether weights may be loaded by mapping the model file
//! (libllama's automatic load mode turns mmap off otherwise). Without it libllama maps weights
//! for every device.

/// cbindgen:field-names=[async, host_buffer, buffer_from_host_ptr, events, mmap_support]
#[cfg(feature = "mmap-caps")]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ggml_backend_dev_caps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
    /// Weights may be loaded by mapping the model file (libllama turns mmap off otherwise).
    pub mmap_support: bool,
}

/// cbindgen:field-names=[async, host_buffer, buffer_from_host_ptr, events]
#[cfg(not(feature = "mmap-caps"))]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ggml_backend_dev_caps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
}

impl ggml_backend_dev_caps {
    /// Whether the device takes mapped weights (always, where devices cannot say).
    pub fn mmap_support(&self) -> bool {
        #[cfg(feature = "mmap-caps")]
        return self.mmap_support;
        #[cfg(not(feature = "mmap-caps"))]
        true
    }
    /// Sets it; nothing where devices cannot say.
    pub fn set_mmap_support(&mut self, supported: bool) {
        #[cfg(feature = "mmap-caps")]
        {
            self.mmap_support = supported;
        }
        #[cfg(not(feature = "mmap-caps"))]
        let _ = supported;
    }
}
