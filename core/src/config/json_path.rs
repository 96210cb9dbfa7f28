//! The field path at a position of a JSON document ([`path_at`]): where serde_json stopped
//! when it refused the configuration (`limits[2].rate_per_s`), so every error names its
//! field.
//!
//! Why not track the path while deserializing (the `serde_path_to_error` crate): its
//! wrapper is instantiated for every type of the document and cost the filter module
//! 133 KB of code (about a fifth of it); an error is rare and the document small, so one
//! pass over the text up to the error is enough.

/// One open container while scanning.
enum Open {
    /// An object, and the key whose value is being read (`None` before the first key or
    /// after a comma).
    Object(Option<String>),
    /// An array, and the index of the value being read (`None` before the first value).
    Array(Option<usize>),
}

/// The byte offset just past `column` (1-based, counted in bytes as serde_json does) of
/// `line` (1-based) in `text`, clamped to its length.
fn offset_of(text: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match text
            .get(start..)
            .and_then(|t| t.iter().position(|b| *b == b'\n'))
        {
            Some(nl) => start += nl + 1,
            None => return text.len(),
        }
    }
    start.saturating_add(column).min(text.len())
}

/// The path of the value being read at `line`/`column` of `text` (serde_json's error
/// position): object keys joined by `.` (an empty key as `""`), array indexes as `[i]`,
/// e.g. `limits[0].key[1]`; empty at the top level. A key just read counts, so an unknown
/// field is named by itself.
pub(super) fn path_at(text: &[u8], line: usize, column: usize) -> String {
    let end = offset_of(text, line, column);
    let mut stack: Vec<Open> = Vec::new();
    let mut i = 0;
    while i < end {
        let Some(&b) = text.get(i) else { break };
        match b {
            b'"' => {
                let (s, next) = read_string(text, i + 1, end);
                match stack.last_mut() {
                    Some(Open::Object(key @ None)) => *key = Some(s),
                    Some(Open::Array(idx @ None)) => *idx = Some(0),
                    _ => {}
                }
                i = next;
                continue;
            }
            b'{' | b'[' => {
                if let Some(Open::Array(idx @ None)) = stack.last_mut() {
                    *idx = Some(0);
                }
                stack.push(if b == b'{' {
                    Open::Object(None)
                } else {
                    Open::Array(None)
                });
            }
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Open::Object(key)) => *key = None,
                Some(Open::Array(idx)) => *idx = Some(idx.map_or(0, |n| n + 1)),
                None => {}
            },
            b if !b.is_ascii_whitespace() && b != b':' => {
                // The start of a scalar: an array's value is being read.
                if let Some(Open::Array(idx @ None)) = stack.last_mut() {
                    *idx = Some(0);
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for open in &stack {
        match open {
            Open::Object(Some(key)) => {
                if !path.is_empty() {
                    path.push('.');
                }
                if key.is_empty() {
                    path.push_str("\"\"");
                } else {
                    path.push_str(key);
                }
            }
            Open::Array(Some(idx)) => path.push_str(&format!("[{idx}]")),
            Open::Object(None) | Open::Array(None) => {}
        }
    }
    path
}

/// The string starting at `start` (just past its opening quote) up to its closing quote or
/// `end`, escapes taken as the character they stand for (enough for a field name); and the
/// offset just past it.
fn read_string(text: &[u8], start: usize, end: usize) -> (String, usize) {
    let mut out = Vec::new();
    let mut i = start;
    while i < end {
        match text.get(i) {
            Some(b'"') => return (String::from_utf8_lossy(&out).into_owned(), i + 1),
            Some(b'\\') => {
                if let Some(&c) = text.get(i + 1) {
                    out.push(c);
                }
                i += 2;
            }
            Some(&c) => {
                out.push(c);
                i += 1;
            }
            None => break,
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), end)
}

#[cfg(test)]
mod tests {
    use super::path_at;

    /// The path at the end of `doc` (one line).
    fn at_end(doc: &str) -> String {
        path_at(doc.as_bytes(), 1, doc.len())
    }

    #[test]
    fn paths_name_keys_and_indexes() {
        assert_eq!(at_end(r#"{"bogus""#), "bogus");
        assert_eq!(at_end(r#"{"store":{"slotz""#), "store.slotz");
        assert_eq!(at_end(r#"{"store":{"""#), r#"store."""#);
        assert_eq!(
            at_end(r#"{"limits":[{"name":"a"},{"rate_per_s":"1""#),
            "limits[1].rate_per_s"
        );
        assert_eq!(at_end(r#"{"limits":[{"name":"a"}"#), "limits[0]");
        assert_eq!(at_end(r#"{"l":[1, 2, ["x", 3"#), "l[2][1]");
        assert_eq!(at_end(r#"{"a":1,"#), "");
        assert_eq!(at_end(r#"{"a\"b":{"c"#), "a\"b.c");
        assert_eq!(at_end("{not"), "");
        assert_eq!(at_end(""), "");
        // Braces and commas inside strings are text.
        assert_eq!(at_end(r#"{"x":"{[,","y":[1"#), "y[0]");
    }

    #[test]
    fn lines_and_columns_are_serde_jsons() {
        let doc = "{\n  \"mode\": \"shadow\",\n  \"store\": {\"slotz\": 1}\n}";
        // serde_json reports the unknown field at line 3 column 19 (its closing quote).
        assert_eq!(path_at(doc.as_bytes(), 3, 19), "store.slotz");
        assert_eq!(path_at(doc.as_bytes(), 99, 1), "");
    }
}
