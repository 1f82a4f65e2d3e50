//! The NNEF `.dat` tensor file (nnef-format.md §1–§3): a 128-byte header written field by
//! field, then the payload in C order.
//!
//! Encoding streams: [`encode_payload`] reads a strided [`TensorView`] in bounded chunks
//! and hands the payload to a sink piece by piece, so a tensor is never copied whole. The
//! header (and so the payload size) is known up front from the shape and the
//! [`Encoding`], which lets an archive write its member header before the data.
//!
//! Standard types follow the strict Khronos flavour (vendor 0, 1-bit packed bools,
//! signed ints as code 4, unsigned as code 1), which tract also reads. Q4_0 uses tract's
//! vendor type (0x5452) in GGML nibble order (0x3040) or the legacy order (0x2040).

use std::fmt;
use std::str::FromStr;

use half::f16;

use crate::error::{Error, Result};
use crate::quant::{self, FloatKind, NibbleOrder};

/// Size of the `.dat` header.
pub const HEADER_LEN: usize = 128;
/// Largest rank a `.dat` file can hold.
pub const MAX_RANK: usize = 8;
/// The tract vendor id, `('T' << 8) | 'R'`.
pub const VENDOR_TRACT: u16 = 0x5452;
/// Item type of Q4_0 in GGML nibble order (tract >= 0.21.11).
pub const CODE_Q4_0: u16 = 0x3040;
/// Item type of Q4_0 in the legacy tract nibble order.
pub const CODE_Q4_0_LEGACY: u16 = 0x2040;
/// `bits` value meaning "vendor layout".
pub const BITS_VENDOR: u32 = u32::MAX;
/// Source bytes processed per step when streaming a payload (bounds the scratch buffers).
pub const CHUNK_BYTES: usize = 4 << 20;

/// Element type of a source buffer handed to the encoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrcDtype {
    /// IEEE half.
    F16,
    /// bfloat16, given as its 16-bit pattern.
    Bf16,
    /// IEEE single.
    F32,
    /// IEEE double.
    F64,
    /// Signed 8-bit.
    I8,
    /// Signed 16-bit.
    I16,
    /// Signed 32-bit.
    I32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 8-bit.
    U8,
    /// Unsigned 16-bit.
    U16,
    /// Unsigned 32-bit.
    U32,
    /// Unsigned 64-bit.
    U64,
    /// One byte per value, zero is false.
    Bool,
}

impl SrcDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        use SrcDtype::*;
        match self {
            I8 | U8 | Bool => 1,
            F16 | Bf16 | I16 | U16 => 2,
            F32 | I32 | U32 => 4,
            F64 | I64 | U64 => 8,
        }
    }

    /// numpy-style name, used in messages.
    pub fn name(self) -> &'static str {
        use SrcDtype::*;
        match self {
            F16 => "float16",
            Bf16 => "bfloat16",
            F32 => "float32",
            F64 => "float64",
            I8 => "int8",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            U8 => "uint8",
            U16 => "uint16",
            U32 => "uint32",
            U64 => "uint64",
            Bool => "bool",
        }
    }
}

/// How a tensor is stored in its `.dat` file (the `encoding` strings of `_native.pyi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Code 0, 16 bits.
    F16,
    /// Code 0, 32 bits.
    F32,
    /// Code 0, 64 bits.
    F64,
    /// Code 4, 8 bits.
    I8,
    /// Code 4, 16 bits.
    I16,
    /// Code 4, 32 bits.
    I32,
    /// Code 4, 64 bits.
    I64,
    /// Code 1, 8 bits.
    U8,
    /// Code 1, 16 bits.
    U16,
    /// Code 1, 32 bits.
    U32,
    /// Code 1, 64 bits.
    U64,
    /// Code 5, 1 bit packed MSB first (decoded files may also hold 8-bit bools).
    Bool,
    /// Code 2, 8 bits: quint8 codes (the caller writes the `graph.quant` entry).
    Qu8,
    /// Code 3, 8 bits: qint8 codes.
    Qi8,
    /// Code 3, 32 bits: qint32 codes.
    Qi32,
    /// tract vendor 0x3040: Q4_0 in GGML nibble order.
    Q4_0,
    /// tract vendor 0x2040: Q4_0 in legacy nibble order.
    Q4_0Legacy,
}

/// Every encoding, in declaration order (the extension publishes their names).
pub const ALL_ENCODINGS: [Encoding; 17] = {
    use Encoding::*;
    [F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool, Qu8, Qi8, Qi32, Q4_0, Q4_0Legacy]
};

impl Encoding {
    /// The tag used across the Python boundary.
    pub fn name(self) -> &'static str {
        use Encoding::*;
        match self {
            F16 => "f16",
            F32 => "f32",
            F64 => "f64",
            I8 => "i8",
            I16 => "i16",
            I32 => "i32",
            I64 => "i64",
            U8 => "u8",
            U16 => "u16",
            U32 => "u32",
            U64 => "u64",
            Bool => "bool",
            Qu8 => "qu8",
            Qi8 => "qi8",
            Qi32 => "qi32",
            Q4_0 => "q4_0",
            Q4_0Legacy => "q4_0_legacy",
        }
    }

    /// (vendor, item type, bits) written in the header.
    pub fn item_type(self) -> (u16, u16, u32) {
        use Encoding::*;
        match self {
            F16 => (0, 0, 16),
            F32 => (0, 0, 32),
            F64 => (0, 0, 64),
            I8 => (0, 4, 8),
            I16 => (0, 4, 16),
            I32 => (0, 4, 32),
            I64 => (0, 4, 64),
            U8 => (0, 1, 8),
            U16 => (0, 1, 16),
            U32 => (0, 1, 32),
            U64 => (0, 1, 64),
            Bool => (0, 5, 1),
            Qu8 => (0, 2, 8),
            Qi8 => (0, 3, 8),
            Qi32 => (0, 3, 32),
            Q4_0 => (VENDOR_TRACT, CODE_Q4_0, BITS_VENDOR),
            Q4_0Legacy => (VENDOR_TRACT, CODE_Q4_0_LEGACY, BITS_VENDOR),
        }
    }

    /// The Q4_0 nibble order, for the two block encodings.
    pub fn nibble_order(self) -> Option<NibbleOrder> {
        match self {
            Encoding::Q4_0 => Some(NibbleOrder::Ggml),
            Encoding::Q4_0Legacy => Some(NibbleOrder::Legacy),
            _ => None,
        }
    }

    /// The source dtype whose bytes are copied unchanged, for the pass-through encodings.
    fn identity_source(self) -> Option<SrcDtype> {
        use Encoding::*;
        Some(match self {
            F16 => SrcDtype::F16,
            F32 => SrcDtype::F32,
            F64 => SrcDtype::F64,
            I8 | Qi8 => SrcDtype::I8,
            I16 => SrcDtype::I16,
            I32 | Qi32 => SrcDtype::I32,
            I64 => SrcDtype::I64,
            U8 | Qu8 => SrcDtype::U8,
            U16 => SrcDtype::U16,
            U32 => SrcDtype::U32,
            U64 => SrcDtype::U64,
            Bool | Q4_0 | Q4_0Legacy => return None,
        })
    }

    /// Whether a `src` tensor written as `self` is computed (narrowed, widened, quantized)
    /// rather than copied byte for byte.
    pub fn converts(self, src: SrcDtype) -> bool {
        self.identity_source() != Some(src)
    }

    /// What the encoder does with a source of dtype `src`, or an error naming the accepted ones.
    fn plan(self, src: SrcDtype) -> Result<Plan> {
        if !self.converts(src) {
            return Ok(Plan::Copy);
        }
        let plan = match (self, src) {
            (Encoding::F32, SrcDtype::Bf16) => Some(Plan::Bf16ToF32),
            (Encoding::F16, SrcDtype::Bf16) => Some(Plan::Bf16ToF16),
            (Encoding::F16, SrcDtype::F32) => Some(Plan::F32ToF16),
            (Encoding::F32, SrcDtype::F16) => Some(Plan::F16ToF32),
            (Encoding::Bool, SrcDtype::Bool) => Some(Plan::PackBits),
            (Encoding::Q4_0 | Encoding::Q4_0Legacy, SrcDtype::F32) => Some(Plan::Q4(FloatKind::F32)),
            (Encoding::Q4_0 | Encoding::Q4_0Legacy, SrcDtype::F16) => Some(Plan::Q4(FloatKind::F16)),
            (Encoding::Q4_0 | Encoding::Q4_0Legacy, SrcDtype::Bf16) => Some(Plan::Q4(FloatKind::Bf16)),
            _ => None,
        };
        plan.ok_or_else(|| {
            let accepted: Vec<&str> = [
                SrcDtype::F16,
                SrcDtype::Bf16,
                SrcDtype::F32,
                SrcDtype::F64,
                SrcDtype::I8,
                SrcDtype::I16,
                SrcDtype::I32,
                SrcDtype::I64,
                SrcDtype::U8,
                SrcDtype::U16,
                SrcDtype::U32,
                SrcDtype::U64,
                SrcDtype::Bool,
            ]
            .into_iter()
            .filter(|s| self.plan_exists(*s))
            .map(SrcDtype::name)
            .collect();
            Error::InvalidArgument(format!(
                "encoding '{}' cannot take a {} array; it takes {}",
                self.name(),
                src.name(),
                accepted.join(" or ")
            ))
        })
    }

    fn plan_exists(self, src: SrcDtype) -> bool {
        self.identity_source() == Some(src)
            || matches!(
                (self, src),
                (Encoding::F32 | Encoding::F16, SrcDtype::Bf16)
                    | (Encoding::F16, SrcDtype::F32)
                    | (Encoding::F32, SrcDtype::F16)
                    | (Encoding::Bool, SrcDtype::Bool)
                    | (Encoding::Q4_0 | Encoding::Q4_0Legacy, SrcDtype::F32 | SrcDtype::F16 | SrcDtype::Bf16)
            )
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Encoding {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ALL_ENCODINGS.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ALL_ENCODINGS.iter().map(|e| e.name()).collect();
            Error::InvalidArgument(format!("unknown encoding '{s}'; expected one of {}", names.join(", ")))
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    Copy,
    Bf16ToF32,
    Bf16ToF16,
    F32ToF16,
    F16ToF32,
    PackBits,
    Q4(FloatKind),
}

/// A parsed or about-to-be-written `.dat` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Payload size in bytes.
    pub data_length: u32,
    /// The shape (rank 0..=8).
    pub shape: Vec<u32>,
    /// Bits per item, or [`BITS_VENDOR`].
    pub bits: u32,
    /// Item type code.
    pub item_type: u16,
    /// Vendor (0 = Khronos, [`VENDOR_TRACT`]).
    pub vendor: u16,
}

impl Header {
    /// The header of a tensor of `shape` stored with `encoding`, or an error if it breaks
    /// a format limit. `label` names the tensor in messages.
    pub fn for_tensor(label: &str, shape: &[usize], encoding: Encoding) -> Result<Header> {
        if shape.len() > MAX_RANK {
            return Err(Error::TensorTooLarge(format!(
                "tensor '{label}' has rank {} but a .dat file holds at most {MAX_RANK} dimensions; \
                 reshape it (merge axes) before export",
                shape.len()
            )));
        }
        let mut dims = Vec::with_capacity(shape.len());
        for &d in shape {
            dims.push(u32::try_from(d).map_err(|_| {
                Error::TensorTooLarge(format!(
                    "tensor '{label}' has a dimension of {d}, over the .dat limit of {}; split it along that axis",
                    u32::MAX
                ))
            })?);
        }
        let count = shape.iter().try_fold(1u128, |acc, &d| Some(acc * d as u128)).unwrap_or(u128::MAX);
        let (vendor, item_type, bits) = encoding.item_type();
        let len: u128 = match encoding {
            Encoding::Q4_0 | Encoding::Q4_0Legacy => {
                quant::check_shape(label, shape)?;
                count / quant::BLOCK as u128 * quant::BLOCK_BYTES as u128
            }
            Encoding::Bool => {
                if count == 0 {
                    return Err(Error::InvalidArgument(format!(
                        "tensor '{label}' is an empty bool tensor of shape {shape:?}: tract cannot load \
                         zero-element bool .dat files; emit it in the graph another way or drop it"
                    )));
                }
                count.div_ceil(8)
            }
            _ => count * u128::from(bits / 8),
        };
        if len > u128::from(u32::MAX) {
            return Err(Error::TensorTooLarge(format!(
                "tensor '{label}' of shape {shape:?} needs {len} bytes as {encoding}, over the .dat payload \
                 limit of {} bytes (4 GiB); quantize it to Q4_0 or split it into several variables",
                u32::MAX
            )));
        }
        Ok(Header { data_length: len as u32, shape: dims, bits, item_type, vendor })
    }

    /// The 128 header bytes, field by field, little-endian.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = 0x4e;
        h[1] = 0xef;
        h[2] = 1; // version 1.0
        h[3] = 0;
        h[4..8].copy_from_slice(&self.data_length.to_le_bytes());
        h[8..12].copy_from_slice(&(self.shape.len() as u32).to_le_bytes());
        for (i, d) in self.shape.iter().enumerate() {
            h[12 + 4 * i..16 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        h[0x2c..0x30].copy_from_slice(&self.bits.to_le_bytes());
        h[0x30..0x32].copy_from_slice(&self.item_type.to_le_bytes());
        h[0x32..0x34].copy_from_slice(&self.vendor.to_le_bytes());
        h
    }

    /// Parse and validate a header (strict: version 1.0, zero reserved area, known type).
    pub fn parse(bytes: &[u8]) -> Result<Header> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::DatFormat(format!("a .dat file needs 128 header bytes, got {}", bytes.len())));
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        if bytes[0..2] != [0x4e, 0xef] {
            return Err(Error::DatFormat(format!("bad magic {:02x} {:02x}, expected 4e ef", bytes[0], bytes[1])));
        }
        if bytes[2..4] != [1, 0] {
            return Err(Error::DatFormat(format!("version {}.{}, expected 1.0", bytes[2], bytes[3])));
        }
        let rank = u32_at(8) as usize;
        if rank > MAX_RANK {
            return Err(Error::DatFormat(format!("rank {rank} is over the limit of {MAX_RANK}")));
        }
        let shape: Vec<u32> = (0..rank).map(|i| u32_at(12 + 4 * i)).collect();
        if (rank..MAX_RANK).any(|i| u32_at(12 + 4 * i) != 0) {
            return Err(Error::DatFormat(format!("dims beyond rank {rank} must be zero")));
        }
        if bytes[0x34..HEADER_LEN].iter().any(|&b| b != 0) {
            return Err(Error::DatFormat("reserved bytes 0x34..0x80 must be zero".into()));
        }
        let header = Header {
            data_length: u32_at(4),
            shape,
            bits: u32_at(0x2c),
            item_type: u16::from_le_bytes([bytes[0x30], bytes[0x31]]),
            vendor: u16::from_le_bytes([bytes[0x32], bytes[0x33]]),
        };
        let encoding = header.encoding()?;
        let count: u128 = header.shape.iter().map(|&d| u128::from(d)).product();
        let expected = match encoding {
            Encoding::Q4_0 | Encoding::Q4_0Legacy => {
                let dims: Vec<usize> = header.shape.iter().map(|&d| d as usize).collect();
                quant::check_shape("decoded", &dims).map_err(|e| Error::DatFormat(e.to_string()))?;
                count / quant::BLOCK as u128 * quant::BLOCK_BYTES as u128
            }
            _ => (count * u128::from(header.bits)).div_ceil(8),
        };
        if expected != u128::from(header.data_length) {
            return Err(Error::DatFormat(format!(
                "data_length is {} but shape {:?} of {encoding} ({} bits) needs {expected}",
                header.data_length, header.shape, header.bits
            )));
        }
        Ok(header)
    }

    /// The encoding of a (vendor, code, bits) triple. Codes 2/3 at widths other than
    /// those of qu8/qi8/qi32 read as plain ints, like tract; 8-bit bools read as `Bool`.
    pub fn encoding(&self) -> Result<Encoding> {
        use Encoding::*;
        let e = match (self.vendor, self.item_type, self.bits) {
            (0, 0, 16) => F16,
            (0, 0, 32) => F32,
            (0, 0, 64) => F64,
            (0, 1, 8) => U8,
            (0, 1 | 2, 16) => U16,
            (0, 1 | 2, 32) => U32,
            (0, 1 | 2, 64) => U64,
            (0, 2, 8) => Qu8,
            (0, 3, 8) => Qi8,
            (0, 3, 32) => Qi32,
            (0, 3 | 4, 16) => I16,
            (0, 3, 64) | (0, 4, 64) => I64,
            (0, 4, 8) => I8,
            (0, 4, 32) => I32,
            (0, 5, 1 | 8) => Bool,
            (VENDOR_TRACT, CODE_Q4_0, BITS_VENDOR) => Q4_0,
            (VENDOR_TRACT, CODE_Q4_0_LEGACY, BITS_VENDOR) => Q4_0Legacy,
            (v, c, b) => {
                return Err(Error::DatFormat(format!(
                    "unsupported item type: vendor {v:#06x}, code {c:#06x}, bits {b}"
                )));
            }
        };
        Ok(e)
    }

    /// Number of elements.
    pub fn count(&self) -> u64 {
        self.shape.iter().map(|&d| u64::from(d)).product()
    }
}

/// A strided, read-only view of a tensor's elements inside a byte buffer.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    bytes: &'a [u8],
    offset: usize,
    dtype: SrcDtype,
    shape: Vec<usize>,
    /// Coalesced (len, byte stride) pairs, outermost first; empty for a single element.
    runs: Vec<(usize, isize)>,
    numel: usize,
}

impl<'a> TensorView<'a> {
    /// A C-contiguous tensor filling `bytes` exactly.
    pub fn contiguous(bytes: &'a [u8], dtype: SrcDtype, shape: &[usize]) -> Result<Self> {
        let mut strides = vec![0isize; shape.len()];
        let mut acc = dtype.size() as isize;
        for i in (0..shape.len()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(shape[i] as isize);
        }
        let view = Self::strided(bytes, 0, dtype, shape, &strides)?;
        if view.numel * dtype.size() != bytes.len() {
            return Err(Error::InvalidArgument(format!(
                "{} bytes do not hold a {} tensor of shape {shape:?}",
                bytes.len(),
                dtype.name()
            )));
        }
        Ok(view)
    }

    /// Elements at `offset + Σ index[i] * strides[i]` (byte strides, possibly negative)
    /// inside `bytes`. Every addressed element is checked to lie within `bytes`.
    pub fn strided(
        bytes: &'a [u8],
        offset: usize,
        dtype: SrcDtype,
        shape: &[usize],
        strides: &[isize],
    ) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::InvalidArgument(format!("shape {shape:?} and strides {strides:?} differ in rank")));
        }
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let numel = numel.ok_or_else(|| Error::TensorTooLarge(format!("shape {shape:?} overflows usize")))?;
        if numel > 0 {
            let (mut lo, mut hi) = (offset as i128, offset as i128);
            for (&d, &s) in shape.iter().zip(strides) {
                let span = (d as i128 - 1) * s as i128;
                if span < 0 { lo += span } else { hi += span }
            }
            if lo < 0 || hi + dtype.size() as i128 > bytes.len() as i128 {
                return Err(Error::InvalidArgument(format!(
                    "strides {strides:?} with shape {shape:?} address bytes outside the {}-byte buffer",
                    bytes.len()
                )));
            }
        }
        // Drop unit axes, then merge neighbours that are contiguous with each other.
        let mut runs: Vec<(usize, isize)> = Vec::new();
        for (&d, &s) in shape.iter().zip(strides) {
            if d == 1 {
                continue;
            }
            match runs.last_mut() {
                Some((ld, ls)) if *ls == s * d as isize => {
                    *ld *= d;
                    *ls = s;
                }
                _ => runs.push((d, s)),
            }
        }
        Ok(TensorView { bytes, offset, dtype, shape: shape.to_vec(), runs, numel })
    }

    /// Element dtype.
    pub fn dtype(&self) -> SrcDtype {
        self.dtype
    }

    /// Logical shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// The elements as one slice when they are stored contiguously in C order.
    pub fn as_contiguous(&self) -> Option<&'a [u8]> {
        let es = self.dtype.size();
        let len = self.numel * es;
        match self.runs.as_slice() {
            _ if self.numel == 0 => Some(&self.bytes[..0]),
            [] => Some(&self.bytes[self.offset..self.offset + es]),
            [(_, s)] if *s == es as isize => Some(&self.bytes[self.offset..self.offset + len]),
            _ => None,
        }
    }

    /// Copy elements `start .. start + out.len() / size` (C order) into `out`.
    pub fn gather(&self, start: usize, out: &mut [u8]) {
        let es = self.dtype.size();
        let n = out.len() / es;
        assert!(out.len().is_multiple_of(es) && start + n <= self.numel, "gather range out of bounds");
        if n == 0 {
            return;
        }
        if self.runs.is_empty() {
            out.copy_from_slice(&self.bytes[self.offset..self.offset + es]);
            return;
        }
        let d = self.runs.len();
        let mut idx = vec![0usize; d];
        let mut rem = start;
        let mut pos = self.offset as isize;
        for i in (0..d).rev() {
            idx[i] = rem % self.runs[i].0;
            rem /= self.runs[i].0;
            pos += idx[i] as isize * self.runs[i].1;
        }
        let (inner_len, inner_stride) = self.runs[d - 1];
        let mut done = 0;
        while done < n {
            let run = (inner_len - idx[d - 1]).min(n - done);
            let dst = &mut out[done * es..(done + run) * es];
            copy_run(self.bytes, pos, inner_stride, es, dst);
            done += run;
            idx[d - 1] += run;
            pos += run as isize * inner_stride;
            // Carry into the outer axes.
            let mut i = d - 1;
            while idx[i] == self.runs[i].0 && i > 0 {
                pos -= idx[i] as isize * self.runs[i].1;
                idx[i] = 0;
                i -= 1;
                idx[i] += 1;
                pos += self.runs[i].1;
            }
        }
    }
}

/// Copy `dst.len() / es` elements starting at byte `pos`, `stride` bytes apart.
fn copy_run(bytes: &[u8], pos: isize, stride: isize, es: usize, dst: &mut [u8]) {
    let pos = pos as usize;
    if stride == es as isize {
        dst.copy_from_slice(&bytes[pos..pos + dst.len()]);
        return;
    }
    fn strided<const N: usize>(bytes: &[u8], pos: usize, stride: isize, dst: &mut [u8]) {
        for (k, d) in dst.chunks_exact_mut(N).enumerate() {
            let p = (pos as isize + k as isize * stride) as usize;
            d.copy_from_slice(&bytes[p..p + N]);
        }
    }
    match es {
        1 => strided::<1>(bytes, pos, stride, dst),
        2 => strided::<2>(bytes, pos, stride, dst),
        4 => strided::<4>(bytes, pos, stride, dst),
        _ => strided::<8>(bytes, pos, stride, dst),
    }
}

/// Per-call options of the encoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EncodeOptions {
    /// Q4_0 calibration quantile of `|x|` per block (1.0 = absmax).
    pub percentile: f32,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions { percentile: 1.0 }
    }
}

/// Validate `view` against `encoding` and return the header it will get: dtype
/// compatibility, rank, payload size and Q4_0 shape, all before any byte is written.
pub fn prepare(label: &str, view: &TensorView<'_>, encoding: Encoding, options: &EncodeOptions) -> Result<Header> {
    prepare_for(label, view.dtype(), view.shape(), encoding, options)
}

/// [`prepare`] from a dtype and shape (for tensors not yet in memory, e.g. in a checkpoint).
pub fn prepare_for(
    label: &str,
    dtype: SrcDtype,
    shape: &[usize],
    encoding: Encoding,
    options: &EncodeOptions,
) -> Result<Header> {
    encoding.plan(dtype).map_err(|e| with_label(label, e))?;
    if encoding.nibble_order().is_some() {
        quant::check_percentile(options.percentile)?;
    }
    Header::for_tensor(label, shape, encoding)
}

/// Prefix a message error with the tensor it concerns.
pub fn with_label(label: &str, err: Error) -> Error {
    let tag = |m: String| if m.contains(&format!("'{label}'")) { m } else { format!("tensor '{label}': {m}") };
    match err {
        Error::InvalidArgument(m) => Error::InvalidArgument(tag(m)),
        Error::TensorTooLarge(m) => Error::TensorTooLarge(tag(m)),
        Error::DtypeOverflow(m) => Error::DtypeOverflow(tag(m)),
        Error::ImpossibleQuantization(m) => Error::ImpossibleQuantization(tag(m)),
        other => other,
    }
}
/// Values narrowed to f16 per piece of [`NARROW_PIECE`] elements, pieces in parallel on the
/// current rayon pool: each run of [`NARROW_RUN`] values is widened to f32 on the stack
/// (bf16 is the high half of an f32), then narrowed by `half`'s slice conversion, which uses
/// the CPU's F16C instructions where it has them (rounding to nearest even, as the per-value
/// conversion), straight into `out` (no allocation per piece). A finite value that does not
/// fit f16 is an error naming its flat index (`first` is the index of `src`'s first value).
fn narrow_to_f16(src: &[u8], width: usize, first: usize, out: &mut Vec<u8>) -> Result<()> {
    use half::slice::HalfFloatSliceExt;
    use rayon::prelude::*;

    out.resize(src.len() / width * 2, 0);
    out.par_chunks_mut(NARROW_PIECE * 2).zip(src.par_chunks(NARROW_PIECE * width)).enumerate().try_for_each(
        |(piece, (dst, src))| {
            let mut wide = [0f32; NARROW_RUN];
            let mut narrow = [f16::ZERO; NARROW_RUN];
            for (run, (dst, src)) in dst.chunks_mut(NARROW_RUN * 2).zip(src.chunks(NARROW_RUN * width)).enumerate() {
                let n = src.len() / width;
                let wide = &mut wide[..n];
                if width == 2 {
                    for (w, b) in wide.iter_mut().zip(src.chunks_exact(2)) {
                        *w = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
                    }
                } else {
                    for (w, b) in wide.iter_mut().zip(src.chunks_exact(4)) {
                        *w = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                }
                let narrow = &mut narrow[..n];
                narrow.convert_from_f32_slice(wide);
                // f16 infinity is 0x7c00 with a zero mantissa: a cheap test first.
                let overflow = if narrow.iter().any(|h| h.to_bits() & 0x7fff == 0x7c00) {
                    narrow.iter().zip(wide.iter()).position(|(h, v)| h.is_infinite() && v.is_finite())
                } else {
                    None
                };
                if let Some(i) = overflow {
                    let name = if width == 2 { "bf16" } else { "f32" };
                    return Err(Error::DtypeOverflow(format!(
                        "{name} value {} at flat index {} does not fit f16 (max 65504); export it as f32 or rescale \
                         the tensor",
                        wide[i],
                        first + piece * NARROW_PIECE + run * NARROW_RUN + i
                    )));
                }
                for (d, h) in dst.chunks_exact_mut(2).zip(narrow.iter()) {
                    d.copy_from_slice(&h.to_bits().to_le_bytes());
                }
            }
            Ok(())
        },
    )
}

/// Values per run of [`narrow_to_f16`]: its f32 and f16 buffers stay on the stack, in L1.
const NARROW_RUN: usize = 1024;

/// Elements per parallel piece of [`narrow_to_f16`]: small enough to split a chunk over the
/// cores, large enough that scheduling is negligible.
const NARROW_PIECE: usize = 64 * 1024;


/// Stream the payload of `view` as `encoding` into `sink`, in pieces of at most a few MiB
/// (contiguous pass-through payloads go out as one borrowed slice, without a copy).
/// Call [`prepare`] first. Q4_0 chunks are quantized on the current rayon pool.
pub fn encode_payload(
    view: &TensorView<'_>,
    encoding: Encoding,
    options: &EncodeOptions,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let plan = encoding.plan(view.dtype())?;
    let es = view.dtype().size();
    let n = view.numel();
    if plan == Plan::Copy
        && let Some(all) = view.as_contiguous() {
            return sink(all);
        }
    // Elements per step: a multiple of 32 so Q4_0 blocks and packed bool bytes never straddle.
    let step = (CHUNK_BYTES / es / quant::BLOCK * quant::BLOCK).max(quant::BLOCK);
    let contiguous = view.as_contiguous();
    let mut scratch = Vec::new();
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let len = step.min(n - start);
        let src: &[u8] = match contiguous {
            Some(all) => &all[start * es..(start + len) * es],
            None => {
                scratch.resize(len * es, 0);
                view.gather(start, &mut scratch);
                &scratch
            }
        };
        match plan {
            Plan::Copy => sink(src)?,
            Plan::Bf16ToF32 => {
                out.clear();
                out.extend(src.chunks_exact(2).flat_map(|b| (u32::from(u16::from_le_bytes([b[0], b[1]])) << 16).to_le_bytes()));
                sink(&out)?;
            }
            Plan::Bf16ToF16 | Plan::F32ToF16 => {
                narrow_to_f16(src, if plan == Plan::Bf16ToF16 { 2 } else { 4 }, start, &mut out)?;
                sink(&out)?;
            }
            Plan::F16ToF32 => {
                out.clear();
                out.extend(src.chunks_exact(2).flat_map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32().to_le_bytes()));
                sink(&out)?;
            }
            Plan::PackBits => {
                out.clear();
                out.extend(src.chunks(8).map(|bits| {
                    bits.iter().enumerate().fold(0u8, |acc, (k, &b)| acc | (u8::from(b != 0) << (7 - k)))
                }));
                sink(&out)?;
            }
            Plan::Q4(kind) => {
                let order = encoding.nibble_order().expect("Q4 plan implies a nibble order");
                out.resize(len / quant::BLOCK * quant::BLOCK_BYTES, 0);
                quant::quantize_q4_0(src, kind, options.percentile, order, start / quant::BLOCK, &mut out)?;
                sink(&out)?;
            }
        }
        start += len;
    }
    Ok(())
}

/// Encode a whole `.dat` file into memory (small tensors, tests, tools).
pub fn encode(label: &str, view: &TensorView<'_>, encoding: Encoding, options: &EncodeOptions) -> Result<Vec<u8>> {
    let header = prepare(label, view, encoding, options)?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + header.data_length as usize);
    bytes.extend_from_slice(&header.to_bytes());
    encode_payload(view, encoding, options, &mut |piece| {
        bytes.extend_from_slice(piece);
        Ok(())
    })
    .map_err(|e| with_label(label, e))?;
    Ok(bytes)
}

/// The header of already-packed Q4_0 blocks (GGML order, as [`quant::quantize_q4_0`]
/// gives them) stored as `encoding` for a tensor of logical `shape`: the shape must be
/// Q4_0-storable and `blocks_len` must be exactly its payload size.
pub fn prepare_q4_0_blocks(label: &str, blocks_len: usize, shape: &[usize], encoding: Encoding) -> Result<Header> {
    if encoding.nibble_order().is_none() {
        return Err(Error::InvalidArgument(format!(
            "tensor '{label}': packed Q4_0 blocks are written as q4_0 or q4_0_legacy, not {encoding}"
        )));
    }
    let header = Header::for_tensor(label, shape, encoding)?;
    if blocks_len != header.data_length as usize {
        return Err(Error::InvalidArgument(format!(
            "tensor '{label}': {blocks_len} bytes of Q4_0 blocks given, shape {shape:?} needs {}",
            header.data_length
        )));
    }
    Ok(header)
}

/// Stream GGML-order Q4_0 `blocks` as the payload of `encoding`: unchanged for Q4_0, each
/// block's nibbles repacked for Q4_0Legacy. No re-quantization. Call
/// [`prepare_q4_0_blocks`] first.
pub fn q4_0_blocks_payload(blocks: &[u8], encoding: Encoding, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    match encoding.nibble_order() {
        Some(NibbleOrder::Ggml) => sink(blocks),
        Some(NibbleOrder::Legacy) => {
            let step = CHUNK_BYTES / quant::BLOCK_BYTES * quant::BLOCK_BYTES;
            let mut out = Vec::with_capacity(step.min(blocks.len()));
            for chunk in blocks.chunks(step) {
                out.clear();
                for block in chunk.chunks_exact(quant::BLOCK_BYTES) {
                    let q = quant::unpack_nibbles(&block[2..], NibbleOrder::Ggml);
                    out.extend_from_slice(&block[..2]);
                    out.extend_from_slice(&quant::pack_nibbles(&q, NibbleOrder::Legacy));
                }
                sink(&out)?;
            }
            Ok(())
        }
        None => Err(Error::InvalidArgument(format!("{encoding} is not a Q4_0 encoding"))),
    }
}

/// A whole `.dat` file of already-packed GGML-order Q4_0 blocks, in memory.
pub fn encode_q4_0_blocks(label: &str, blocks: &[u8], shape: &[usize], encoding: Encoding) -> Result<Vec<u8>> {
    let header = prepare_q4_0_blocks(label, blocks.len(), shape, encoding)?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + blocks.len());
    bytes.extend_from_slice(&header.to_bytes());
    q4_0_blocks_payload(blocks, encoding, &mut |piece| {
        bytes.extend_from_slice(piece);
        Ok(())
    })?;
    Ok(bytes)
}

/// Decoded element values.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Little-endian elements of the stored dtype (bools one byte each, 0 or 1).
    Raw(Vec<u8>),
    /// Dequantized Q4_0 values.
    F32(Vec<f32>),
}

/// A parsed `.dat` file borrowing its payload.
#[derive(Clone, Debug)]
pub struct Decoded<'a> {
    /// The header.
    pub header: Header,
    /// Its encoding.
    pub encoding: Encoding,
    /// The payload bytes.
    pub payload: &'a [u8],
}

/// Parse a whole `.dat` file; the file must end right after the payload.
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>> {
    let header = Header::parse(bytes)?;
    let encoding = header.encoding()?;
    let end = HEADER_LEN + header.data_length as usize;
    if bytes.len() != end {
        return Err(Error::DatFormat(format!(
            "file is {} bytes but the header announces 128 + {} = {end}",
            bytes.len(),
            header.data_length
        )));
    }
    Ok(Decoded { header, encoding, payload: &bytes[HEADER_LEN..] })
}

impl Decoded<'_> {
    /// numpy dtype name of [`Decoded::values`].
    pub fn value_dtype(&self) -> &'static str {
        use Encoding::*;
        match self.encoding {
            F16 => "<f2",
            F32 | Q4_0 | Q4_0Legacy => "<f4",
            F64 => "<f8",
            I8 | Qi8 => "i1",
            I16 => "<i2",
            I32 | Qi32 => "<i4",
            I64 => "<i8",
            U8 | Qu8 => "u1",
            U16 => "<u2",
            U32 => "<u4",
            U64 => "<u8",
            Bool => "?",
        }
    }

    /// The element values (bools unpacked, Q4_0 dequantized).
    pub fn values(&self) -> Result<Values> {
        let count = self.header.count() as usize;
        match self.encoding {
            Encoding::Bool if self.header.bits == 1 => {
                Ok(Values::Raw((0..count).map(|i| (self.payload[i / 8] >> (7 - i % 8)) & 1).collect()))
            }
            Encoding::Bool => Ok(Values::Raw(self.payload.iter().map(|&b| u8::from(b != 0)).collect())),
            Encoding::Q4_0 | Encoding::Q4_0Legacy => {
                let mut out = vec![0f32; count];
                quant::dequantize_q4_0(self.payload, self.encoding.nibble_order().expect("q4"), &mut out)?;
                Ok(Values::F32(out))
            }
            _ => Ok(Values::Raw(self.payload.to_vec())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
    }

    /// Bytes 0x00..0x2c (magic .. dims) of a header from its first bytes, zero-padded.
    fn head(prefix: &str, bits: &str, code: &str) -> Vec<u8> {
        let mut h = hex(prefix);
        h.resize(0x2c, 0);
        h.extend(hex(bits));
        h.extend(hex(code));
        h.resize(HEADER_LEN, 0);
        h
    }

    fn enc<T: Copy>(vals: &[T], to_bytes: fn(T) -> Vec<u8>, dtype: SrcDtype, shape: &[usize], e: Encoding) -> Vec<u8> {
        let bytes: Vec<u8> = vals.iter().flat_map(|&v| to_bytes(v)).collect();
        let view = TensorView::contiguous(&bytes, dtype, shape).unwrap();
        encode("t", &view, e, &EncodeOptions::default()).unwrap()
    }

    #[test]
    fn worked_dump_a_f32_2x3() {
        let vals = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let file = enc(&vals, |v| v.to_le_bytes().to_vec(), SrcDtype::F32, &[2, 3], Encoding::F32);
        let expected = head("4e ef 01 00 18 00 00 00 02 00 00 00 02 00 00 00 03 00 00 00", "20 00 00 00", "00 00 00 00");
        assert_eq!(&file[..HEADER_LEN], &expected[..]);
        assert_eq!(file.len(), 152);
        assert_eq!(&file[HEADER_LEN..HEADER_LEN + 4], &1.0f32.to_le_bytes());
    }

    #[test]
    fn worked_dump_b_f64_scalar() {
        let file = enc(&[2.5f64], |v| v.to_le_bytes().to_vec(), SrcDtype::F64, &[], Encoding::F64);
        let expected = head("4e ef 01 00 08 00 00 00 00 00 00 00", "40 00 00 00", "00 00 00 00");
        assert_eq!(&file[..HEADER_LEN], &expected[..]);
        assert_eq!(&file[HEADER_LEN..], &hex("00 00 00 00 00 00 04 40")[..]);
    }

    #[test]
    fn worked_dump_c_bool_1bit() {
        let file = enc(&[1u8, 0, 1], |v| vec![v], SrcDtype::Bool, &[3], Encoding::Bool);
        let expected = head("4e ef 01 00 01 00 00 00 01 00 00 00 03 00 00 00", "01 00 00 00", "05 00 00 00");
        assert_eq!(&file[..HEADER_LEN], &expected[..]);
        assert_eq!(&file[HEADER_LEN..], &[0xa0]);
        let d = decode(&file).unwrap();
        assert_eq!(d.values().unwrap(), Values::Raw(vec![1, 0, 1]));
    }

    #[test]
    fn worked_dump_d_i64() {
        let file = enc(&[1i64, -2, 3, 4], |v| v.to_le_bytes().to_vec(), SrcDtype::I64, &[4], Encoding::I64);
        let expected = head("4e ef 01 00 20 00 00 00 01 00 00 00 04 00 00 00", "40 00 00 00", "04 00 00 00");
        assert_eq!(&file[..HEADER_LEN], &expected[..]);
        assert_eq!(file.len(), HEADER_LEN + 32);
    }

    #[test]
    fn worked_dump_e_q4_0_32x64() {
        let vals: Vec<f32> = (0..2048).map(|i| (i as f32 * 0.1).cos()).collect();
        let file = enc(&vals, |v| v.to_le_bytes().to_vec(), SrcDtype::F32, &[32, 64], Encoding::Q4_0);
        let expected = head("4e ef 01 00 80 04 00 00 02 00 00 00 20 00 00 00 40 00 00 00", "ff ff ff ff", "40 30 52 54");
        assert_eq!(&file[..HEADER_LEN], &expected[..]);
        assert_eq!(file.len(), HEADER_LEN + 0x480);
        let legacy = enc(&vals, |v| v.to_le_bytes().to_vec(), SrcDtype::F32, &[32, 64], Encoding::Q4_0Legacy);
        assert_eq!(&legacy[0x30..0x34], &hex("40 20 52 54")[..]);
    }

    #[test]
    fn packed_q4_0_blocks_are_written_without_requantizing() {
        // 64x32 values: the dat file from packed blocks equals direct encoding, both orders.
        let vals: Vec<f32> = (0..64 * 32).map(|i| ((i as f32) * 0.731).sin() * 2.5).collect();
        let src: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::contiguous(&src, SrcDtype::F32, &[64, 32]).unwrap();
        let opts = EncodeOptions::default();
        let direct = encode("w", &view, Encoding::Q4_0, &opts).unwrap();
        let blocks = &direct[HEADER_LEN..];
        assert_eq!(encode_q4_0_blocks("w", blocks, &[64, 32], Encoding::Q4_0).unwrap(), direct);
        let legacy = encode("w", &view, Encoding::Q4_0Legacy, &opts).unwrap();
        assert_eq!(encode_q4_0_blocks("w", blocks, &[64, 32], Encoding::Q4_0Legacy).unwrap(), legacy);
        // A block whose codes are not what the quantizer would give is kept as is.
        let mut odd = blocks.to_vec();
        odd[2] ^= 0x11;
        let out = encode_q4_0_blocks("w", &odd, &[64, 32], Encoding::Q4_0).unwrap();
        assert_eq!(&out[HEADER_LEN..], &odd[..]);
        // Wrong length, wrong shape, wrong encoding.
        let err = encode_q4_0_blocks("w", &blocks[..18], &[64, 32], Encoding::Q4_0).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)) && err.to_string().contains("'w'"), "{err}");
        let err = encode_q4_0_blocks("w", blocks, &[2048], Encoding::Q4_0).unwrap_err();
        assert!(matches!(err, Error::ImpossibleQuantization(_)), "{err}");
        assert!(encode_q4_0_blocks("w", blocks, &[64, 32], Encoding::F32).is_err());
    }

    #[test]
    fn limits_are_checked_before_encoding() {
        let e = Header::for_tensor("big", &[1 << 30, 2], Encoding::F32).unwrap_err();
        assert!(matches!(e, Error::TensorTooLarge(ref m) if m.contains("'big'") && m.contains("Q4_0")), "{e}");
        let e = Header::for_tensor("deep", &[1; 9], Encoding::F32).unwrap_err();
        assert!(matches!(e, Error::TensorTooLarge(ref m) if m.contains("rank 9")), "{e}");
        let e = Header::for_tensor("m", &[0, 3], Encoding::Bool).unwrap_err();
        assert!(e.to_string().contains("empty bool"), "{e}");
        let e = Header::for_tensor("q", &[3, 31], Encoding::Q4_0).unwrap_err();
        assert!(matches!(e, Error::ImpossibleQuantization(_)), "{e}");
        // Exactly u32::MAX bytes of u8 fits; one more does not.
        assert!(Header::for_tensor("x", &[u32::MAX as usize], Encoding::U8).is_ok());
        assert!(Header::for_tensor("x", &[u32::MAX as usize + 1], Encoding::U8).is_err());
    }

    #[test]
    fn strided_gather_matches_index_arithmetic() {
        // A 4x5x3 i16 buffer read transposed as [3, 5, 4] starting at an offset.
        let bytes: Vec<u8> = (0..60i16).flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::strided(&bytes, 0, SrcDtype::I16, &[3, 5, 4], &[2, 6, 30]).unwrap();
        assert!(view.as_contiguous().is_none());
        let file = encode("t", &view, Encoding::I16, &EncodeOptions::default()).unwrap();
        let got: Vec<i16> = file[HEADER_LEN..].chunks(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
        let mut expected = Vec::new();
        for k in 0..3 {
            for j in 0..5 {
                for i in 0..4 {
                    expected.push((i * 15 + j * 3 + k) as i16);
                }
            }
        }
        assert_eq!(got, expected);
        // Partial ranges across row boundaries, and negative strides.
        let mut part = vec![0u8; 14];
        view.gather(3, &mut part);
        let part: Vec<i16> = part.chunks(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
        assert_eq!(part, expected[3..10]);
        let rev = TensorView::strided(&bytes, 118, SrcDtype::I16, &[60], &[-2]).unwrap();
        let mut all = vec![0u8; 120];
        rev.gather(0, &mut all);
        assert_eq!(i16::from_le_bytes([all[0], all[1]]), 59);
        assert!(TensorView::strided(&bytes, 0, SrcDtype::I16, &[61], &[2]).is_err());
    }

    #[test]
    fn bf16_to_f32_is_exact_and_to_f16_checks_overflow() {
        let vals: [f32; 3] = [1.5, -(2f32.powi(127)), 65536.0];
        let bits: Vec<u16> = vals.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
        let f32file = enc(&bits, |v| v.to_le_bytes().to_vec(), SrcDtype::Bf16, &[3], Encoding::F32);
        let back: Vec<f32> = f32file[HEADER_LEN..].chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(back, vals);
        let bytes: Vec<u8> = bits.iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::contiguous(&bytes, SrcDtype::Bf16, &[3]).unwrap();
        let err = encode("w", &view, Encoding::F16, &EncodeOptions::default()).unwrap_err();
        assert!(matches!(err, Error::DtypeOverflow(ref m) if m.contains("'w'")), "{err}");
        let ok = enc(&bits[..1], |v| v.to_le_bytes().to_vec(), SrcDtype::Bf16, &[1], Encoding::F16);
        assert_eq!(&ok[HEADER_LEN..], &f16::from_f32(1.5).to_le_bytes());
    }

    #[test]
    fn narrowing_to_f16_equals_the_per_value_conversion() {
        // Every bf16 bit pattern (NaNs, infinities, subnormals, values too large for f16)
        // and f32 patterns around f16's range, over several parallel pieces: each f16 is
        // the per-value conversion's, and an overflow names the first index of its piece.
        let bf16: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        let f32s: Vec<u8> = (0..3 * NARROW_PIECE as u32)
            .map(|i| f32::from_bits(0x3380_0000u32.wrapping_add(i.wrapping_mul(0x9E37))))
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for (src, width) in [(&bf16, 2usize), (&f32s, 4)] {
            let widen = |b: &[u8]| {
                if width == 2 {
                    f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
                } else {
                    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
                }
            };
            let fits: Vec<u8> = src
                .chunks_exact(width)
                .filter(|b| !(f16::from_f32(widen(b)).is_infinite() && widen(b).is_finite()))
                .flatten()
                .copied()
                .collect();
            let mut out = Vec::new();
            narrow_to_f16(&fits, width, 0, &mut out).unwrap();
            let expected: Vec<u8> = fits.chunks_exact(width).flat_map(|b| f16::from_f32(widen(b)).to_le_bytes()).collect();
            assert_eq!(out, expected);
        }
        let mut big = vec![0u8; 2 * NARROW_PIECE + 8];
        big[2 * NARROW_PIECE + 2..2 * NARROW_PIECE + 4].copy_from_slice(&((70000f32.to_bits() >> 16) as u16).to_le_bytes());
        let err = narrow_to_f16(&big, 2, 10, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains(&format!("at flat index {}", 10 + NARROW_PIECE + 1)), "{err}");
    }

    #[test]
    fn dtype_mismatch_names_accepted_dtypes() {
        let bytes = [0u8; 8];
        let view = TensorView::contiguous(&bytes, SrcDtype::I32, &[2]).unwrap();
        let err = encode("x", &view, Encoding::F32, &EncodeOptions::default()).unwrap_err().to_string();
        assert!(err.contains("'f32' cannot take a int32 array") && err.contains("bfloat16 or float32"), "{err}");
        assert!("f8".parse::<Encoding>().unwrap_err().to_string().contains("q4_0_legacy"));
    }

    #[test]
    fn decoder_rejects_malformed_files() {
        let good = enc(&[7u8, 8], |v| vec![v], SrcDtype::U8, &[2], Encoding::U8);
        assert!(decode(&good).is_ok());
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(decode(&bad).unwrap_err().to_string().contains("magic"));
        let mut bad = good.clone();
        bad[4] = 3;
        assert!(decode(&bad).unwrap_err().to_string().contains("data_length"));
        let mut bad = good.clone();
        bad.push(0);
        assert!(decode(&bad).unwrap_err().to_string().contains("announces"));
        let mut bad = good.clone();
        bad[0x40] = 1;
        assert!(decode(&bad).unwrap_err().to_string().contains("reserved"));
        let mut bad = good;
        bad[0x30] = 9;
        assert!(decode(&bad).unwrap_err().to_string().contains("unsupported item type"));
    }

    proptest::proptest! {
        #[test]
        fn strided_views_round_trip(shape in proptest::collection::vec(1usize..5, 0..4), perm_seed in 0usize..24, step in 1usize..3) {
            // Build a buffer, then a permuted + stepped view, and compare with index arithmetic.
            let rank = shape.len();
            let full: Vec<usize> = shape.iter().map(|d| d * step).collect();
            let total: usize = full.iter().product();
            let bytes: Vec<u8> = (0..total as u32).flat_map(|v| v.to_le_bytes()).collect();
            let mut cstrides = vec![4isize; rank];
            for i in (0..rank.saturating_sub(1)).rev() { cstrides[i] = cstrides[i + 1] * full[i + 1] as isize; }
            let mut perm: Vec<usize> = (0..rank).collect();
            let mut seed = perm_seed;
            for i in (1..rank).rev() { perm.swap(i, seed % (i + 1)); seed /= i + 1; }
            let vshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let vstrides: Vec<isize> = perm.iter().map(|&p| cstrides[p] * step as isize).collect();
            let view = TensorView::strided(&bytes, 0, SrcDtype::U32, &vshape, &vstrides).unwrap();
            let file = encode("p", &view, Encoding::U32, &EncodeOptions::default()).unwrap();
            let got: Vec<u32> = file[HEADER_LEN..].chunks(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
            let n: usize = vshape.iter().product();
            let mut expected = Vec::with_capacity(n);
            for flat in 0..n {
                let (mut rem, mut off) = (flat, 0isize);
                for i in (0..rank).rev() { off += (rem % vshape[i]) as isize * vstrides[i]; rem /= vshape[i]; }
                expected.push((off / 4) as u32);
            }
            proptest::prop_assert_eq!(got, expected);
            let d = decode(&file).unwrap();
            proptest::prop_assert_eq!(d.header.shape.iter().map(|&x| x as usize).collect::<Vec<_>>(), vshape);
        }
    }
}
