//! Writing `.safetensors` files: each tensor's bytes streamed from the caller's buffers
//! (no copy of the set), the header (JSON, its 8-byte little-endian length, offsets, the
//! padding to 8 bytes, tensors ordered by descending dtype alignment then name) built by
//! the `safetensors` crate, so files are byte-identical to what its Python package writes.
//! The file is written beside the target under a temporary name and renamed into place:
//! a failure leaves nothing and never touches an existing target.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use safetensors::tensor::{SafeTensorError, View, serialize_to_file};
use safetensors::Dtype;

use crate::archive::temp_beside;
use crate::error::{Error, Result};

/// One tensor to write: its bytes (C order, native little-endian) and what they hold.
pub struct RawTensor<'a> {
    /// The safetensors dtype.
    pub dtype: Dtype,
    /// The shape.
    pub shape: Vec<usize>,
    /// The bytes, `numel * dtype size` of them.
    pub data: &'a [u8],
}

impl View for &RawTensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The dtype named `name` (`F32`, `BF16`, ...: the format's own names).
pub fn dtype_named(name: &str) -> Result<Dtype> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| Error::InvalidArgument(format!("'{name}' is not a safetensors dtype name (F32, BF16, I64, ...)")))
}

/// Write `tensors` (name, tensor) and the `__metadata__` strings `metadata` as a
/// `.safetensors` file at `path`, replacing it only once the file is complete.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, RawTensor<'_>)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let mut names = std::collections::HashSet::with_capacity(tensors.len());
    for (name, tensor) in tensors {
        if !names.insert(name.as_str()) {
            return Err(Error::InvalidArgument(format!("tensor '{name}' is given twice; names must be unique")));
        }
        let bits = tensor.shape.iter().try_fold(tensor.dtype.bitsize(), |n, &d| n.checked_mul(d));
        if bits != Some(tensor.data.len() * 8) {
            return Err(Error::InvalidArgument(format!(
                "tensor '{name}': {} bytes given, but {:?} of shape {:?} needs {}",
                tensor.data.len(),
                tensor.dtype,
                tensor.shape,
                bits.map_or("more than usize can count".to_string(), |b| (b / 8).to_string()),
            )));
        }
    }
    let tmp = temp_beside(path)?;
    let written = serialize_to_file(tensors.iter().map(|(name, tensor)| (name, tensor)), metadata, &tmp)
        .map_err(|e| match e {
            SafeTensorError::IoError(source) => Error::io("cannot write", &tmp, source),
            other => Error::InvalidArgument(format!("cannot write {}: {other}", path.display())),
        })
        .and_then(|()| {
            fs::rename(&tmp, path)
                .map_err(|e| Error::io(&format!("cannot rename {} to", tmp.display()), path, e))
        });
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Checkpoint;

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn round_trips_through_the_checkpoint_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        let a = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = [1u8, 0, 1];
        let tensors = vec![
            ("b".to_string(), RawTensor { dtype: Dtype::BOOL, shape: vec![3], data: &b }),
            ("a".to_string(), RawTensor { dtype: Dtype::F32, shape: vec![2, 3], data: &a }),
            ("empty".to_string(), RawTensor { dtype: Dtype::I64, shape: vec![0, 4], data: &[] }),
        ];
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        write_safetensors(&path, &tensors, Some(meta)).unwrap();
        let ckpt = Checkpoint::open(&path).unwrap();
        assert_eq!(ckpt.len(), 3);
        assert_eq!(ckpt.entry("a").unwrap().shape, vec![2, 3]);
        assert_eq!(ckpt.entry("b").unwrap().dtype_name, "BOOL");
        assert_eq!(ckpt.metadata().get("format").map(String::as_str), Some("pt"));
        let bytes = fs::read(&path).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(header_len % 8, 0);
        // F32 (4-byte alignment) comes before BOOL: the crate's order.
        assert_eq!(&bytes[8 + header_len..8 + header_len + a.len()], &a[..]);
        assert_eq!(&bytes[8 + header_len + a.len()..], &b[..]);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary left");
    }

    #[test]
    fn a_wrong_length_leaves_the_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        fs::write(&path, b"old").unwrap();
        let a = f32_bytes(&[1.0, 2.0]);
        let tensors = vec![("a".to_string(), RawTensor { dtype: Dtype::F32, shape: vec![3], data: &a })];
        let err = write_safetensors(&path, &tensors, None).unwrap_err().to_string();
        assert!(err.contains("tensor 'a': 8 bytes given"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_unwritable_folder_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("w.safetensors");
        let err = write_safetensors(&path, &[], None).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn dtype_names_are_the_formats() {
        assert_eq!(dtype_named("BF16").unwrap(), Dtype::BF16);
        assert!(dtype_named("float32").unwrap_err().to_string().contains("not a safetensors dtype"));
    }
}
