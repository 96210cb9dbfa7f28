//! The in-memory [`Host`]: fake request contexts, shared data ([`MemStore`]), counters by
//! name, recorded callouts and replies, a settable clock.

use crawlguard_core::host::{Callout, ContextId, Host, HostError, LocalReply};
use crawlguard_core::store::mem::MemStore;
use crawlguard_core::store::SharedData;
use std::collections::HashMap;
use std::rc::Rc;

/// A local reply as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentReply {
    /// Status.
    pub status: u16,
    /// `%RESPONSE_CODE_DETAILS%`.
    pub details: String,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl SentReply {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One fake request context.
#[derive(Debug, Clone, Default)]
pub struct FakeRequest {
    /// Request headers (lowercase names; repeated names = several lines), pseudo-headers too.
    pub request_headers: Vec<(String, Vec<u8>)>,
    /// Response headers, `:status` included.
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// `source.address`.
    pub downstream: Option<Vec<u8>>,
    /// `connection.tls_version` is set: the request came over TLS.
    pub tls: bool,
    /// `request.protocol` (`HTTP/1.1`, `HTTP/2`); `None`: the host does not say.
    pub protocol: Option<String>,
    /// The local reply, once sent.
    pub reply: Option<SentReply>,
    /// How many times it was resumed.
    pub resumed: u32,
}

impl FakeRequest {
    /// The first value of request header `name`.
    pub fn request_header(&self, name: &str) -> Option<&[u8]> {
        self.request_headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// A callout as dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentCallout {
    /// Token returned.
    pub token: u32,
    /// Cluster.
    pub cluster: String,
    /// `:method`.
    pub method: String,
    /// `:path`.
    pub path: String,
    /// Timeout, ms.
    pub timeout_ms: u64,
    /// Request body.
    pub body: Vec<u8>,
}

/// The in-memory [`Host`].
#[derive(Debug, Default)]
pub struct FakeHost {
    /// The clock, ns since the Unix epoch (`None`: the host fails to tell time).
    pub now_ns: Option<u64>,
    /// Shared data (an `Rc`, so several fake workers can share one Envoy's store).
    pub store: Rc<MemStore>,
    /// Request contexts by id.
    pub requests: HashMap<ContextId, FakeRequest>,
    /// The effective context.
    pub current: ContextId,
    /// Counter values by metric id.
    pub counters: HashMap<u32, u64>,
    /// Gauge values by metric id.
    pub gauges: HashMap<u32, u64>,
    /// Metric names by id (filled by [`FakeHost::define`]).
    pub metric_names: HashMap<u32, String>,
    /// Every callout dispatched, in order.
    pub callouts: Vec<SentCallout>,
    /// Root wake-ups requested.
    pub wakes: u32,
    /// Make `dispatch_callout` fail.
    pub refuse_dispatch: bool,
    /// Make `wake_root` fail.
    pub refuse_wake: bool,
    /// Make `send_reply` fail.
    pub refuse_reply: bool,
    /// Value returned by `random_u32`.
    pub random: u32,
    /// Every [`Host`] call that is a proxy-wasm host call in the real module, in order
    /// (`"get request header :path"`, `"now"`, ...); shared-data calls are counted by the
    /// store ([`MemStore::calls`]). Counter increments are not here: the module buffers
    /// them in VM memory (`metrics::CounterBuffer`) and hands them over on the tick.
    pub host_calls: Vec<String>,
}

impl FakeHost {
    /// Defines a metric (for [`Metrics::define`]): ids 1, 2, ... in definition order.
    pub fn define(
        &mut self,
        name: &str,
        _kind: crawlguard_core::metrics::MetricKind,
    ) -> Option<u32> {
        let id = u32::try_from(self.metric_names.len() + 1).ok()?;
        self.metric_names.insert(id, name.to_string());
        Some(id)
    }

    /// A counter's value by name (0 if never incremented or unknown).
    pub fn counter(&self, name: &str) -> u64 {
        self.id_of(name)
            .and_then(|id| self.counters.get(&id))
            .copied()
            .unwrap_or(0)
    }

    /// A gauge's value by name (`None` if never set or unknown).
    pub fn gauge(&self, name: &str) -> Option<u64> {
        self.id_of(name)
            .and_then(|id| self.gauges.get(&id))
            .copied()
    }

    fn id_of(&self, name: &str) -> Option<u32> {
        self.metric_names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| *id)
    }

    fn cur(&mut self) -> Option<&mut FakeRequest> {
        self.requests.get_mut(&self.current)
    }
}

fn lines(map: &[(String, Vec<u8>)], name: &str) -> Vec<Vec<u8>> {
    map.iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

impl Host for FakeHost {
    fn now_ns(&mut self) -> Option<u64> {
        self.host_calls.push("now".into());
        self.now_ns
    }

    fn random_u32(&mut self) -> u32 {
        self.random
    }

    fn request_header(&mut self, name: &str) -> Option<Vec<u8>> {
        self.host_calls.push(format!("get request header {name}"));
        self.cur()
            .and_then(|r| lines(&r.request_headers, name).into_iter().next())
    }

    fn request_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        self.host_calls.push("get request header map".into());
        self.cur()
            .map(|r| lines(&r.request_headers, name))
            .unwrap_or_default()
    }

    fn set_request_header(&mut self, name: &str, value: Option<&[u8]>) {
        self.host_calls.push(match value {
            Some(_) => format!("replace request header {name}"),
            None => format!("remove request header {name}"),
        });
        if let Some(r) = self.cur() {
            r.request_headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case(name));
            if let Some(v) = value {
                r.request_headers.push((name.to_string(), v.to_vec()));
            }
        }
    }

    fn downstream_address(&mut self) -> Option<Vec<u8>> {
        self.host_calls.push("get property source.address".into());
        self.cur().and_then(|r| r.downstream.clone())
    }

    fn downstream_tls(&mut self) -> bool {
        self.host_calls
            .push("get property connection.tls_version".into());
        self.cur().is_some_and(|r| r.tls)
    }

    fn request_protocol(&mut self) -> Option<Vec<u8>> {
        self.host_calls.push("get property request.protocol".into());
        self.cur()
            .and_then(|r| r.protocol.as_ref().map(|p| p.as_bytes().to_vec()))
    }

    fn response_header(&mut self, name: &str) -> Option<Vec<u8>> {
        self.host_calls.push(format!("get response header {name}"));
        self.cur()
            .and_then(|r| lines(&r.response_headers, name).into_iter().next())
    }

    fn response_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        self.host_calls.push("get response header map".into());
        self.cur()
            .map(|r| lines(&r.response_headers, name))
            .unwrap_or_default()
    }

    fn remove_response_header(&mut self, name: &str) {
        self.host_calls
            .push(format!("remove response header {name}"));
        if let Some(r) = self.cur() {
            r.response_headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        }
    }

    fn send_reply(&mut self, reply: &LocalReply<'_>) -> Result<(), HostError> {
        self.host_calls.push("send local reply".into());
        if self.refuse_reply {
            return Err(HostError(2));
        }
        let r = self.cur().ok_or(HostError(2))?;
        r.reply = Some(SentReply {
            status: reply.status,
            details: reply.details.to_string(),
            headers: reply
                .headers
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
            body: reply.body.to_vec(),
        });
        Ok(())
    }

    fn resume_request(&mut self) -> Result<(), HostError> {
        let r = self.cur().ok_or(HostError(2))?;
        r.resumed += 1;
        Ok(())
    }

    fn add_to_counter(&mut self, id: u32, n: u64) {
        let c = self.counters.entry(id).or_insert(0);
        *c = c.saturating_add(n);
    }

    fn set_gauge(&mut self, id: u32, value: u64) {
        self.gauges.insert(id, value);
    }

    fn shared_data(&self) -> &dyn SharedData {
        &*self.store
    }

    fn dispatch_callout(&mut self, c: &Callout<'_>) -> Result<u32, HostError> {
        if self.refuse_dispatch {
            return Err(HostError(2));
        }
        let token = u32::try_from(self.callouts.len() + 1).unwrap_or(u32::MAX);
        self.callouts.push(SentCallout {
            token,
            cluster: c.cluster.to_string(),
            method: c.method.to_string(),
            path: c.path.to_string(),
            timeout_ms: c.timeout_ms,
            body: c.body.to_vec(),
        });
        Ok(token)
    }

    fn wake_root(&mut self) -> Result<(), HostError> {
        if self.refuse_wake {
            return Err(HostError(1));
        }
        self.wakes += 1;
        Ok(())
    }

    fn switch_to(&mut self, context: ContextId) -> Result<(), HostError> {
        if !self.requests.contains_key(&context) {
            return Err(HostError(2));
        }
        self.current = context;
        Ok(())
    }
}
