//! What a request asks for ([`Spec`]): its query parameters and `x-upstream-*` headers,
//! decoded.

use hyper::Request;

/// What the request asked for.
#[derive(Debug, Default)]
pub(crate) struct Spec {
    pub(crate) status: Option<u16>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Option<String>,
    pub(crate) body_bytes: Option<u64>,
    pub(crate) chunk_bytes: Option<usize>,
    pub(crate) frames: Option<u64>,
    pub(crate) chunk_delay_ms: Option<u64>,
    pub(crate) chunked: Option<bool>,
    pub(crate) delay_ms: Option<u64>,
    pub(crate) read_body: Option<bool>,
}

impl Spec {
    /// Applies one parameter; a single-valued parameter keeps its first value.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
            v.trim()
                .parse()
                .map_err(|_| format!("{k}: not a number: {v:?}"))
        }
        fn set<T>(slot: &mut Option<T>, v: T) {
            if slot.is_none() {
                *slot = Some(v);
            }
        }
        match key {
            "status" => set(&mut self.status, num(key, value)?),
            "header" => {
                let (n, v) = value
                    .split_once(':')
                    .ok_or_else(|| format!("header: expected name:value, got {value:?}"))?;
                self.headers
                    .push((n.trim().to_string(), v.trim_start().to_string()));
            }
            "body" => set(&mut self.body, value.to_string()),
            "body_bytes" => set(&mut self.body_bytes, num(key, value)?),
            "chunk_bytes" => set(&mut self.chunk_bytes, num::<usize>(key, value)?.max(1)),
            "frames" => set(&mut self.frames, num::<u64>(key, value)?.max(1)),
            "chunk_delay_ms" => set(&mut self.chunk_delay_ms, num(key, value)?),
            "chunked" => set(&mut self.chunked, matches!(value, "1" | "true" | "yes")),
            "delay_ms" => set(&mut self.delay_ms, num(key, value)?),
            "read_body" => set(&mut self.read_body, matches!(value, "1" | "true" | "yes")),
            _ => {} // unknown parameters belong to the test, not to us
        }
        Ok(())
    }

    pub(crate) fn from_request<B>(req: &Request<B>) -> Result<Spec, String> {
        let mut spec = Spec::default();
        for (k, v) in parse_query(req.uri().query().unwrap_or("")) {
            spec.apply(&k, &v)?;
        }
        for (name, value) in req.headers() {
            if let Some(param) = name.as_str().strip_prefix("x-upstream-") {
                let value = value
                    .to_str()
                    .map_err(|_| format!("{name}: not visible ASCII"))?;
                spec.apply(&param.replace('-', "_"), value)?;
            }
        }
        Ok(spec)
    }
}

/// Splits and decodes an `application/x-www-form-urlencoded` query.
pub(crate) fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

pub(crate) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
