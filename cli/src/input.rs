//! Reading logs: files or stdin (`-`), plain or gzip (detected by the magic bytes, not the
//! name; multi-member files such as concatenated rotations are read whole), line by line
//! into one reused buffer, so memory does not grow with the input. The format is detected
//! per file from its first lines unless one is forced.

use crate::logfmt::{self, Format, LogRecord};
use flate2::read::MultiGzDecoder;
use serde::Serialize;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

/// Read buffer size.
const BUF: usize = 256 * 1024;
/// Lines sampled for format detection.
const SAMPLE_LINES: usize = 1000;
/// Unparsable line numbers remembered per file (for the message).
const BAD_EXAMPLES: usize = 5;
/// Longest line kept, bytes (without its line end). Longer lines are counted (`too_long`,
/// and as unparsable) and skipped without being held in memory: a line is one request, and
/// Envoy refuses requests with over 60 KiB of headers by default.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Bytes of sample lines held for format detection (fewer than [`SAMPLE_LINES`] lines are
/// sampled when they are long).
const SAMPLE_BYTES: usize = 4 * 1024 * 1024;

/// Opens `path` (`-` = stdin), transparently gunzipping.
pub fn open(path: &str) -> io::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path)?)
    };
    let mut r = BufReader::with_capacity(BUF, raw);
    let head = r.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            BUF,
            MultiGzDecoder::new(r),
        )))
    } else {
        Ok(Box::new(r))
    }
}

/// What happened to one input.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileStats {
    /// The path as given (`-` for stdin).
    pub name: String,
    /// The format used (detected or forced); `None` if nothing parsed.
    pub format: Option<Format>,
    /// Non-blank lines read.
    pub lines: u64,
    /// Lines that parsed.
    pub parsed: u64,
    /// Lines that did not parse in the file's format (too long ones included).
    pub unparsable: u64,
    /// Lines longer than [`MAX_LINE_BYTES`], skipped.
    pub too_long: u64,
    /// Line numbers (1-based) of the first unparsable lines.
    pub unparsable_examples: Vec<u64>,
    /// An I/O or decompression error that ended the file early (what was read before it
    /// is kept).
    pub error: Option<String>,
}

impl FileStats {
    fn too_long(&mut self, lineno: u64) {
        self.lines += 1;
        self.too_long += 1;
        self.bad(lineno);
    }

    fn bad(&mut self, lineno: u64) {
        self.unparsable += 1;
        if self.unparsable_examples.len() < BAD_EXAMPLES {
            self.unparsable_examples.push(lineno);
        }
    }
}

/// Reads every line of `reader`, parses it in `forced` or the detected format, and hands
/// each record to `f`. Never fails: errors end up in the returned stats.
pub fn each_record(
    name: &str,
    reader: &mut dyn BufRead,
    forced: Option<Format>,
    f: &mut dyn FnMut(&LogRecord<'_>),
) -> FileStats {
    let mut st = FileStats {
        name: name.to_string(),
        format: forced,
        ..FileStats::default()
    };
    let mut buf = Vec::with_capacity(4096);
    let mut lineno = 0u64;
    // Detection: buffer up to SAMPLE_LINES non-blank lines, pick the best format, then
    // replay the sample through it.
    if forced.is_none() {
        let mut sample: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut bytes = 0usize;
        while sample.len() < SAMPLE_LINES && bytes < SAMPLE_BYTES {
            match read_line(reader, &mut buf) {
                Ok(Line::Read) => {
                    lineno += 1;
                    if !trim_eol(&buf).trim_ascii().is_empty() {
                        bytes += buf.len();
                        sample.push((lineno, trim_eol(&buf).to_vec()));
                    }
                }
                Ok(Line::TooLong) => {
                    lineno += 1;
                    st.too_long(lineno);
                }
                Ok(Line::End) => break,
                Err(e) => {
                    st.error = Some(e.to_string());
                    break;
                }
            }
        }
        st.format = logfmt::detect(sample.iter().map(|(_, l)| l.as_slice()));
        for (n, l) in &sample {
            one(&mut st, *n, l, f);
        }
        if st.error.is_some() {
            return st;
        }
    }
    loop {
        match read_line(reader, &mut buf) {
            Ok(Line::Read) => {
                lineno += 1;
                let l = trim_eol(&buf);
                if !l.trim_ascii().is_empty() {
                    one(&mut st, lineno, l, f);
                }
            }
            Ok(Line::TooLong) => {
                lineno += 1;
                st.too_long(lineno);
            }
            Ok(Line::End) => break,
            Err(e) => {
                st.error = Some(e.to_string());
                break;
            }
        }
    }
    st
}

/// One non-blank line. While no format is known (nothing parsed in the sample), each
/// line is tried in every format and the first that parses fixes it.
fn one(st: &mut FileStats, lineno: u64, l: &[u8], f: &mut dyn FnMut(&LogRecord<'_>)) {
    st.lines += 1;
    let ok = match st.format {
        Some(fmt) => logfmt::parse(fmt, l, f),
        None => match Format::ALL
            .into_iter()
            .find(|fmt| logfmt::parse(*fmt, l, &mut |_| {}))
        {
            Some(fmt) => {
                st.format = Some(fmt);
                logfmt::parse(fmt, l, f)
            }
            None => false,
        },
    };
    if ok {
        st.parsed += 1;
    } else {
        st.bad(lineno);
    }
}

/// What [`read_line`] found.
enum Line {
    /// A line (in the buffer, with its line end).
    Read,
    /// A line over [`MAX_LINE_BYTES`], consumed and dropped.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads one line into `buf`, holding at most [`MAX_LINE_BYTES`] (plus `\r\n`) of it.
fn read_line(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<Line> {
    buf.clear();
    let (mut any, mut long) = (false, false);
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (any, long) {
                (false, _) => Line::End,
                (true, true) => Line::TooLong,
                (true, false) => Line::Read,
            });
        }
        any = true;
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !long {
            match chunk.get(..take) {
                Some(part) if buf.len() + take <= MAX_LINE_BYTES + 2 => buf.extend_from_slice(part),
                _ => {
                    long = true;
                    buf.clear();
                }
            }
        }
        r.consume(take);
        if done {
            long |= trim_eol(buf).len() > MAX_LINE_BYTES;
            return Ok(if long { Line::TooLong } else { Line::Read });
        }
    }
}

fn trim_eol(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// Reads every input in order (`paths` empty = stdin), see [`each_record`]. A file that
/// cannot be opened is reported in its stats (with `error`) and skipped.
pub fn each_input(
    paths: &[String],
    forced: Option<Format>,
    f: &mut dyn FnMut(&LogRecord<'_>),
) -> Vec<FileStats> {
    let stdin = ["-".to_string()];
    let paths = if paths.is_empty() { &stdin[..] } else { paths };
    let mut out = Vec::new();
    for p in paths {
        match open(p) {
            Ok(mut r) => out.push(each_record(p, &mut *r, forced, f)),
            Err(e) => out.push(FileStats {
                name: p.clone(),
                format: forced,
                error: Some(format!("cannot open: {e}")),
                ..FileStats::default()
            }),
        }
    }
    out
}
