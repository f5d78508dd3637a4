//! Reading a file format's fields in order from a byte slice: each read is bounds-checked and
//! says `None` past the end, so a torn or hostile file is refused, never a panic.

pub(crate) struct ByteCursor<'a> {
    pub b: &'a [u8],
    pub pos: usize,
}

impl<'a> ByteCursor<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Self { b, pos: 0 }
    }
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn at_end(&self) -> bool {
        self.pos == self.b.len()
    }
}
