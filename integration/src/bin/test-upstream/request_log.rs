//! The request log (`GET /__upstream/requests`): every other request, in arrival order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Path of the request log.
pub(crate) const LOG_PATH: &str = "/__upstream/requests";

/// Most requests kept in the log.
pub(crate) const LOG_CAP: usize = 10_000;

/// One logged request.
pub(crate) struct LoggedRequest {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) version: String,
    pub(crate) headers: BTreeMap<String, Vec<String>>,
    pub(crate) body_bytes_sent: Arc<AtomicU64>,
}

impl LoggedRequest {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "method": self.method,
            "path": self.path,
            "version": self.version,
            "headers": self.headers,
            "body_bytes_sent": self.body_bytes_sent.load(Ordering::Relaxed),
        })
    }
}

pub(crate) type Log = Arc<Mutex<VecDeque<LoggedRequest>>>;
