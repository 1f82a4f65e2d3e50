//! fastnnef's Rust core: plain modules that know nothing of Python, each with its own
//! unit tests and criterion benches. The PyO3 bindings live in `python/` behind the
//! `python` feature (maturin turns it on), so `cargo test` never links libpython.
//!
//! | module        | responsibility                                                     |
//! |---------------|--------------------------------------------------------------------|
//! | `error`       | the one error enum, mapped onto `fastnnef.exceptions` in Python    |
//! | `dat`         | `.dat` header + payload encoding/decoding for every dtype          |
//! | `quant`       | Q4_0 quantization / dequantization, parallel over blocks           |
//! | `archive`     | single-pass sink: directory, `.tar`, `.tgz` (parallel gzip)        |
//! | `deflate`     | the deflate encoder of each gzip level (ISA-L, zlib-rs, stored)    |
//! | `checkpoint`  | `.safetensors` files and sharded indexes, tensors mapped on demand |
//! | `safetensors_write` | `.safetensors` written from caller buffers, renamed into place |
//! | `tract_check` | load/run artefacts with the linked tract, tract's `--approx` rule  |
#![deny(missing_docs)]

pub mod archive;
pub mod checkpoint;
pub mod dat;
pub mod deflate;
pub mod direct;
pub mod error;
pub mod quant;
pub mod safetensors_write;
pub mod tract_check;

#[cfg(feature = "python")]
mod python;
