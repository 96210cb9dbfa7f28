//! Our own thin wrappers over the proxy-wasm host calls whose SDK versions panic on an
//! unexpected host status (shared data, metrics, time). A panic kills the worker's VM, so
//! these return errors instead and the callers fail open.

use crate::store::{SharedData, StoreError};

// Status values of the proxy-wasm ABI 0.2.1.
const OK: u32 = 0;
const NOT_FOUND: u32 = 1;
const CAS_MISMATCH: u32 = 8;

#[allow(clashing_extern_declarations)] // the SDK declares these with its own enum types
#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_shared_data(
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
        return_cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
        cas: u32,
    ) -> u32;
    fn proxy_define_metric(
        metric_type: u32,
        name_data: *const u8,
        name_size: usize,
        return_id: *mut u32,
    ) -> u32;
    fn proxy_increment_metric(metric_id: u32, offset: i64) -> u32;
    fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> u32;
    fn proxy_send_local_response(
        status_code: u32,
        status_code_details_data: *const u8,
        status_code_details_size: usize,
        body_data: *const u8,
        body_size: usize,
        headers_data: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
}

/// Answers the current request locally (Envoy `sendLocalReply`), with `details` shown as
/// `%RESPONSE_CODE_DETAILS%` in access logs (the SDK's version sends none). `Err(status)` if
/// the host refused.
pub fn send_local_response(
    status: u16,
    details: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<(), u32> {
    let map = crate::respond::serialize_headers(headers);
    // SAFETY: every pointer/length pair is a live slice for the duration of the call.
    let st = unsafe {
        proxy_send_local_response(
            u32::from(status),
            details.as_ptr(),
            details.len(),
            body.as_ptr(),
            body.len(),
            map.as_ptr(),
            map.len(),
            -1, // not gRPC
        )
    };
    if st == OK {
        Ok(())
    } else {
        Err(st)
    }
}

/// proxy-wasm shared data through the host.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostStore;

impl SharedData for HostStore {
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        let mut data: *mut u8 = std::ptr::null_mut();
        let mut size: usize = 0;
        let mut cas: u32 = 0;
        // SAFETY: pointers are to live locals; on OK the host hands us a buffer it allocated
        // through the SDK's `proxy_on_memory_allocate` (a boxed `[u8]` of exactly `size`).
        let status = unsafe {
            proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas)
        };
        match status {
            OK if data.is_null() => Ok(Some((Vec::new(), cas))),
            // SAFETY: see above; we take ownership of the host-allocated buffer.
            OK => Ok(Some((
                unsafe { Vec::from_raw_parts(data, size, size) },
                cas,
            ))),
            NOT_FOUND => Ok(None),
            other => Err(StoreError::Host(other)),
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        // SAFETY: key and value are live slices for the duration of the call.
        let status = unsafe {
            proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas)
        };
        match status {
            OK => Ok(()),
            CAS_MISMATCH => Err(StoreError::CasMismatch),
            other => Err(StoreError::Host(other)),
        }
    }
}

/// Defines a counter; `None` on any host error.
pub fn define_counter(name: &str) -> Option<u32> {
    let mut id = 0u32;
    // SAFETY: name is a live slice; id a live local. Metric type 0 = counter.
    let status = unsafe { proxy_define_metric(0, name.as_ptr(), name.len(), &mut id) };
    (status == OK).then_some(id)
}

/// Adds 1 to a counter, ignoring host errors (stats must never fail a request).
pub fn increment(id: u32) {
    // SAFETY: plain values.
    let _ = unsafe { proxy_increment_metric(id, 1) };
}

/// Host wall-clock time in ns since the Unix epoch; `None` if the host fails (the caller
/// then fails open rather than write a bogus time into shared buckets).
pub fn now_ns() -> Option<u64> {
    let mut t = 0u64;
    // SAFETY: t is a live local.
    let status = unsafe { proxy_get_current_time_nanoseconds(&mut t) };
    (status == OK && t > 0).then_some(t)
}

/// Uniform random u32 from the host (WASI `random_get`), 0 if unavailable (jitter is a
/// spreading aid, not a security property).
pub fn random_u32() -> u32 {
    getrandom::u32().unwrap_or(0)
}
