//! Weights read straight from `.safetensors` checkpoints, one tensor at a time.
//!
//! - [`Checkpoint::open`] takes a `.safetensors` file, a sharded checkpoint's
//!   `*.safetensors.index.json`, or a directory holding one of them. Only the JSON headers
//!   are read (validated by the `safetensors` crate: dtypes, shapes and contiguous
//!   offsets); a file shorter than its header says is refused here, naming the file and
//!   the first tensor it cuts, so a truncated checkpoint fails before anything is written.
//! - Tensor bytes are memory-mapped on demand, per tensor or per window of one
//!   ([`Checkpoint::map`]), never the whole file: address space and resident memory stay
//!   bounded by what is in use at once, and dropping a map returns its pages.
//! - Maps are private and read-only: the checkpoint on disk is never written.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use memmap2::{Advice, Mmap, MmapMut, MmapOptions};
use safetensors::tensor::Metadata;
use safetensors::Dtype;

use crate::dat::{self, EncodeOptions, Encoding, Header, SrcDtype, TensorView};
use crate::error::{Error, Result};
use crate::quant::{self, FloatKind};

/// Largest JSON header accepted (the `safetensors` crate's own limit).
const MAX_HEADER: u64 = 100_000_000;
/// Bytes of a tensor mapped at once while streaming it: resident memory stays bounded for
/// tensors of any size (a multiple of 256 elements, so Q4_0 blocks and packed bools never
/// straddle two windows).
pub const STREAM_WINDOW: u64 = 64 << 20;

/// Where one tensor lives.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    /// Index of its file in [`Checkpoint::files`].
    pub file: usize,
    /// The safetensors dtype name (`F32`, `BF16`, ...).
    pub dtype_name: String,
    /// The element type the encoder reads, or `None` for dtypes tract cannot hold (fp8, ...).
    pub dtype: Option<SrcDtype>,
    /// The shape.
    pub shape: Vec<usize>,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Data length in bytes.
    pub len: u64,
}

/// One open `.safetensors` file.
#[derive(Debug)]
struct ShardFile {
    path: PathBuf,
    file: File,
}

/// An opened checkpoint: headers parsed, no tensor data read.
#[derive(Debug)]
pub struct Checkpoint {
    root: PathBuf,
    shards: Vec<ShardFile>,
    tensors: BTreeMap<String, TensorEntry>,
    metadata: BTreeMap<String, String>,
}

/// A memory map of some bytes of one tensor (empty tensors map nothing).
pub struct TensorMap {
    map: Option<Mmap>,
}

impl TensorMap {
    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// The safetensors dtypes the checkpoint reader streams, and their element type.
pub const STREAMED_DTYPES: [(Dtype, SrcDtype); 13] = [
    (Dtype::BOOL, SrcDtype::Bool),
    (Dtype::U8, SrcDtype::U8),
    (Dtype::I8, SrcDtype::I8),
    (Dtype::I16, SrcDtype::I16),
    (Dtype::U16, SrcDtype::U16),
    (Dtype::F16, SrcDtype::F16),
    (Dtype::BF16, SrcDtype::Bf16),
    (Dtype::I32, SrcDtype::I32),
    (Dtype::U32, SrcDtype::U32),
    (Dtype::F32, SrcDtype::F32),
    (Dtype::F64, SrcDtype::F64),
    (Dtype::I64, SrcDtype::I64),
    (Dtype::U64, SrcDtype::U64),
];

fn src_dtype(dtype: Dtype) -> Option<SrcDtype> {
    STREAMED_DTYPES.iter().find(|(d, _)| *d == dtype).map(|&(_, s)| s)
}

fn corrupt(path: &Path, why: String) -> Error {
    Error::Checkpoint(format!(
        "checkpoint {} is not a valid .safetensors file: {why}; re-download or re-save it",
        path.display()
    ))
}

impl Checkpoint {
    /// Open a `.safetensors` file, a `*.safetensors.index.json`, or a directory holding
    /// `model.safetensors` or `model.safetensors.index.json`.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let path = if path.is_dir() {
            let index = path.join("model.safetensors.index.json");
            let single = path.join("model.safetensors");
            if index.is_file() {
                index
            } else if single.is_file() {
                single
            } else {
                return Err(Error::Checkpoint(format!(
                    "directory {} holds neither model.safetensors nor model.safetensors.index.json; \
                     pass the .safetensors file or the index file itself",
                    path.display()
                )));
            }
        } else {
            path.to_path_buf()
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let mut ckpt = Checkpoint {
            root: path.clone(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
            metadata: BTreeMap::new(),
        };
        if name.ends_with(".index.json") {
            ckpt.open_index(&path)?;
        } else {
            ckpt.add_shard(&path)?;
        }
        Ok(ckpt)
    }

    /// Parse a sharded checkpoint's index and every shard it names.
    fn open_index(&mut self, index: &Path) -> Result<()> {
        let text = fs::read(index).map_err(|e| Error::io("cannot read", index, e))?;
        let json: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| corrupt(index, format!("the index is not valid JSON ({e})")))?;
        let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| {
            corrupt(index, "the index has no \"weight_map\" object of tensor name -> shard file".into())
        })?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut by_shard: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (tensor, shard) in map {
            let shard = shard
                .as_str()
                .ok_or_else(|| corrupt(index, format!("weight_map[\"{tensor}\"] is not a file name")))?;
            if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
                return Err(corrupt(index, format!("shard name '{shard}' of tensor '{tensor}' is not a plain file name")));
            }
            by_shard.entry(shard.to_string()).or_default().push(tensor.clone());
        }
        for (shard, wanted) in by_shard {
            let shard_path = dir.join(&shard);
            let found = self.add_shard(&shard_path)?;
            for tensor in wanted {
                if !found.contains(&tensor) {
                    return Err(corrupt(
                        index,
                        format!("the index puts tensor '{tensor}' in {shard}, but that shard does not hold it"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Parse one file's header; returns the names it holds.
    fn add_shard(&mut self, path: &Path) -> Result<Vec<String>> {
        let mut file = File::open(path).map_err(|e| Error::io("cannot open checkpoint", path, e))?;
        let size = file.metadata().map_err(|e| Error::io("cannot stat", path, e))?.len();
        let mut len_bytes = [0u8; 8];
        file.read_exact(&mut len_bytes)
            .map_err(|_| corrupt(path, format!("it is {size} bytes, shorter than the 8-byte header length")))?;
        let n = u64::from_le_bytes(len_bytes);
        if n > MAX_HEADER || 8 + n > size {
            return Err(corrupt(path, format!("the header claims {n} bytes but the file has {size}")));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header).map_err(|e| Error::io("cannot read the header of", path, e))?;
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|e| corrupt(path, format!("bad header ({e})")))?;
        let data_start = 8 + n;
        let index = self.shards.len();
        let mut names = Vec::new();
        // In data order, so the first tensor cut by a short file is the one reported.
        for name in metadata.offset_keys() {
            let info = metadata.info(&name).expect("offset_keys come from the metadata");
            let (start, end) = info.data_offsets;
            if data_start + end as u64 > size {
                return Err(corrupt(
                    path,
                    format!(
                        "tensor '{name}' ends at byte {} but the file has only {size} bytes (truncated?)",
                        data_start + end as u64
                    ),
                ));
            }
            if self.tensors.contains_key(&name) {
                return Err(Error::Checkpoint(format!(
                    "tensor '{name}' appears in two files of checkpoint {} ({} and {})",
                    self.root.display(),
                    self.shards[self.tensors[&name].file].path.display(),
                    path.display()
                )));
            }
            self.tensors.insert(
                name.clone(),
                TensorEntry {
                    file: index,
                    dtype_name: format!("{:?}", info.dtype),
                    dtype: src_dtype(info.dtype),
                    shape: info.shape.clone(),
                    offset: data_start + start as u64,
                    len: (end - start) as u64,
                },
            );
            names.push(name);
        }
        if let Some(meta) = metadata.metadata() {
            self.metadata.extend(meta.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        self.shards.push(ShardFile { path: path.to_path_buf(), file });
        Ok(names)
    }

    /// The path given to [`Checkpoint::open`] (resolved inside a directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Tensor names, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The `__metadata__` string map (merged over shards).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Where `key` lives, or an error naming the checkpoint.
    pub fn entry(&self, key: &str) -> Result<&TensorEntry> {
        self.tensors.get(key).ok_or_else(|| {
            Error::Checkpoint(format!(
                "tensor '{key}' is not in checkpoint {} ({} tensors); check the parameter name",
                self.root.display(),
                self.tensors.len()
            ))
        })
    }

    /// The file holding `key`.
    pub fn file_of(&self, entry: &TensorEntry) -> &Path {
        &self.shards[entry.file].path
    }

    /// The element type of `key`, or an error for dtypes tract cannot hold.
    pub fn src_dtype(&self, key: &str) -> Result<SrcDtype> {
        let entry = self.entry(key)?;
        entry.dtype.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor '{key}' in {} has dtype {}, which tract cannot load; convert the checkpoint \
                 (e.g. to F32 or F16) first",
                self.file_of(entry).display(),
                entry.dtype_name
            ))
        })
    }

    /// The shard of `entry`, checked to still hold all of it: the file may have changed
    /// since it was opened, and touching mapped pages past its end would kill the process
    /// (SIGBUS).
    fn shard_still_holding(&self, key: &str, entry: &TensorEntry) -> Result<&ShardFile> {
        let shard = &self.shards[entry.file];
        let size = shard.file.metadata().map_err(|e| Error::io("cannot stat", &shard.path, e))?.len();
        if entry.offset + entry.len > size {
            return Err(corrupt(
                &shard.path,
                format!("tensor '{key}' ends at byte {} but the file now has {size} bytes (truncated while in use?)", entry.offset + entry.len),
            ));
        }
        Ok(shard)
    }

    /// Map `len` bytes of `key`'s data starting `start` bytes in (private, read-only).
    pub fn map(&self, key: &str, start: u64, len: u64) -> Result<TensorMap> {
        let entry = self.entry(key)?;
        assert!(start + len <= entry.len, "map range inside the tensor");
        if len == 0 {
            return Ok(TensorMap { map: None });
        }
        let shard = self.shard_still_holding(key, entry)?;
        // SAFETY: the map is private and read-only, so nothing we do writes the file. As with
        // any file map, another process truncating the file while it is mapped would make
        // reads fault; the length check above catches files that were already cut.
        let map = unsafe {
            MmapOptions::new().offset(entry.offset + start).len(len as usize).map_copy_read_only(&shard.file)
        }
        .map_err(|e| Error::io(&format!("cannot map tensor '{key}' of"), &shard.path, e))?;
        // Read ahead: the bytes are consumed front to back. Only a hint; failure is harmless.
        // (MAP_POPULATE instead was measured 3x slower per window on this machine.)
        let _ = map.advise(Advice::Sequential);
        Ok(TensorMap { map: Some(map) })
    }

    /// The `.dat` header of `key` written as `encoding` under `label` (every check that can
    /// fail before a byte is written: dtype, encoding, format limits).
    pub fn prepare(&self, label: &str, key: &str, encoding: Encoding, options: &EncodeOptions) -> Result<Header> {
        let dtype = self.src_dtype(key)?;
        dat::prepare_for(label, dtype, &self.entry(key)?.shape, encoding, options)
    }

    /// Stream `key`'s payload as `encoding` into `sink`, converting (or quantizing) on the
    /// way, [`STREAM_WINDOW`] bytes of the file mapped at a time. Call [`Checkpoint::prepare`]
    /// first.
    pub fn encode_payload(
        &self,
        key: &str,
        encoding: Encoding,
        options: &EncodeOptions,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let entry = self.entry(key)?;
        let dtype = self.src_dtype(key)?;
        let es = dtype.size() as u64;
        let total = entry.len / es;
        let step = (STREAM_WINDOW / es / 256 * 256).max(256);
        let mut start = 0;
        while start < total {
            let n = step.min(total - start);
            let map = self.map(key, start * es, n * es)?;
            let view = TensorView::contiguous(map.bytes(), dtype, &[n as usize])?;
            dat::encode_payload(&view, encoding, options, sink)?;
            start += n;
        }
        Ok(())
    }

    /// `key`'s values through min-max Q4_0 and back, as `target`, into `out` (`numel *
    /// target.size()` bytes): what torch computes with for a weight written as Q4_0
    /// ([`quant::round_trip_q4_0`]). Streamed: [`STREAM_WINDOW`] bytes of the file mapped
    /// at a time, quantized and dequantized block by block straight into `out`, so the
    /// only memory it takes beyond `out` is one window of file pages (no packed blocks, no
    /// f32 copy of the tensor).
    pub fn q4_0_round_trip(&self, key: &str, target: FloatKind, out: &mut [u8]) -> Result<()> {
        let entry = self.entry(key)?;
        let kind = match self.src_dtype(key)? {
            SrcDtype::F32 => FloatKind::F32,
            SrcDtype::F16 => FloatKind::F16,
            SrcDtype::Bf16 => FloatKind::Bf16,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "tensor '{key}' is {}: Q4_0 quantizes F32, F16 or BF16 tensors",
                    other.name()
                )))
            }
        };
        quant::check_shape(key, &entry.shape)?;
        let es = kind.size() as u64;
        let total = entry.len / es;
        let ts = target.size();
        if out.len() as u64 != total * ts as u64 {
            return Err(Error::InvalidArgument(format!(
                "the Q4_0 values of tensor '{key}' take {} bytes as {target:?}, the buffer has {}",
                total * ts as u64,
                out.len()
            )));
        }
        let step = (STREAM_WINDOW / es / 256 * 256).max(256);
        let mut start = 0;
        while start < total {
            let n = step.min(total - start);
            let map = self.map(key, start * es, n * es)?;
            let dst = &mut out[(start as usize) * ts..((start + n) as usize) * ts];
            quant::round_trip_q4_0(map.bytes(), kind, target, 1.0, (start as usize) / quant::BLOCK, dst)?;
            start += n;
        }
        Ok(())
    }

    /// All of `key`'s data mapped copy-on-write (for zero-copy views handed to torch):
    /// writes through the view land in private memory, never in the file. `None` for an
    /// empty tensor.
    pub fn map_private(&self, key: &str) -> Result<Option<MmapMut>> {
        let entry = self.entry(key)?;
        if entry.len == 0 {
            return Ok(None);
        }
        let shard = self.shard_still_holding(key, entry)?;
        // SAFETY: a private (copy-on-write) map never writes the file; see `map`.
        let map = unsafe { MmapOptions::new().offset(entry.offset).len(entry.len as usize).map_copy(&shard.file) }
            .map_err(|e| Error::io(&format!("cannot map tensor '{key}' of"), &shard.path, e))?;
        Ok(Some(map))
    }

    /// Map all of `key`'s data.
    pub fn map_all(&self, key: &str) -> Result<TensorMap> {
        let len = self.entry(key)?.len;
        self.map(key, 0, len)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A `.safetensors` file of the given (name, dtype, shape, bytes) tensors.
    pub(crate) fn write_safetensors(path: &Path, tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) {
        let mut header = serde_json::Map::new();
        let mut offset = 0usize;
        let mut data = Vec::new();
        for (name, dtype, shape, bytes) in tensors {
            header.insert(
                (*name).to_string(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
            );
            offset += bytes.len();
            data.extend_from_slice(bytes);
        }
        let mut text = serde_json::to_vec(&header).unwrap();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut out = (text.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&text);
        out.extend_from_slice(&data);
        fs::write(path, out).unwrap();
    }

    fn f32_bytes(vals: &[f32]) -> Vec<u8> {
        vals.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn opens_single_files_and_maps_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        write_safetensors(&p, &[("b", "F32", vec![3], f32_bytes(&[1., 2., 3.])), ("a", "BF16", vec![2], vec![0, 0x3f, 0, 0x40])]);
        let c = Checkpoint::open(dir.path()).unwrap();
        assert_eq!(c.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(c.src_dtype("a").unwrap(), SrcDtype::Bf16);
        assert_eq!(c.map_all("b").unwrap().bytes(), &f32_bytes(&[1., 2., 3.])[..]);
        assert_eq!(c.map("b", 4, 4).unwrap().bytes(), &f32_bytes(&[2.])[..]);
        let err = c.entry("zz").unwrap_err().to_string();
        assert!(err.contains("tensor 'zz' is not in checkpoint"), "{err}");
    }

    #[test]
    fn truncated_and_corrupt_files_name_file_and_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.safetensors");
        write_safetensors(&p, &[("w1", "F32", vec![4], f32_bytes(&[0.; 4])), ("w2", "F32", vec![4], f32_bytes(&[0.; 4]))]);
        let full = fs::read(&p).unwrap();
        fs::write(&p, &full[..full.len() - 3]).unwrap();
        let err = Checkpoint::open(&p).unwrap_err().to_string();
        assert!(err.contains("m.safetensors") && err.contains("tensor 'w2'") && err.contains("truncated"), "{err}");
        fs::write(&p, &full[..20]).unwrap();
        let err = Checkpoint::open(&p).unwrap_err().to_string();
        assert!(err.contains("m.safetensors") && err.contains("header claims"), "{err}");
        let mut bad = full.clone();
        bad[8] = b'[';
        fs::write(&p, &bad).unwrap();
        assert!(Checkpoint::open(&p).unwrap_err().to_string().contains("bad header"));
    }

    #[test]
    fn q4_0_round_trip_streams_the_same_values_as_the_whole_tensor() {
        // Larger than one window, so several maps are stitched together.
        let rows = (STREAM_WINDOW as usize / 2) / 64 + 3;
        let vals: Vec<u16> = (0..rows * 64)
            .map(|i| half::bf16::from_f32(((i as f32) * 0.013).sin() * 4.0).to_bits())
            .collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        write_safetensors(&p, &[("w", "BF16", vec![rows, 64], bytes.clone()), ("i", "I64", vec![1, 32], vec![0; 256])]);
        let c = Checkpoint::open(&p).unwrap();
        let mut got = vec![0u8; rows * 64 * 2];
        c.q4_0_round_trip("w", FloatKind::F16, &mut got).unwrap();
        let mut expected = vec![0u8; rows * 64 * 2];
        quant::round_trip_q4_0(&bytes, FloatKind::Bf16, FloatKind::F16, 1.0, 0, &mut expected).unwrap();
        assert_eq!(got, expected);
        let err = c.q4_0_round_trip("i", FloatKind::F32, &mut [0u8; 128]).unwrap_err().to_string();
        assert!(err.contains("tensor 'i' is"), "{err}");
        assert!(c.q4_0_round_trip("w", FloatKind::F32, &mut got).is_err(), "a buffer of the wrong size is refused");
    }

    #[test]
    fn sharded_index_resolves_and_checks_every_name() {
        let dir = tempfile::tempdir().unwrap();
        write_safetensors(&dir.path().join("s1.safetensors"), &[("x", "F16", vec![1], vec![0, 0x3c])]);
        write_safetensors(&dir.path().join("s2.safetensors"), &[("y", "I64", vec![1], vec![7, 0, 0, 0, 0, 0, 0, 0])]);
        let index = dir.path().join("model.safetensors.index.json");
        fs::write(&index, r#"{"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}}"#).unwrap();
        let c = Checkpoint::open(dir.path()).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.map_all("y").unwrap().bytes()[0], 7);
        fs::write(&index, r#"{"weight_map": {"x": "s2.safetensors"}}"#).unwrap();
        let err = Checkpoint::open(&index).unwrap_err().to_string();
        assert!(err.contains("tensor 'x' in s2.safetensors"), "{err}");
    }
}
