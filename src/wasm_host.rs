//! [`Host`] over the proxy-wasm ABI 0.2.1, with our own thin wrappers of the host calls:
//! the SDK's versions panic on an unexpected host status, and a panic kills the worker's VM.
//! Every failure here reads as "absent" or an error the caller fails open on.

use crate::header_map;
use crawlguard_core::host::{Callout, ContextId, Host, HostError, LocalReply};
use crawlguard_core::metrics::{CounterBuffer, MetricKind};
use crawlguard_core::store::{SharedData, StoreError};
use std::cell::RefCell;

// Status values of the proxy-wasm ABI 0.2.1.
const OK: u32 = 0;
const NOT_FOUND: u32 = 1;
const CAS_MISMATCH: u32 = 8;
// Map and buffer types.
const REQUEST_HEADERS: u32 = 0;
const RESPONSE_HEADERS: u32 = 2;
const CALL_RESPONSE_HEADERS: u32 = 6;
const CALL_RESPONSE_BODY: u32 = 4;
const PLUGIN_CONFIGURATION: u32 = 7;
// Stream type of `proxy_continue_stream`.
const HTTP_REQUEST: u32 = 0;

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
    fn proxy_record_metric(metric_id: u32, value: u64) -> u32;
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
    fn proxy_get_header_map_value(
        map_type: u32,
        key_data: *const u8,
        key_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_get_header_map_pairs(
        map_type: u32,
        return_map_data: *mut *mut u8,
        return_map_size: *mut usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        map_type: u32,
        key_data: *const u8,
        key_size: usize,
        value_data: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(map_type: u32, key_data: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(
        path_data: *const u8,
        path_size: usize,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_get_buffer_bytes(
        buffer_type: u32,
        start: usize,
        max_size: usize,
        return_buffer_data: *mut *mut u8,
        return_buffer_size: *mut usize,
    ) -> u32;
    fn proxy_continue_stream(stream_type: u32) -> u32;
    fn proxy_set_effective_context(context_id: u32) -> u32;
    fn proxy_register_shared_queue(
        name_data: *const u8,
        name_size: usize,
        return_id: *mut u32,
    ) -> u32;
    fn proxy_enqueue_shared_queue(queue_id: u32, value_data: *const u8, value_size: usize) -> u32;
    fn proxy_dequeue_shared_queue(
        queue_id: u32,
        return_value_data: *mut *mut u8,
        return_value_size: *mut usize,
    ) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
}

/// Takes ownership of a buffer the host returned through the SDK's
/// `proxy_on_memory_allocate` (a boxed `[u8]` of exactly `size` bytes); empty when null.
///
/// # Safety
/// `data`/`size` must come from a successful host call that returns a buffer.
unsafe fn take_buffer(data: *mut u8, size: usize) -> Vec<u8> {
    if data.is_null() {
        Vec::new()
    } else {
        // SAFETY: per the caller's contract, the host allocated exactly `size` bytes here
        // for us to own.
        unsafe { Vec::from_raw_parts(data, size, size) }
    }
}

/// Calls a host function that returns a buffer: `Some(bytes)` on OK, `None` otherwise.
fn get_bytes(call: impl FnOnce(*mut *mut u8, *mut usize) -> u32) -> Option<Vec<u8>> {
    let mut data: *mut u8 = std::ptr::null_mut();
    let mut size: usize = 0;
    let status = call(&mut data, &mut size);
    // SAFETY: on OK the host returned a buffer it allocated for us.
    (status == OK).then(|| unsafe { take_buffer(data, size) })
}

fn map_value(map: u32, name: &str) -> Option<Vec<u8>> {
    // SAFETY: name is a live slice; the out-pointers are live locals of get_bytes.
    get_bytes(|d, s| unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), d, s) })
}

fn map_lines(map: u32, name: &str) -> Vec<Vec<u8>> {
    // SAFETY: the out-pointers are live locals of get_bytes.
    let bytes = get_bytes(|d, s| unsafe { proxy_get_header_map_pairs(map, d, s) });
    header_map::deserialize(&bytes.unwrap_or_default())
        .into_iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| v)
        .collect()
}

/// proxy-wasm shared data through the host.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostStore;

impl SharedData for HostStore {
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        let mut data: *mut u8 = std::ptr::null_mut();
        let mut size: usize = 0;
        let mut cas: u32 = 0;
        // SAFETY: pointers are to live locals.
        let status = unsafe {
            proxy_get_shared_data(key.as_ptr(), key.len(), &mut data, &mut size, &mut cas)
        };
        match status {
            // SAFETY: on OK the host returned a buffer it allocated for us.
            OK => Ok(Some((unsafe { take_buffer(data, size) }, cas))),
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

thread_local! {
    /// This VM's counter increments since the last flush (a VM runs on one thread).
    static PENDING: RefCell<CounterBuffer> = RefCell::new(CounterBuffer::default());
}

/// Adds `n` to host counter `id` now; errors are ignored (stats never fail a request).
fn increment_metric(id: u32, n: u64) {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    // SAFETY: plain values.
    let _ = unsafe { proxy_increment_metric(id, n) };
}

/// Hands the counted events to Envoy (one host call per counter touched since the last
/// flush), then adds 1 to `flushes` (`crawlguard.stats.flushes`, so a reader can tell that
/// a flush happened after the requests it sent). Called on every root tick.
pub fn flush_counters(flushes: Option<u32>) {
    PENDING.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            p.flush(&mut increment_metric);
        }
    });
    if let Some(id) = flushes {
        increment_metric(id, 1);
    }
}

/// Defines a counter or gauge; `None` on any host error.
pub fn define_metric(name: &str, kind: MetricKind) -> Option<u32> {
    let mut id = 0u32;
    let metric_type = match kind {
        MetricKind::Counter => 0,
        MetricKind::Gauge => 1,
    };
    // SAFETY: name is a live slice; id a live local.
    let status = unsafe { proxy_define_metric(metric_type, name.as_ptr(), name.len(), &mut id) };
    (status == OK).then_some(id)
}

/// The plugin configuration bytes (empty when there is none or the host fails).
pub fn plugin_configuration() -> Vec<u8> {
    // SAFETY: the out-pointers are live locals of get_bytes.
    get_bytes(|d, s| unsafe { proxy_get_buffer_bytes(PLUGIN_CONFIGURATION, 0, usize::MAX, d, s) })
        .unwrap_or_default()
}

/// Registers a shared queue named `name` for this root context; its id, or `None`.
pub fn register_queue(name: &str) -> Option<u32> {
    let mut id = 0u32;
    // SAFETY: name is a live slice; id a live local.
    let status = unsafe { proxy_register_shared_queue(name.as_ptr(), name.len(), &mut id) };
    (status == OK).then_some(id)
}

/// Removes every message from queue `id` (they carry nothing; the wake-up is the message).
pub fn drain_queue(id: u32) {
    // A bound, in case the host keeps answering OK.
    for _ in 0..10_000 {
        // SAFETY: the out-pointers are live locals of get_bytes.
        if get_bytes(|d, s| unsafe { proxy_dequeue_shared_queue(id, d, s) }).is_none() {
            return;
        }
    }
}

/// Asks for `on_tick` every `period_ms` on this root context (0 stops it).
pub fn set_tick_period_ms(period_ms: u32) -> bool {
    // SAFETY: a plain value.
    unsafe { proxy_set_tick_period_milliseconds(period_ms) == OK }
}

/// The answer of the callout being delivered: `:status` (absent on timeout/reset) and at
/// most `max_body` bytes of its body.
pub fn callout_response(body_size: usize, max_body: usize) -> (Option<Vec<u8>>, Vec<u8>) {
    let status = map_value(CALL_RESPONSE_HEADERS, ":status");
    let n = body_size.min(max_body);
    let body = if n == 0 {
        Vec::new()
    } else {
        // SAFETY: the out-pointers are live locals of get_bytes.
        get_bytes(|d, s| unsafe { proxy_get_buffer_bytes(CALL_RESPONSE_BODY, 0, n, d, s) })
            .unwrap_or_default()
    };
    (status, body)
}

/// [`Host`] over the proxy-wasm ABI, acting on the effective context.
#[derive(Debug, Clone, Copy, Default)]
pub struct WasmHost {
    /// This worker's wake-up queue (registered by the root context).
    pub queue: Option<u32>,
}

impl Host for WasmHost {
    fn now_ns(&mut self) -> Option<u64> {
        let mut t = 0u64;
        // SAFETY: t is a live local.
        let status = unsafe { proxy_get_current_time_nanoseconds(&mut t) };
        (status == OK && t > 0).then_some(t)
    }

    fn random_u32(&mut self) -> u32 {
        getrandom::u32().unwrap_or(0)
    }

    fn request_header(&mut self, name: &str) -> Option<Vec<u8>> {
        map_value(REQUEST_HEADERS, name)
    }

    fn request_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        map_lines(REQUEST_HEADERS, name)
    }

    fn set_request_header(&mut self, name: &str, value: Option<&[u8]>) {
        // SAFETY: name and value are live slices for the duration of the calls.
        let _ = unsafe {
            match value {
                Some(v) => proxy_replace_header_map_value(
                    REQUEST_HEADERS,
                    name.as_ptr(),
                    name.len(),
                    v.as_ptr(),
                    v.len(),
                ),
                None => proxy_remove_header_map_value(REQUEST_HEADERS, name.as_ptr(), name.len()),
            }
        };
    }

    fn downstream_address(&mut self) -> Option<Vec<u8>> {
        const PATH: &[u8] = b"source\0address";
        // SAFETY: PATH is static; the out-pointers are live locals of get_bytes.
        get_bytes(|d, s| unsafe { proxy_get_property(PATH.as_ptr(), PATH.len(), d, s) })
    }

    fn downstream_tls(&mut self) -> bool {
        const PATH: &[u8] = b"connection\0tls_version";
        // SAFETY: PATH is static; the out-pointers are live locals of get_bytes.
        get_bytes(|d, s| unsafe { proxy_get_property(PATH.as_ptr(), PATH.len(), d, s) })
            .is_some_and(|v| !v.is_empty())
    }

    fn request_protocol(&mut self) -> Option<Vec<u8>> {
        const PATH: &[u8] = b"request\0protocol";
        // SAFETY: PATH is static; the out-pointers are live locals of get_bytes.
        get_bytes(|d, s| unsafe { proxy_get_property(PATH.as_ptr(), PATH.len(), d, s) })
    }

    fn response_header(&mut self, name: &str) -> Option<Vec<u8>> {
        map_value(RESPONSE_HEADERS, name)
    }

    fn response_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        map_lines(RESPONSE_HEADERS, name)
    }

    fn remove_response_header(&mut self, name: &str) {
        // SAFETY: name is a live slice for the duration of the call.
        let _ =
            unsafe { proxy_remove_header_map_value(RESPONSE_HEADERS, name.as_ptr(), name.len()) };
    }

    fn send_reply(&mut self, reply: &LocalReply<'_>) -> Result<(), HostError> {
        let pairs: Vec<(&str, &str)> = reply
            .headers
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        let map = header_map::serialize(&pairs);
        // SAFETY: every pointer/length pair is a live slice for the duration of the call.
        let st = unsafe {
            proxy_send_local_response(
                u32::from(reply.status),
                reply.details.as_ptr(),
                reply.details.len(),
                reply.body.as_ptr(),
                reply.body.len(),
                map.as_ptr(),
                map.len(),
                -1, // not gRPC
            )
        };
        if st == OK {
            Ok(())
        } else {
            Err(HostError(st))
        }
    }

    fn resume_request(&mut self) -> Result<(), HostError> {
        // SAFETY: a plain value.
        match unsafe { proxy_continue_stream(HTTP_REQUEST) } {
            OK => Ok(()),
            st => Err(HostError(st)),
        }
    }

    fn add_to_counter(&mut self, id: u32, n: u64) {
        // Kept in VM memory until the root tick's flush (`flush_counters`): no host call
        // per request. If the buffer is busy (it never is: one thread per VM), count now.
        let buffered = PENDING.with(|p| p.try_borrow_mut().map(|mut p| p.add(id, n)).is_ok());
        if !buffered {
            increment_metric(id, n);
        }
    }

    fn set_gauge(&mut self, id: u32, value: u64) {
        // SAFETY: plain values. Errors are ignored: stats never fail a request.
        let _ = unsafe { proxy_record_metric(id, value) };
    }

    fn shared_data(&self) -> &dyn SharedData {
        &HostStore
    }

    fn dispatch_callout(&mut self, c: &Callout<'_>) -> Result<u32, HostError> {
        let mut headers = vec![
            (":method", c.method),
            (":path", c.path),
            (":authority", c.authority),
            ("accept", "application/json"),
        ];
        if !c.body.is_empty() {
            headers.push(("content-type", "application/json"));
        }
        // The SDK's call registers the token with its dispatcher, which routes the answer
        // to the context whose callback is running: the root context here. It panics only
        // on statuses Envoy does not return for this call (Ok, BadArgument, InternalFailure).
        proxy_wasm::hostcalls::dispatch_http_call(
            c.cluster,
            headers,
            (!c.body.is_empty()).then_some(c.body),
            vec![],
            std::time::Duration::from_millis(c.timeout_ms),
        )
        .map_err(|s| HostError(s as u32))
    }

    fn wake_root(&mut self) -> Result<(), HostError> {
        let Some(q) = self.queue else {
            return Err(HostError(NOT_FOUND));
        };
        // SAFETY: an empty message (null, 0).
        match unsafe { proxy_enqueue_shared_queue(q, std::ptr::null(), 0) } {
            OK => Ok(()),
            st => Err(HostError(st)),
        }
    }

    fn switch_to(&mut self, context: ContextId) -> Result<(), HostError> {
        // SAFETY: a plain value.
        match unsafe { proxy_set_effective_context(context) } {
            OK => Ok(()),
            st => Err(HostError(st)),
        }
    }
}
