//! PyO3 bindings: argument conversion, GIL release and error mapping only.
//! The logic lives in the plain modules of the crate.

mod checkpoint;
mod codec;
mod tract;

use pyo3::prelude::*;

use numpy::{PyArray1, PyArrayMethods};

use crate::dat::SrcDtype;
use crate::error::Error;
use crate::quant::FloatKind;

/// The element type of a numpy dtype (kind + item size): the one table of numpy dtypes the
/// bindings use, for encoding arrays and for feeding them to tract.
pub(crate) fn numpy_element(kind: u8, itemsize: usize) -> Option<SrcDtype> {
    Some(match (kind, itemsize) {
        (b'f', 2) => SrcDtype::F16,
        (b'f', 4) => SrcDtype::F32,
        (b'f', 8) => SrcDtype::F64,
        (b'i', 1) => SrcDtype::I8,
        (b'i', 2) => SrcDtype::I16,
        (b'i', 4) => SrcDtype::I32,
        (b'i', 8) => SrcDtype::I64,
        (b'u', 1) => SrcDtype::U8,
        (b'u', 2) => SrcDtype::U16,
        (b'u', 4) => SrcDtype::U32,
        (b'u', 8) => SrcDtype::U64,
        (b'b', 1) => SrcDtype::Bool,
        _ => return None,
    })
}

/// The float type named `name` (`"f32"`, `"f16"` or `"bf16"`).
pub(crate) fn float_kind(name: &str) -> PyResult<FloatKind> {
    match name {
        "f32" => Ok(FloatKind::F32),
        "f16" => Ok(FloatKind::F16),
        "bf16" => Ok(FloatKind::Bf16),
        _ => Err(to_pyerr(Error::InvalidArgument(format!(
            "float dtype must be 'f32', 'f16' or 'bf16', got '{name}'"
        )))),
    }
}

/// A new 1-D numpy array of `n` values of `kind` (float32, float16, or uint16 holding
/// bfloat16 bits), filled by `fill` with its bytes while the GIL is released.
pub(crate) fn float_array<'py>(
    py: Python<'py>,
    kind: FloatKind,
    n: usize,
    fill: impl FnOnce(&mut [u8]) -> crate::error::Result<()> + Send,
) -> PyResult<Bound<'py, PyAny>> {
    // Zeroed by calloc: pages are only touched as `fill` writes them.
    let bytes = PyArray1::<u8>::zeros(py, n * kind.size(), false);
    {
        // SAFETY: the array was just created and no other reference to it exists yet.
        let slice = unsafe { bytes.as_slice_mut() }.expect("a new array is contiguous");
        py.detach(|| fill(slice)).map_err(to_pyerr)?;
    }
    let numpy_dtype = match kind {
        FloatKind::F32 => "float32",
        FloatKind::F16 => "float16",
        FloatKind::Bf16 => "uint16",
    };
    bytes.call_method1("view", (numpy_dtype,))
}

/// Raise `err` as the matching class of `fastnnef.exceptions`.
pub(crate) fn to_pyerr(err: Error) -> PyErr {
    let class = match &err {
        Error::InvalidArgument(_) => "T2NErrorInvalidArgument",
        Error::TensorTooLarge(_) => "T2NErrorTensorTooLarge",
        Error::DtypeOverflow(_) => "T2NErrorDtypeOverflow",
        Error::ImpossibleQuantization(_) => "T2NErrorImpossibleQuantization",
        Error::DatFormat(_) => "T2NErrorDatFormat",
        Error::Io { .. } => "T2NErrorArtefactIO",
        Error::Checkpoint(_) => "T2NErrorCheckpoint",
        Error::Tract(_) => "T2NErrorTract",
    };
    let message = err.to_string();
    Python::attach(|py| {
        let errno = match &err {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        };
        match py.import("fastnnef.exceptions").and_then(|m| m.getattr(class)) {
            Ok(cls) => {
                let args = match errno {
                    // OSError subclasses get (errno, message) so `.errno` is meaningful.
                    Some(code) => cls.call1((code, message)),
                    None => cls.call1((message,)),
                };
                match args {
                    Ok(instance) => PyErr::from_value(instance),
                    Err(e) => e,
                }
            }
            Err(e) => e,
        }
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("TRACT_VERSION", crate::tract_check::TRACT_VERSION)?;
    m.add("DAT_MAX_PAYLOAD", u64::from(u32::MAX))?;
    // Tables whose Python twins tests pin against these (tests/test_native_tables.py).
    m.add("ENCODINGS", crate::dat::ALL_ENCODINGS.iter().map(|e| e.name()).collect::<Vec<_>>())?;
    m.add("TOLERANCES", crate::tract_check::Approximation::LEVELS.iter().map(|a| a.name()).collect::<Vec<_>>())?;
    m.add("Q4_0_BLOCK", crate::quant::BLOCK)?;
    m.add(
        "CHECKPOINT_DTYPES",
        crate::checkpoint::STREAMED_DTYPES.iter().map(|(d, _)| format!("{d:?}")).collect::<Vec<_>>(),
    )?;
    codec::register(m)?;
    checkpoint::register(m)?;
    tract::register(m)?;
    Ok(())
}
