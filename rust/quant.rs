//! Q4_0 block quantization (nnef-format.md §2.1), parallel over blocks with rayon.
//!
//! The recipe is torch_to_nnef's, so our bytes equal the reference's:
//! 1. per block of 32 consecutive values (the tensor flattened in C order),
//!    `amax = max |x|` (or the `percentile` quantile of `|x|`, in f32, torch's linear rule);
//! 2. `scale = f16(amax / -8)`, so the stored scale is always `<= 0` (`-0.0` for a zero block);
//! 3. `r = f16(1 / scale)`, `r = scale` where the scale is zero;
//! 4. `q = clamp(floor(x * r + 8.5), 0, 15)`, computed in f32 for f32/bf16 inputs and with
//!    f16 rounding after each operation for f16 inputs (torch's promotion rules).
//!
//! Two deliberate deviations, both cases where the reference writes a file tract would
//! evaluate to NaN: a non-finite input value, and a block whose scale overflows f16
//! (`amax > 65504 * 8`), are rejected with [`Error::ImpossibleQuantization`].

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::error::{Error, Result};

/// Values per Q4_0 block.
pub const BLOCK: usize = 32;
/// Bytes per Q4_0 block: an f16 scale and 16 bytes of 4-bit codes.
pub const BLOCK_BYTES: usize = 18;
/// Ranks a weight stored as Q4_0 may have (tract's loader and the reference agree on 2..=4).
pub const RANKS: std::ops::RangeInclusive<usize> = 2..=4;

/// Check that a tensor of `shape` can be stored as Q4_0: rank 2 to 4, and the product of
/// all dimensions but the first a multiple of [`BLOCK`] (blocks never straddle rows).
/// The one source of this rule: Python asks it through the extension.
pub fn check_shape(label: &str, shape: &[usize]) -> Result<()> {
    let inner: u128 = shape.iter().skip(1).map(|&d| d as u128).product();
    if !RANKS.contains(&shape.len()) || !inner.is_multiple_of(BLOCK as u128) {
        return Err(Error::ImpossibleQuantization(format!(
            "tensor '{label}' of shape {shape:?} cannot be quantized to Q4_0: tract needs rank 2 to 4 \
             with the product of all dimensions but the first divisible by {BLOCK}; keep it in float"
        )));
    }
    Ok(())
}

/// How the 32 four-bit codes of a block are packed into its 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NibbleOrder {
    /// tract >= 0.21.11 (item type 0x3040): byte `j` = `q[j] | q[j + 16] << 4`.
    Ggml,
    /// Older tract (item type 0x2040): byte `j` = `q[2j] | q[2j + 1] << 4`.
    Legacy,
}

/// The float type of a quantizer input buffer (little-endian bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatKind {
    /// IEEE half: arithmetic is rounded to f16 after each step, as torch does.
    F16,
    /// bfloat16 bits: promoted to f32 exactly.
    Bf16,
    /// IEEE single.
    F32,
}

impl FloatKind {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            FloatKind::F16 | FloatKind::Bf16 => 2,
            FloatKind::F32 => 4,
        }
    }

    /// Widen one block of little-endian values to f32 (the match is outside the loop; f16
    /// goes through `half`'s slice conversion, F16C where the CPU has it).
    #[inline(always)]
    fn load_block(self, bytes: &[u8]) -> [f32; BLOCK] {
        let mut x = [0f32; BLOCK];
        match self {
            FloatKind::F32 => {
                for (v, b) in x.iter_mut().zip(bytes.chunks_exact(4)) {
                    *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            FloatKind::F16 => {
                let mut h = [f16::ZERO; BLOCK];
                for (v, b) in h.iter_mut().zip(bytes.chunks_exact(2)) {
                    *v = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
                }
                h.convert_to_f32_slice(&mut x);
            }
            FloatKind::Bf16 => {
                let bytes = &bytes[..2 * BLOCK];
                for (i, v) in x.iter_mut().enumerate() {
                    *v = f32::from_bits(u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])) << 16);
                }
            }
        }
        x
    }

    /// Round each value to this type (nearest even, as torch's `.to(dtype)`), in f32.
    /// The values must be finite (bf16 is rounded without `half`'s NaN branch, so the loop
    /// vectorizes; an overflow still gives infinity, as `half` does).
    #[inline(always)]
    fn round_block(self, values: &mut [f32; BLOCK]) {
        match self {
            FloatKind::F32 => {}
            FloatKind::F16 => {
                let mut h = [f16::ZERO; BLOCK];
                h.convert_from_f32_slice(values);
                h.convert_to_f32_slice(values);
            }
            FloatKind::Bf16 => {
                for v in values.iter_mut() {
                    *v = f32::from_bits(u32::from(bf16_bits(*v)) << 16);
                }
            }
        }
    }

    /// Store one block of finite `values` as little-endian values of this type (rounded to
    /// nearest even).
    #[inline(always)]
    fn store_block(self, values: &[f32; BLOCK], out: &mut [u8]) {
        match self {
            FloatKind::F32 => {
                for (o, v) in out.chunks_exact_mut(4).zip(values) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            FloatKind::F16 => {
                let mut h = [f16::ZERO; BLOCK];
                h.convert_from_f32_slice(values);
                for (o, v) in out.chunks_exact_mut(2).zip(h) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            FloatKind::Bf16 => {
                let out = &mut out[..2 * BLOCK];
                for (i, v) in values.iter().enumerate() {
                    let [lo, hi] = bf16_bits(*v).to_le_bytes();
                    (out[2 * i], out[2 * i + 1]) = (lo, hi);
                }
            }
        }
    }
}

/// `f` of each value of a block: `[T; N]::map`, which is not inlined, so its loop would run
/// out of line in the baseline instruction set, one value at a time.
#[inline(always)]
fn each<T: Copy, U: Copy + Default, const N: usize>(values: &[T; N], f: impl Fn(T) -> U) -> [U; N] {
    let mut out = [U::default(); N];
    for (o, &v) in out.iter_mut().zip(values) {
        *o = f(v);
    }
    out
}

/// The bf16 bits of a finite `v`, rounded to nearest even: `half`'s rule without its NaN
/// branch (the carry of a value that rounds past bf16's largest gives infinity, as there).
#[inline(always)]
fn bf16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// Check a percentile argument: `0 < percentile <= 1`, as the reference asserts.
pub fn check_percentile(percentile: f32) -> Result<()> {
    if percentile > 0.0 && percentile <= 1.0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "percentile must satisfy 0 < percentile <= 1, got {percentile}; use 1.0 for plain absmax calibration"
        )))
    }
}

/// torch.quantile's linear rule on 32 sorted values, in f32.
fn quantile_sorted(sorted: &[f32; BLOCK], percentile: f32) -> f32 {
    let rank = percentile * (BLOCK as f32 - 1.0);
    let below = rank.floor();
    let weight = rank - below;
    let lo = sorted[below as usize];
    let hi = sorted[(rank.ceil() as usize).min(BLOCK - 1)];
    // torch's lerp: the formula switches at 0.5 to stay exact at both ends.
    if weight < 0.5 { lo + weight * (hi - lo) } else { hi - (hi - lo) * (1.0 - weight) }
}

/// Pack 32 codes (each 0..=15) into 16 bytes in the given order.
#[inline(always)]
pub fn pack_nibbles(q: &[u8; BLOCK], order: NibbleOrder) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (j, byte) in out.iter_mut().enumerate() {
        *byte = match order {
            NibbleOrder::Ggml => q[j] | (q[j + 16] << 4),
            NibbleOrder::Legacy => q[2 * j] | (q[2 * j + 1] << 4),
        };
    }
    out
}

/// Unpack 16 bytes into 32 codes (inverse of [`pack_nibbles`]).
pub fn unpack_nibbles(bytes: &[u8], order: NibbleOrder) -> [u8; BLOCK] {
    let mut q = [0u8; BLOCK];
    for (j, &b) in bytes[..16].iter().enumerate() {
        let (lo, hi) = (b & 0x0f, b >> 4);
        match order {
            NibbleOrder::Ggml => {
                q[j] = lo;
                q[j + 16] = hi;
            }
            NibbleOrder::Legacy => {
                q[2 * j] = lo;
                q[2 * j + 1] = hi;
            }
        }
    }
    q
}

/// The scale and the 32 codes (whole floats 0 to 15) of one block of values (already
/// widened to f32).
/// `block_index` only serves error messages. Written so the loops vectorize: the largest
/// `|x|` and the finiteness test are one integer maximum over the values' magnitude bits
/// (for floats of one sign, the bits order as the values do, and every NaN or infinity
/// lies above the largest finite value).
#[inline(always)]
fn block_codes(x: &[f32; BLOCK], kind: FloatKind, percentile: f32, block_index: usize) -> Result<(f16, [f32; BLOCK])> {
    let top = x.iter().fold(0u32, |top, v| top.max(v.to_bits() & 0x7fff_ffff));
    if top >= f32::INFINITY.to_bits() {
        let v = x.iter().find(|v| !v.is_finite()).copied().unwrap_or(f32::NAN);
        return Err(Error::ImpossibleQuantization(format!(
            "block {block_index} holds {v}: Q4_0 cannot represent NaN or infinite values; \
             replace them (e.g. torch.nan_to_num) or keep this tensor in float"
        )));
    }
    let mut amax = f32::from_bits(top);
    if percentile < 1.0 {
        let mut sorted = each(x, f32::abs);
        sorted.sort_unstable_by(f32::total_cmp);
        amax = quantile_sorted(&sorted, percentile);
    }
    let scale = f16::from_f32(amax / -8.0);
    if scale.is_infinite() {
        return Err(Error::ImpossibleQuantization(format!(
            "block {block_index} has max |x| = {amax}, whose Q4_0 scale overflows f16 (|x| must stay \
             below {}); rescale the tensor or keep it in float",
            65504.0f32 * 8.0
        )));
    }
    let recip = if scale.to_f32() == 0.0 { scale } else { f16::from_f32(1.0 / scale.to_f32()) };
    let r = recip.to_f32();
    let mut shifted = each(x, |v| v * r);
    if kind == FloatKind::F16 {
        // f16 tensor * f16 scalar stays f16 in torch: round after the product and the sum.
        // (Not `round_block`: a subnormal scale has an infinite reciprocal, so NaN can occur.)
        let mut h = [f16::ZERO; BLOCK];
        h.convert_from_f32_slice(&shifted);
        h.convert_to_f32_slice(&mut shifted);
        shifted = each(&shifted, |v| v + 8.5);
        h.convert_from_f32_slice(&shifted);
        h.convert_to_f32_slice(&mut shifted);
    } else {
        shifted = each(&shifted, |v| v + 8.5);
    }
    // Clamping first makes truncation equal floor: same result as clamp(floor(v), 0, 15)
    // without a libm floor call per value. The compare-selects map NaN to 0, as there, and
    // leave a value in 0..=15, so the unchecked conversion (one vector instruction; `as`
    // saturates value by value) is exact. The codes stay floats: the round trip computes
    // with them as such.
    Ok((
        scale,
        each(&shifted, |v| {
            let v = if v > 0.0 { v } else { 0.0 };
            let v = if v < 15.0 { v } else { 15.0 };
            // SAFETY: v is finite and in 0..=15, so it fits an i32.
            unsafe { v.to_int_unchecked::<i32>() as f32 }
        }),
    ))
}

/// Blocks one rayon task quantizes in a row: enough to make a task's cost negligible, few
/// enough that a 1 MiB piece of a tensor still splits over the cores.
const TASK_BLOCKS: usize = 256;

/// Calls `$f($task)` (`$task` of type `$ty`), an `#[inline(always)]` loop over blocks,
/// compiled for AVX2 and F16C where the CPU has them (x86-64's baseline, SSE2, vectorizes
/// these loops poorly: 4 lanes, no unsigned maximum, no f16 conversion) and for the
/// baseline elsewhere. The arithmetic is the same IEEE operations either way (no fused
/// multiply-add), so the bytes are too.
macro_rules! with_best_instructions {
    ($f:ident($task:expr) as $ty:ty) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,f16c")]
            fn wide(task: $ty) -> Result<()> {
                $f(task)
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
                // SAFETY: the CPU has the features `wide` was compiled for.
                unsafe { wide($task) }
            } else {
                $f($task)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $f($task)
        }
    }};
}

/// The number of Q4_0 blocks in `src` (little-endian values of `kind`), or the error
/// naming how many values it holds when they do not fill whole blocks.
fn whole_blocks(src: &[u8], kind: FloatKind) -> Result<usize> {
    let block_src = BLOCK * kind.size();
    if !src.len().is_multiple_of(block_src) {
        return Err(Error::ImpossibleQuantization(format!(
            "Q4_0 needs a multiple of {BLOCK} values, got {} values; pad the tensor or keep it in float",
            src.len() / kind.size()
        )));
    }
    Ok(src.len() / block_src)
}

/// Quantize `src` (little-endian values of `kind`, a whole number of blocks) into `out`
/// (`n_blocks * 18` bytes). `first_block` numbers the blocks in error messages when a
/// tensor is quantized chunk by chunk. Runs on the current rayon pool.
pub fn quantize_q4_0(
    src: &[u8],
    kind: FloatKind,
    percentile: f32,
    order: NibbleOrder,
    first_block: usize,
    out: &mut [u8],
) -> Result<()> {
    for_each_block(src, kind, percentile, BlockOutput::Packed(order), first_block, out)
}

/// Quantize `src` (little-endian values of `kind`, a whole number of blocks) to Q4_0 and
/// dequantize it again, block by block, writing the values into `out` as `target`: the
/// values torch computes with for a weight written as Q4_0. Each dequantized f32 value is
/// first rounded to `kind` (the weight's own dtype), then stored as `target` (the dtype
/// the model runs in), the two conversions torch makes; so the result is byte-identical
/// to [`quantize_q4_0`] + [`dequantize_q4_0`] + those casts, without the packed blocks or
/// an f32 copy of the tensor. `first_block` numbers blocks in error messages. Runs on the
/// current rayon pool.
pub fn round_trip_q4_0(
    src: &[u8],
    kind: FloatKind,
    target: FloatKind,
    percentile: f32,
    first_block: usize,
    out: &mut [u8],
) -> Result<()> {
    for_each_block(src, kind, percentile, BlockOutput::Values(target), first_block, out)
}

/// What a pass over Q4_0 blocks writes of each block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockOutput {
    /// Its 18 bytes: the f16 scale and the codes packed in this order.
    Packed(NibbleOrder),
    /// Its 32 values again, quantized and dequantized, as this type.
    Values(FloatKind),
}

impl BlockOutput {
    fn bytes(self) -> usize {
        match self {
            BlockOutput::Packed(_) => BLOCK_BYTES,
            BlockOutput::Values(target) => BLOCK * target.size(),
        }
    }
}

/// Quantize each block of `src` and write it to `out` as `output` says, in parallel over
/// rayon tasks of [`TASK_BLOCKS`] blocks.
fn for_each_block(
    src: &[u8],
    kind: FloatKind,
    percentile: f32,
    output: BlockOutput,
    first_block: usize,
    out: &mut [u8],
) -> Result<()> {
    check_percentile(percentile)?;
    let n_blocks = whole_blocks(src, kind)?;
    if out.len() != n_blocks * output.bytes() {
        return Err(Error::InvalidArgument(format!(
            "Q4_0 output buffer holds {} bytes, {n_blocks} blocks as {output:?} need {}",
            out.len(),
            n_blocks * output.bytes()
        )));
    }
    let src_tasks = src.par_chunks(BLOCK * kind.size() * TASK_BLOCKS);
    src_tasks.zip(out.par_chunks_mut(output.bytes() * TASK_BLOCKS)).enumerate().try_for_each(|(task, (src, out))| {
        let task = BlockTask { src, out, kind, percentile, output, first: first_block + task * TASK_BLOCKS };
        with_best_instructions!(blocks(task) as BlockTask)
    })
}

/// One rayon task of [`for_each_block`]: consecutive blocks and where they go.
struct BlockTask<'a> {
    src: &'a [u8],
    out: &'a mut [u8],
    kind: FloatKind,
    percentile: f32,
    output: BlockOutput,
    first: usize,
}

#[inline(always)]
fn blocks(t: BlockTask) -> Result<()> {
    let (block_src, block_out) = (BLOCK * t.kind.size(), t.output.bytes());
    for (i, (block, dst)) in t.src.chunks_exact(block_src).zip(t.out.chunks_exact_mut(block_out)).enumerate() {
        let (scale, codes) = block_codes(&t.kind.load_block(block), t.kind, t.percentile, t.first + i)?;
        match t.output {
            BlockOutput::Packed(order) => {
                // SAFETY: the codes are whole floats in 0..=15.
                let q = each(&codes, |c| unsafe { c.to_int_unchecked::<i32>() as u8 });
                dst[..2].copy_from_slice(&scale.to_le_bytes());
                dst[2..BLOCK_BYTES].copy_from_slice(&pack_nibbles(&q, order));
            }
            BlockOutput::Values(target) => {
                // The codes straight back to values: what packing then unpacking them gives.
                let d = scale.to_f32();
                let mut values = each(&codes, |c| (c - 8.0) * d);
                if target != t.kind {
                    t.kind.round_block(&mut values); // storing as `kind` rounds the same way
                }
                target.store_block(&values, dst);
            }
        }
    }
    Ok(())
}

/// One block's values: `(q - 8) * scale`, in f32.
fn dequantize_block(block: &[u8], order: NibbleOrder) -> [f32; BLOCK] {
    let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
    each(&unpack_nibbles(&block[2..], order), |q| (f32::from(q) - 8.0) * d)
}

/// Dequantize Q4_0 blocks into little-endian values of `target` (f32 values rounded to
/// nearest even, as torch's cast of [`dequantize_q4_0`]'s output), no f32 copy in between.
pub fn dequantize_q4_0_as(blocks: &[u8], order: NibbleOrder, target: FloatKind, out: &mut [u8]) -> Result<()> {
    let block_out = BLOCK * target.size();
    if !blocks.len().is_multiple_of(BLOCK_BYTES) || out.len() != blocks.len() / BLOCK_BYTES * block_out {
        return Err(Error::DatFormat(format!(
            "Q4_0 payload of {} bytes is not {} values in {BLOCK_BYTES}-byte blocks",
            blocks.len(),
            out.len() / target.size()
        )));
    }
    blocks.par_chunks(BLOCK_BYTES).zip(out.par_chunks_mut(block_out)).with_min_len(TASK_BLOCKS).for_each(|(b, dst)| {
        target.store_block(&dequantize_block(b, order), dst);
    });
    Ok(())
}

/// Dequantize Q4_0 blocks into f32: `(q - 8) * scale`.
pub fn dequantize_q4_0(blocks: &[u8], order: NibbleOrder, out: &mut [f32]) -> Result<()> {
    if !blocks.len().is_multiple_of(BLOCK_BYTES) || out.len() != blocks.len() / BLOCK_BYTES * BLOCK {
        return Err(Error::DatFormat(format!(
            "Q4_0 payload of {} bytes is not {} values in {BLOCK_BYTES}-byte blocks",
            blocks.len(),
            out.len()
        )));
    }
    blocks.par_chunks(BLOCK_BYTES).zip(out.par_chunks_mut(BLOCK)).with_min_len(TASK_BLOCKS).for_each(|(b, dst)| {
        dst.copy_from_slice(&dequantize_block(b, order));
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked block of nnef-format.md §2.1: d = 0.5, q[j] = j, q[16 + j] = 15 - j.
    fn worked_codes() -> [u8; BLOCK] {
        let mut q = [0u8; BLOCK];
        for j in 0..16 {
            q[j] = j as u8;
            q[16 + j] = 15 - j as u8;
        }
        q
    }

    #[test]
    fn worked_block_both_orders() {
        let q = worked_codes();
        let ggml = [0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f];
        let legacy = [0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01];
        assert_eq!(pack_nibbles(&q, NibbleOrder::Ggml), ggml);
        assert_eq!(pack_nibbles(&q, NibbleOrder::Legacy), legacy);
        assert_eq!(unpack_nibbles(&ggml, NibbleOrder::Ggml), q);
        assert_eq!(unpack_nibbles(&legacy, NibbleOrder::Legacy), q);
        assert_eq!(f16::from_f32(0.5).to_le_bytes(), [0x00, 0x38]);
    }

    #[test]
    fn zero_block_has_negative_zero_scale_and_code_8() {
        let src = vec![0u8; BLOCK * 4];
        let mut out = vec![0u8; BLOCK_BYTES];
        quantize_q4_0(&src, FloatKind::F32, 1.0, NibbleOrder::Ggml, 0, &mut out).unwrap();
        assert_eq!(&out[..2], &[0x00, 0x80]);
        assert!(out[2..].iter().all(|&b| b == 0x88));
    }

    #[test]
    fn max_magnitude_maps_to_code_0_and_round_trips() {
        // amax = 8 -> scale -1, r = -1: x = 8 -> floor(0.5) = 0; x = -8 -> 16 -> clamp 15.
        let mut x = [0f32; BLOCK];
        x[0] = 8.0;
        x[1] = -8.0;
        x[2] = 3.0;
        let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0u8; BLOCK_BYTES];
        quantize_q4_0(&src, FloatKind::F32, 1.0, NibbleOrder::Ggml, 0, &mut out).unwrap();
        assert_eq!(f16::from_le_bytes([out[0], out[1]]).to_f32(), -1.0);
        let q = unpack_nibbles(&out[2..], NibbleOrder::Ggml);
        assert_eq!((q[0], q[1], q[2], q[3]), (0, 15, 5, 8));
        let mut back = [0f32; BLOCK];
        dequantize_q4_0(&out, NibbleOrder::Ggml, &mut back).unwrap();
        assert_eq!((back[0], back[1], back[2]), (8.0, -7.0, 3.0));
    }

    #[test]
    fn rejects_partial_blocks_non_finite_and_overflow() {
        let mut out = vec![0u8; BLOCK_BYTES];
        let err = quantize_q4_0(&[0u8; 12], FloatKind::F32, 1.0, NibbleOrder::Ggml, 0, &mut out).unwrap_err();
        assert!(matches!(err, Error::ImpossibleQuantization(_)), "{err}");
        let mut nan = vec![0u8; BLOCK * 4];
        nan[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        let err = quantize_q4_0(&nan, FloatKind::F32, 1.0, NibbleOrder::Ggml, 7, &mut out).unwrap_err();
        assert!(err.to_string().contains("block 7"), "{err}");
        let mut big = vec![0u8; BLOCK * 4];
        big[..4].copy_from_slice(&1.0e6f32.to_le_bytes());
        let err = quantize_q4_0(&big, FloatKind::F32, 1.0, NibbleOrder::Ggml, 0, &mut out).unwrap_err();
        assert!(err.to_string().contains("overflows f16"), "{err}");
        assert!(quantize_q4_0(&[0u8; 128], FloatKind::F32, 0.0, NibbleOrder::Ggml, 0, &mut out).is_err());
    }

    /// `v` rounded to `kind` by `half`'s per-value conversions (the reference for the
    /// vectorized block conversions), back in f32.
    fn round_one(v: f32, kind: FloatKind) -> f32 {
        match kind {
            FloatKind::F32 => v,
            FloatKind::F16 => f16::from_f32(v).to_f32(),
            FloatKind::Bf16 => half::bf16::from_f32(v).to_f32(),
        }
    }

    /// Little-endian bytes of `kind` for `vals` (rounded to nearest even, value by value).
    fn bytes_of(vals: &[f32], kind: FloatKind) -> Vec<u8> {
        vals.iter()
            .flat_map(|&v| match kind {
                FloatKind::F32 => v.to_le_bytes().to_vec(),
                FloatKind::F16 => f16::from_f32(v).to_le_bytes().to_vec(),
                FloatKind::Bf16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
            })
            .collect()
    }

    /// The recipe of the module docs value by value, with `half`'s scalar conversions: what
    /// the vectorized [`quantize_q4_0`] must equal byte for byte.
    fn quantize_value_by_value(src: &[u8], kind: FloatKind, percentile: f32) -> Vec<u8> {
        let mut out = Vec::new();
        for block in src.chunks_exact(BLOCK * kind.size()) {
            let x = kind.load_block(block);
            let mut amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            if percentile < 1.0 {
                let mut sorted = x.map(f32::abs);
                sorted.sort_unstable_by(f32::total_cmp);
                amax = quantile_sorted(&sorted, percentile);
            }
            let scale = f16::from_f32(amax / -8.0);
            let r = if scale.to_f32() == 0.0 { scale } else { f16::from_f32(1.0 / scale.to_f32()) }.to_f32();
            let q = x.map(|v| {
                let shifted = match kind {
                    FloatKind::F16 => f16::from_f32(f16::from_f32(v * r).to_f32() + 8.5).to_f32(),
                    _ => v * r + 8.5,
                };
                shifted.floor().clamp(0.0, 15.0) as u8
            });
            out.extend_from_slice(&scale.to_le_bytes());
            out.extend_from_slice(&pack_nibbles(&q, NibbleOrder::Ggml));
        }
        out
    }

    #[test]
    fn vectorized_blocks_equal_the_recipe_value_by_value() {
        // Magnitudes from f16 subnormal scales (an infinite reciprocal) to near the overflow,
        // zero blocks, ties at the code boundaries, constant blocks, both signs.
        let vals: Vec<f32> = (0..BLOCK * 2000)
            .map(|i| {
                let block = i / BLOCK;
                let x = (i as f32 * 0.377).sin();
                match block % 9 {
                    0 => 0.0,
                    1 => x * 1e-7,
                    2 => x * 3e-6,
                    3 => (i % 17) as f32 * 0.5 - 4.0,
                    4 => -2.5,
                    5 => x * 6.0e4, // near f16's largest value
                    _ => x * 10f32.powi((block % 7) as i32 - 3),
                }
            })
            .collect();
        for kind in [FloatKind::F32, FloatKind::F16, FloatKind::Bf16] {
            let src = bytes_of(&vals, kind);
            for percentile in [1.0, 0.9] {
                let mut got = vec![0u8; vals.len() / BLOCK * BLOCK_BYTES];
                quantize_q4_0(&src, kind, percentile, NibbleOrder::Ggml, 0, &mut got).unwrap();
                assert_eq!(got, quantize_value_by_value(&src, kind, percentile), "{kind:?} at {percentile}");
            }
        }
    }

    /// What the block-wise round trip must equal: quantize the whole tensor, dequantize
    /// the whole tensor to f32, round each value to `kind`, store it as `target`.
    fn round_trip_in_steps(src: &[u8], kind: FloatKind, target: FloatKind) -> Vec<u8> {
        let n = src.len() / kind.size();
        let mut blocks = vec![0u8; n / BLOCK * BLOCK_BYTES];
        quantize_q4_0(src, kind, 1.0, NibbleOrder::Ggml, 0, &mut blocks).unwrap();
        let mut values = vec![0f32; n];
        dequantize_q4_0(&blocks, NibbleOrder::Ggml, &mut values).unwrap();
        let rounded: Vec<f32> = values.iter().map(|&v| round_one(v, kind)).collect();
        bytes_of(&rounded, target)
    }

    #[test]
    fn baseline_instructions_give_the_bytes_of_the_wide_ones() {
        // The loops called directly run in the baseline instruction set; the public
        // functions in AVX2 + F16C where this CPU has them (elsewhere both are the baseline).
        let vals: Vec<f32> = (0..BLOCK * 500)
            .map(|i| match (i / BLOCK) % 5 {
                0 => 0.0,
                1 => (i as f32 * 0.377).sin() * 1e-7,
                2 => (i % 17) as f32 * 0.5 - 4.0,
                _ => (i as f32 * 0.731).sin() * 10f32.powi((i % 5) as i32 - 2),
            })
            .collect();
        let kinds = [FloatKind::F32, FloatKind::F16, FloatKind::Bf16];
        for kind in kinds {
            let src = bytes_of(&vals, kind);
            for percentile in [1.0, 0.9] {
                let mut wide = vec![0u8; vals.len() / BLOCK * BLOCK_BYTES];
                quantize_q4_0(&src, kind, percentile, NibbleOrder::Ggml, 0, &mut wide).unwrap();
                let mut base = vec![0u8; wide.len()];
                let output = BlockOutput::Packed(NibbleOrder::Ggml);
                blocks(BlockTask { src: &src, out: &mut base, kind, percentile, output, first: 0 }).unwrap();
                assert_eq!(base, wide, "quantize {kind:?} at {percentile}");
            }
            for target in kinds {
                let mut wide = vec![0u8; vals.len() * target.size()];
                round_trip_q4_0(&src, kind, target, 1.0, 0, &mut wide).unwrap();
                let mut base = vec![0u8; wide.len()];
                let output = BlockOutput::Values(target);
                blocks(BlockTask { src: &src, out: &mut base, kind, percentile: 1.0, output, first: 0 }).unwrap();
                assert_eq!(base, wide, "round trip {kind:?} -> {target:?}");
            }
        }
    }

    #[test]
    fn round_trip_equals_quantize_dequantize_and_casts() {
        let kinds = [FloatKind::F32, FloatKind::F16, FloatKind::Bf16];
        // Values spanning magnitudes, with zero blocks and ties, over 300 blocks.
        let vals: Vec<f32> = (0..BLOCK * 300)
            .map(|i| if (i / BLOCK) % 7 == 3 { 0.0 } else { (i as f32 * 0.731).sin() * 10f32.powi((i % 5) as i32 - 2) })
            .collect();
        for kind in kinds {
            let src = bytes_of(&vals, kind);
            for target in kinds {
                let mut got = vec![0u8; vals.len() * target.size()];
                round_trip_q4_0(&src, kind, target, 1.0, 0, &mut got).unwrap();
                assert_eq!(got, round_trip_in_steps(&src, kind, target), "{kind:?} -> {target:?}");
                // Dequantizing packed blocks straight to `target` equals f32 then the cast.
                let mut blocks = vec![0u8; vals.len() / BLOCK * BLOCK_BYTES];
                quantize_q4_0(&src, kind, 1.0, NibbleOrder::Ggml, 0, &mut blocks).unwrap();
                let mut f32s = vec![0f32; vals.len()];
                dequantize_q4_0(&blocks, NibbleOrder::Ggml, &mut f32s).unwrap();
                let mut direct = vec![0u8; vals.len() * target.size()];
                dequantize_q4_0_as(&blocks, NibbleOrder::Ggml, target, &mut direct).unwrap();
                assert_eq!(direct, bytes_of(&f32s, target), "blocks -> {target:?}");
            }
        }
    }

    #[test]
    fn round_trip_reports_the_block_and_checks_sizes() {
        let mut nan = vec![0u8; BLOCK * 4 * 3];
        nan[BLOCK * 4 * 2..BLOCK * 4 * 2 + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let mut out = vec![0u8; BLOCK * 2 * 3];
        let err = round_trip_q4_0(&nan, FloatKind::F32, FloatKind::F16, 1.0, 10, &mut out).unwrap_err();
        assert!(err.to_string().contains("block 12"), "{err}");
        let err = round_trip_q4_0(&nan, FloatKind::F32, FloatKind::F32, 1.0, 0, &mut out).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn same_bytes_whatever_the_thread_count() {
        let src: Vec<u8> = (0..BLOCK * 1000).flat_map(|i| ((i as f32 * 0.37).sin() * 3.0).to_le_bytes()).collect();
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut out = vec![0u8; 1000 * BLOCK_BYTES];
            pool.install(|| quantize_q4_0(&src, FloatKind::F32, 1.0, NibbleOrder::Ggml, 0, &mut out)).unwrap();
            out
        };
        assert_eq!(run(1), run(3));
    }
}
