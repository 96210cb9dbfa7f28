//! The proxy-wasm header-map wire format (ABI 0.2.1), both ways, without panics: a count
//! (u32 LE), then per entry the key and value lengths (u32 LE each), then every key and
//! value followed by a NUL byte.

/// Serialises `(name, value)` pairs for the host (local reply headers, callout headers).
pub fn serialize(pairs: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + pairs
        .iter()
        .map(|(k, v)| k.len() + v.len() + 10)
        .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    out.extend_from_slice(&len32(pairs.len()));
    for (k, v) in pairs {
        out.extend_from_slice(&len32(k.len()));
        out.extend_from_slice(&len32(v.len()));
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// The entries of a map the host handed over, as `(name, value)` slices of `bytes`, in
/// order, without copying. Malformed input (truncated, lengths past the end) yields the
/// entries that were complete, never a panic.
pub fn entries(bytes: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let u32_at = move |at: usize| -> Option<usize> {
        let b: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    // Each entry needs at least 8 length bytes and 2 NULs: bound the count by the input.
    let count = u32_at(0).unwrap_or(0).min(bytes.len() / 10);
    let mut p = count.saturating_mul(8).saturating_add(4);
    (0..count).map_while(move |n| {
        let s = 4 + n * 8;
        let (klen, vlen) = (u32_at(s)?, u32_at(s + 4)?);
        let key = bytes.get(p..p.checked_add(klen)?)?;
        p += klen + 1;
        let value = bytes.get(p..p.checked_add(vlen)?)?;
        p += vlen + 1;
        Some((key, value))
    })
}

/// [`entries`], owned.
pub fn deserialize(bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    entries(bytes)
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_in_the_proxy_wasm_map_format() {
        let b = serialize(&[("a", "xy"), ("bc", "")]);
        assert_eq!(
            b,
            [
                2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'a', 0, b'x', b'y', 0,
                b'b', b'c', 0, 0
            ]
        );
        assert_eq!(serialize(&[]), [0, 0, 0, 0]);
    }

    #[test]
    fn roundtrips_and_survives_garbage() {
        let pairs = [("user-agent", "x\u{ff}y"), (":path", "/a?b")];
        let back = deserialize(&serialize(&pairs));
        assert_eq!(
            back,
            pairs
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect::<Vec<_>>()
        );
        let full = serialize(&pairs);
        for cut in 0..full.len() {
            let part = deserialize(full.get(..cut).unwrap_or_default());
            assert!(part.len() <= 2);
        }
        assert!(deserialize(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).is_empty());
        assert!(deserialize(&[]).is_empty());
    }
}
