//! Bindings for `checkpoint` and `safetensors_write`: a `.safetensors` checkpoint whose
//! tensors are handed to numpy as zero-copy views of a private map, or streamed into
//! artefacts by the sink; and `.safetensors` files written from Python buffers.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use memmap2::MmapMut;
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use super::{float_array, float_kind, to_pyerr};
use crate::checkpoint::Checkpoint;
use crate::dat::{EncodeOptions, Encoding};
use crate::error::Error;
use crate::safetensors_write::{self, RawTensor};

/// A checkpoint opened by its headers; tensors are mapped on demand.
#[pyclass(name = "Checkpoint", module = "fastnnef._native", frozen)]
pub(crate) struct PyCheckpoint {
    pub(crate) inner: Arc<Checkpoint>,
}

/// Owns one tensor's copy-on-write map while numpy (and torch) views of it live.
#[pyclass(name = "_TensorMap", module = "fastnnef._native", frozen)]
struct TensorMapOwner {
    map: MmapMut,
}

#[pymethods]
impl PyCheckpoint {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| Checkpoint::open(&path)).map_err(to_pyerr)?;
        Ok(PyCheckpoint { inner: Arc::new(inner) })
    }

    /// The opened file (a `.safetensors` or the sharded index).
    #[getter]
    fn path(&self) -> String {
        self.inner.root().display().to_string()
    }

    fn keys(&self) -> Vec<String> {
        self.inner.keys().map(str::to_string).collect()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, key: &str) -> bool {
        self.inner.entry(key).is_ok()
    }

    /// `(safetensors dtype name, shape, file holding it)`.
    fn info(&self, key: &str) -> PyResult<(String, Vec<usize>, String)> {
        let entry = self.inner.entry(key).map_err(to_pyerr)?;
        Ok((entry.dtype_name.clone(), entry.shape.clone(), self.inner.file_of(entry).display().to_string()))
    }

    /// Every check writing `key` as `encoding` under `label` would make before its first
    /// byte (dtype, conversion, format limits); returns the payload size.
    #[pyo3(signature = (label, key, encoding, percentile = 1.0))]
    fn check(&self, label: &str, key: &str, encoding: &str, percentile: f32) -> PyResult<u64> {
        let enc: Encoding = encoding.parse().map_err(to_pyerr)?;
        let header = self.inner.prepare(label, key, enc, &EncodeOptions { percentile }).map_err(to_pyerr)?;
        Ok(u64::from(header.data_length))
    }

    /// The `__metadata__` strings.
    fn metadata(&self) -> BTreeMap<String, String> {
        self.inner.metadata().clone()
    }

    /// The raw bytes of `key` as a writable uint8 array over a private map of the file
    /// (copy-on-write: the file is never written). Python views it as the tensor's dtype.
    fn raw<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let map = py.detach(|| self.inner.map_private(key)).map_err(to_pyerr)?;
        let Some(map) = map else {
            return Ok(PyArray1::from_vec(py, Vec::new()));
        };
        let owner = Bound::new(py, TensorMapOwner { map })?;
        let (ptr, len) = (owner.get().map.as_ptr(), owner.get().map.len());
        // SAFETY: the map lives inside `owner` (a frozen Python object) at a fixed address.
        let view = unsafe { ArrayView1::from_shape_ptr(len, ptr) };
        // SAFETY: `owner` becomes the array's base object and owns the map, which is never
        // remapped or resized while it lives, so the memory stays valid as long as the array
        // (or any view of it, torch's included) does.
        Ok(unsafe { PyArray1::borrow_from_array(&view, owner.into_any()) })
    }

    /// `key` through min-max Q4_0 and back, as a 1-D array of `dtype` (`"f32"`, `"f16"`,
    /// or `"bf16"`: uint16 bits): the values torch computes with for a weight written as
    /// Q4_0, computed block by block from the file's map (no f32 copy, no packed blocks).
    fn q4_0_round_trip<'py>(&self, py: Python<'py>, key: &str, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
        let target = float_kind(dtype)?;
        let numel: usize = self.inner.entry(key).map_err(to_pyerr)?.shape.iter().product();
        let inner = &self.inner;
        float_array(py, target, numel, |out| inner.q4_0_round_trip(key, target, out))
    }

    fn __repr__(&self) -> String {
        format!("Checkpoint('{}', {} tensors)", self.inner.root().display(), self.inner.len())
    }
}

/// Write `(name, safetensors dtype name, shape, bytes)` tensors and the `metadata` strings
/// as a `.safetensors` file at `path`, streamed from the buffers (zero copy) with the GIL
/// released, written beside and renamed: a failure leaves nothing.
#[pyfunction]
#[pyo3(signature = (path, tensors, metadata = None))]
fn write_safetensors(
    py: Python<'_>,
    path: PathBuf,
    tensors: Vec<(String, String, Vec<usize>, PyBuffer<u8>)>,
    metadata: Option<HashMap<String, String>>,
) -> PyResult<()> {
    let mut raw = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, buffer) in &tensors {
        if !buffer.is_c_contiguous() {
            return Err(to_pyerr(Error::InvalidArgument(format!(
                "tensor '{name}': its buffer is not contiguous; pass tensor.contiguous()"
            ))));
        }
        let dtype = safetensors_write::dtype_named(dtype).map_err(to_pyerr)?;
        // SAFETY: `buffer` holds a C-contiguous export of `len_bytes` initialised bytes that
        // stays valid until it is released, after this function returns (`tensors` owns
        // it). The slice is only read. As with any buffer-protocol consumer, callers must
        // not resize or mutate the object from another thread while the call runs.
        let data = unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
        raw.push((name.clone(), RawTensor { dtype, shape: shape.clone(), data }));
    }
    py.detach(|| safetensors_write::write_safetensors(&path, &raw, metadata)).map_err(to_pyerr)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(write_safetensors, m)?)?;
    m.add_class::<PyCheckpoint>()?;
    m.add_class::<TensorMapOwner>()?;
    Ok(())
}
