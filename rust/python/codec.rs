//! Bindings for the `.dat` codec, Q4_0 and the artefact sink: argument conversion, GIL
//! release and error mapping only (the logic is in `dat`, `quant` and `archive`).
//!
//! numpy arrays cross without a copy: [`view_of`] borrows the array's memory through its
//! data pointer and byte strides, and the Rust side gathers it in C order in bounded
//! chunks while the GIL is released.

use std::path::PathBuf;
use std::sync::RwLock;

use numpy::{PyArray1, PyArrayDescrMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::checkpoint::PyCheckpoint;
use super::{float_array, float_kind, numpy_element, to_pyerr};
use crate::archive::{self, ArtefactWriter, Format};
use crate::dat::{self, Decoded, EncodeOptions, Encoding, Header, SrcDtype, TensorView, Values};
use crate::error::Error;
use crate::quant::{self, NibbleOrder};

fn invalid(msg: String) -> PyErr {
    to_pyerr(Error::InvalidArgument(msg))
}

/// The element type of `array`; with `bf16`, a 16-bit integer array holding bfloat16 bits.
fn src_dtype(array: &Bound<'_, PyUntypedArray>, bf16: bool) -> PyResult<SrcDtype> {
    let dtype = array.dtype();
    if dtype.is_native_byteorder() == Some(false) {
        return Err(invalid(format!(
            "array dtype {dtype} is not in native byte order; convert it with arr.astype(arr.dtype.newbyteorder('='))"
        )));
    }
    let (kind, size) = (dtype.kind(), dtype.itemsize());
    if bf16 {
        return match (kind, size) {
            (b'i' | b'u', 2) => Ok(SrcDtype::Bf16),
            _ => Err(invalid(format!(
                "bf16=True needs an int16/uint16 array holding bfloat16 bits (tensor.view(torch.int16).numpy()), got {dtype}"
            ))),
        };
    }
    numpy_element(kind, size).ok_or_else(|| {
        invalid(format!("unsupported array dtype {dtype}; expected a float, int, uint or bool dtype"))
    })
}

/// A strided view of `array`'s elements, valid while `array` is borrowed.
fn view_of<'a>(array: &'a Bound<'_, PyUntypedArray>, bf16: bool) -> PyResult<TensorView<'a>> {
    let dtype = src_dtype(array, bf16)?;
    let shape = array.shape().to_vec();
    let strides = array.strides().to_vec();
    let es = dtype.size() as isize;
    if shape.contains(&0) {
        return TensorView::strided(&[], 0, dtype, &shape, &strides).map_err(to_pyerr);
    }
    // The byte range the elements occupy, relative to the data pointer.
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&d, &s) in shape.iter().zip(&strides) {
        let span = (d as isize - 1) * s;
        if span < 0 { lo += span } else { hi += span }
    }
    // SAFETY: `array` is a live numpy array (we hold a reference to it for 'a, and the
    // caller keeps that reference while the GIL is released), and numpy guarantees that
    // every element `data + Σ i_k * strides_k` lies in its allocation; [lo, hi + es) is
    // exactly the hull of those addresses, so the slice covers initialised memory of the
    // array. The slice is only read. As with any buffer-protocol consumer, callers must
    // not resize or mutate the array from another thread while a call is running.
    let bytes = unsafe {
        let data = (*array.as_array_ptr()).fields.data as *const u8;
        std::slice::from_raw_parts(data.offset(lo), (hi - lo + es) as usize)
    };
    TensorView::strided(bytes, (-lo) as usize, dtype, &shape, &strides).map_err(to_pyerr)
}

fn encoding(name: &str) -> PyResult<Encoding> {
    name.parse().map_err(to_pyerr)
}

/// Encode one tensor as `.dat` bytes.
#[pyfunction]
#[pyo3(signature = (array, encoding, bf16 = false, percentile = 1.0))]
fn dat_encode<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyUntypedArray>,
    encoding: &str,
    bf16: bool,
    percentile: f32,
) -> PyResult<Bound<'py, PyBytes>> {
    let enc = self::encoding(encoding)?;
    let view = view_of(array, bf16)?;
    let options = EncodeOptions { percentile };
    let bytes = py.detach(|| dat::encode("array", &view, enc, &options)).map_err(to_pyerr)?;
    Ok(PyBytes::new(py, &bytes))
}

/// Write one `.dat` file atomically; returns the bytes written.
#[pyfunction]
#[pyo3(signature = (path, array, encoding, bf16 = false, percentile = 1.0, label = None))]
fn dat_write(
    py: Python<'_>,
    path: PathBuf,
    array: &Bound<'_, PyUntypedArray>,
    encoding: &str,
    bf16: bool,
    percentile: f32,
    label: Option<String>,
) -> PyResult<u64> {
    let enc = self::encoding(encoding)?;
    let view = view_of(array, bf16)?;
    let options = EncodeOptions { percentile };
    let label = label.unwrap_or_else(|| path.display().to_string());
    py.detach(|| archive::write_dat_file(&path, &label, &view, enc, &options)).map_err(to_pyerr)
}

/// Write tensor `key` of `checkpoint` as one `.dat` file, atomically, streamed from the
/// file; returns the bytes written.
#[pyfunction]
#[pyo3(signature = (path, checkpoint, key, encoding, percentile = 1.0, label = None))]
fn checkpoint_dat_write(
    py: Python<'_>,
    path: PathBuf,
    checkpoint: &PyCheckpoint,
    key: &str,
    encoding: &str,
    percentile: f32,
    label: Option<String>,
) -> PyResult<u64> {
    let enc = self::encoding(encoding)?;
    let options = EncodeOptions { percentile };
    let label = label.unwrap_or_else(|| key.to_string());
    let ckpt = checkpoint.inner.clone();
    py.detach(|| archive::write_checkpoint_dat_file(&path, &label, &ckpt, key, enc, &options)).map_err(to_pyerr)
}

/// Payload size of a tensor, or the format-limit error it would raise.
#[pyfunction]
fn dat_payload_size(label: &str, shape: Vec<usize>, encoding: &str) -> PyResult<u64> {
    let enc = self::encoding(encoding)?;
    Header::for_tensor(label, &shape, enc).map(|h| u64::from(h.data_length)).map_err(to_pyerr)
}

/// Raise if `name` is not a valid artefact member name (relative, no `.`/`..`).
#[pyfunction]
fn validate_member_name(name: &str) -> PyResult<()> {
    archive::validate_member_name(name).map_err(to_pyerr)
}

/// Remove the staging entries (`.<name>.tmp-<pid>-<n>`) that killed exports to `target`
/// left beside it, whose process is gone.
#[pyfunction]
fn remove_stale_temps(target: std::path::PathBuf) {
    archive::remove_stale_temps(&target)
}

/// A decoded `.dat` file.
#[pyclass(name = "DatTensor", module = "fastnnef._native", frozen)]
struct DatTensor {
    bytes: Vec<u8>,
}

impl DatTensor {
    fn decoded(&self) -> Decoded<'_> {
        dat::decode(&self.bytes).expect("validated at construction")
    }
}

#[pymethods]
impl DatTensor {
    #[getter]
    fn item_type(&self) -> u16 {
        self.decoded().header.item_type
    }
    #[getter]
    fn vendor(&self) -> u16 {
        self.decoded().header.vendor
    }
    #[getter]
    fn bits(&self) -> u32 {
        self.decoded().header.bits
    }
    #[getter]
    fn shape(&self) -> Vec<u32> {
        self.decoded().header.shape
    }
    #[getter]
    fn encoding(&self) -> &'static str {
        self.decoded().encoding.name()
    }
    fn array<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let decoded = self.decoded();
        let shape = PyTuple::new(py, decoded.header.shape.iter().copied())?;
        let values = py.detach(|| decoded.values()).map_err(to_pyerr)?;
        let flat = match values {
            Values::Raw(raw) => PyArray1::from_vec(py, raw).call_method1("view", (decoded.value_dtype(),))?,
            Values::F32(vals) => PyArray1::from_vec(py, vals).into_any(),
        };
        flat.call_method1("reshape", (shape,))
    }
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.decoded().payload)
    }
    fn __repr__(&self) -> String {
        let d = self.decoded();
        format!("DatTensor(encoding='{}', shape={:?})", d.encoding, d.header.shape)
    }
}

/// Parse `.dat` bytes.
#[pyfunction]
fn dat_decode(data: &[u8]) -> PyResult<DatTensor> {
    dat::decode(data).map_err(to_pyerr)?;
    Ok(DatTensor { bytes: data.to_vec() })
}

/// Quantize a float array to Q4_0 blocks (GGML order).
#[pyfunction]
#[pyo3(signature = (array, bf16 = false, percentile = 1.0))]
fn q4_0_quantize<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyUntypedArray>,
    bf16: bool,
    percentile: f32,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let view = view_of(array, bf16)?;
    if !matches!(view.dtype(), SrcDtype::F32 | SrcDtype::F16 | SrcDtype::Bf16) {
        return Err(to_pyerr(Error::InvalidArgument(format!(
            "Q4_0 quantizes float32, float16 or bfloat16 arrays, got {}",
            view.dtype().name()
        ))));
    }
    if view.numel() % quant::BLOCK != 0 {
        return Err(to_pyerr(Error::ImpossibleQuantization(format!(
            "Q4_0 needs a multiple of {} values, got {} (shape {:?}); keep this tensor in float",
            quant::BLOCK,
            view.numel(),
            view.shape()
        ))));
    }
    let options = EncodeOptions { percentile };
    let blocks = py
        .detach(|| {
            quant::check_percentile(percentile)?;
            let mut out = Vec::with_capacity(view.numel() / quant::BLOCK * quant::BLOCK_BYTES);
            dat::encode_payload(&view, Encoding::Q4_0, &options, &mut |piece| {
                out.extend_from_slice(piece);
                Ok(())
            })?;
            Ok(out)
        })
        .map_err(to_pyerr)?;
    Ok(PyArray1::from_vec(py, blocks))
}

/// `array` (float32, float16, or bfloat16 bits with `bf16`; C-contiguous) through min-max
/// Q4_0 and back, in its own dtype, block by block (no packed blocks, no f32 copy).
#[pyfunction]
#[pyo3(signature = (array, bf16 = false))]
fn q4_0_round_trip<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyUntypedArray>,
    bf16: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let view = view_of(array, bf16)?;
    let kind = match view.dtype() {
        SrcDtype::F32 => quant::FloatKind::F32,
        SrcDtype::F16 => quant::FloatKind::F16,
        SrcDtype::Bf16 => quant::FloatKind::Bf16,
        other => return Err(invalid(format!("Q4_0 quantizes float32, float16 or bfloat16 arrays, got {}", other.name()))),
    };
    let src = view.as_contiguous().ok_or_else(|| invalid("the Q4_0 round trip needs a C-contiguous array".into()))?;
    float_array(py, kind, view.numel(), |out| quant::round_trip_q4_0(src, kind, kind, 1.0, 0, out))?
        .call_method1("reshape", (PyTuple::new(py, view.shape())?,))
}

/// Dequantize GGML-order Q4_0 blocks to `shape`, as `dtype` (`"f32"`, `"f16"`, or
/// `"bf16"`: uint16 bits), rounded from the f32 values without an f32 copy.
#[pyfunction]
#[pyo3(signature = (blocks, shape, dtype = "f32"))]
fn q4_0_dequantize<'py>(
    py: Python<'py>,
    blocks: PyReadonlyArrayDyn<'py, u8>,
    shape: Vec<usize>,
    dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let target = float_kind(dtype)?;
    let bytes = blocks.as_slice().map_err(|_| invalid("Q4_0 blocks must be a contiguous uint8 array".into()))?;
    let count: usize = shape.iter().product();
    if count != bytes.len() / quant::BLOCK_BYTES * quant::BLOCK {
        return Err(invalid(format!(
            "{} bytes of Q4_0 blocks hold {} values, shape {shape:?} has {count}",
            bytes.len(),
            bytes.len() / quant::BLOCK_BYTES * quant::BLOCK
        )));
    }
    float_array(py, target, count, |out| quant::dequantize_q4_0_as(bytes, NibbleOrder::Ggml, target, out))?
        .call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// A `.dat` file of already-packed GGML-order Q4_0 blocks (no re-quantization).
#[pyfunction]
#[pyo3(signature = (blocks, shape, encoding = "q4_0"))]
fn q4_0_blocks_dat_encode<'py>(
    py: Python<'py>,
    blocks: PyReadonlyArrayDyn<'py, u8>,
    shape: Vec<usize>,
    encoding: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let enc = self::encoding(encoding)?;
    let bytes = blocks.as_slice().map_err(|_| invalid("Q4_0 blocks must be a contiguous uint8 array".into()))?;
    let out = py.detach(|| dat::encode_q4_0_blocks("blocks", bytes, &shape, enc)).map_err(to_pyerr)?;
    Ok(PyBytes::new(py, &out))
}

/// Python face of [`ArtefactWriter`]; the GIL goes while a member is written. Members are
/// added under the read side of the lock (several threads at once: a directory's files
/// are written concurrently), `finish` and `abort` take the write side, so they wait for
/// members in flight.
#[pyclass(name = "ArtefactWriter", module = "fastnnef._native")]
struct PyArtefactWriter {
    inner: RwLock<Option<ArtefactWriter>>,
}

impl PyArtefactWriter {
    fn with<T>(&self, f: impl FnOnce(&ArtefactWriter) -> crate::error::Result<T>) -> crate::error::Result<T> {
        let guard = self.inner.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        match guard.as_ref() {
            Some(w) => f(w),
            None => Err(Error::InvalidArgument("this ArtefactWriter is already finished or aborted".into())),
        }
    }
}

#[pymethods]
impl PyArtefactWriter {
    #[new]
    #[pyo3(signature = (path, format, compression_level = 0, past_cache = false))]
    fn new(py: Python<'_>, path: PathBuf, format: &str, compression_level: u32, past_cache: bool) -> PyResult<Self> {
        let format: Format = format.parse().map_err(to_pyerr)?;
        let writer =
            py.detach(|| ArtefactWriter::create(path, format, compression_level, past_cache)).map_err(to_pyerr)?;
        Ok(PyArtefactWriter { inner: RwLock::new(Some(writer)) })
    }

    fn add_file(&self, py: Python<'_>, name: &str, data: &[u8]) -> PyResult<()> {
        py.detach(|| self.with(|w| w.add_file(name, data))).map_err(to_pyerr)
    }

    #[pyo3(signature = (label, array, encoding, bf16 = false, percentile = 1.0))]
    fn add_tensor(
        &self,
        py: Python<'_>,
        label: &str,
        array: &Bound<'_, PyUntypedArray>,
        encoding: &str,
        bf16: bool,
        percentile: f32,
    ) -> PyResult<u64> {
        let enc = self::encoding(encoding)?;
        // `array` stays borrowed (and so alive) until detach returns.
        let view = view_of(array, bf16)?;
        let options = EncodeOptions { percentile };
        py.detach(|| self.with(|w| w.add_tensor(label, &view, enc, &options))).map_err(to_pyerr)
    }

    /// Stream tensor `key` of `checkpoint` into `<label>.dat`, converted on the way.
    #[pyo3(signature = (label, checkpoint, key, encoding, percentile = 1.0))]
    fn add_checkpoint_tensor(
        &self,
        py: Python<'_>,
        label: &str,
        checkpoint: &PyCheckpoint,
        key: &str,
        encoding: &str,
        percentile: f32,
    ) -> PyResult<u64> {
        let enc = self::encoding(encoding)?;
        let options = EncodeOptions { percentile };
        let ckpt = checkpoint.inner.clone();
        py.detach(|| self.with(|w| w.add_checkpoint_tensor(label, &ckpt, key, enc, &options))).map_err(to_pyerr)
    }

    #[pyo3(signature = (label, blocks, shape, encoding = "q4_0"))]
    fn add_q4_0_blocks(
        &self,
        py: Python<'_>,
        label: &str,
        blocks: PyReadonlyArrayDyn<'_, u8>,
        shape: Vec<usize>,
        encoding: &str,
    ) -> PyResult<u64> {
        let enc = self::encoding(encoding)?;
        let bytes = blocks.as_slice().map_err(|_| invalid("Q4_0 blocks must be a contiguous uint8 array".into()))?;
        // `blocks` stays borrowed (and so alive) until detach returns.
        py.detach(|| self.with(|w| w.add_q4_0_blocks(label, bytes, &shape, enc))).map_err(to_pyerr)
    }

    /// Remove member `name` of a directory artefact (written earlier) so it can be written again.
    fn remove_member(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.with(|w| w.remove_member(name))).map_err(to_pyerr)
    }

    fn finish(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| {
            let mut guard = self.inner.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            let writer = guard
                .take()
                .ok_or_else(|| Error::InvalidArgument("this ArtefactWriter is already finished or aborted".into()))?;
            writer.finish().map(|p| p.display().to_string())
        })
        .map_err(to_pyerr)
    }

    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let mut guard = self.inner.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            match guard.take() {
                Some(mut w) => w.abort(),
                None => Ok(()),
            }
        })
        .map_err(to_pyerr)
    }
}

/// Raise `T2NErrorImpossibleQuantization` unless a tensor of `shape` can be stored as
/// Q4_0 (the one rule, `quant::check_shape`).
#[pyfunction]
fn q4_0_check_shape(label: &str, shape: Vec<usize>) -> PyResult<()> {
    quant::check_shape(label, &shape).map_err(to_pyerr)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(q4_0_check_shape, m)?)?;
    m.add_function(wrap_pyfunction!(dat_encode, m)?)?;
    m.add_function(wrap_pyfunction!(dat_write, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_dat_write, m)?)?;
    m.add_function(wrap_pyfunction!(dat_payload_size, m)?)?;
    m.add_function(wrap_pyfunction!(dat_decode, m)?)?;
    m.add_function(wrap_pyfunction!(validate_member_name, m)?)?;
    m.add_function(wrap_pyfunction!(remove_stale_temps, m)?)?;
    m.add_function(wrap_pyfunction!(q4_0_quantize, m)?)?;
    m.add_function(wrap_pyfunction!(q4_0_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(q4_0_round_trip, m)?)?;
    m.add_function(wrap_pyfunction!(q4_0_blocks_dat_encode, m)?)?;
    m.add_class::<DatTensor>()?;
    m.add_class::<PyArtefactWriter>()?;
    Ok(())
}
