//! Bindings for `crate::tract_check`: `TractModel`, `compare`, `CompareReport`.
//! Arrays cross as (dtype tag, shape, C-order bytes); tract runs with the GIL released.

use std::path::PathBuf;

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tract_nnef::prelude::{DatumType, Tensor};

use super::{numpy_element, to_pyerr};
use crate::dat::SrcDtype;
use crate::error::Error;
use crate::tract_check::{self, Approximation, Dim, Fact};

/// The tract datum type of a numpy dtype (kind + item size), if tract has one.
fn datum_type_of(kind: u8, itemsize: usize) -> Option<DatumType> {
    use DatumType::*;
    Some(match numpy_element(kind, itemsize)? {
        SrcDtype::Bool => Bool,
        SrcDtype::U8 => U8,
        SrcDtype::U16 => U16,
        SrcDtype::U32 => U32,
        SrcDtype::U64 => U64,
        SrcDtype::I8 => I8,
        SrcDtype::I16 => I16,
        SrcDtype::I32 => I32,
        SrcDtype::I64 => I64,
        SrcDtype::F16 => F16,
        SrcDtype::F32 => F32,
        SrcDtype::F64 => F64,
        SrcDtype::Bf16 => return None,
    })
}

/// Copy a numpy array into a tract tensor (C order, native byte order).
fn tensor_from_numpy(what: &str, array: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let py = array.py();
    let np = py.import("numpy")?;
    let untyped = array.cast::<PyUntypedArray>().map_err(|_| {
        to_pyerr(Error::InvalidArgument(format!(
            "{what} must be a numpy array, got {}",
            array.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        )))
    })?;
    let descr = untyped.dtype();
    let dt = datum_type_of(descr.kind(), descr.itemsize()).ok_or_else(|| {
        to_pyerr(Error::InvalidArgument(format!(
            "{what} has dtype {}, which tract cannot take; use bool, (u)int8..64, float16/32/64",
            descr.str().map(|s| s.to_string()).unwrap_or_default()
        )))
    })?;
    // One C-contiguous, native-order copy only when the array is not already that.
    let native = descr.is_native_byteorder().unwrap_or(true);
    let contiguous = if untyped.is_c_contiguous() && native {
        untyped.clone()
    } else {
        let target = descr.call_method1("newbyteorder", ("=",))?;
        np.call_method1("ascontiguousarray", (untyped, target))?.cast_into::<PyUntypedArray>()?
    };
    let shape = contiguous.shape().to_vec();
    let nbytes = contiguous.len() * dt.size_of();
    // SAFETY: `contiguous` is a live, C-contiguous numpy array of `len()` elements of
    // `itemsize == dt.size_of()` bytes; we hold the GIL and a reference to it for the whole
    // borrow, and `tensor_from_bytes` copies the bytes before returning.
    let bytes = unsafe {
        let data = (*contiguous.as_array_ptr()).fields.data as *const u8;
        if nbytes == 0 { &[][..] } else { std::slice::from_raw_parts(data, nbytes) }
    };
    tract_check::tensor_from_bytes(dt, &shape, bytes).map_err(to_pyerr)
}

/// Copy a tract tensor into a new, writable numpy array.
fn tensor_to_numpy<'py>(py: Python<'py>, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let tensor = if tensor.datum_type() == DatumType::TDim {
        std::borrow::Cow::Owned(
            tensor
                .cast_to_dt(DatumType::I64)
                .map_err(|e| to_pyerr(Error::Tract(format!("{e:?}"))))?
                .into_owned(),
        )
    } else {
        std::borrow::Cow::Borrowed(tensor)
    };
    let dt = tensor.datum_type();
    let name = tract_check::numpy_name(dt);
    if tract_check::dtype_from_name(tract_check::dtype_name(dt)).is_err() {
        return Err(to_pyerr(Error::InvalidArgument(format!(
            "tract produced a {name} tensor, which has no numpy equivalent"
        ))));
    }
    let np = py.import("numpy")?;
    let out = np.call_method1("empty", (tensor.shape().to_vec(), name))?;
    let array = out.cast::<PyUntypedArray>()?;
    let src = tensor
        .try_as_plain_ram()
        .map_err(|e| to_pyerr(Error::Tract(format!("tract output is not in plain memory: {e:?}"))))?
        .as_bytes();
    // SAFETY: `array` was just created by numpy.empty with the tensor's shape and an item
    // size equal to `dt.size_of()`, so it is C-contiguous with exactly `src.len()` bytes and
    // nobody else refers to it yet.
    unsafe {
        let dst = (*array.as_array_ptr()).fields.data as *mut u8;
        if !src.is_empty() {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        }
    }
    Ok(out)
}

fn facts_to_py<'py>(py: Python<'py>, facts: &[Fact]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for fact in facts {
        let dims = PyList::empty(py);
        for d in &fact.dims {
            match d {
                Dim::Fixed(v) => dims.append(v)?,
                Dim::Symbolic(s) => dims.append(s)?,
            }
        }
        out.append((tract_check::dtype_name(fact.dtype), dims))?;
    }
    Ok(out)
}

/// An NNEF artefact loaded, optimized and planned by the linked tract.
#[pyclass(frozen, module = "fastnnef._native")]
struct TractModel {
    inner: tract_check::TractModel,
}

#[pymethods]
impl TractModel {
    #[staticmethod]
    #[pyo3(signature = (path, optimize = true))]
    fn load(py: Python<'_>, path: PathBuf, optimize: bool) -> PyResult<TractModel> {
        let inner = py.detach(|| tract_check::TractModel::load_path(&path, optimize)).map_err(to_pyerr)?;
        Ok(TractModel { inner })
    }

    #[staticmethod]
    #[pyo3(signature = (data, optimize = true))]
    fn load_bytes(py: Python<'_>, data: &[u8], optimize: bool) -> PyResult<TractModel> {
        let inner = py.detach(|| tract_check::TractModel::load_bytes(data, optimize)).map_err(to_pyerr)?;
        Ok(TractModel { inner })
    }

    fn input_names(&self) -> Vec<String> {
        self.inner.input_names().to_vec()
    }

    fn output_names(&self) -> Vec<String> {
        self.inner.output_names().to_vec()
    }

    fn input_facts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        facts_to_py(py, self.inner.input_facts())
    }

    fn output_facts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        facts_to_py(py, self.inner.output_facts())
    }

    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (k, v) in self.inner.properties() {
            dict.set_item(k, v)?;
        }
        Ok(dict)
    }

    fn run<'py>(&self, py: Python<'py>, inputs: Vec<Bound<'py, PyAny>>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let names = self.inner.input_names();
        let tensors = inputs
            .iter()
            .enumerate()
            .map(|(ix, a)| {
                let what = match names.get(ix) {
                    Some(n) => format!("input {ix} ({n:?})"),
                    None => format!("input {ix}"),
                };
                tensor_from_numpy(&what, a)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let outputs = py.detach(|| self.inner.run(tensors)).map_err(to_pyerr)?;
        outputs.iter().map(|t| tensor_to_numpy(py, t)).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "TractModel({}, inputs={:?}, outputs={:?})",
            self.inner.source(),
            self.inner.input_names(),
            self.inner.output_names()
        )
    }
}

/// The report of `compare`, field for field `tract_check::CompareReport`.
#[pyclass(frozen, module = "fastnnef._native")]
struct CompareReport {
    #[pyo3(get)]
    ok: bool,
    #[pyo3(get)]
    approximation: String,
    #[pyo3(get)]
    atol: f64,
    #[pyo3(get)]
    rtol: f64,
    #[pyo3(get)]
    max_outlier_fraction: f64,
    #[pyo3(get)]
    expected_shape: Vec<usize>,
    #[pyo3(get)]
    got_shape: Vec<usize>,
    #[pyo3(get)]
    expected_dtype: String,
    #[pyo3(get)]
    got_dtype: String,
    #[pyo3(get)]
    shape_mismatch: bool,
    #[pyo3(get)]
    n_elements: usize,
    #[pyo3(get)]
    n_fail: usize,
    #[pyo3(get)]
    fail_fraction: f64,
    #[pyo3(get)]
    max_abs_error: f64,
    #[pyo3(get)]
    max_rel_error: f64,
    #[pyo3(get)]
    worst_index: Option<Vec<usize>>,
    #[pyo3(get)]
    worst_expected: Option<f64>,
    #[pyo3(get)]
    worst_got: Option<f64>,
    text: String,
}

impl From<tract_check::CompareReport> for CompareReport {
    fn from(r: tract_check::CompareReport) -> Self {
        let text = r.to_string();
        CompareReport {
            ok: r.ok,
            approximation: r.approximation,
            atol: r.atol,
            rtol: r.rtol,
            max_outlier_fraction: r.max_outlier_fraction,
            expected_shape: r.expected_shape,
            got_shape: r.got_shape,
            expected_dtype: r.expected_dtype,
            got_dtype: r.got_dtype,
            shape_mismatch: r.shape_mismatch,
            n_elements: r.n_elements,
            n_fail: r.n_fail,
            fail_fraction: r.fail_fraction,
            max_abs_error: r.max_abs_error,
            max_rel_error: r.max_rel_error,
            worst_index: r.worst_index,
            worst_expected: r.worst_expected,
            worst_got: r.worst_got,
            text,
        }
    }
}

#[pymethods]
impl CompareReport {
    fn __str__(&self) -> &str {
        &self.text
    }

    fn __repr__(&self) -> String {
        format!(
            "CompareReport(ok={}, approximation={:?}, n_fail={}, max_abs_error={})",
            if self.ok { "True" } else { "False" },
            self.approximation,
            self.n_fail,
            self.max_abs_error
        )
    }
}

/// tract's `close_enough` rule with a full report (see `_native.pyi`).
#[pyfunction]
fn compare(
    py: Python<'_>,
    expected: &Bound<'_, PyAny>,
    got: &Bound<'_, PyAny>,
    approximation: &str,
) -> PyResult<CompareReport> {
    let approx = Approximation::parse(approximation).map_err(to_pyerr)?;
    let expected = tensor_from_numpy("expected", expected)?;
    let got = tensor_from_numpy("got", got)?;
    let report = py.detach(|| tract_check::compare(&expected, &got, approx)).map_err(to_pyerr)?;
    Ok(report.into())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TractModel>()?;
    m.add_class::<CompareReport>()?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    Ok(())
}
