//! Criterion benches of the codec and the archive sink (figures in benches/README.md).
//!
//! Workload: `FASTNNEF_BENCH_MB` MiB of f32 weights (default 64), normally distributed-ish
//! values from a fixed generator. Throughput is reported in bytes of f32 input.
//!
//!     cargo bench --bench codec                       # all
//!     FASTNNEF_BENCH_MB=256 cargo bench --bench codec -- tgz
//!     cargo bench --bench codec -- deflate             # deflate encoder candidates
//!     cargo bench --bench codec -- tgz                 # .tgz: ISA-L vs the zlib-rs baseline

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fastnnef::archive::{ArtefactWriter, Format, ParallelGz};
use fastnnef::dat::{self, EncodeOptions, Encoding, SrcDtype, TensorView};
use fastnnef::deflate::{self, Encoder};
use fastnnef::quant::{self, FloatKind, NibbleOrder};

fn workload_bytes() -> usize {
    let mb: usize = std::env::var("FASTNNEF_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    mb << 20
}

/// Deterministic weight-like f32 data (a sum of uniforms: roughly normal, little redundancy).
fn weights(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n).flat_map(|_| ((next() + next() + next() - 1.5) * 0.05f32).to_le_bytes()).collect()
}

fn encode_benches(c: &mut Criterion) {
    let bytes = workload_bytes();
    let n = bytes / 4;
    let data = weights(n);
    let rows = 1024;
    let cols = n / rows;
    let mut group = c.benchmark_group("dat_encode");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).throughput(Throughput::Bytes(bytes as u64));
    let mut out = Vec::with_capacity(bytes + 128);
    let run = |view: &TensorView<'_>, enc: Encoding, out: &mut Vec<u8>| {
        out.clear();
        dat::encode_payload(view, enc, &EncodeOptions::default(), &mut |p| {
            out.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
        black_box(out.len());
    };
    let contiguous = TensorView::contiguous(&data, SrcDtype::F32, &[rows, cols]).unwrap();
    group.bench_function("f32_contiguous", |b| b.iter(|| run(&contiguous, Encoding::F32, &mut out)));
    // The transpose of a [cols, rows] matrix: every element is a strided read.
    let transposed = TensorView::strided(&data, 0, SrcDtype::F32, &[rows, cols], &[4, 4 * rows as isize]).unwrap();
    group.bench_function("f32_transposed", |b| b.iter(|| run(&transposed, Encoding::F32, &mut out)));
    let bf16: Vec<u8> = data.chunks(4).flat_map(|b| [b[2], b[3]]).collect();
    let bf16_view = TensorView::contiguous(&bf16, SrcDtype::Bf16, &[rows, cols]).unwrap();
    group.throughput(Throughput::Bytes(bf16.len() as u64));
    group.bench_function("bf16_to_f32", |b| b.iter(|| run(&bf16_view, Encoding::F32, &mut out)));
    group.bench_function("bf16_to_f16", |b| b.iter(|| run(&bf16_view, Encoding::F16, &mut out)));
    group.finish();

    let mut group = c.benchmark_group("q4_0");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).throughput(Throughput::Bytes(bytes as u64));
    let mut blocks = vec![0u8; n / quant::BLOCK * quant::BLOCK_BYTES];
    for threads in [1, 0] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let name = if threads == 1 { "quantize_f32_1thread" } else { "quantize_f32_all_threads" };
        group.bench_function(name, |b| {
            b.iter(|| {
                pool.install(|| quant::quantize_q4_0(&data, FloatKind::F32, 1.0, NibbleOrder::Ggml, 0, &mut blocks))
                    .unwrap()
            })
        });
    }
    // What a Q4_0 export's test bundles compute with: a bf16 checkpoint's weights through
    // Q4_0 and back to bf16 (one core: the writer has the other).
    let bf16: Vec<u8> = data.chunks(4).flat_map(|b| [b[2], b[3]]).collect();
    let mut back = vec![0u8; bf16.len()];
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("round_trip_bf16_1thread", |b| {
        b.iter(|| one.install(|| quant::round_trip_q4_0(&bf16, FloatKind::Bf16, FloatKind::Bf16, 1.0, 0, &mut back)).unwrap())
    });
    group.finish();
}

fn archive_benches(c: &mut Criterion) {
    let bytes = workload_bytes();
    let n = bytes / 4;
    let data = weights(n);
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("archive");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).throughput(Throughput::Bytes(bytes as u64));
    // 16 tensors of equal size, like the weights of a small model.
    let per = n / 16;
    let write = |format: Format, level: u32| {
        let path = dir.path().join("bench.nnef");
        let w = ArtefactWriter::create(&path, format, level, false).unwrap();
        w.add_file("graph.nnef", b"version 1.0;\n").unwrap();
        for (i, chunk) in data.chunks(per * 4).enumerate() {
            let view = TensorView::contiguous(chunk, SrcDtype::F32, &[chunk.len() / 4]).unwrap();
            w.add_tensor(&format!("w{i:02}"), &view, Encoding::F32, &EncodeOptions::default()).unwrap();
        }
        let done = w.finish().unwrap();
        if format == Format::Dir {
            std::fs::remove_dir_all(done).unwrap();
        } else {
            std::fs::remove_file(done).unwrap();
        }
    };
    group.bench_function("dir", |b| b.iter(|| write(Format::Dir, 0)));
    group.bench_function("tar", |b| b.iter(|| write(Format::Tar, 0)));
    for level in [1, 3, 6] {
        for threads in [1, 0] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let name = format!("tgz_level{level}_{}", if threads == 1 { "1thread" } else { "all_threads" });
            group.bench_function(name, |b| b.iter(|| pool.install(|| write(Format::Tgz, level))));
        }
    }
    group.finish();
}

/// The deflate encoders compared when choosing each level's (benches/README.md, "gzip
/// encoders"): 1 MiB chunks of weight-like f32, each primed with the previous 32 KiB and
/// sync-flushed, exactly as the `.tgz` sink calls them, on one thread.
fn deflate_benches(c: &mut Criterion) {
    use zlib_rs::Strategy;
    let data = weights(workload_bytes() / 4);
    let mut group = c.benchmark_group("deflate");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).throughput(Throughput::Bytes(data.len() as u64));
    for (name, encoder) in [
        ("zlib_rs_level1_quick", Encoder::Zlib(1, Strategy::Default)),
        ("zlib_rs_level1_rle", Encoder::Zlib(1, Strategy::Rle)),
        ("zlib_rs_level1_huffman_only", Encoder::Zlib(1, Strategy::HuffmanOnly)),
        ("zlib_rs_level2", Encoder::Zlib(2, Strategy::Default)),
        ("zlib_rs_level6", Encoder::Zlib(6, Strategy::Default)),
        ("isal_level1", Encoder::Isal(1)),
        ("isal_level2", Encoder::Isal(2)),
        ("isal_level3", Encoder::Isal(3)),
    ] {
        let mut size = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                size = 0;
                let mut dict: &[u8] = &[];
                for chunk in data.chunks(1 << 20) {
                    size += deflate::deflate_chunk(encoder, dict, chunk, false).unwrap().len();
                    dict = &chunk[chunk.len() - (32 << 10)..];
                }
                black_box(size)
            })
        });
        println!("deflate/{name}: size/input {:.4}", size as f64 / data.len() as f64);
    }
    group.finish();
}

/// The parallel gzip writer alone (no tar framing, no file) with today's level-1 encoder
/// and the previous one, zlib-rs' run-length strategy, as a same-run baseline.
fn tgz_stream_benches(c: &mut Criterion) {
    let data = weights(workload_bytes() / 4);
    let mut group = c.benchmark_group("tgz_stream");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).throughput(Throughput::Bytes(data.len() as u64));
    for (name, encoder) in
        [("level1_isal", Encoder::for_level(1)), ("level1_zlib_rs_rle_baseline", Encoder::Zlib(1, zlib_rs::Strategy::Rle))]
    {
        for threads in [1, 0] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let id = format!("{name}_{}", if threads == 1 { "1thread" } else { "all_threads" });
            group.bench_function(id, |b| {
                b.iter(|| {
                    pool.install(|| {
                        let mut gz = ParallelGz::with_encoder(std::io::sink(), 1, encoder).unwrap();
                        gz.write_all(&data).unwrap();
                        gz.finish().unwrap()
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = encode_benches, archive_benches, deflate_benches, tgz_stream_benches
}
criterion_main!(benches);
