//! PyO3 bindings: argument conversion, GIL release and error mapping only.
//! The logic lives in the plain modules of the crate.

mod codec;
mod tract;

use pyo3::prelude::*;

use crate::error::Error;

/// Raise `err` as the matching class of `fastnnef.exceptions`.
pub(crate) fn to_pyerr(err: Error) -> PyErr {
    let class = match &err {
        Error::InvalidArgument(_) => "T2NErrorInvalidArgument",
        Error::TensorTooLarge(_) => "T2NErrorTensorTooLarge",
        Error::DtypeOverflow(_) => "T2NErrorDtypeOverflow",
        Error::ImpossibleQuantization(_) => "T2NErrorImpossibleQuantization",
        Error::DatFormat(_) => "T2NErrorDatFormat",
        Error::Io { .. } => "T2NErrorArtefactIO",
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
    codec::register(m)?;
    tract::register(m)?;
    Ok(())
}
