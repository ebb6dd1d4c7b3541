//! The C objects this crate makes, seen from inside: the other direction of [`super::handle`].
//!
//! A C object of ours (a buffer, a buffer type, a device, a backend, a registry) is a C struct
//! whose vtable ggml calls with the object's address, and Rust state that the address leads to.
//! [`CObject`] says how a state type is found from that address; one macro per C object family
//! ([`buffer_iface!`], [`buft_iface!`], [`device_iface!`], [`backend_iface!`], [`reg_iface!`])
//! builds the family's vtable from the state type's methods:
//!
//! ```ignore
//! const IFACE: ggml_backend_buffer_i = buffer_iface!(RpcBuffer {
//!     free_buffer, get_base, init_tensor, set_tensor, get_tensor, clear,
//! });
//! ```
//!
//! Each listed entry becomes an `unsafe extern "C"` function that finds the state (an address
//! that is not a live object of that kind aborts, naming the kind), turns the C arguments into
//! handles, slices and strings (a NULL where the ABI promises an object aborts, naming the
//! entry), and calls the state type's method of the entry's name with the state, the object's
//! handle and those arguments. An entry that is not listed stays `None`, which ggml reads as
//! "not implemented". The methods are ordinary safe Rust, so a state type's file reads as the
//! object's behaviour; the `unsafe` of the C edge is here, once per entry.
//!
//! The methods an entry calls, with `H` the object's handle (`Buffer`, `Buft`, `Device`,
//! `Backend`, `Reg`) and `Held` the state as [`CObject::find`] gives it:
//!
//! | family | entry | method |
//! |---|---|---|
//! | buffer | `free_buffer` | `fn(this: Held, Buffer)` (forgets the state) |
//! | | `get_base` | `fn(&self, Buffer) -> usize` |
//! | | `init_tensor` | `fn(&self, Buffer, Tensor) -> ggml_status` |
//! | | `memset_tensor` | `fn(&self, Buffer, Tensor, value: u8, offset, size)` |
//! | | `set_tensor` / `get_tensor` | `fn(&self, Buffer, Tensor, &[u8] / &mut [u8], offset)` |
//! | | `cpy_tensor` | `fn(&self, Buffer, src: Tensor, dst: Tensor) -> bool` |
//! | | `clear` / `reset` | `fn(&self, Buffer, value: u8)` / `fn(&self, Buffer)` |
//! | buffer type | `get_name` | `fn(&self, Buft) -> &CStr` |
//! | | `alloc_buffer` | `fn(&self, Buft, size) -> ggml_backend_buffer_t` (NULL: failed) |
//! | | `alloc_buffer_n` | `fn(&self, Buft, Vec<Tensor>) -> ggml_backend_buffer_t` |
//! | | `get_alignment` / `get_max_size` | `fn(&self, Buft) -> usize` |
//! | | `get_alloc_size` | `fn(&self, Buft, Tensor) -> usize` |
//! | | `is_host` | `fn(&self, Buft) -> bool` |
//! | device | `get_name` / `get_description` | `fn(&self, Device) -> &CStr` |
//! | | `get_memory` | `fn(&self, Device) -> (free, total)` |
//! | | `get_type` | `fn(&self, Device) -> ggml_backend_dev_type_raw` |
//! | | `get_props` | `fn(&self, Device, &mut ggml_backend_dev_props)` |
//! | | `init_backend` | `fn(this: Held, Device, params) -> ggml_backend_t` (kept by the backend) |
//! | | `get_buffer_type`, `get_host_buffer_type` | `fn(&self, Device) -> ..._buffer_type_t` |
//! | | `supports_op` | `fn(&self, Device, Tensor) -> bool` |
//! | | `supports_buft` | `fn(&self, Device, Buft) -> bool` |
//! | | `event_new` | `fn(&self, Device) -> ggml_backend_event_t` |
//! | | `event_free` / `event_synchronize` | `fn(&self, Device, Event)` |
//! | backend | `get_name` | `fn(&self, Backend) -> &CStr` |
//! | | `free` | `fn(this: Held, Backend)` (forgets the state, frees the object) |
//! | | `set_tensor_async` / `get_tensor_async` | `unsafe fn(&self, Backend, Tensor, data, ...)` |
//! | | `synchronize` | `fn(&self, Backend)` |
//! | | `graph_compute` | `fn(&self, Backend, Graph) -> ggml_status` |
//! | | `event_record` / `event_wait` | `fn(&self, Backend, Event)` |
//! | registry | `get_name` | `fn(&self, Reg) -> &CStr` |
//! | | `get_device_count` | `fn(&self, Reg) -> usize` |
//! | | `get_device` | `fn(&self, Reg, index) -> ggml_backend_dev_t` |
//! | | `get_proc_address` | `fn(&self, Reg, &CStr) -> *mut c_void` (a NULL name: NULL) |
//!
//! The asynchronous transfers stay `unsafe fn`: their bytes must stay live until the backend
//! is synchronized, which no Rust lifetime of the call can say.

use std::ffi::{c_char, c_void, CStr};

use super::handle::CHandle;
use super::log::abort;

/// Rust state behind C objects of one kind, found by the object's address.
pub trait CObject: Sized + 'static {
    /// What the objects are called in messages ("meta buffer", "RPC device").
    const KIND: &'static str;
    /// The state as an entry holds it while it runs: `Arc<Self>` for objects that are freed
    /// (so a free in another thread cannot pull it away), `&'static Self` or a copy for those
    /// that live for the process.
    type Held;
    /// The state of the object at `addr`, if it is a live object of this kind.
    fn find(addr: usize) -> Option<Self::Held>;
}

/// The object a vtable entry was called on, as its state and handle. ggml calls an entry only
/// with the object whose vtable holds it, so anything else is a caller's error and aborts.
///
/// # Safety
/// `ptr` is NULL or a live C object of `H`'s type (every vtable entry's contract).
pub unsafe fn this<T: CObject, H: CHandle>(ptr: *mut H::C) -> (T::Held, H) {
    // SAFETY: NULL or live (this function's contract).
    let Some(handle) = (unsafe { H::from_ptr(ptr) }) else {
        not_ours::<T>(ptr.cast())
    };
    let Some(held) = T::find(ptr as usize) else {
        not_ours::<T>(ptr.cast())
    };
    (held, handle)
}

#[cold]
fn not_ours<T: CObject>(ptr: *const c_void) -> ! {
    let kind = T::KIND;
    abort(
        file!(),
        line!(),
        &format!("{kind} vtable called with {ptr:p}, which is not a live {kind}"),
    )
}

/// An object argument of `entry`, which the ABI promises is not NULL.
///
/// # Safety
/// `ptr` is NULL or a live C object of `H`'s type.
pub unsafe fn arg<T: CObject, H: CHandle>(ptr: *mut H::C, entry: &str) -> H {
    // SAFETY: NULL or live (this function's contract).
    unsafe { H::from_ptr(ptr) }.unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("{} {entry}: an object argument is NULL", T::KIND),
        )
    })
}

/// The caller's `size` bytes at `data`; empty, without touching `data` (which ggml may pass as
/// NULL), when `size` is 0.
///
/// # Safety
/// When `size` > 0, `data` is NULL or the address of `size` readable bytes that stay live and
/// unwritten for `'a`.
pub unsafe fn bytes<'a, T: CObject>(data: *const c_void, size: usize, entry: &str) -> &'a [u8] {
    if size == 0 {
        return &[];
    }
    if data.is_null() {
        null_data::<T>(entry, size);
    }
    // SAFETY: non-NULL with a non-zero size: this function's contract.
    unsafe { std::slice::from_raw_parts(data.cast(), size) }
}

/// As [`bytes`], writable.
///
/// # Safety
/// When `size` > 0, `data` is NULL or the address of `size` writable bytes that nothing else
/// uses for `'a`.
pub unsafe fn bytes_mut<'a, T: CObject>(
    data: *mut c_void,
    size: usize,
    entry: &str,
) -> &'a mut [u8] {
    if size == 0 {
        return &mut [];
    }
    if data.is_null() {
        null_data::<T>(entry, size);
    }
    // SAFETY: non-NULL with a non-zero size: this function's contract.
    unsafe { std::slice::from_raw_parts_mut(data.cast(), size) }
}

#[cold]
fn null_data<T: CObject>(entry: &str, size: usize) -> ! {
    abort(
        file!(),
        line!(),
        &format!("{} {entry}: data is NULL for {size} bytes", T::KIND),
    )
}

/// A C string argument; None for NULL.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that stays live for `'a`.
pub unsafe fn c_str<'a>(s: *const c_char) -> Option<&'a CStr> {
    // SAFETY: non-NULL, and NUL-terminated by this function's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) })
}

/// The vtable of buffers whose state is `$ty` (module documentation).
macro_rules! buffer_iface {
    ($ty:ty { $($entry:ident),* $(,)? }) => {
        $crate::abi::ggml_backend_buffer_i {
            $($entry: Some($crate::abi::object::buffer_entry!($ty, $entry)),)*
            ..$crate::abi::ggml_backend_buffer_i::EMPTY
        }
    };
}

#[doc(hidden)]
macro_rules! buffer_entry {
    ($ty:ty, free_buffer) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buffer: c::ggml_backend_buffer_t) {
            // SAFETY: ggml frees a live buffer through its own vtable, once.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buffer>(buffer) };
            <$ty>::free_buffer(this, b)
        }
        entry
    }};
    ($ty:ty, get_base) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buffer: c::ggml_backend_buffer_t) -> *mut ::std::ffi::c_void {
            // SAFETY: ggml calls a buffer's entries with that live buffer.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buffer>(buffer) };
            <$ty>::get_base(&this, b) as *mut ::std::ffi::c_void
        }
        entry
    }};
    ($ty:ty, init_tensor) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buffer: c::ggml_backend_buffer_t,
            tensor: *mut c::ggml_tensor,
        ) -> c::ggml_status {
            // SAFETY: ggml calls a buffer's entries with that live buffer and live tensors.
            let ((this, b), t) = unsafe {
                (
                    c::object::this::<$ty, c::Buffer>(buffer),
                    c::object::arg::<$ty, c::Tensor>(tensor, "init_tensor"),
                )
            };
            <$ty>::init_tensor(&this, b, t)
        }
        entry
    }};
    ($ty:ty, memset_tensor) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buffer: c::ggml_backend_buffer_t,
            tensor: *mut c::ggml_tensor,
            value: u8,
            offset: usize,
            size: usize,
        ) {
            // SAFETY: ggml calls a buffer's entries with that live buffer and live tensors.
            let ((this, b), t) = unsafe {
                (
                    c::object::this::<$ty, c::Buffer>(buffer),
                    c::object::arg::<$ty, c::Tensor>(tensor, "memset_tensor"),
                )
            };
            <$ty>::memset_tensor(&this, b, t, value, offset, size)
        }
        entry
    }};
    ($ty:ty, set_tensor) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buffer: c::ggml_backend_buffer_t,
            tensor: *mut c::ggml_tensor,
            data: *const ::std::ffi::c_void,
            offset: usize,
            size: usize,
        ) {
            // SAFETY: ggml_backend_tensor_set passes this live buffer, a live tensor and
            // `size` bytes at `data`, readable until it returns.
            let ((this, b), t, data) = unsafe {
                (
                    c::object::this::<$ty, c::Buffer>(buffer),
                    c::object::arg::<$ty, c::Tensor>(tensor, "set_tensor"),
                    c::object::bytes::<$ty>(data, size, "set_tensor"),
                )
            };
            <$ty>::set_tensor(&this, b, t, data, offset)
        }
        entry
    }};
    ($ty:ty, get_tensor) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buffer: c::ggml_backend_buffer_t,
            tensor: *const c::ggml_tensor,
            data: *mut ::std::ffi::c_void,
            offset: usize,
            size: usize,
        ) {
            // SAFETY: ggml_backend_tensor_get passes this live buffer, a live tensor and
            // `size` bytes at `data`, writable and the caller's alone until it returns.
            let ((this, b), t, out) = unsafe {
                (
                    c::object::this::<$ty, c::Buffer>(buffer),
                    c::object::arg::<$ty, c::Tensor>(tensor.cast_mut(), "get_tensor"),
                    c::object::bytes_mut::<$ty>(data, size, "get_tensor"),
                )
            };
            <$ty>::get_tensor(&this, b, t, out, offset)
        }
        entry
    }};
    ($ty:ty, cpy_tensor) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buffer: c::ggml_backend_buffer_t,
            src: *const c::ggml_tensor,
            dst: *mut c::ggml_tensor,
        ) -> bool {
            // SAFETY: ggml calls a buffer's entries with that live buffer and live tensors.
            let ((this, b), s, d) = unsafe {
                (
                    c::object::this::<$ty, c::Buffer>(buffer),
                    c::object::arg::<$ty, c::Tensor>(src.cast_mut(), "cpy_tensor"),
                    c::object::arg::<$ty, c::Tensor>(dst, "cpy_tensor"),
                )
            };
            <$ty>::cpy_tensor(&this, b, s, d)
        }
        entry
    }};
    ($ty:ty, clear) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buffer: c::ggml_backend_buffer_t, value: u8) {
            // SAFETY: ggml calls a buffer's entries with that live buffer.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buffer>(buffer) };
            <$ty>::clear(&this, b, value)
        }
        entry
    }};
    ($ty:ty, reset) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buffer: c::ggml_backend_buffer_t) {
            // SAFETY: ggml calls a buffer's entries with that live buffer.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buffer>(buffer) };
            <$ty>::reset(&this, b)
        }
        entry
    }};
}

/// The vtable of buffer types whose state is `$ty` (module documentation). `alloc_buffer_n`
/// is set where the ABI has it (fact `list-alloc`) and left out where it does not.
macro_rules! buft_iface {
    ($ty:ty { $($entry:ident),* $(,)? }) => {
        $crate::abi::object::buft_iface!(
            @ $ty { $($entry),* } $crate::abi::ggml_backend_buffer_type_i::EMPTY
        )
    };
    (@ $ty:ty { alloc_buffer_n $(, $rest:ident)* } $base:expr) => {
        $crate::abi::object::buft_iface!(@ $ty { $($rest),* }
            $base.with_alloc_buffer_n($crate::abi::object::buft_entry!($ty, alloc_buffer_n)))
    };
    (@ $ty:ty { $entry:ident $(, $rest:ident)* } $base:expr) => {
        $crate::abi::object::buft_iface!(@ $ty { $($rest),* }
            $crate::abi::ggml_backend_buffer_type_i {
                $entry: Some($crate::abi::object::buft_entry!($ty, $entry)),
                ..$base
            })
    };
    (@ $ty:ty { } $base:expr) => {
        $base
    };
}

#[doc(hidden)]
macro_rules! buft_entry {
    ($ty:ty, get_name) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buft: c::ggml_backend_buffer_type_t,
        ) -> *const ::std::ffi::c_char {
            // SAFETY: ggml calls a buffer type's entries with that live buffer type.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buft>(buft) };
            <$ty>::get_name(&this, b).as_ptr()
        }
        entry
    }};
    ($ty:ty, alloc_buffer) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buft: c::ggml_backend_buffer_type_t,
            size: usize,
        ) -> c::ggml_backend_buffer_t {
            // SAFETY: ggml calls a buffer type's entries with that live buffer type.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buft>(buft) };
            <$ty>::alloc_buffer(&this, b, size)
        }
        entry
    }};
    ($ty:ty, alloc_buffer_n) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buft: c::ggml_backend_buffer_type_t,
            tensors: *mut *mut c::ggml_tensor,
            n_tensors: ::std::ffi::c_int,
        ) -> c::ggml_backend_buffer_t {
            // SAFETY: ggml_backend_buft_alloc_buffer_n passes this live buffer type and
            // `n_tensors` tensor pointers, each NULL (refused) or live.
            let ((this, b), list) = unsafe {
                (
                    c::object::this::<$ty, c::Buft>(buft),
                    c::tensor_list(tensors, n_tensors, "ggml_backend_buft_alloc_buffer_n"),
                )
            };
            <$ty>::alloc_buffer_n(&this, b, list)
        }
        entry
    }};
    ($ty:ty, get_alignment) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buft: c::ggml_backend_buffer_type_t) -> usize {
            // SAFETY: ggml calls a buffer type's entries with that live buffer type.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buft>(buft) };
            <$ty>::get_alignment(&this, b)
        }
        entry
    }};
    ($ty:ty, get_max_size) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buft: c::ggml_backend_buffer_type_t) -> usize {
            // SAFETY: ggml calls a buffer type's entries with that live buffer type.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buft>(buft) };
            <$ty>::get_max_size(&this, b)
        }
        entry
    }};
    ($ty:ty, get_alloc_size) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            buft: c::ggml_backend_buffer_type_t,
            tensor: *const c::ggml_tensor,
        ) -> usize {
            // SAFETY: ggml calls a buffer type's entries with that live buffer type and live
            // tensors.
            let ((this, b), t) = unsafe {
                (
                    c::object::this::<$ty, c::Buft>(buft),
                    c::object::arg::<$ty, c::Tensor>(tensor.cast_mut(), "get_alloc_size"),
                )
            };
            <$ty>::get_alloc_size(&this, b, t)
        }
        entry
    }};
    ($ty:ty, is_host) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(buft: c::ggml_backend_buffer_type_t) -> bool {
            // SAFETY: ggml calls a buffer type's entries with that live buffer type.
            let (this, b) = unsafe { c::object::this::<$ty, c::Buft>(buft) };
            <$ty>::is_host(&this, b)
        }
        entry
    }};
}

/// The vtable of devices whose state is `$ty` (module documentation).
macro_rules! device_iface {
    ($ty:ty { $($entry:ident),* $(,)? }) => {
        $crate::abi::ggml_backend_device_i {
            $($entry: Some($crate::abi::object::device_entry!($ty, $entry)),)*
            ..$crate::abi::ggml_backend_device_i::EMPTY
        }
    };
}

#[doc(hidden)]
macro_rules! device_entry {
    ($ty:ty, get_name) => {
        $crate::abi::object::device_entry!(@cstr $ty, get_name)
    };
    ($ty:ty, get_description) => {
        $crate::abi::object::device_entry!(@cstr $ty, get_description)
    };
    (@cstr $ty:ty, $entry:ident) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(dev: c::ggml_backend_dev_t) -> *const ::std::ffi::c_char {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            <$ty>::$entry(&this, d).as_ptr()
        }
        entry
    }};
    ($ty:ty, get_memory) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            dev: c::ggml_backend_dev_t,
            free: *mut usize,
            total: *mut usize,
        ) {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            let (f, t) = <$ty>::get_memory(&this, d);
            // SAFETY: ggml_backend_dev_memory passes NULL or writable `size_t`s.
            unsafe {
                if let Some(free) = free.as_mut() {
                    *free = f;
                }
                if let Some(total) = total.as_mut() {
                    *total = t;
                }
            }
        }
        entry
    }};
    ($ty:ty, get_type) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(dev: c::ggml_backend_dev_t) -> c::ggml_backend_dev_type_raw {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            <$ty>::get_type(&this, d)
        }
        entry
    }};
    ($ty:ty, get_props) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            dev: c::ggml_backend_dev_t,
            props: *mut c::ggml_backend_dev_props,
        ) {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            // SAFETY: ggml_backend_dev_get_props passes NULL or its own writable props, used
            // by nothing else until this returns.
            let props = unsafe { props.as_mut() };
            let Some(props) = props else {
                $crate::abi::log::abort(file!(), line!(), "get_props: props is NULL")
            };
            <$ty>::get_props(&this, d, props)
        }
        entry
    }};
    ($ty:ty, init_backend) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            dev: c::ggml_backend_dev_t,
            params: *const ::std::ffi::c_char,
        ) -> c::ggml_backend_t {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            // SAFETY: NULL or a C string (ggml_backend_dev_init's contract).
            let params = unsafe { c::object::c_str(params) };
            <$ty>::init_backend(this, d, params)
        }
        entry
    }};
    ($ty:ty, get_buffer_type) => {
        $crate::abi::object::device_entry!(@buft $ty, get_buffer_type)
    };
    ($ty:ty, get_host_buffer_type) => {
        $crate::abi::object::device_entry!(@buft $ty, get_host_buffer_type)
    };
    (@buft $ty:ty, $entry:ident) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(dev: c::ggml_backend_dev_t) -> c::ggml_backend_buffer_type_t {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            <$ty>::$entry(&this, d)
        }
        entry
    }};
    ($ty:ty, supports_op) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(dev: c::ggml_backend_dev_t, op: *const c::ggml_tensor) -> bool {
            // SAFETY: ggml calls a device's entries with that live device and live tensors.
            let ((this, d), op) = unsafe {
                (
                    c::object::this::<$ty, c::Device>(dev),
                    c::object::arg::<$ty, c::Tensor>(op.cast_mut(), "supports_op"),
                )
            };
            <$ty>::supports_op(&this, d, op)
        }
        entry
    }};
    ($ty:ty, supports_buft) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            dev: c::ggml_backend_dev_t,
            buft: c::ggml_backend_buffer_type_t,
        ) -> bool {
            // SAFETY: ggml calls a device's entries with that live device and live buffer
            // types.
            let ((this, d), b) = unsafe {
                (
                    c::object::this::<$ty, c::Device>(dev),
                    c::object::arg::<$ty, c::Buft>(buft, "supports_buft"),
                )
            };
            <$ty>::supports_buft(&this, d, b)
        }
        entry
    }};
    ($ty:ty, event_new) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(dev: c::ggml_backend_dev_t) -> c::ggml_backend_event_t {
            // SAFETY: ggml calls a device's entries with that live device.
            let (this, d) = unsafe { c::object::this::<$ty, c::Device>(dev) };
            <$ty>::event_new(&this, d)
        }
        entry
    }};
    ($ty:ty, event_free) => {
        $crate::abi::object::device_entry!(@event $ty, event_free)
    };
    ($ty:ty, event_synchronize) => {
        $crate::abi::object::device_entry!(@event $ty, event_synchronize)
    };
    (@event $ty:ty, $entry:ident) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(dev: c::ggml_backend_dev_t, event: c::ggml_backend_event_t) {
            // SAFETY: ggml calls a device's entries with that live device and its live events.
            let ((this, d), e) = unsafe {
                (
                    c::object::this::<$ty, c::Device>(dev),
                    c::object::arg::<$ty, c::Event>(event, stringify!($entry)),
                )
            };
            <$ty>::$entry(&this, d, e)
        }
        entry
    }};
}

/// The vtable of backends whose state is `$ty` (module documentation).
macro_rules! backend_iface {
    ($ty:ty { $($entry:ident),* $(,)? }) => {
        $crate::abi::ggml_backend_i {
            $($entry: Some($crate::abi::object::backend_entry!($ty, $entry)),)*
            ..$crate::abi::ggml_backend_i::EMPTY
        }
    };
}

#[doc(hidden)]
macro_rules! backend_entry {
    ($ty:ty, get_name) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(backend: c::ggml_backend_t) -> *const ::std::ffi::c_char {
            // SAFETY: ggml calls a backend's entries with that live backend.
            let (this, b) = unsafe { c::object::this::<$ty, c::Backend>(backend) };
            <$ty>::get_name(&this, b).as_ptr()
        }
        entry
    }};
    ($ty:ty, free) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(backend: c::ggml_backend_t) {
            // SAFETY: ggml frees a live backend through its own vtable, once.
            let (this, b) = unsafe { c::object::this::<$ty, c::Backend>(backend) };
            <$ty>::free(this, b)
        }
        entry
    }};
    ($ty:ty, set_tensor_async) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            backend: c::ggml_backend_t,
            tensor: *mut c::ggml_tensor,
            data: *const ::std::ffi::c_void,
            offset: usize,
            size: usize,
        ) {
            // SAFETY: ggml_backend_tensor_set_async passes this live backend, a live tensor
            // and `size` bytes at `data` that stay readable until the backend is synchronized:
            // the method's contract.
            unsafe {
                let (this, b) = c::object::this::<$ty, c::Backend>(backend);
                let t = c::object::arg::<$ty, c::Tensor>(tensor, "set_tensor_async");
                <$ty>::set_tensor_async(&this, b, t, data, offset, size)
            }
        }
        entry
    }};
    ($ty:ty, get_tensor_async) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            backend: c::ggml_backend_t,
            tensor: *const c::ggml_tensor,
            data: *mut ::std::ffi::c_void,
            offset: usize,
            size: usize,
        ) {
            // SAFETY: ggml_backend_tensor_get_async passes this live backend, a live tensor
            // and `size` bytes at `data` that stay writable, and the caller's alone, until the
            // backend is synchronized: the method's contract.
            unsafe {
                let (this, b) = c::object::this::<$ty, c::Backend>(backend);
                let t = c::object::arg::<$ty, c::Tensor>(tensor.cast_mut(), "get_tensor_async");
                <$ty>::get_tensor_async(&this, b, t, data, offset, size)
            }
        }
        entry
    }};
    ($ty:ty, synchronize) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(backend: c::ggml_backend_t) {
            // SAFETY: ggml calls a backend's entries with that live backend.
            let (this, b) = unsafe { c::object::this::<$ty, c::Backend>(backend) };
            <$ty>::synchronize(&this, b)
        }
        entry
    }};
    ($ty:ty, graph_compute) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            backend: c::ggml_backend_t,
            cgraph: *mut c::ggml_cgraph,
        ) -> c::ggml_status {
            // SAFETY: ggml calls a backend's entries with that live backend and live graphs.
            let ((this, b), g) = unsafe {
                (
                    c::object::this::<$ty, c::Backend>(backend),
                    c::object::arg::<$ty, c::Graph>(cgraph, "graph_compute"),
                )
            };
            <$ty>::graph_compute(&this, b, g)
        }
        entry
    }};
    ($ty:ty, event_record) => {
        $crate::abi::object::backend_entry!(@event $ty, event_record)
    };
    ($ty:ty, event_wait) => {
        $crate::abi::object::backend_entry!(@event $ty, event_wait)
    };
    (@event $ty:ty, $entry:ident) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(backend: c::ggml_backend_t, event: c::ggml_backend_event_t) {
            // SAFETY: ggml calls a backend's entries with that live backend and live events.
            let ((this, b), e) = unsafe {
                (
                    c::object::this::<$ty, c::Backend>(backend),
                    c::object::arg::<$ty, c::Event>(event, stringify!($entry)),
                )
            };
            <$ty>::$entry(&this, b, e)
        }
        entry
    }};
}

/// The vtable of registries whose state is `$ty` (module documentation).
macro_rules! reg_iface {
    ($ty:ty { $($entry:ident),* $(,)? }) => {
        $crate::abi::ggml_backend_reg_i {
            $($entry: Some($crate::abi::object::reg_entry!($ty, $entry)),)*
        }
    };
}

#[doc(hidden)]
macro_rules! reg_entry {
    ($ty:ty, get_name) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(reg: c::ggml_backend_reg_t) -> *const ::std::ffi::c_char {
            // SAFETY: ggml calls a registry's entries with that live registry.
            let (this, r) = unsafe { c::object::this::<$ty, c::Reg>(reg) };
            <$ty>::get_name(&this, r).as_ptr()
        }
        entry
    }};
    ($ty:ty, get_device_count) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(reg: c::ggml_backend_reg_t) -> usize {
            // SAFETY: ggml calls a registry's entries with that live registry.
            let (this, r) = unsafe { c::object::this::<$ty, c::Reg>(reg) };
            <$ty>::get_device_count(&this, r)
        }
        entry
    }};
    ($ty:ty, get_device) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            reg: c::ggml_backend_reg_t,
            index: usize,
        ) -> c::ggml_backend_dev_t {
            // SAFETY: ggml calls a registry's entries with that live registry.
            let (this, r) = unsafe { c::object::this::<$ty, c::Reg>(reg) };
            <$ty>::get_device(&this, r, index)
        }
        entry
    }};
    ($ty:ty, get_proc_address) => {{
        use $crate::abi as c;
        unsafe extern "C" fn entry(
            reg: c::ggml_backend_reg_t,
            name: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            // SAFETY: ggml calls a registry's entries with that live registry.
            let (this, r) = unsafe { c::object::this::<$ty, c::Reg>(reg) };
            // SAFETY: NULL or a C string (ggml_backend_reg_get_proc_address's contract).
            let name = unsafe { c::object::c_str(name) };
            match name {
                Some(name) => <$ty>::get_proc_address(&this, r, name),
                None => ::std::ptr::null_mut(),
            }
        }
        entry
    }};
}

pub(crate) use {
    backend_entry, backend_iface, buffer_entry, buffer_iface, buft_entry, buft_iface, device_entry,
    device_iface, reg_entry, reg_iface,
};
