//! Raw-deflate encoders of the `.tgz` sink, and the one place that picks an encoder for a
//! gzip level (figures behind the choice: benches/README.md, "gzip encoders").
//!
//! | gzip level | encoder | why |
//! |---|---|---|
//! | 0 | stored blocks | no compression asked |
//! | 1, 2, 3 | ISA-L igzip, its levels 1, 2, 3 | 4–6× faster than zlib-rs on float weights, and smaller |
//! | 4 … 9 | zlib-rs at the same level | ISA-L has no levels above 3; these trade speed for ratio |
//!
//! [`deflate_chunk`] compresses one chunk of a larger stream: primed with the preceding
//! 32 KiB as dictionary, ended by a sync flush (an empty stored block that byte-aligns the
//! output) or, for the last chunk, by a final block, so independently compressed chunks
//! concatenate into one deflate stream. A chunk whose compressed form would be larger than
//! its stored form is written as stored blocks, so the output never grows by more than
//! 5 bytes per 64 KiB. On one machine the output depends only on the chunk, its dictionary
//! and the level. ISA-L dispatches on CPU features (its level 3 even runs another matcher
//! on AVX-512 CPUs), so the compressed bytes may differ between CPU families; any inflater
//! reads them back to the same content.

use std::io;

use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Method, Status, Strategy};

/// Largest payload of one stored deflate block.
pub const STORED_BLOCK: usize = 65_535;

/// A deflate encoder and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoder {
    /// Stored blocks only (gzip level 0).
    Stored,
    /// ISA-L igzip at its own level 1..=3.
    Isal(u32),
    /// zlib-rs at a zlib level 1..=9 with a strategy.
    Zlib(u32, Strategy),
}

impl Encoder {
    /// The encoder of gzip `level` (0..=9; the caller validates the range).
    pub fn for_level(level: u32) -> Encoder {
        match level {
            0 => Encoder::Stored,
            1..=3 => Encoder::Isal(level),
            _ => Encoder::Zlib(level, Strategy::Default),
        }
    }
}

/// Raw-deflate `data` primed with `dict` (at most the last 32 KiB are used), ending with a
/// sync flush or, if `last`, the final block; stored blocks when compressing would not
/// make it smaller.
pub fn deflate_chunk(encoder: Encoder, dict: &[u8], data: &[u8], last: bool) -> io::Result<Vec<u8>> {
    let out = match encoder {
        Encoder::Stored => return Ok(stored_blocks(data, last)),
        Encoder::Isal(level) => isal::deflate(level, dict, data, last)?,
        Encoder::Zlib(level, strategy) => zlib_deflate(level, strategy, dict, data, last)?,
    };
    if out.len() >= stored_len(data.len()) {
        return Ok(stored_blocks(data, last));
    }
    Ok(out)
}

/// Output room for one call that cannot run short on incompressible data: the stored
/// size plus the flush marker, a Huffman header and slack.
fn out_bound(len: usize) -> usize {
    stored_len(len) + 1024
}

fn zlib_deflate(level: u32, strategy: Strategy, dict: &[u8], data: &[u8], last: bool) -> io::Result<Vec<u8>> {
    let config = DeflateConfig { level: level as i32, method: Method::Deflated, window_bits: -15, mem_level: 8, strategy };
    let mut c = Deflate::new_with_config(config);
    // RLE only looks one byte back: a dictionary would cost time and change nothing.
    if !dict.is_empty() && strategy != Strategy::Rle {
        c.set_dictionary(dict).map_err(|e| io::Error::other(format!("deflate dictionary: {e:?}")))?;
    }
    let flush = if last { DeflateFlush::Finish } else { DeflateFlush::SyncFlush };
    let mut out = vec![0u8; zlib_rs::compress_bound(data.len()).max(out_bound(data.len()))];
    loop {
        let consumed = c.total_in() as usize;
        let produced = c.total_out() as usize;
        let status = c
            .compress(&data[consumed..], &mut out[produced..], flush)
            .map_err(|e| io::Error::other(format!("deflate: {e:?}")))?;
        let room_left = (c.total_out() as usize) < out.len();
        match status {
            Status::StreamEnd => break,
            _ if !last && c.total_in() as usize == data.len() && room_left => break,
            _ => {}
        }
        if !room_left {
            out.resize(out.len() * 2, 0);
        }
    }
    out.truncate(c.total_out() as usize);
    Ok(out)
}

/// ISA-L's stateful raw deflate, the only FFI of the crate.
mod isal {
    use std::io;

    use isal_sys::igzip_lib as ffi;

    /// Level buffer per ISA-L level. Its token buffer bounds the block length, so the size
    /// is part of the output format (fixed, for determinism); the largest suggested size
    /// means fewer Huffman tables to build: 7 % less CPU than the default at level 1 on
    /// float weights, same size.
    fn level_buf_size(level: u32) -> u32 {
        match level {
            1 => ffi::ISAL_DEF_LVL1_EXTRA_LARGE,
            2 => ffi::ISAL_DEF_LVL2_EXTRA_LARGE,
            _ => ffi::ISAL_DEF_LVL3_EXTRA_LARGE,
        }
    }

    pub(super) fn deflate(level: u32, dict: &[u8], data: &[u8], last: bool) -> io::Result<Vec<u8>> {
        let fail = |what: &str, rc: i32| io::Error::other(format!("ISA-L deflate: {what} returned {rc}"));
        let too_big = || io::Error::other("ISA-L deflate: chunk larger than 4 GiB");
        let mut level_buf = vec![0u8; level_buf_size(level) as usize];
        let mut out = vec![0u8; super::out_bound(data.len())];
        // The stream state is 80 KiB: on the heap. isal_deflate_init sets what it reads;
        // zeroing first means nothing is ever uninitialised.
        // SAFETY: isal_zstream is a plain C struct (integers, pointers, arrays) for which
        // all-zero bytes are a valid value.
        let mut s: Box<ffi::isal_zstream> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `s` points to a live isal_zstream.
        unsafe { ffi::isal_deflate_init(&mut *s) };
        s.level = level;
        s.level_buf = level_buf.as_mut_ptr();
        s.level_buf_size = level_buf.len() as u32;
        s.flush = ffi::SYNC_FLUSH as u16;
        s.end_of_stream = u16::from(last);
        s.gzip_flag = ffi::IGZIP_DEFLATE as u16;
        if !dict.is_empty() {
            let dict = &dict[dict.len().saturating_sub(ffi::ISAL_DEF_HIST_SIZE as usize)..];
            // SAFETY: ISA-L copies `dict` (it takes `*mut` but only reads it) before returning.
            let rc = unsafe { ffi::isal_deflate_set_dict(&mut *s, dict.as_ptr().cast_mut(), dict.len() as u32) };
            if rc != ffi::COMP_OK as i32 {
                return Err(fail("isal_deflate_set_dict", rc));
            }
        }
        s.next_in = data.as_ptr().cast_mut();
        s.avail_in = u32::try_from(data.len()).map_err(|_| too_big())?;
        loop {
            let produced = s.total_out as usize;
            s.next_out = out[produced..].as_mut_ptr();
            s.avail_out = u32::try_from(out.len() - produced).map_err(|_| too_big())?;
            // SAFETY: next_in/avail_in cover `data` (read only), next_out/avail_out the
            // unwritten tail of `out`, level_buf/level_buf_size `level_buf`; all outlive
            // the call, and ISA-L keeps no pointer into them after returning that is used
            // again without being reset here.
            let rc = unsafe { ffi::isal_deflate(&mut *s) };
            if rc != ffi::COMP_OK as i32 {
                return Err(fail("isal_deflate", rc));
            }
            // Done once all input is in and output room is left (the flush, or the final
            // block, is then complete: igzip_lib.h, isal_deflate).
            if s.avail_in == 0 && s.avail_out > 0 {
                break;
            }
            if s.avail_out == 0 {
                out.resize(out.len() * 2, 0);
            }
        }
        if last && s.internal_state.state != ffi::isal_zstate_state_ZSTATE_END {
            return Err(io::Error::other("ISA-L deflate: the final block was not completed"));
        }
        out.truncate(s.total_out as usize);
        Ok(out)
    }
}

/// Bytes taken by `len` bytes in stored blocks (5 header bytes per block of up to 64 KiB;
/// an empty input still takes one block).
pub fn stored_len(len: usize) -> usize {
    len + 5 * len.div_ceil(STORED_BLOCK).max(1)
}

/// `data` as byte-aligned stored deflate blocks (the previous chunk ended on a byte
/// boundary); with `last`, the final block carries BFINAL.
pub fn stored_blocks(data: &[u8], last: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(stored_len(data.len()));
    let mut pieces: Vec<&[u8]> = data.chunks(STORED_BLOCK).collect();
    if pieces.is_empty() {
        pieces.push(&[]);
    }
    let n = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        let len = piece.len() as u16;
        out.push(u8::from(last && i == n - 1)); // BFINAL, BTYPE 00, then padding to the byte
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// Deterministic incompressible bytes (xorshift64), for the tests of this module and the
/// archive's.
#[cfg(test)]
pub(crate) fn test_noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn inflate(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(bytes).read_to_end(&mut out).unwrap();
        out
    }

    /// Every encoder a level can pick, plus zlib-rs' run-length strategy (the benches' baseline).
    fn encoders() -> Vec<Encoder> {
        let mut all: Vec<Encoder> = (0..=9).map(Encoder::for_level).collect();
        all.push(Encoder::Zlib(1, Strategy::Rle));
        all
    }

    /// `data` cut at `cuts`, each piece compressed on its own with the previous 32 KiB as
    /// dictionary, as the parallel gzip writer does.
    fn chunked(encoder: Encoder, data: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|&c| c < data.len()));
        bounds.push(data.len());
        let mut out = Vec::new();
        for (i, w) in bounds.windows(2).enumerate() {
            let dict = &data[w[0].saturating_sub(32 << 10)..w[0]];
            out.extend(deflate_chunk(encoder, dict, &data[w[0]..w[1]], i == bounds.len() - 2).unwrap());
        }
        out
    }

    fn float_weights(n: usize) -> Vec<u8> {
        (0..n).flat_map(|i| (((i as f32) * 0.618).sin() * 0.02 + ((i * 7919) % 101) as f32 * 1e-5).to_le_bytes()).collect()
    }

    #[test]
    fn chunks_concatenate_into_one_stream_for_every_encoder() {
        let text: Vec<u8> = (0..300_000).map(|i| b"weights of layer 12 "[i % 20] ^ u8::from(i % 977 == 0)).collect();
        let zeros = vec![0u8; 200_000];
        let floats = float_weights(100_000);
        for encoder in encoders() {
            for data in [&[][..], &b"x"[..], &text, &zeros, &floats] {
                for cuts in [&[][..], &[1, 70_000, 70_001, 250_000][..]] {
                    let out = chunked(encoder, data, cuts);
                    assert!(inflate(&out) == data, "{encoder:?}, {} bytes, cuts {cuts:?}", data.len());
                }
            }
        }
    }

    #[test]
    fn the_dictionary_carries_matches_across_chunks() {
        // 64 KiB of noise repeated: the second copy is all matches, but only within reach of
        // the previous chunk's tail (the 32 KiB window).
        let noise = test_noise(0x2545_f491_4f6c_dd1d, 16 << 10);
        let data = [noise.clone(), noise].concat();
        for encoder in (1..=9).map(Encoder::for_level) {
            let primed = deflate_chunk(encoder, &data[..16 << 10], &data[16 << 10..], true).unwrap();
            let cold = deflate_chunk(encoder, &[], &data[16 << 10..], true).unwrap();
            assert!(primed.len() < 1024, "{encoder:?}: {} bytes with the dictionary", primed.len());
            assert!(cold.len() >= stored_len(16 << 10), "{encoder:?}: noise compressed without it");
        }
    }

    #[test]
    fn output_is_never_larger_than_stored_blocks() {
        let noise = test_noise(0x9e37_79b9_7f4a_7c15, 300_000);
        for encoder in encoders() {
            for last in [false, true] {
                let out = deflate_chunk(encoder, &noise[..32 << 10], &noise[32 << 10..], last).unwrap();
                assert!(out.len() <= stored_len(noise.len() - (32 << 10)), "{encoder:?}: {} bytes", out.len());
            }
        }
    }

    #[test]
    fn isal_is_deterministic_and_compresses_float_weights() {
        let floats = float_weights(1 << 18);
        for level in 1..=3 {
            let encoder = Encoder::for_level(level);
            let a = deflate_chunk(encoder, &floats[..32 << 10], &floats[32 << 10..], false).unwrap();
            let b = deflate_chunk(encoder, &floats[..32 << 10], &floats[32 << 10..], false).unwrap();
            assert_eq!(a, b, "level {level}");
            // Ends with the sync-flush marker, an empty stored block.
            assert_eq!(&a[a.len() - 4..], &[0, 0, 0xff, 0xff], "level {level}");
            assert!(a.len() < floats.len() * 95 / 100, "level {level}: {} of {} bytes", a.len(), floats.len());
        }
    }
}
