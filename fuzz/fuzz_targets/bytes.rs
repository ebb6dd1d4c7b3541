//! Values read from a fuzz input, zero once it runs out. (Each target uses some of them.)
#![allow(dead_code)]

pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&v, rest)) => {
                self.0 = rest;
                v
            }
            None => 0,
        }
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn i32(&mut self) -> i32 {
        self.u32() as i32
    }
    /// A tensor's extent as ggml makes them: 1 to 4096, sometimes 0 (never negative:
    /// ggml_new_tensor refuses that).
    pub fn extent(&mut self) -> i64 {
        match self.u8() % 16 {
            0 => 0,
            _ => 1 + (u16::from_le_bytes([self.u8(), self.u8()]) % 4096) as i64,
        }
    }
    /// A per-device extent: small, sometimes negative or huge.
    pub fn small_i64(&mut self) -> i64 {
        match self.u8() % 32 {
            0 => i64::MAX - self.u8() as i64,
            1 => -(self.u8() as i64),
            _ => (self.u16() % 2048) as i64,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
}
