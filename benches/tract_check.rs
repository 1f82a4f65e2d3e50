//! In-process check overhead: tract's own load + optimize + plan + run against
//! `tract_check::TractModel::load_path` + `run` + `compare` on the same artefact.
//!
//! Workload: an 8-layer MLP (512 wide, batch 64; weights in `.dat` files written here from
//! the format reference, 8.4 MB), as a `.tar`. Run: `cargo bench --bench tract_check`.

use std::io::Write;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use fastnnef::tract_check::{self, Approximation, TractModel};
use tract_nnef::prelude::*;

const WIDTH: usize = 512;
const BATCH: usize = 64;
const LAYERS: usize = 8;

/// A `.dat` file for an f32 tensor: 128-byte header (nnef-format.md §1.1) then the payload.
fn dat_f32(shape: &[usize], values: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; 128];
    out[0] = 0x4E;
    out[1] = 0xEF;
    out[2] = 1;
    out[3] = 0;
    out[4..8].copy_from_slice(&((values.len() * 4) as u32).to_le_bytes());
    out[8..12].copy_from_slice(&(shape.len() as u32).to_le_bytes());
    for (i, d) in shape.iter().enumerate() {
        out[12 + 4 * i..16 + 4 * i].copy_from_slice(&(*d as u32).to_le_bytes());
    }
    out[0x2C..0x30].copy_from_slice(&32u32.to_le_bytes());
    // item_type 0 (float), vendor 0: already zero.
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn write_mlp(path: &Path) {
    let mut graph = String::from("version 1.0;\nextension tract_registry tract_core;\n");
    graph += "graph network(x) -> (y) {\n";
    graph += &format!("  x = tract_core_external(shape = [{BATCH}, {WIDTH}], datum_type = 'f32');\n");
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    let mut prev = "x".to_string();
    for l in 0..LAYERS {
        let w: Vec<f32> =
            (0..WIDTH * WIDTH).map(|i| (((i * 7919 + l * 31) % 1000) as f32 - 500.0) * 1e-5).collect();
        let b: Vec<f32> = (0..WIDTH).map(|i| (i % 17) as f32 * 1e-3).collect();
        members.push((format!("w{l}.dat"), dat_f32(&[WIDTH, WIDTH], &w)));
        members.push((format!("b{l}.dat"), dat_f32(&[1, WIDTH], &b)));
        graph += &format!("  w{l} = variable<scalar>(label = 'w{l}', shape = [{WIDTH}, {WIDTH}]);\n");
        graph += &format!("  b{l} = variable<scalar>(label = 'b{l}', shape = [1, {WIDTH}]);\n");
        graph += &format!("  m{l} = matmul({prev}, w{l});\n  a{l} = add(m{l}, b{l});\n");
        let out = if l + 1 == LAYERS { "y".to_string() } else { format!("h{l}") };
        graph += &format!("  {out} = relu(a{l});\n");
        prev = out;
    }
    graph += "}\n";
    let file = std::fs::File::create(path).unwrap();
    let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, data).unwrap();
    };
    add("graph.nnef", graph.as_bytes());
    for (name, data) in &members {
        add(name, data);
    }
    tar.into_inner().unwrap().flush().unwrap();
}

fn input() -> Tensor {
    let x: Vec<f32> = (0..BATCH * WIDTH).map(|i| ((i % 101) as f32 - 50.0) * 1e-2).collect();
    Tensor::from_shape(&[BATCH, WIDTH], &x).unwrap()
}

fn raw_tract(path: &Path, x: &Tensor) -> Tensor {
    let model = tract_check::loader().model_for_path(path).unwrap().into_optimized().unwrap();
    let plan = model.into_runnable().unwrap();
    plan.run(tvec![x.clone().into_tvalue()]).unwrap().remove(0).into_tensor()
}

fn ours(path: &Path, x: &Tensor, expected: &Tensor) -> bool {
    let model = TractModel::load_path(path, true).unwrap();
    let got = model.run(vec![x.clone()]).unwrap();
    tract_check::compare(expected, &got[0], Approximation::Approximate).unwrap().ok
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mlp.nnef.tar");
    write_mlp(&path);
    let x = input();
    let expected = raw_tract(&path, &x);
    // Benchmarks double as tests: both paths agree before anything is timed.
    assert!(ours(&path, &x, &expected));

    // On a shared machine sequential groups drift with the load; alternating the two paths
    // gives a paired estimate of the overhead as well.
    let (mut raw, mut ck) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        let t = std::time::Instant::now();
        std::hint::black_box(raw_tract(&path, &x));
        raw.push(t.elapsed().as_secs_f64());
        let t = std::time::Instant::now();
        std::hint::black_box(ours(&path, &x, &expected));
        ck.push(t.elapsed().as_secs_f64());
    }
    let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "interleaved x40: raw min {:.2} ms median {:.2} ms; tract_check min {:.2} ms median {:.2} ms; \
         overhead min {:+.1}% median {:+.1}%",
        min(&raw) * 1e3,
        median(&mut raw) * 1e3,
        min(&ck) * 1e3,
        median(&mut ck) * 1e3,
        (min(&ck) / min(&raw) - 1.0) * 100.0,
        (median(&mut ck) / median(&mut raw) - 1.0) * 100.0
    );

    let mut group = c.benchmark_group("mlp8x512_tar");
    group.sample_size(20);
    group.bench_function("raw_tract_load_optimize_run", |b| b.iter(|| raw_tract(&path, &x)));
    group.bench_function("tract_check_load_run_compare", |b| b.iter(|| ours(&path, &x, &expected)));
    group.finish();

    let n = 1 << 20;
    let e: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    let g: Vec<f32> = e.iter().map(|v| v + 1e-5).collect();
    let (e, g) = (Tensor::from_shape(&[n], &e).unwrap(), Tensor::from_shape(&[n], &g).unwrap());
    let mut group = c.benchmark_group("compare_1M_f32");
    group.bench_function("tract_close_enough", |b| {
        b.iter(|| e.close_enough(&g, tract_nnef::prelude::tract_data::internal::Approximation::Approximate).is_ok())
    });
    group.bench_function("tract_check_compare", |b| {
        b.iter(|| tract_check::compare(&e, &g, Approximation::Approximate).unwrap().ok)
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
