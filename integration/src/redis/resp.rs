//! The harness's own Redis client: one command per fresh plain-text connection, RESP encoded
//! and read back by hand ([`RedisReply`]), so tests look at Redis without the code under test.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Bound on one command of the test client.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisReply {
    /// `+OK` and other simple strings.
    Status(String),
    /// An integer.
    Int(i64),
    /// A bulk string (lossy UTF-8).
    Bulk(String),
    /// A null bulk string or array (a missing key).
    Nil,
    /// An array.
    Array(Vec<RedisReply>),
    /// `-ERR ...`.
    Error(String),
}

impl RedisReply {
    /// The integer, else a panic naming what came instead.
    pub fn int(&self) -> i64 {
        match self {
            RedisReply::Int(v) => *v,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    /// The string of a bulk or status reply; `None` for nil; a panic otherwise.
    pub fn text(&self) -> Option<String> {
        match self {
            RedisReply::Bulk(s) | RedisReply::Status(s) => Some(s.clone()),
            RedisReply::Nil => None,
            other => panic!("expected a string reply, got {other:?}"),
        }
    }
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if !line.ends_with("\r\n") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("truncated RESP line {line:?}"),
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_len(s: &str) -> std::io::Result<i64> {
    s.parse().map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad length {s:?}"))
    })
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<RedisReply> {
    let line = read_line(r)?;
    let (tag, rest) = line.split_at(line.len().min(1));
    Ok(match tag {
        "+" => RedisReply::Status(rest.to_string()),
        "-" => RedisReply::Error(rest.to_string()),
        ":" => RedisReply::Int(parse_len(rest)?),
        "$" => {
            let n = parse_len(rest)?;
            if n < 0 {
                return Ok(RedisReply::Nil);
            }
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(n as usize);
            RedisReply::Bulk(String::from_utf8_lossy(&buf).into_owned())
        }
        "*" => {
            let n = parse_len(rest)?;
            if n < 0 {
                return Ok(RedisReply::Nil);
            }
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(read_reply(r)?);
            }
            RedisReply::Array(items)
        }
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unexpected RESP line {line:?}"),
            ))
        }
    })
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends one command to `addr` on a fresh plain-text connection (after `AUTH password` when
/// given; a refused AUTH is the reply) and reads its reply.
pub fn redis_cmd_auth(
    addr: SocketAddr,
    password: Option<&str>,
    args: &[&str],
) -> std::io::Result<RedisReply> {
    let stream = TcpStream::connect_timeout(&addr, CMD_TIMEOUT)?;
    stream.set_read_timeout(Some(CMD_TIMEOUT))?;
    stream.set_write_timeout(Some(CMD_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    if let Some(pw) = password {
        (&stream).write_all(&encode(&["AUTH", pw]))?;
        let reply = read_reply(&mut reader)?;
        if reply != RedisReply::Status("OK".into()) {
            return Ok(reply);
        }
    }
    (&stream).write_all(&encode(args))?;
    read_reply(&mut reader)
}

/// Sends one command to `addr` on a fresh plain-text connection and reads its reply.
pub fn redis_cmd(addr: SocketAddr, args: &[&str]) -> std::io::Result<RedisReply> {
    redis_cmd_auth(addr, None, args)
}
