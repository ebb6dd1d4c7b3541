//! Typed, non-null handles over the C structs, with one method per vtable entry.
//!
//! A handle is created only by `from_ptr` (unsafe: the caller vouches that the pointer names
//! a live object whose vtable was filled in per the ABI). After that, every method is safe:
//! the `unsafe` needed to read fields and call function pointers is confined to this file,
//! and each optional entry is checked before it is called.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{self, NonNull};

use super::backend::*;
use super::ggml::*;
use super::meta::GGML_BACKEND_META_MAX_DEVICES;
use crate::abi::log::ggml_assert;

/// What every handle is: a non-null address of one C type. Generic code (the vtables of
/// `super::object`) makes handles through it.
pub trait CHandle: Sized {
    /// The C struct the handle points to.
    type C;
    /// # Safety
    /// As the handle's own `from_ptr`: `ptr` is NULL or points to a live object of this type
    /// with a valid vtable, which outlives every use of the returned handle.
    unsafe fn from_ptr(ptr: *mut Self::C) -> Option<Self>;
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident => $c:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(transparent)]
        pub struct $name(NonNull<$c>);

        impl $name {
            /// # Safety
            /// `ptr` is NULL or points to a live object of this type with a valid vtable,
            /// which outlives every use of the returned handle.
            pub unsafe fn from_ptr(ptr: *mut $c) -> Option<Self> {
                NonNull::new(ptr).map(Self)
            }

            pub fn as_ptr(self) -> *mut $c {
                self.0.as_ptr()
            }

            fn raw(&self) -> &$c {
                // SAFETY: from_ptr's contract: the object is alive while the handle is used.
                unsafe { self.0.as_ref() }
            }
        }

        impl CHandle for $name {
            type C = $c;
            unsafe fn from_ptr(ptr: *mut $c) -> Option<Self> {
                NonNull::new(ptr).map(Self)
            }
        }

        // SAFETY: a handle is a plain address; ggml shares the objects handles name between
        // threads by design, and every access through a handle follows ggml's own threading
        // contract for that object.
        unsafe impl Send for $name {}
        // SAFETY: as for `Send`: shared handles only read the address.
        unsafe impl Sync for $name {}
    };
}

/// A backend's request from `graph_optimize`: keep `tensor` allocated until `until`, a later
/// node of the same graph, has been computed (it reads `tensor` out of order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocDep {
    pub tensor: Tensor,
    pub until: Tensor,
}

handle!(/// `ggml_backend_buffer_type_t`
    Buft => ggml_backend_buffer_type);
handle!(/// `ggml_backend_buffer_t`
    Buffer => ggml_backend_buffer);
handle!(/// `ggml_backend_t`
    Backend => ggml_backend);
handle!(/// `ggml_backend_dev_t`
    Device => ggml_backend_device);
handle!(/// `ggml_backend_reg_t`
    Reg => ggml_backend_reg);
handle!(/// `ggml_backend_event_t`
    Event => ggml_backend_event);
handle!(/// `struct ggml_tensor *`
    Tensor => ggml_tensor);
handle!(/// `struct ggml_cgraph *`
    Graph => ggml_cgraph);

/// Reads a vtable entry that the ABI makes mandatory, aborting with its name when a backend
/// left it NULL (upstream would jump to address 0).
macro_rules! required {
    ($iface:expr, $entry:ident, $what:literal) => {
        match $iface.$entry {
            Some(f) => f,
            None => $crate::abi::log::abort(
                file!(),
                line!(),
                concat!(
                    $what,
                    ": the backend does not implement the mandatory callback `",
                    stringify!($entry),
                    "`"
                ),
            ),
        }
    };
}

// ---------------------------------------------------------------------------------------

impl Buft {
    pub fn iface(&self) -> ggml_backend_buffer_type_i {
        self.raw().iface
    }
    pub fn device(&self) -> ggml_backend_dev_t {
        self.raw().device
    }
    pub fn context(&self) -> *mut c_void {
        self.raw().context
    }
    pub fn name(&self) -> *const c_char {
        let f = required!(self.iface(), get_name, "ggml_backend_buft_name");
        // SAFETY: vtable entry of a live buffer type, called with that buffer type.
        unsafe { f(self.as_ptr()) }
    }
    pub fn name_string(&self) -> String {
        c_str_lossy(self.name())
    }
    pub fn alloc_buffer(&self, size: usize) -> ggml_backend_buffer_t {
        let f = required!(self.iface(), alloc_buffer, "ggml_backend_buft_alloc_buffer");
        // SAFETY: as above.
        unsafe { f(self.as_ptr(), size) }
    }
    pub fn alignment(&self) -> usize {
        let f = required!(
            self.iface(),
            get_alignment,
            "ggml_backend_buft_get_alignment"
        );
        // SAFETY: as above.
        unsafe { f(self.as_ptr()) }
    }
    /// Largest buffer this type can allocate; `usize::MAX` when the type does not say.
    pub fn max_size(&self) -> usize {
        match self.iface().get_max_size {
            // SAFETY: as above.
            Some(f) => unsafe { f(self.as_ptr()) },
            None => usize::MAX,
        }
    }
    /// Bytes the tensor needs in a buffer of this type, padding included; `ggml_nbytes` by default.
    /// At least its bytes, but for a leaf (see below).
    pub fn alloc_size(&self, tensor: Tensor) -> usize {
        let nbytes = tensor.nbytes();
        match self.iface().get_alloc_size {
            Some(f) => {
                // SAFETY: as above; the tensor is live.
                let size = unsafe { f(self.as_ptr(), tensor.as_ptr()) };
                // A leaf may take less than its bytes (a tensor-parallel device counts its
                // weights by what one member holds of them); an op's result takes them all.
                let leaf = tensor
                    .op_kind()
                    .is_some_and(|op| op == ggml_backend_rs_core::Op::None || op.is_view());
                ggml_assert!(
                    size >= nbytes || leaf,
                    "ggml_backend_buft_get_alloc_size: buffer type reports {size} bytes for a tensor of {nbytes} bytes"
                );
                size
            }
            None => nbytes,
        }
    }
    pub fn is_host(&self) -> bool {
        match self.iface().is_host {
            // SAFETY: as above.
            Some(f) => unsafe { f(self.as_ptr()) },
            None => false,
        }
    }
}

// ---------------------------------------------------------------------------------------

impl Buffer {
    pub fn iface(&self) -> ggml_backend_buffer_i {
        self.raw().iface
    }
    pub fn buft(&self) -> ggml_backend_buffer_type_t {
        self.raw().buft
    }
    pub fn context(&self) -> *mut c_void {
        self.raw().context
    }
    pub fn size(&self) -> usize {
        self.raw().size
    }
    pub fn usage(&self) -> ggml_backend_buffer_usage_raw {
        self.raw().usage
    }
    pub fn set_usage_field(&self, usage: ggml_backend_buffer_usage_raw) {
        // SAFETY: the buffer is live; `usage` is a plain field that C code only reads.
        unsafe { (*self.as_ptr()).usage = usage }
    }
    /// Sets the size field; for the buffer's creator, before the buffer is shared.
    pub fn set_size_field(&self, size: usize) {
        // SAFETY: the buffer is live; `size` is a plain field that C code only reads.
        unsafe { (*self.as_ptr()).size = size }
    }
    /// The buffer's type; aborts when a backend created a buffer without one.
    pub fn buft_handle(&self) -> Buft {
        // SAFETY: a buffer's type outlives the buffer.
        match unsafe { Buft::from_ptr(self.buft()) } {
            Some(b) => b,
            None => {
                crate::abi::log::abort(file!(), line!(), "ggml backend buffer has no buffer type")
            }
        }
    }
    pub fn call_get_base(&self) -> Option<*mut c_void> {
        // SAFETY: vtable entry of a live buffer.
        self.iface().get_base.map(|f| unsafe { f(self.as_ptr()) })
    }
    pub fn init_tensor(&self, tensor: Tensor) -> ggml_status {
        match self.iface().init_tensor {
            // SAFETY: vtable entry of a live buffer, with a live tensor.
            Some(f) => unsafe { f(self.as_ptr(), tensor.as_ptr()) },
            None => GGML_STATUS_SUCCESS,
        }
    }
    pub fn clear(&self, value: u8) {
        let f = required!(self.iface(), clear, "ggml_backend_buffer_clear");
        // SAFETY: as above.
        unsafe { f(self.as_ptr(), value) }
    }
    pub fn reset(&self) {
        if let Some(f) = self.iface().reset {
            // SAFETY: as above.
            unsafe { f(self.as_ptr()) }
        }
    }
    /// # Safety
    /// `data` is readable for `size` bytes; `offset + size` lies inside the tensor.
    pub unsafe fn set_tensor(
        &self,
        tensor: Tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
    ) {
        let f = required!(self.iface(), set_tensor, "ggml_backend_tensor_set");
        // SAFETY: vtable entry of a live buffer, with a live tensor; `data` is readable for
        // `size` bytes and `offset + size` lies inside the tensor (this method's contract).
        unsafe { f(self.as_ptr(), tensor.as_ptr(), data, offset, size) }
    }
    /// # Safety
    /// `data` is writable for `size` bytes; `offset + size` lies inside the tensor.
    pub unsafe fn get_tensor(&self, tensor: Tensor, data: *mut c_void, offset: usize, size: usize) {
        let f = required!(self.iface(), get_tensor, "ggml_backend_tensor_get");
        // SAFETY: vtable entry of a live buffer, with a live tensor; `data` is writable for
        // `size` bytes and `offset + size` lies inside the tensor (this method's contract).
        unsafe { f(self.as_ptr(), tensor.as_ptr(), data, offset, size) }
    }
    /// Caller has checked that `offset + size` lies inside the tensor.
    pub fn memset_tensor(&self, tensor: Tensor, value: u8, offset: usize, size: usize) {
        let f = required!(self.iface(), memset_tensor, "ggml_backend_tensor_memset");
        // SAFETY: bounds checked by the caller against the tensor's size.
        unsafe { f(self.as_ptr(), tensor.as_ptr(), value, offset, size) }
    }
    /// Tries the buffer's own copy into `dst` (which lives in this buffer).
    pub fn cpy_tensor(&self, src: Tensor, dst: Tensor) -> bool {
        match self.iface().cpy_tensor {
            // SAFETY: both tensors are live and have the same layout (checked by callers).
            Some(f) => unsafe { f(self.as_ptr(), src.as_ptr(), dst.as_ptr()) },
            None => false,
        }
    }
    pub fn free_buffer_fn(&self) -> Option<unsafe extern "C" fn(ggml_backend_buffer_t)> {
        self.iface().free_buffer
    }
}

// ---------------------------------------------------------------------------------------

impl Backend {
    pub fn iface(&self) -> ggml_backend_i {
        self.raw().iface
    }
    pub fn iface_context(&self) -> *mut c_void {
        self.raw().context
    }
    pub fn guid(&self) -> ggml_guid_t {
        self.raw().guid
    }
    pub fn device(&self) -> ggml_backend_dev_t {
        self.raw().device
    }
    pub fn device_handle(&self, what: &str) -> Device {
        // SAFETY: a backend's device outlives it.
        match unsafe { Device::from_ptr(self.device()) } {
            Some(d) => d,
            None => {
                crate::abi::log::abort(file!(), line!(), &format!("{what}: backend has no device"))
            }
        }
    }
    pub fn name(&self) -> *const c_char {
        let f = required!(self.iface(), get_name, "ggml_backend_name");
        // SAFETY: vtable entry of a live backend.
        unsafe { f(self.as_ptr()) }
    }
    pub fn name_string(&self) -> String {
        c_str_lossy(self.name())
    }
    pub fn free(self) {
        let f = required!(self.iface(), free, "ggml_backend_free");
        // SAFETY: as above; the handle is consumed.
        unsafe { f(self.as_ptr()) }
    }
    pub fn synchronize(&self) {
        if let Some(f) = self.iface().synchronize {
            // SAFETY: as above.
            unsafe { f(self.as_ptr()) }
        }
    }
    pub fn graph_compute(&self, graph: Graph) -> ggml_status {
        let f = required!(self.iface(), graph_compute, "ggml_backend_graph_compute");
        // SAFETY: as above, with a live graph.
        unsafe { f(self.as_ptr(), graph.as_ptr()) }
    }
    pub fn event_record(&self, event: Event) {
        let f = required!(self.iface(), event_record, "ggml_backend_event_record");
        // SAFETY: as above, with a live event.
        unsafe { f(self.as_ptr(), event.as_ptr()) }
    }
    pub fn event_wait(&self, event: Event) {
        let f = required!(self.iface(), event_wait, "ggml_backend_event_wait");
        // SAFETY: as above.
        unsafe { f(self.as_ptr(), event.as_ptr()) }
    }
}

// ---------------------------------------------------------------------------------------

impl Device {
    pub fn iface(&self) -> ggml_backend_device_i {
        self.raw().iface
    }
    pub fn reg(&self) -> ggml_backend_reg_t {
        self.raw().reg
    }
    pub fn name(&self) -> *const c_char {
        let f = required!(self.iface(), get_name, "ggml_backend_dev_name");
        // SAFETY: vtable entry of a live device.
        unsafe { f(self.as_ptr()) }
    }
    /// The device name as Rust text (lossy), for comparisons and messages.
    pub fn name_string(&self) -> String {
        c_str_lossy(self.name())
    }
    pub fn description_string(&self) -> String {
        c_str_lossy(self.description())
    }
    pub fn description(&self) -> *const c_char {
        let f = required!(
            self.iface(),
            get_description,
            "ggml_backend_dev_description"
        );
        // SAFETY: as above.
        unsafe { f(self.as_ptr()) }
    }
    pub fn memory(&self, free: &mut usize, total: &mut usize) {
        let f = required!(self.iface(), get_memory, "ggml_backend_dev_memory");
        // SAFETY: as above, with two valid destinations.
        unsafe { f(self.as_ptr(), free, total) }
    }
    pub fn dev_type(&self) -> ggml_backend_dev_type_raw {
        let f = required!(self.iface(), get_type, "ggml_backend_dev_type");
        // SAFETY: as above.
        unsafe { f(self.as_ptr()) }
    }
    pub fn props(&self, props: &mut ggml_backend_dev_props) {
        let f = required!(self.iface(), get_props, "ggml_backend_dev_get_props");
        // SAFETY: as above; `props` is a valid, exclusive destination.
        unsafe { f(self.as_ptr(), props) }
    }
    /// The device's `device_id` (e.g. a PCI bus id), when it reports a non-empty one.
    pub fn device_id(&self) -> Option<String> {
        // SAFETY: a plain C struct of pointers, integers and bools: all-zero is a valid value.
        let mut p: ggml_backend_dev_props = unsafe { std::mem::zeroed() };
        self.props(&mut p);
        if p.device_id.is_null() {
            return None;
        }
        // SAFETY: a device's props hold NULL or a NUL-terminated id that lives as long as the
        // device.
        let id = unsafe { CStr::from_ptr(p.device_id) }.to_string_lossy();
        (!id.is_empty()).then(|| id.into_owned())
    }
    pub fn init_backend(&self, params: Option<&CStr>) -> ggml_backend_t {
        let f = required!(self.iface(), init_backend, "ggml_backend_dev_init");
        // SAFETY: as above; params is NULL or a valid C string.
        unsafe { f(self.as_ptr(), params.map_or(ptr::null(), CStr::as_ptr)) }
    }
    pub fn buffer_type(&self) -> ggml_backend_buffer_type_t {
        let f = required!(
            self.iface(),
            get_buffer_type,
            "ggml_backend_dev_buffer_type"
        );
        // SAFETY: as above.
        unsafe { f(self.as_ptr()) }
    }
    pub fn host_buffer_type(&self) -> ggml_backend_buffer_type_t {
        match self.iface().get_host_buffer_type {
            // SAFETY: as above.
            Some(f) => unsafe { f(self.as_ptr()) },
            None => ptr::null_mut(),
        }
    }
    /// # Safety
    /// `data` addresses `size` bytes of host memory that outlive the returned buffer.
    pub unsafe fn buffer_from_host_ptr(
        &self,
        data: *mut c_void,
        size: usize,
        max_tensor_size: usize,
    ) -> ggml_backend_buffer_t {
        match self.iface().buffer_from_host_ptr {
            // SAFETY: vtable entry of a live device; `data` addresses `size` bytes of host
            // memory that outlive the returned buffer (this method's contract).
            Some(f) => unsafe { f(self.as_ptr(), data, size, max_tensor_size) },
            None => ptr::null_mut(),
        }
    }
    pub fn supports_op(&self, op: Tensor) -> bool {
        let f = required!(self.iface(), supports_op, "ggml_backend_dev_supports_op");
        // SAFETY: as above, with a live tensor.
        unsafe { f(self.as_ptr(), op.as_ptr()) }
    }
    pub fn supports_buft(&self, buft: Buft) -> bool {
        let f = required!(
            self.iface(),
            supports_buft,
            "ggml_backend_dev_supports_buft"
        );
        // SAFETY: as above, with a live buffer type.
        unsafe { f(self.as_ptr(), buft.as_ptr()) }
    }
    pub fn offload_op(&self, op: Tensor) -> bool {
        match self.iface().offload_op {
            // SAFETY: as above.
            Some(f) => unsafe { f(self.as_ptr(), op.as_ptr()) },
            None => false,
        }
    }
    /// An optional entry point of this device's registry (`get_proc_address`), if offered.
    pub fn reg_proc(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: a device's registry lives as long as the device.
        let reg = unsafe { Reg::from_ptr(self.reg()) }?;
        let p = reg.proc_address(name);
        (!p.is_null()).then_some(p)
    }
    pub fn event_new(&self) -> ggml_backend_event_t {
        match self.iface().event_new {
            // SAFETY: as above.
            Some(f) => unsafe { f(self.as_ptr()) },
            None => ptr::null_mut(),
        }
    }
    pub fn event_free(&self, event: Event) {
        let f = required!(self.iface(), event_free, "ggml_backend_event_free");
        // SAFETY: as above; the event was created by this device.
        unsafe { f(self.as_ptr(), event.as_ptr()) }
    }
    pub fn event_synchronize(&self, event: Event) {
        let f = required!(
            self.iface(),
            event_synchronize,
            "ggml_backend_event_synchronize"
        );
        // SAFETY: as above.
        unsafe { f(self.as_ptr(), event.as_ptr()) }
    }
}

// ---------------------------------------------------------------------------------------

impl Reg {
    pub fn api_version(&self) -> i32 {
        self.raw().api_version
    }
    pub fn iface(&self) -> ggml_backend_reg_i {
        self.raw().iface
    }
    pub fn name(&self) -> *const c_char {
        let f = required!(self.iface(), get_name, "ggml_backend_reg_name");
        // SAFETY: vtable entry of a live registry.
        unsafe { f(self.as_ptr()) }
    }
    pub fn name_string(&self) -> String {
        c_str_lossy(self.name())
    }
    pub fn device_count(&self) -> usize {
        let f = required!(self.iface(), get_device_count, "ggml_backend_reg_dev_count");
        // SAFETY: as above.
        unsafe { f(self.as_ptr()) }
    }
    pub fn device(&self, index: usize) -> ggml_backend_dev_t {
        let f = required!(self.iface(), get_device, "ggml_backend_reg_dev_get");
        // SAFETY: as above.
        unsafe { f(self.as_ptr(), index) }
    }
    /// All devices of this registry, in its order; NULL entries are dropped.
    pub fn devices(&self) -> Vec<Device> {
        (0..self.device_count())
            // SAFETY: devices returned by a live registry live as long as it does.
            .filter_map(|i| unsafe { Device::from_ptr(self.device(i)) })
            .collect()
    }
    pub fn proc_address(&self, name: &CStr) -> *mut c_void {
        match self.iface().get_proc_address {
            // SAFETY: as above; `name` is a valid C string.
            Some(f) => unsafe { f(self.as_ptr(), name.as_ptr()) },
            None => ptr::null_mut(),
        }
    }
}

// ---------------------------------------------------------------------------------------

impl Event {
    pub fn device(&self) -> Option<Device> {
        // SAFETY: an event's device outlives the event.
        unsafe { Device::from_ptr(self.raw().device) }
    }
    /// The backend's own event object (for CUDA, a `cudaEvent_t`).
    pub fn context(&self) -> *mut c_void {
        self.raw().context
    }
}

// ---------------------------------------------------------------------------------------

/// One backend and one tensor per simple device of a meta device, as the C arrays that a
/// backend's AllReduce entry points take (null after the last device).
pub fn per_device_arrays(
    backends: &[Backend],
    tensors: &[Tensor],
) -> (
    [ggml_backend_t; GGML_BACKEND_META_MAX_DEVICES],
    [*mut ggml_tensor; GGML_BACKEND_META_MAX_DEVICES],
) {
    ggml_assert!(
        backends.len() == tensors.len() && backends.len() <= GGML_BACKEND_META_MAX_DEVICES,
        "meta AllReduce: {} backends, {} tensors",
        backends.len(),
        tensors.len()
    );
    let mut bs = [ptr::null_mut(); GGML_BACKEND_META_MAX_DEVICES];
    let mut ts = [ptr::null_mut(); GGML_BACKEND_META_MAX_DEVICES];
    for (j, (b, t)) in backends.iter().zip(tensors).enumerate() {
        bs[j] = b.as_ptr();
        ts[j] = t.as_ptr();
    }
    (bs, ts)
}

/// A C tensor list (`ggml_tensor **` and a count) as handles, every entry checked non-NULL;
/// a NULL entry or a negative count aborts naming `func`.
///
/// # Safety
/// `tensors` points to `n` tensor pointers (or is anything when `n` is 0), each NULL or live.
pub unsafe fn tensor_list(
    tensors: *mut *mut ggml_tensor,
    n: std::ffi::c_int,
    func: &str,
) -> Vec<Tensor> {
    let Ok(n) = usize::try_from(n) else {
        crate::abi::log::abort(file!(), line!(), &format!("{func}: n_tensors is {n}"))
    };
    if n == 0 {
        return Vec::new();
    }
    if tensors.is_null() {
        crate::abi::log::abort(
            file!(),
            line!(),
            &format!("{func}: argument `tensors` is NULL"),
        );
    }
    // SAFETY: `tensors` is non-NULL and points to `n` pointers (this function's contract).
    let raw = unsafe { std::slice::from_raw_parts(tensors, n) };
    raw.iter()
        .enumerate()
        .map(|(i, &t)| {
            // SAFETY: a non-NULL entry names a live tensor (this function's contract).
            unsafe { Tensor::from_ptr(t) }.unwrap_or_else(|| {
                crate::abi::log::abort(file!(), line!(), &format!("{func}: tensors[{i}] is NULL"))
            })
        })
        .collect()
}

impl Tensor {
    pub fn nbytes(&self) -> usize {
        // SAFETY: ggml_nbytes only reads the live tensor's type, ne and nb.
        unsafe { ggml_nbytes(self.as_ptr()) }
    }
    pub fn nelements(&self) -> i64 {
        self.raw().ne.iter().product()
    }
    /// Elements per block of the tensor's type (1 for non-quantized types).
    pub fn blck_size(&self) -> i64 {
        // SAFETY: ggml_blck_size reads a static type table.
        unsafe { ggml_blck_size(self.raw().type_) }
    }
    pub fn is_contiguous(&self) -> bool {
        // SAFETY: reads the live tensor's type, ne and nb.
        unsafe { ggml_is_contiguous(self.as_ptr()) }
    }
    pub fn type_(&self) -> ggml_type {
        self.raw().type_
    }
    pub fn ne_all(&self) -> [i64; 4] {
        self.raw().ne
    }
    pub fn nb_all(&self) -> [usize; 4] {
        self.raw().nb
    }
    pub fn op_params(&self) -> [i32; GGML_MAX_OP_PARAMS / 4] {
        self.raw().op_params
    }
    /// Sets the first `params.len()` words of the op's parameters (of a tensor this library
    /// made).
    pub fn set_op_params(&self, params: &[i32]) {
        ggml_assert!(
            params.len() <= GGML_MAX_OP_PARAMS / 4,
            "{} op parameters",
            params.len()
        );
        // SAFETY: the tensor is live; the caller owns it (no other thread reads it now).
        let words = unsafe { &mut (*self.as_ptr()).op_params };
        words[..params.len()].copy_from_slice(params);
    }
    /// A copy of the whole header (every field), for building per-device tensors from it.
    pub fn header(&self) -> ggml_tensor {
        *self.raw()
    }
    pub fn data(&self) -> *mut c_void {
        self.raw().data
    }
    pub fn buffer(&self) -> ggml_backend_buffer_t {
        self.raw().buffer
    }
    pub fn view_src(&self) -> Option<Tensor> {
        // SAFETY: a view's source outlives the view.
        unsafe { Tensor::from_ptr(self.raw().view_src) }
    }
    pub fn view_offs(&self) -> usize {
        self.raw().view_offs
    }
    pub fn op(&self) -> ggml_op {
        self.raw().op
    }
    /// The op as the typed vocabulary of the core; `None` for a value ggml (at the pin) does
    /// not define.
    pub fn op_kind(&self) -> Option<ggml_backend_rs_core::Op> {
        super::facts::OPS.op(self.op()).ok()
    }
    /// Ops that only reinterpret their source's memory (no computation).
    pub fn is_view_op(&self) -> bool {
        self.op_kind().is_some_and(|op| op.is_view())
    }
    /// The op's name as ggml prints it (the unary op's name for GGML_OP_UNARY).
    pub fn op_desc(&self) -> String {
        // SAFETY: ggml_op_desc returns a static string for any live tensor.
        c_str_lossy(unsafe { ggml_op_desc(self.as_ptr()) })
    }
    /// The name of the op's `enum ggml_op` value (UNARY for every unary op).
    pub fn op_name(&self) -> String {
        // SAFETY: ggml_op_name returns a static string for an op value of a live tensor.
        c_str_lossy(unsafe { ggml_op_name(self.op()) })
    }
    pub fn flags(&self) -> i32 {
        self.raw().flags
    }
    pub fn ne(&self, dim: usize) -> i64 {
        self.raw().ne[dim]
    }
    pub fn nb(&self, dim: usize) -> usize {
        self.raw().nb[dim]
    }
    pub fn src(&self, j: usize) -> Option<Tensor> {
        // SAFETY: a tensor's sources outlive it.
        unsafe { Tensor::from_ptr(self.raw().src[j]) }
    }
    /// The non-NULL sources with their slot index.
    pub fn srcs_indexed(&self) -> impl Iterator<Item = (usize, Tensor)> + '_ {
        // SAFETY: as above.
        self.raw()
            .src
            .iter()
            .enumerate()
            .filter_map(|(j, &s)| unsafe { Tensor::from_ptr(s) }.map(|t| (j, t)))
    }
    /// Replaces source `j` (the scheduler points ops at copies of their inputs).
    pub fn set_src(&self, j: usize, src: Tensor) {
        // SAFETY: the tensor is live; graph rewriting is single-threaded by ggml's contract.
        unsafe { (*self.as_ptr()).src[j] = src.as_ptr() }
    }
    /// The non-NULL sources with their slot index. The iterator holds the handle, not a borrow
    /// of it, and reads each slot when it gets there (a slot rewired before is seen rewired).
    pub fn srcs_by_slot(self) -> impl Iterator<Item = (usize, Tensor)> {
        let p = self.as_ptr();
        // SAFETY: the tensor is live while its handle is used, and its sources outlive it.
        (0..GGML_MAX_SRC)
            .filter_map(move |j| unsafe { Tensor::from_ptr((*p).src[j]) }.map(|t| (j, t)))
    }
    pub fn srcs(&self) -> impl Iterator<Item = Tensor> + '_ {
        // SAFETY: a tensor's sources outlive it.
        self.raw()
            .src
            .iter()
            .filter_map(|&s| unsafe { Tensor::from_ptr(s) })
    }
    /// The buffer that holds this tensor's data: a view's data lives in its source's buffer.
    pub fn data_buffer(&self) -> Option<Buffer> {
        let owner = self.view_src().unwrap_or(*self);
        // SAFETY: a tensor's buffer outlives the tensor's allocation.
        unsafe { Buffer::from_ptr(owner.buffer()) }
    }
    /// The buffer this tensor is attached to (`tensor->buffer`).
    pub fn own_buffer(&self) -> Option<Buffer> {
        // SAFETY: as above.
        unsafe { Buffer::from_ptr(self.buffer()) }
    }
    /// Same type, shape and strides: the condition for a byte-wise copy.
    pub fn same_layout(&self, other: Tensor) -> bool {
        let (a, b) = (self.raw(), other.raw());
        a.type_ == b.type_ && a.ne == b.ne && a.nb == b.nb
    }
    pub fn name_string(&self) -> String {
        String::from_utf8_lossy(self.name_bytes()).into_owned()
    }
    /// The name's bytes up to its NUL (all of them when ggml left none).
    pub fn name_bytes(&self) -> &[u8] {
        let name = &self.raw().name;
        // SAFETY: `c_char` is `i8` or `u8`: the same size and alignment as `u8`, and every bit
        // pattern is a valid `u8`; the slice borrows the live tensor's name array.
        let bytes = unsafe { std::slice::from_raw_parts(name.as_ptr().cast::<u8>(), name.len()) };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        &bytes[..end]
    }
    /// Clears `buffer` and `data`: undoes a placement that failed half-way.
    pub fn detach(&self) {
        // SAFETY: as in `attach`.
        unsafe {
            (*self.as_ptr()).buffer = std::ptr::null_mut();
            (*self.as_ptr()).data = std::ptr::null_mut();
        }
    }
    /// Writes `buffer` and `data` of an unallocated tensor.
    pub fn attach(&self, buffer: Buffer, data: *mut c_void) {
        // SAFETY: the tensor is live and the caller owns its allocation fields (ggml contract:
        // tensor placement is single-threaded).
        unsafe {
            (*self.as_ptr()).buffer = buffer.as_ptr();
            (*self.as_ptr()).data = data;
        }
    }
}

impl Graph {
    pub fn n_nodes(&self) -> usize {
        self.raw().n_nodes.max(0) as usize
    }
    pub fn size(&self) -> usize {
        self.raw().size.max(0) as usize
    }
    /// The graph's identity (0: none, or a version whose graphs carry none).
    pub fn uid(&self) -> u64 {
        self.raw().uid()
    }
    /// Gives the graph a fresh identity, so that no backend replays what it prepared for
    /// another graph; nothing where the version's graphs carry no identity.
    pub fn renew_uid(&self) {
        self.set_uid(super::facts::next_graph_uid())
    }
    /// Sets the graph's identity (0: none; backends then compare it with what they prepared
    /// before); nothing where the version's graphs carry no identity.
    pub fn set_uid(&self, uid: u64) {
        // SAFETY: a live graph; its uid is the runner's to set, as ggml's scheduler does.
        unsafe { (*self.as_ptr()).set_uid(uid) }
    }
    pub fn n_leafs(&self) -> usize {
        self.raw().n_leafs.max(0) as usize
    }
    pub fn leafs(&self) -> impl Iterator<Item = Tensor> + '_ {
        let raw = self.raw();
        // SAFETY: `leafs` holds n_leafs live tensors.
        (0..self.n_leafs()).filter_map(move |i| unsafe { Tensor::from_ptr(*raw.leafs.add(i)) })
    }
    pub fn hash_size(&self) -> usize {
        self.raw().visited_hash_set.size
    }
    pub fn node(&self, i: usize) -> Tensor {
        ggml_assert!(
            i < self.n_nodes(),
            "graph node index {i} out of range ({} nodes)",
            self.n_nodes()
        );
        // SAFETY: `nodes` holds n_nodes live tensors.
        match unsafe { Tensor::from_ptr(*self.raw().nodes.add(i)) } {
            Some(t) => t,
            None => crate::abi::log::abort(file!(), line!(), &format!("graph node {i} is NULL")),
        }
    }
    pub fn nodes(&self) -> impl Iterator<Item = Tensor> + '_ {
        (0..self.n_nodes()).map(|i| self.node(i))
    }
    /// Records `t` in the graph's visited set with `count` uses, as ggml's graph builder does
    /// (backends that fuse ops read use counts through the set). Mirrors ggml-impl.h's open
    /// addressing: hash = address >> 4, linear probing, a 32-bit-word bitset of used slots.
    pub fn note_use_count(&self, t: Tensor, count: i32) {
        let raw = self.as_ptr();
        // SAFETY: a graph made by ggml_new_graph_custom owns a hash set of `size` slots with
        // its `used` bitset, `keys` and `use_counts` arrays.
        unsafe {
            let hs = &mut (*raw).visited_hash_set;
            if hs.size == 0 || hs.used.is_null() || (*raw).use_counts.is_null() {
                return;
            }
            let key = t.as_ptr();
            let start = (key as usize >> 4) % hs.size;
            let mut i = start;
            loop {
                let word = hs.used.add(i >> 5);
                let bit = 1u32 << (i & 31);
                if *word & bit == 0 {
                    *word |= bit;
                    *hs.keys.add(i) = key;
                    break;
                }
                if *hs.keys.add(i) == key {
                    break;
                }
                i = (i + 1) % hs.size;
                ggml_assert!(i != start, "graph hash set is full");
            }
            *(*raw).use_counts.add(i) = count;
        }
    }
    /// The use count ggml recorded for `t` when it built the graph (graph views share the
    /// whole graph's counts); `None` when the graph has no visited set or `t` is not in it.
    pub fn recorded_use_count(&self, t: Tensor) -> Option<i32> {
        self.recorded_use_count_at(t.as_ptr() as usize)
    }
    /// [`recorded_use_count`](Self::recorded_use_count) of the tensor at `address`, which
    /// need not be live: it is only compared with the set's keys.
    pub fn recorded_use_count_at(&self, address: usize) -> Option<i32> {
        let raw = self.as_ptr();
        // SAFETY: as in note_use_count; read-only probing.
        unsafe {
            let hs = &(*raw).visited_hash_set;
            if hs.size == 0 || hs.used.is_null() || (*raw).use_counts.is_null() {
                return None;
            }
            let start = (address >> 4) % hs.size;
            let mut i = start;
            loop {
                if *hs.used.add(i >> 5) & (1u32 << (i & 31)) == 0 {
                    return None;
                }
                if *hs.keys.add(i) as usize == address {
                    return Some(*(*raw).use_counts.add(i));
                }
                i = (i + 1) % hs.size;
                if i == start {
                    return None;
                }
            }
        }
    }
    /// Appends a node to a graph with spare capacity (used to build graph copies).
    pub fn push_node(&self, t: Tensor) {
        let raw = self.as_ptr();
        // SAFETY: the graph is live and was created with room for `size` nodes.
        unsafe {
            let n = (*raw).n_nodes;
            ggml_assert!(n < (*raw).size, "graph is full ({} nodes)", (*raw).size);
            *(*raw).nodes.add(n as usize) = t.as_ptr();
            (*raw).n_nodes = n + 1;
        }
    }
}

/// Text of a C string owned by a backend, lossily decoded; "" for NULL.
fn c_str_lossy(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: backends return NUL-terminated names that live as long as the backend.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
