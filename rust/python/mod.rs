//! PyO3 bindings: argument conversion, GIL release and error mapping only.
//! The logic lives in the plain modules of the crate.

mod checkpoint;
mod codec;
mod tract;

use pyo3::prelude::*;

use crate::dat::SrcDtype;
use crate::error::Error;

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
