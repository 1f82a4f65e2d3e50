//! Bindings for `checkpoint`: a `.safetensors` checkpoint whose tensors are handed to
//! numpy as zero-copy views of a private map, or streamed into artefacts by the sink.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use memmap2::MmapMut;
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;

use super::{float_array, float_kind, to_pyerr};
use crate::checkpoint::Checkpoint;
use crate::dat::{EncodeOptions, Encoding};

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

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCheckpoint>()?;
    m.add_class::<TensorMapOwner>()?;
    Ok(())
}
