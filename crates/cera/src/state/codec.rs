//! The little-endian byte codec of saved state (checkpoints, prefix-cache entries): a writer
//! that appends, and a reader that checks every length against what is left, so a truncated or
//! hostile buffer is an error naming the field, never a panic or a huge allocation.

use crate::error::{Error, Result};

#[derive(Default)]
pub(crate) struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// A length (u64) and the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.raw(b);
    }
    pub fn u32s(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        self.buf.reserve(v.len() * 4);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    pub fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        self.buf.reserve(v.len() * 4);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }
}

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    /// What is being read, for errors ("checkpoint /tmp/a.ckpt").
    what: &'a str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'a str) -> Reader<'a> {
        Reader { buf, at: 0, what }
    }

    pub fn error(&self, reason: impl Into<String>) -> Error {
        Error::State {
            what: self.what.to_owned(),
            reason: reason.into(),
        }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    pub fn raw(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.error(format!(
                "truncated: {field} at byte {} needs {n} bytes, {} left",
                self.at,
                self.remaining()
            )));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.raw(1, field)?[0])
    }
    pub fn u32(&mut self, field: &str) -> Result<u32> {
        let b = self.raw(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self, field: &str) -> Result<u64> {
        let b = self.raw(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A u64 that must fit `max` (a count or size read from the data).
    pub fn len(&mut self, field: &str, max: usize) -> Result<usize> {
        let v = self.u64(field)?;
        if v > max as u64 {
            return Err(self.error(format!("{field} is {v}, at most {max} is possible here")));
        }
        Ok(v as usize)
    }
    pub fn bytes(&mut self, field: &str) -> Result<&'a [u8]> {
        let n = self.len(field, self.remaining().saturating_sub(8))?;
        self.raw(n, field)
    }
    pub fn u32s(&mut self, field: &str) -> Result<Vec<u32>> {
        let n = self.len(field, self.remaining().saturating_sub(8) / 4)?;
        let b = self.raw(n * 4, field)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    pub fn f32s(&mut self, field: &str) -> Result<Vec<f32>> {
        let n = self.len(field, self.remaining().saturating_sub(8) / 4)?;
        let b = self.raw(n * 4, field)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    /// Fails unless everything was read.
    pub fn finish(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.error(format!(
                "{} unexpected bytes after the end",
                self.remaining()
            )));
        }
        Ok(())
    }
}
