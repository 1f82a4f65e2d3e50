//! Load, run and check NNEF artefacts with the tract linked into this crate.
//!
//! This replaces the reference's `tract` subprocess: the artefact is loaded with the same
//! registries the reference's CLI check enables (`tract_core`, `tract_pulse`, `tract_extra`,
//! `tract_transformers`; tract.md §3.1), optimized (`-O`) and planned once, then run on
//! tensors built from raw buffers. Outputs are compared with [`compare`], a re-statement of
//! tract's `Tensor::close_enough` rule (tract.md §5.2) that also returns a full report; a unit
//! test checks that its verdict agrees with tract's own function.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Cursor;
use std::path::Path;

use tract_nnef::framework::Nnef;
use tract_nnef::prelude::*;
use tract_extra::WithTractExtra;
use tract_pulse::WithPulse;
use tract_transformers::WithTractTransformers;

use crate::error::{Error, Result};

/// The tract version linked in (all tract crates are pinned to it in `Cargo.toml`).
pub const TRACT_VERSION: &str = "0.23.9";

/// The NNEF loader with every registry the reference's check enables.
pub fn loader() -> Nnef {
    // `tract_nnef` and `tract_core` are on by default in 0.23 (tract.md §3.1).
    tract_nnef::nnef().with_pulse().with_tract_extra().with_tract_transformers()
}

/// One dimension of a declared fact: a number or a symbolic expression such as `S`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A concrete size.
    Fixed(usize),
    /// A symbolic expression, as tract prints it (`S`, `S+1`, ...).
    Symbolic(String),
}

/// The dtype and shape tract declares for an input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    /// Element type, as named by [`dtype_name`].
    pub dtype: DatumType,
    /// Dimensions, possibly symbolic.
    pub dims: Vec<Dim>,
}

impl Fact {
    fn from_typed(fact: &TypedFact) -> Fact {
        let dims = fact
            .shape
            .dims()
            .iter()
            .map(|d| match d.as_i64() {
                Some(v) if v >= 0 => Dim::Fixed(v as usize),
                _ => Dim::Symbolic(d.to_string()),
            })
            .collect();
        Fact { dtype: fact.datum_type, dims }
    }
}

/// The short name of a tract datum type, as numpy spells it where numpy has it
/// (`f32`, `i64`, `bool`, ...). Quantized types are named by their storage type.
pub fn dtype_name(dt: DatumType) -> &'static str {
    use DatumType::*;
    match dt.unquantized() {
        Bool => "bool",
        U8 => "u8",
        U16 => "u16",
        U32 => "u32",
        U64 => "u64",
        I8 => "i8",
        I16 => "i16",
        I32 => "i32",
        I64 => "i64",
        F16 => "f16",
        F32 => "f32",
        F64 => "f64",
        TDim => "tdim",
        Blob => "blob",
        String => "string",
        _ => "unknown",
    }
}

/// The datum type named by `name` (the inverse of [`dtype_name`] for plain numeric types).
pub fn dtype_from_name(name: &str) -> Result<DatumType> {
    use DatumType::*;
    Ok(match name {
        "bool" => Bool,
        "u8" => U8,
        "u16" => U16,
        "u32" => U32,
        "u64" => U64,
        "i8" => I8,
        "i16" => I16,
        "i32" => I32,
        "i64" => I64,
        "f16" => F16,
        "f32" => F32,
        "f64" => F64,
        other => {
            return Err(Error::InvalidArgument(format!(
                "unsupported tensor dtype {other:?}: tract inputs and outputs can be \
                 bool, u8/u16/u32/u64, i8/i16/i32/i64, f16, f32 or f64"
            )));
        }
    })
}

/// Build a tensor of `dtype` and `shape` from its C-order bytes (copied).
pub fn tensor_from_bytes(dtype: DatumType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
    let dtype = dtype_from_name(dtype_name(dtype)).map_err(|_| {
        Error::InvalidArgument(format!("cannot build a tensor of dtype {dtype:?} from bytes"))
    })?;
    if dtype == DatumType::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(Error::InvalidArgument(
            "bool tensor bytes must be 0 or 1; pass a numpy bool array".into(),
        ));
    }
    // SAFETY: `dtype` is a plain-old-data numeric type (checked just above, String/TDim/Blob
    // rejected) and bool bytes are 0 or 1, so every byte pattern of `bytes` is a valid value;
    // `from_raw_dt` checks that `bytes` has exactly `volume(shape) * size_of(dtype)` bytes
    // and copies them into an aligned buffer.
    unsafe { Tensor::from_raw_dt(dtype, shape, bytes) }
        .map_err(|e| Error::InvalidArgument(format!("{e:#}")))
}

/// Where an artefact came from, for error messages.
fn describe_source(path: Option<&Path>) -> String {
    match path {
        Some(p) => format!("artefact {}", p.display()),
        None => "in-memory artefact".to_string(),
    }
}

/// Run `f`, turning a panic inside tract into an error: some unsupported graphs make tract
/// assert instead of returning an error, and a panic must not escape to the caller (in
/// Python it would not be an exception of fastnnef's hierarchy).
fn guard_panics<T>(what: &str, source: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        Err(Error::Tract(format!(
            "tract panicked while trying to {what} {source}: {message} (a graph tract cannot handle: \
             please report it with the artefact)"
        )))
    })
}

fn tract_error(what: &str, source: &str, err: anyhow::Error) -> Error {
    // `{:?}` on an anyhow error prints the whole "Caused by:" chain.
    Error::Tract(format!("tract failed to {what} {source}: {err:?}"))
}

/// An artefact loaded, optimized and planned by the linked tract; runnable many times.
#[derive(Debug)]
pub struct TractModel {
    plan: Arc<TypedRunnableModel>,
    source: String,
    input_names: Vec<String>,
    output_names: Vec<String>,
    input_facts: Vec<Fact>,
    output_facts: Vec<Fact>,
    properties: BTreeMap<String, String>,
}

impl TractModel {
    /// Load a directory, `.tar` or `.tgz` (gzip detected by its magic bytes).
    pub fn load_path(path: &Path, optimize: bool) -> Result<TractModel> {
        let source = describe_source(Some(path));
        if !path.exists() {
            return Err(Error::Tract(format!(
                "tract failed to load {source}: no such file or directory"
            )));
        }
        guard_panics("load", &source.clone(), || {
            let model = loader().model_for_path(path).map_err(|e| tract_error("load", &source, e))?;
            Self::prepare(model, source, optimize)
        })
    }

    /// Load a `.tar` or `.tgz` held in memory.
    pub fn load_bytes(data: &[u8], optimize: bool) -> Result<TractModel> {
        let source = describe_source(None);
        guard_panics("load", &source.clone(), || {
            let model = loader()
                .model_for_read(&mut Cursor::new(data))
                .map_err(|e| tract_error("load", &source, e))?;
            Self::prepare(model, source, optimize)
        })
    }

    fn prepare(model: TypedModel, source: String, optimize: bool) -> Result<TractModel> {
        // Names and declared input facts come from the model as written; optimization may
        // rename nodes but keeps source names and outlet labels.
        let inputs = model.input_outlets().map_err(|e| tract_error("inspect", &source, e))?;
        let input_names = inputs.iter().map(|o| model.node(o.node).name.clone()).collect();
        let input_facts = inputs
            .iter()
            .map(|o| model.outlet_fact(*o).map(Fact::from_typed))
            .collect::<TractResult<Vec<_>>>()
            .map_err(|e| tract_error("inspect", &source, e))?;
        let properties = model
            .properties
            .iter()
            .filter_map(|(k, v)| {
                let s = v.try_as_plain_ram().ok()?.to_scalar::<String>().ok()?.clone();
                Some((k.clone(), s))
            })
            .collect();
        let model = if optimize {
            model.into_optimized().map_err(|e| tract_error("optimize", &source, e))?
        } else {
            model
        };
        let outputs = model.output_outlets().map_err(|e| tract_error("inspect", &source, e))?;
        let output_names = outputs
            .iter()
            .map(|o| {
                model.outlet_label(*o).map(str::to_string).unwrap_or_else(|| model.node(o.node).name.clone())
            })
            .collect();
        let output_facts = outputs
            .iter()
            .map(|o| model.outlet_fact(*o).map(Fact::from_typed))
            .collect::<TractResult<Vec<_>>>()
            .map_err(|e| tract_error("inspect", &source, e))?;
        let plan = model.into_runnable().map_err(|e| tract_error("plan", &source, e))?;
        Ok(TractModel { plan, source, input_names, output_names, input_facts, output_facts, properties })
    }

    /// Input names (source node names), in the model's input order.
    pub fn input_names(&self) -> &[String] {
        &self.input_names
    }
    /// Output names (outlet labels), in the model's output order.
    pub fn output_names(&self) -> &[String] {
        &self.output_names
    }
    /// Declared input facts.
    pub fn input_facts(&self) -> &[Fact] {
        &self.input_facts
    }
    /// Output facts after optimization.
    pub fn output_facts(&self) -> &[Fact] {
        &self.output_facts
    }
    /// The string-valued entries of the `tract_core_properties` fragment.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }
    /// Where the model was loaded from, as used in error messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Run on `inputs` (model input order). Dtypes must equal the declared ones exactly;
    /// symbolic dims are solved from the input shapes.
    pub fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if inputs.len() != self.input_facts.len() {
            return Err(Error::InvalidArgument(format!(
                "{} expects {} inputs ({:?}), got {}",
                self.source,
                self.input_facts.len(),
                self.input_names,
                inputs.len()
            )));
        }
        for (ix, (t, fact)) in inputs.iter().zip(&self.input_facts).enumerate() {
            let name = &self.input_names[ix];
            if t.datum_type().unquantized() != fact.dtype.unquantized() {
                return Err(Error::InvalidArgument(format!(
                    "input {ix} ({name:?}) of {} expects dtype {}, given {}; cast it before \
                     calling (e.g. `x.astype(np.{})`)",
                    self.source,
                    dtype_name(fact.dtype),
                    dtype_name(t.datum_type()),
                    numpy_name(fact.dtype),
                )));
            }
            let rank_ok = t.rank() == fact.dims.len();
            let dims_ok = rank_ok
                && t.shape().iter().zip(&fact.dims).all(|(s, d)| match d {
                    Dim::Fixed(v) => s == v,
                    Dim::Symbolic(_) => true,
                });
            if !dims_ok {
                return Err(Error::InvalidArgument(format!(
                    "input {ix} ({name:?}) of {} expects shape {}, given {:?}",
                    self.source,
                    format_dims(&fact.dims),
                    t.shape()
                )));
            }
        }
        // A quantized input takes the npz value's bytes as they are (tract.md §5.3).
        let inputs = inputs
            .into_iter()
            .zip(&self.input_facts)
            .map(|(mut t, fact)| {
                if t.datum_type() != fact.dtype {
                    // SAFETY: the storage types are equal (checked above), only the quantization
                    // parameters are attached.
                    unsafe { t.set_datum_type(fact.dtype) };
                }
                t.into_tvalue()
            })
            .collect();
        guard_panics("run", &self.source, || {
            let outputs = self.plan.run(inputs).map_err(|e| tract_error("run", &self.source, e))?;
            outputs
                .into_iter()
                .map(|v| plain_tensor(v.into_tensor()).map_err(|e| tract_error("read output of", &self.source, e)))
                .collect()
        })
    }
}

/// The numpy dtype name for `dt` (`float32`, `int64`, `bool`, ...).
pub fn numpy_name(dt: DatumType) -> &'static str {
    match dtype_name(dt) {
        "f16" => "float16",
        "f32" => "float32",
        "f64" => "float64",
        "i8" => "int8",
        "i16" => "int16",
        "i32" => "int32",
        "i64" => "int64",
        "u8" => "uint8",
        "u16" => "uint16",
        "u32" => "uint32",
        "u64" => "uint64",
        other => other,
    }
}

fn format_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(v) => v.to_string(),
            Dim::Symbolic(s) => s.clone(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

// --- comparison -------------------------------------------------------------------------

/// tract's `--approx` levels (tract.md §5.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Approximation {
    /// `exact`: atol = rtol = 0.
    Exact,
    /// `close`: 1e-7 (f16: 1e-3).
    Close,
    /// `approximate`: atol 1e-4, rtol 5e-4 (f16: 1e-3, 5e-3).
    Approximate,
    /// `very`: atol 5e-2, rtol 1e-2.
    Very,
    /// `super`: atol 0.1, rtol 0.05, outliers 1e-4.
    Super,
    /// `ultra`: atol 0.2, rtol 0.1, outliers 5e-4.
    Ultra,
    /// `custom:ATOL,RTOL,OUTLIERS` (tract's `--approx-custom`).
    Custom(f32, f32, f32),
}

impl Approximation {
    /// The named levels, strictest first (``custom:`` aside).
    pub const LEVELS: [Approximation; 6] = [
        Approximation::Exact,
        Approximation::Close,
        Approximation::Approximate,
        Approximation::Very,
        Approximation::Super,
        Approximation::Ultra,
    ];

    /// Parse `exact|close|approximate|very|super|ultra|custom:ATOL,RTOL,OUTLIERS`.
    pub fn parse(text: &str) -> Result<Approximation> {
        let bad = || {
            Error::InvalidArgument(format!(
                "unknown tolerance {text:?}: use one of exact, close, approximate, very, super, \
                 ultra, or custom:ATOL,RTOL,OUTLIERS (e.g. custom:1e-3,1e-3,0)"
            ))
        };
        Ok(match text {
            "exact" => Approximation::Exact,
            "close" => Approximation::Close,
            "approximate" => Approximation::Approximate,
            "very" => Approximation::Very,
            "super" => Approximation::Super,
            "ultra" => Approximation::Ultra,
            _ => {
                let rest = text.strip_prefix("custom:").ok_or_else(bad)?;
                let parts = rest
                    .split(',')
                    .map(|p| p.trim().parse::<f32>())
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| bad())?;
                match parts[..] {
                    [a, r, o] if a >= 0.0 && r >= 0.0 && o >= 0.0 => Approximation::Custom(a, r, o),
                    _ => return Err(bad()),
                }
            }
        })
    }

    /// The level's name as accepted by [`Approximation::parse`].
    pub fn name(&self) -> String {
        match self {
            Approximation::Exact => "exact".into(),
            Approximation::Close => "close".into(),
            Approximation::Approximate => "approximate".into(),
            Approximation::Very => "very".into(),
            Approximation::Super => "super".into(),
            Approximation::Ultra => "ultra".into(),
            Approximation::Custom(a, r, o) => format!("custom:{a},{r},{o}"),
        }
    }

    /// (atol, rtol, max outlier fraction) for tensors of `dt` (tract.md §5.1). f64 as in
    /// tract; the element rule uses them as f32.
    pub fn tolerances(&self, dt: DatumType) -> (f64, f64, f64) {
        use Approximation::*;
        match (self, dt) {
            (Exact, _) => (0.0, 0.0, 0.0),
            (Close, DatumType::F16) => (1e-3, 1e-3, 0.0),
            (Approximate, DatumType::F16) => (1e-3, 5e-3, 0.0),
            (Approximate, qp) if qp.is_quantized() => (qp.zp_scale().1 as f64, 0.0, 0.0),
            (Close, _) => (1e-7, 1e-7, 0.0),
            (Approximate, _) => (1e-4, 5e-4, 0.0),
            (Very, _) => (5e-2, 1e-2, 0.0),
            (Super, _) => (0.1, 0.05, 0.0001),
            (Ultra, _) => (0.2, 0.1, 0.0005),
            (Custom(a, r, o), _) => (*a as f64, *r as f64, *o as f64),
        }
    }
}

/// The outcome of comparing one expected tensor with one obtained tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareReport {
    /// Whether the check passes.
    pub ok: bool,
    /// The level's name.
    pub approximation: String,
    /// Absolute tolerance used.
    pub atol: f64,
    /// Relative tolerance used (relative to the obtained value).
    pub rtol: f64,
    /// Largest fraction of failing elements allowed.
    pub max_outlier_fraction: f64,
    /// Shape of the expected tensor.
    pub expected_shape: Vec<usize>,
    /// Shape of the obtained tensor.
    pub got_shape: Vec<usize>,
    /// Dtype of the expected tensor as given (before alignment).
    pub expected_dtype: String,
    /// Dtype of the obtained tensor.
    pub got_dtype: String,
    /// The shapes differ (nothing else was compared).
    pub shape_mismatch: bool,
    /// Number of elements compared.
    pub n_elements: usize,
    /// Number of elements failing tract's rule.
    pub n_fail: usize,
    /// `n_fail / n_elements` (0 for empty tensors).
    pub fail_fraction: f64,
    /// Largest `|expected - got|` (f32 values, difference in f64; infinite where only one
    /// side is NaN or the infinities differ).
    pub max_abs_error: f64,
    /// Largest `|expected - got| / |got|`.
    pub max_rel_error: f64,
    /// Index of the failing element with the largest absolute error (or, when nothing fails,
    /// of the element with the largest absolute error).
    pub worst_index: Option<Vec<usize>>,
    /// Expected value at `worst_index` (after alignment, as f32).
    pub worst_expected: Option<f64>,
    /// Obtained value at `worst_index` (as f32).
    pub worst_got: Option<f64>,
}

/// Per-element comparison, exactly tract's `close_enough` predicate (f32 arithmetic).
#[inline]
fn element_passes(a: f32, b: f32, atol: f32, rtol: f32) -> bool {
    (a.is_nan() && b.is_nan())
        || (a.is_infinite() && b.is_infinite() && a.signum() == b.signum())
        || (a - b).abs() <= atol + rtol * b.abs()
}

/// The reporting error of one element pair: 0 where tract treats them as equal, infinite
/// where only one side is NaN or the infinities differ.
#[inline]
fn element_abs_error(a: f32, b: f32) -> f64 {
    if (a.is_nan() && b.is_nan()) || (a.is_infinite() && a == b) {
        0.0
    } else {
        let d = (a as f64 - b as f64).abs();
        if d.is_nan() { f64::INFINITY } else { d }
    }
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (ix, dim) in shape.iter().enumerate().rev() {
        index[ix] = flat % dim;
        flat /= dim;
    }
    index
}

/// Compare `got` with `expected` by tract's rule (tract.md §5.2), with a full report.
///
/// `expected` is first cast to `got`'s dtype when both are unquantized floats (as tract's
/// CLI does with `--allow-float-casts`), or relabelled with `got`'s quantization when they
/// share a storage type; the tolerance row is picked from that aligned dtype.
pub fn compare(expected: &Tensor, got: &Tensor, approx: Approximation) -> Result<CompareReport> {
    let edt = expected.datum_type();
    let gdt = got.datum_type();
    let mut report = CompareReport {
        ok: false,
        approximation: approx.name(),
        atol: 0.0,
        rtol: 0.0,
        max_outlier_fraction: 0.0,
        expected_shape: expected.shape().to_vec(),
        got_shape: got.shape().to_vec(),
        expected_dtype: dtype_name(edt).to_string(),
        got_dtype: dtype_name(gdt).to_string(),
        shape_mismatch: false,
        n_elements: expected.len(),
        n_fail: 0,
        fail_fraction: 0.0,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        worst_index: None,
        worst_expected: None,
        worst_got: None,
    };
    let cmp_err = |e: anyhow::Error| Error::InvalidArgument(format!("cannot compare tensors: {e:#}"));
    let aligned = if edt.is_float() && gdt.is_float() {
        expected.cast_to_dt(gdt).map_err(cmp_err)?
    } else if edt != gdt && edt.unquantized() == gdt.unquantized() {
        let mut t = expected.clone();
        // SAFETY: same storage type; only quantization parameters change.
        unsafe { t.set_datum_type(gdt) };
        std::borrow::Cow::Owned(t)
    } else {
        std::borrow::Cow::Borrowed(expected)
    };
    let (atol, rtol, outliers) = approx.tolerances(aligned.datum_type());
    report.atol = atol;
    report.rtol = rtol;
    report.max_outlier_fraction = outliers;
    if expected.shape() != got.shape() {
        report.shape_mismatch = true;
        return Ok(report);
    }
    let a = aligned.cast_to::<f32>().map_err(cmp_err)?;
    let b = got.cast_to::<f32>().map_err(cmp_err)?;
    let a = a.try_as_plain_ram().and_then(|v| v.as_slice::<f32>()).map_err(cmp_err)?;
    let b = b.try_as_plain_ram().and_then(|v| v.as_slice::<f32>()).map_err(cmp_err)?;
    let (atol32, rtol32) = (atol as f32, rtol as f32);
    let mut n_fail = 0usize;
    let mut worst: Option<(usize, f64, bool)> = None; // (flat index, abs error, failing)
    for (ix, (&x, &y)) in a.iter().zip(b).enumerate() {
        let pass = element_passes(x, y, atol32, rtol32);
        let err = element_abs_error(x, y);
        let rel = if err == 0.0 { 0.0 } else { err / (y as f64).abs() };
        if !pass {
            n_fail += 1;
        }
        report.max_abs_error = report.max_abs_error.max(err);
        if !rel.is_nan() {
            report.max_rel_error = report.max_rel_error.max(rel);
        }
        let better = match worst {
            None => true,
            Some((_, w, wf)) => (!pass && !wf) || (pass != wf && err > w),
        };
        if better {
            worst = Some((ix, err, !pass));
        }
    }
    let n = a.len();
    report.n_fail = n_fail;
    report.fail_fraction = if n > 0 { n_fail as f64 / n as f64 } else { 0.0 };
    // The verdict, as tract computes it: strictly greater than the allowed fraction.
    report.ok = !(n > 0 && n_fail as f64 / n as f64 > outliers);
    if let Some((ix, _, _)) = worst {
        report.worst_index = Some(unravel(ix, expected.shape()));
        report.worst_expected = Some(a[ix] as f64);
        report.worst_got = Some(b[ix] as f64);
    }
    Ok(report)
}

impl fmt::Display for CompareReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.ok { "OK" } else { "MISMATCH" };
        writeln!(
            f,
            "{verdict} at tolerance {} (atol={:e}, rtol={:e}, max outliers={})",
            self.approximation, self.atol, self.rtol, self.max_outlier_fraction
        )?;
        writeln!(
            f,
            "  expected {} {:?}, got {} {:?}",
            self.expected_dtype, self.expected_shape, self.got_dtype, self.got_shape
        )?;
        if self.shape_mismatch {
            return write!(f, "  shape mismatch: nothing else compared");
        }
        writeln!(
            f,
            "  failing elements: {} / {} = {:.6}",
            self.n_fail, self.n_elements, self.fail_fraction
        )?;
        write!(f, "  max abs error: {:e}, max rel error: {:e}", self.max_abs_error, self.max_rel_error)?;
        if let (Some(ix), Some(e), Some(g)) = (&self.worst_index, self.worst_expected, self.worst_got) {
            write!(f, "\n  worst element at {ix:?}: expected {e}, got {g}")?;
        }
        Ok(())
    }
}

/// `tensor` in plain memory: block-quantized (Q4_0) values, which tract keeps in their
/// packed form when a variable is an output, are dequantized to f32.
fn plain_tensor(tensor: Tensor) -> TractResult<Tensor> {
    use tract_nnef::tract_core::tract_linalg::block_quant::BlockQuantStorage;
    if tensor.is_plain() {
        return Ok(tensor);
    }
    let packed = tensor.try_storage_as::<BlockQuantStorage>()?;
    let values = packed.format().dequant_f32(packed.value().as_bytes())?;
    values.into_shape(tensor.shape())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRAPH: &str = "version 1.0;\nextension tract_registry tract_core;\nextension tract_symbol S;\n\
        fragment tract_core_properties() -> (properties: (string, tensor<scalar>)[]) {\n\
          properties = [(\"k\", \"v\")];\n}\n\
        graph network(x) -> (y) {\n  x = tract_core_external(shape = [1, S], datum_type = 'f32');\n  y = mul(x, 2.0);\n}\n";

    fn tar_of(graph: &str) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(graph.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, "graph.nnef", graph.as_bytes()).unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn loads_runs_symbolic_and_reads_properties() {
        let m = TractModel::load_bytes(&tar_of(GRAPH), true).unwrap();
        assert_eq!(m.input_names(), ["x"]);
        assert_eq!(m.output_names(), ["y"]);
        assert_eq!(m.input_facts()[0].dims, vec![Dim::Fixed(1), Dim::Symbolic("S".into())]);
        assert_eq!(m.properties().get("k").map(String::as_str), Some("v"));
        for len in [3usize, 7] {
            let x: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let out = m.run(vec![Tensor::from_shape(&[1, len], &x).unwrap()]).unwrap();
            let y = out[0].try_as_plain_ram().unwrap().as_slice::<f32>().unwrap().to_vec();
            assert_eq!(y, x.iter().map(|v| v * 2.0).collect::<Vec<_>>());
        }
    }

    #[test]
    fn gzip_bytes_load_too() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar_of(GRAPH)).unwrap();
        let m = TractModel::load_bytes(&gz.finish().unwrap(), false).unwrap();
        assert_eq!(m.output_names(), ["y"]);
    }

    #[test]
    fn dtype_mismatch_names_input() {
        let m = TractModel::load_bytes(&tar_of(GRAPH), true).unwrap();
        let err = m.run(vec![Tensor::from_shape(&[1, 2], &[1f64, 2.0]).unwrap()]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("\"x\"") && msg.contains("expects dtype f32, given f64"), "{msg}");
    }

    #[test]
    fn load_error_carries_chain() {
        let graph = GRAPH.replace("mul(x, 2.0)", "no_such_op(x)");
        let err = TractModel::load_bytes(&tar_of(&graph), true).unwrap_err().to_string();
        assert!(err.contains("Caused by") && err.contains("no_such_op"), "{err}");
    }

    #[test]
    fn parse_levels() {
        assert_eq!(Approximation::parse("very").unwrap(), Approximation::Very);
        assert_eq!(Approximation::parse("custom:0.1,0.2,0").unwrap(), Approximation::Custom(0.1, 0.2, 0.0));
        assert!(Approximation::parse("loose").is_err());
        assert!(Approximation::parse("custom:1,2").is_err());
    }

    #[test]
    fn report_figures() {
        let e = Tensor::from_shape(&[2, 2], &[1f32, 2.0, 3.0, 4.0]).unwrap();
        let g = Tensor::from_shape(&[2, 2], &[1f32, 2.5, 3.0, 3.0]).unwrap();
        let r = compare(&e, &g, Approximation::Approximate).unwrap();
        assert!(!r.ok);
        assert_eq!((r.n_fail, r.max_abs_error), (2, 1.0));
        assert_eq!(r.worst_index, Some(vec![1, 1]));
        assert_eq!(r.max_rel_error, 1.0 / 3.0);
        let r = compare(&e, &Tensor::from_shape(&[4], &[1f32, 2.0, 3.0, 4.0]).unwrap(), Approximation::Ultra)
            .unwrap();
        assert!(r.shape_mismatch && !r.ok);
    }

    fn tensor1(v: &[f32]) -> Tensor {
        Tensor::from_shape(&[v.len()], v).unwrap()
    }

    #[test]
    fn nan_and_inf_rules() {
        let e = Tensor::from_shape(&[3], &[f32::NAN, f32::INFINITY, 1.0]).unwrap();
        assert!(compare(&e, &e, Approximation::Exact).unwrap().ok);
        let g = Tensor::from_shape(&[3], &[1.0f32, f32::NEG_INFINITY, f32::NAN]).unwrap();
        let r = compare(&e, &g, Approximation::Exact).unwrap();
        assert_eq!(r.n_fail, 3);
        assert_eq!(r.max_abs_error, f64::INFINITY);
        // tract's quirk, kept: with rtol > 0, `inf <= atol + rtol * inf` holds, so opposite
        // infinities pass.
        let r = compare(&e, &g, Approximation::Ultra).unwrap();
        assert_eq!(r.n_fail, 2);
        let (pinf, ninf) = (tensor1(&[f32::INFINITY]), tensor1(&[f32::NEG_INFINITY]));
        assert!(pinf.close_enough(&ninf, tract_nnef::prelude::tract_data::internal::Approximation::UltraApproximate).is_ok());
        assert!(compare(&pinf, &ninf, Approximation::Ultra).unwrap().ok);
    }

    /// A tiny deterministic generator (xorshift), so the test needs no extra dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    fn tract_approx(a: Approximation) -> tract_nnef::prelude::tract_data::internal::Approximation {
        use tract_nnef::prelude::tract_data::internal::Approximation as T;
        match a {
            Approximation::Exact => T::Exact,
            Approximation::Close => T::Close,
            Approximation::Approximate => T::Approximate,
            Approximation::Very => T::VeryApproximate,
            Approximation::Super => T::SuperApproximate,
            Approximation::Ultra => T::UltraApproximate,
            Approximation::Custom(a, r, o) => T::Custom(a, r, o),
        }
    }

    /// Our verdict equals tract's `close_enough` on many perturbed cases, per level and for
    /// f32/f32, f16/f16 and f32-expected/f16-got (aligned as the CLI does).
    #[test]
    fn verdict_agrees_with_tract_close_enough() {
        let levels = [
            Approximation::Exact,
            Approximation::Close,
            Approximation::Approximate,
            Approximation::Very,
            Approximation::Super,
            Approximation::Ultra,
            Approximation::Custom(1e-2, 1e-3, 0.01),
        ];
        let mut rng = Rng(0x9E3779B97F4A7C15);
        let mut disagreements = 0;
        let mut cases = 0;
        let mut passes = 0;
        for level in levels {
            for case in 0..400 {
                let n = 1 + (rng.next() % 4000) as usize;
                let (atol, rtol, _) = level.tolerances(DatumType::F32);
                let scale = [1e-3f32, 1.0, 100.0][case % 3];
                let e: Vec<f32> = (0..n).map(|_| (rng.unit() * 2.0 - 1.0) * scale).collect();
                // Perturb a random number of elements by about the tolerance bound.
                let k = (rng.next() % 4) as usize;
                let mut g = e.clone();
                for _ in 0..k {
                    let i = (rng.next() as usize) % n;
                    let bound = atol as f32 + rtol as f32 * g[i].abs();
                    let f = [0.5f32, 0.999, 1.0, 1.001, 2.0, 20.0][(rng.next() % 6) as usize];
                    g[i] += if rng.next().is_multiple_of(2) { bound * f } else { -bound * f } + f32::EPSILON * scale;
                }
                if case % 17 == 0 {
                    g[0] = f32::NAN;
                }
                let et = Tensor::from_shape(&[n], &e).unwrap();
                let gt = Tensor::from_shape(&[n], &g).unwrap();
                let variants: [(Tensor, Tensor); 3] = [
                    (et.clone(), gt.clone()),
                    (et.cast_to::<f16>().unwrap().into_owned(), gt.cast_to::<f16>().unwrap().into_owned()),
                    (et.clone(), gt.cast_to::<f16>().unwrap().into_owned()),
                ];
                for (exp, got) in variants {
                    let ours = compare(&exp, &got, level).unwrap().ok;
                    let aligned = exp.cast_to_dt(got.datum_type()).unwrap();
                    let theirs = aligned.close_enough(&got, tract_approx(level)).is_ok();
                    cases += 1;
                    passes += ours as usize;
                    if ours != theirs {
                        disagreements += 1;
                    }
                }
            }
        }
        assert_eq!(disagreements, 0, "of {cases} cases");
        // Both verdicts occur, so the agreement is not vacuous.
        assert!(passes > cases / 10 && passes < cases * 9 / 10, "{passes} / {cases}");
    }
}
