//! The artefact sink (nnef-format.md §5): `graph.nnef`, `graph.quant` and tensors arrive
//! one at a time and go, in a single pass, into a directory, a `.tar` or a `.tgz`.
//!
//! - A `.tar`/`.tgz` is written to an unnamed file in the target's directory (`O_TMPFILE`,
//!   where the filesystem has it): until [`ArtefactWriter::finish`] links it under a
//!   temporary name and renames that over the target, it has no name at all, so a killed
//!   process (SIGKILL, power loss) leaves nothing behind. Elsewhere, and for directories,
//!   everything is written under a temporary name beside the target
//!   (`.<name>.tmp-<pid>-<n>`), renamed into place by `finish`, removed by
//!   [`ArtefactWriter::abort`] or by dropping an unfinished writer; what a killed process
//!   leaves under such a name is removed by the next export to the same target (its pid is
//!   dead). An existing target is never touched by a failed export.
//! - Tensors stream: the tar header goes first (the payload size follows from the shape and
//!   encoding), then the payload in bounded pieces. No temporary directory, no second copy.
//! - Archives are reproducible: ustar members (PAX records for long names), mtime
//!   315532800, uid/gid 0, mode 0644, empty user/group names, no directory entries.
//! - gzip is ONE member (tract reads only the first) compressed on all cores the pigz way:
//!   the stream is cut into fixed 1 MiB chunks, each deflated independently with the
//!   previous 32 KiB as dictionary and ended by a sync flush (the last by a final block),
//!   and the chunk CRCs are combined. Chunk boundaries depend only on the bytes, so the
//!   output is identical whatever the thread count.
//! - A chunk whose deflate output would be larger than the chunk itself is written as
//!   stored blocks instead, so a `.tgz` is never larger than the `.tar` plus 5 bytes per
//!   64 KiB and the gzip header and trailer, at any level.
//! - The deflate encoder of each level is chosen in one place, [`crate::deflate`]: ISA-L for
//!   levels 1–3, zlib-rs for 4–9 (figures in benches/README.md).

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use crate::checkpoint::Checkpoint;
use crate::dat::{self, EncodeOptions, Encoding, TensorView, HEADER_LEN};
use crate::deflate::{self, Encoder};
use crate::direct::DirectFile;
use crate::error::{Error, Result};

/// Modification time of every archive member: 1980-01-01, as tract's deterministic mode.
pub const MTIME: u64 = 315_532_800;
/// Uncompressed bytes per independently deflated gzip chunk.
pub const GZ_CHUNK: usize = 1 << 20;
/// Deflate window: each chunk is primed with this many preceding bytes.
const WINDOW: usize = 32 << 10;
const TAR_BLOCK: usize = 512;

/// The three artefact layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A directory tree.
    Dir,
    /// An uncompressed tar file.
    Tar,
    /// A gzip-compressed tar file.
    Tgz,
}

impl FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "dir" => Ok(Format::Dir),
            "tar" => Ok(Format::Tar),
            "tgz" => Ok(Format::Tgz),
            _ => Err(Error::InvalidArgument(format!("unknown artefact format '{s}'; expected dir, tar or tgz"))),
        }
    }
}

/// Check an archive member name (a label plus `.dat`, or `graph.nnef`): relative, `/`
/// separated, no empty, `.` or `..` component, and no component starting with `.`
/// (tract silently ignores those).
pub fn validate_member_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "invalid artefact member name '{name}': {why}; use a relative '/'-separated name such as 'enc/w'"
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.contains('\0') || name.contains('\\') {
        return bad("it contains a NUL byte or a backslash");
    }
    if name.starts_with('/') {
        return bad("it is absolute (starts with '/')");
    }
    for part in name.split('/') {
        if part.is_empty() {
            return bad("it has an empty path component");
        }
        if part == ".." || part == "." {
            return bad("'.' and '..' components would leave the artefact");
        }
        if part.starts_with('.') {
            return bad("a component starts with '.', and tract ignores such files");
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------
// Parallel single-member gzip

/// One deflated chunk and the CRC of its input.
type Compressed = io::Result<(Vec<u8>, crc32fast::Hasher)>;

/// A batch being compressed: one pool job per chunk, each sending `(index, result)`.
struct InFlight {
    rx: mpsc::Receiver<(usize, Compressed)>,
    chunks: usize,
    data: Arc<Vec<u8>>,
}

/// A [`Write`] adapter producing one gzip member, compressed in parallel on the current
/// rayon pool. Input is gathered into batches of one 1 MiB chunk per thread; a full batch
/// is compressed in the background, one pool job per chunk, while the next one fills, so
/// encoding tensors, copying and writing the compressed bytes overlap with deflate. Holds
/// at most three batches.
pub struct ParallelGz<W: Write> {
    inner: W,
    encoder: Encoder,
    pending: Vec<u8>,
    batch_bytes: usize,
    /// The last 32 KiB of the stream before `pending`.
    dict: Vec<u8>,
    crc: crc32fast::Hasher,
    total: u64,
    in_flight: Option<InFlight>,
    /// An emptied batch buffer, reused to save the page faults of a fresh one.
    spare: Option<Vec<u8>>,
}

impl<W: Write> ParallelGz<W> {
    /// Start a gzip member at `level` (0 = stored blocks, 1..=9) with that level's encoder
    /// ([`Encoder::for_level`]); writes the 10-byte header (mtime 0, no file name, OS byte
    /// 255 "unknown").
    pub fn new(inner: W, level: u32) -> io::Result<Self> {
        if level > 9 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("gzip level {level} is not in 0..=9")));
        }
        Self::with_encoder(inner, level, Encoder::for_level(level))
    }

    /// Like [`ParallelGz::new`] with another encoder than the level's own (the benches
    /// compare encoders through the whole parallel writer this way).
    pub fn with_encoder(mut inner: W, level: u32, encoder: Encoder) -> io::Result<Self> {
        let xfl = match level {
            9 => 2,
            1 => 4,
            _ => 0,
        };
        inner.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255])?;
        let batch_bytes = rayon::current_num_threads().max(1) * GZ_CHUNK;
        Ok(ParallelGz {
            inner,
            encoder,
            pending: Vec::with_capacity(batch_bytes),
            batch_bytes,
            dict: Vec::new(),
            crc: crc32fast::Hasher::new(),
            total: 0,
            in_flight: None,
            spare: None,
        })
    }

    /// Start compressing what is pending (with `last`, up to the end of the deflate
    /// stream), then write out the batch before it.
    fn compress_pending(&mut self, last: bool) -> io::Result<()> {
        // The next batch's dictionary: the last 32 KiB of the stream including this batch.
        let tail = &self.pending[self.pending.len().saturating_sub(WINDOW)..];
        let mut next_dict = Vec::with_capacity(WINDOW);
        next_dict.extend_from_slice(&self.dict[self.dict.len().saturating_sub(WINDOW - tail.len())..]);
        next_dict.extend_from_slice(tail);
        let dict = Arc::new(std::mem::replace(&mut self.dict, next_dict));
        self.total += self.pending.len() as u64;
        let fresh = self.spare.take().unwrap_or_else(|| Vec::with_capacity(self.batch_bytes));
        let data = Arc::new(std::mem::replace(&mut self.pending, fresh));
        // The final block needs a chunk of its own when the data ends on a boundary.
        let chunks = data.len().div_ceil(GZ_CHUNK) + usize::from(last && data.len().is_multiple_of(GZ_CHUNK));
        let encoder = self.encoder;
        let (tx, rx) = mpsc::channel();
        // One job per chunk, so that each wakes a thread of the pool on its own.
        for i in 0..chunks {
            let (data, dict, tx) = (Arc::clone(&data), Arc::clone(&dict), tx.clone());
            rayon::spawn(move || {
                // A panic must reach the writer as an error, not abort the process.
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    compress_chunk(encoder, &dict, &data, i, last && i == chunks - 1)
                }))
                .unwrap_or_else(|_| Err(io::Error::other("gzip compression panicked")));
                // Release the batch before reporting, so the writer can reuse its buffer.
                drop(data);
                // The writer may be gone (dropped after an error): nothing to deliver then.
                let _ = tx.send((i, result));
            });
        }
        self.write_in_flight()?;
        self.in_flight = Some(InFlight { rx, chunks, data });
        Ok(())
    }

    /// Wait for the batch in flight, if any, and write its compressed chunks in order.
    fn write_in_flight(&mut self) -> io::Result<()> {
        let Some(batch) = self.in_flight.take() else {
            return Ok(());
        };
        let mut results: Vec<Option<Compressed>> = (0..batch.chunks).map(|_| None).collect();
        for _ in 0..batch.chunks {
            let (i, result) = wait_for(&batch.rx)?;
            results[i] = Some(result);
        }
        if let Ok(mut buffer) = Arc::try_unwrap(batch.data) {
            buffer.clear();
            self.spare = Some(buffer);
        }
        for result in results.into_iter().flatten() {
            let (bytes, crc) = result?;
            self.inner.write_all(&bytes)?;
            self.crc.combine(&crc);
        }
        Ok(())
    }

    /// End the member (final block, CRC32, length) and return the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.compress_pending(true)?;
        self.write_in_flight()?;
        let crc = self.crc.clone().finalize();
        self.inner.write_all(&crc.to_le_bytes())?;
        self.inner.write_all(&(self.total as u32).to_le_bytes())?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// Deflate chunk `i` (1 MiB) of batch `data`, primed with the tail of the chunk before it
/// (for the first, `dict`: the end of the previous batch); `last` ends the stream.
fn compress_chunk(encoder: Encoder, dict: &[u8], data: &[u8], i: usize, last: bool) -> Compressed {
    let start = (i * GZ_CHUNK).min(data.len());
    let piece = &data[start..((i + 1) * GZ_CHUNK).min(data.len())];
    let prev = if i == 0 { dict } else { &data[start - GZ_CHUNK..start] };
    let prev = &prev[prev.len().saturating_sub(WINDOW)..];
    let mut crc = crc32fast::Hasher::new();
    crc.update(piece);
    Ok((deflate::deflate_chunk(encoder, prev, piece, last)?, crc))
}

/// A message from the pool. A thread of the pool itself (a writer used inside
/// `ThreadPool::install`) must not block: the chunks may need it, so it runs pool work
/// while it waits.
fn wait_for<T>(rx: &mpsc::Receiver<T>) -> io::Result<T> {
    let lost = || io::Error::other("gzip compression task ended without a result");
    if rayon::current_thread_index().is_none() {
        return rx.recv().map_err(|_| lost());
    }
    loop {
        match rx.try_recv() {
            Ok(done) => return Ok(done),
            Err(mpsc::TryRecvError::Disconnected) => return Err(lost()),
            Err(mpsc::TryRecvError::Empty) => {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl<W: Write> Write for ParallelGz<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let take = buf.len().min(self.batch_bytes - self.pending.len());
        self.pending.extend_from_slice(&buf[..take]);
        if self.pending.len() == self.batch_bytes {
            self.compress_pending(false)?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Flushing mid-stream would change chunk boundaries; only `finish` ends chunks.
        Ok(())
    }
}

// ------------------------------------------------------------------------------------
// tar stream

/// Writes reproducible ustar members to any [`Write`].
struct TarStream<W: Write> {
    out: W,
}

impl<W: Write> TarStream<W> {
    fn header(name: &str, size: u64, kind: tar::EntryType) -> io::Result<tar::Header> {
        let mut h = tar::Header::new_ustar();
        h.set_path(name)?;
        h.set_size(size);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(MTIME);
        h.set_username("")?;
        h.set_groupname("")?;
        h.set_entry_type(kind);
        h.set_cksum();
        Ok(h)
    }

    /// Write the header(s) of a regular member of `size` bytes.
    fn begin(&mut self, name: &str, size: u64) -> io::Result<()> {
        let header = match Self::header(name, size, tar::EntryType::Regular) {
            Ok(h) => h,
            Err(_) => {
                // Too long for ustar's name/prefix split: a PAX `path` record carries it.
                let record = pax_record("path", name);
                let mut xname = format!("PaxHeaders/{name}");
                xname.truncate(99.min(xname.len()));
                while !xname.is_char_boundary(xname.len()) {
                    xname.pop();
                }
                let short: String = name.chars().rev().take(90).collect::<String>().chars().rev().collect();
                let short = short.trim_start_matches('/');
                let x = Self::header(&xname.replace('/', "_"), record.len() as u64, tar::EntryType::XHeader)?;
                self.out.write_all(x.as_bytes())?;
                self.out.write_all(&record)?;
                self.pad(record.len() as u64)?;
                Self::header(short, size, tar::EntryType::Regular)?
            }
        };
        self.out.write_all(header.as_bytes())
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rem = (size % TAR_BLOCK as u64) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; TAR_BLOCK][..TAR_BLOCK - rem])?;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; 2 * TAR_BLOCK])?;
        Ok(self.out)
    }
}

/// One PAX extended-header record: `"<len> <key>=<value>\n"`, len counting itself.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while (len.to_string().len() + body.len()) != len {
        len = len.to_string().len() + body.len();
    }
    format!("{len}{body}").into_bytes()
}

// ------------------------------------------------------------------------------------
// The writer

enum Sink {
    Dir,
    Tar(TarStream<DirectFile>),
    Tgz(TarStream<ParallelGz<DirectFile>>),
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique temporary path beside `target`: `.<name>.tmp-<pid>-<n>`.
pub(crate) fn temp_beside(target: &Path) -> Result<PathBuf> {
    let name = target.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::InvalidArgument(format!("artefact path '{}' has no usable file name", target.display()))
    })?;
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(target.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id())))
}

fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| Error::io("cannot create", path, e))
}

/// An unnamed file in `target`'s directory (`O_TMPFILE`), or `None` where the filesystem
/// or platform cannot make one (the caller then uses a named temporary).
fn create_unnamed(target: &Path) -> Option<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        OpenOptions::new().write(true).mode(0o644).custom_flags(libc::O_TMPFILE).open(dir).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = target;
        None
    }
}

/// Give the unnamed `file` the name `path` (which must not exist).
#[cfg(target_os = "linux")]
fn link_unnamed(file: &File, path: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL in a number");
    let to = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both arguments are valid NUL-terminated strings that outlive the call.
    let rc = unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(not(target_os = "linux"))]
fn link_unnamed(_file: &File, _path: &Path) -> io::Result<()> {
    unreachable!("unnamed files are only made on Linux")
}

/// Remove what killed exports to `target` left beside it: `.<name>.tmp-<pid>-<n>` entries
/// whose process no longer runs (Linux: `/proc/<pid>` is gone). Best effort. Exporters that
/// stage a whole directory of their own (the LLM exporter) name it the same way and call this.
pub fn remove_stale_temps(target: &Path) {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    if !Path::new("/proc/self").exists() {
        return; // no way to tell a dead pid here
    }
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        let _ = if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
    }
}

/// Streams an NNEF artefact to a directory, `.tar` or `.tgz`; see the module docs.
///
/// Members are added through `&self`, from several threads at once if the caller likes:
/// a directory's files are written concurrently (each is its own file: on this VM two
/// files written at once go 1.6-1.9x faster than one after the other, where two writers
/// of one file contend on its inode lock, benches/README.md), an archive's members one
/// at a time under its lock. `finish` and `abort` take the writer whole, so no member is
/// in flight then.
pub struct ArtefactWriter {
    target: PathBuf,
    tmp: PathBuf,
    format: Format,
    sink: Mutex<Option<Sink>>,
    names: Mutex<HashSet<String>>,
    failed: AtomicBool,
    /// The archive is an unnamed file (`O_TMPFILE`): `tmp` is only the name it gets at `finish`.
    unnamed: bool,
    /// Large files written past the page cache (`create`).
    past_cache: bool,
}

/// Receives a `.dat` payload piece by piece (bounded chunks, never the whole tensor).
type PieceSink<'a> = dyn FnMut(&[u8]) -> Result<()> + 'a;

impl ArtefactWriter {
    /// Start an artefact at `path`. `level` is the gzip level (tgz only, 0..=9).
    /// `past_cache`: write large files past the page cache where the filesystem allows it
    /// ([`DirectFile`]), for an artefact nothing reads right after (reading a gigabyte back
    /// from the disk cost this VM more than caching it as it was written).
    pub fn create(path: impl Into<PathBuf>, format: Format, level: u32, past_cache: bool) -> Result<Self> {
        let target: PathBuf = path.into();
        if level > 9 || (format != Format::Tgz && level != 0) {
            return Err(Error::InvalidArgument(format!(
                "compression level {level} is not valid for format {format:?}: tgz takes 0..=9, dir and tar take 0"
            )));
        }
        let tmp = temp_beside(&target)?;
        remove_stale_temps(&target);
        let mut unnamed = false;
        let mut open_file = || -> Result<DirectFile> {
            let file = match create_unnamed(&target) {
                Some(f) => {
                    unnamed = true;
                    f
                }
                None => create_new(&tmp)?,
            };
            Ok(DirectFile::new(file, u64::MAX, past_cache))
        };
        let sink = match format {
            Format::Dir => {
                fs::create_dir(&tmp).map_err(|e| Error::io("cannot create directory", &tmp, e))?;
                Sink::Dir
            }
            Format::Tar => Sink::Tar(TarStream { out: open_file()? }),
            Format::Tgz => {
                let file = open_file()?;
                match ParallelGz::new(file, level) {
                    Ok(gz) => Sink::Tgz(TarStream { out: gz }),
                    Err(e) => {
                        if !unnamed {
                            let _ = fs::remove_file(&tmp);
                        }
                        return Err(Error::io("cannot start gzip stream in", &tmp, e));
                    }
                }
            }
        };
        Ok(ArtefactWriter {
            target,
            tmp,
            format,
            sink: Mutex::new(Some(sink)),
            names: Mutex::new(HashSet::new()),
            failed: AtomicBool::new(false),
            unnamed,
            past_cache,
        })
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary path written until `finish` (for an unnamed `O_TMPFILE` archive, the
    /// name it is linked under just before the final rename).
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// The sink, held: a member written by another thread that panicked leaves it as it was
    /// (that member's error already marked the writer failed).
    fn locked_sink(&self) -> MutexGuard<'_, Option<Sink>> {
        self.sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "artefact writer for {} failed earlier and was not finished; call abort()",
                self.target.display()
            )));
        }
        if self.locked_sink().is_none() {
            return Err(Error::InvalidArgument(format!(
                "artefact writer for {} is already finished or aborted",
                self.target.display()
            )));
        }
        Ok(())
    }

    fn claim(&self, name: &str) -> Result<()> {
        validate_member_name(name)?;
        let mut names = self.names.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !names.insert(name.to_string()) {
            return Err(Error::InvalidArgument(format!(
                "artefact member '{name}' was already written; tensor labels must be unique"
            )));
        }
        Ok(())
    }

    /// Write one member: header of `size` bytes, then whatever `body` streams into the
    /// given writer. A failure poisons the writer (the member may be half written). A
    /// directory's member is written without holding the sink, so other threads write
    /// theirs meanwhile; an archive's holds it to the end.
    fn member(&self, name: &str, size: u64, body: &mut dyn FnMut(&mut dyn Write) -> Result<()>) -> Result<()> {
        let tmp = self.tmp.clone();
        let io_err = |e| Error::io("cannot write", tmp.join(name), e);
        let result = (|| -> Result<()> {
            let mut sink = self.locked_sink();
            let written = match sink.as_mut().expect("checked usable") {
                Sink::Dir => {
                    drop(sink);
                    let path = tmp.join(name);
                    if let Some(parent) = path.parent() {
                        fs::create_dir_all(parent).map_err(|e| Error::io("cannot create directory", parent, e))?;
                    }
                    let mut file = DirectFile::new(create_new(&path)?, size, self.past_cache);
                    let written = counted(&mut file, body)?;
                    file.finish().map_err(io_err)?;
                    written
                }
                Sink::Tar(t) => {
                    t.begin(name, size).map_err(io_err)?;
                    let written = counted(&mut t.out, body)?;
                    t.pad(size).map_err(io_err)?;
                    written
                }
                Sink::Tgz(t) => {
                    t.begin(name, size).map_err(io_err)?;
                    let written = counted(&mut t.out, body)?;
                    t.pad(size).map_err(io_err)?;
                    written
                }
            };
            if written != size {
                return Err(Error::InvalidArgument(format!(
                    "member '{name}' announced {size} bytes but {written} were produced"
                )));
            }
            Ok(())
        })();
        if result.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        result
    }

    /// Add a member with the given bytes (`graph.nnef`, `graph.quant`).
    pub fn add_file(&self, name: &str, data: &[u8]) -> Result<()> {
        self.check_usable()?;
        self.claim(name)?;
        let tmp = self.tmp.join(name);
        self.member(name, data.len() as u64, &mut |w| w.write_all(data).map_err(|e| Error::io("cannot write", &tmp, e)))
    }

    /// Remove member `name` of a directory, written earlier, so that the name can be
    /// written again (a tensor file written ahead of the graph that the graph does not
    /// use as it is). An archive's members are final: refused.
    pub fn remove_member(&self, name: &str) -> Result<()> {
        self.check_usable()?;
        if self.format != Format::Dir {
            return Err(Error::InvalidArgument(format!(
                "member '{name}' cannot be removed from a {:?} artefact: only a directory's can",
                self.format
            )));
        }
        let mut names = self.names.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !names.contains(name) {
            return Err(Error::InvalidArgument(format!("artefact member '{name}' was not written")));
        }
        let path = self.tmp.join(name);
        fs::remove_file(&path).map_err(|e| Error::io("cannot remove", &path, e))?;
        names.remove(name);
        Ok(())
    }

    /// Encode `view` as `encoding` and add it as `<label>.dat`; returns the bytes written
    /// (header included). Limits are checked before anything is written.
    pub fn add_tensor(
        &self,
        label: &str,
        view: &TensorView<'_>,
        encoding: Encoding,
        options: &EncodeOptions,
    ) -> Result<u64> {
        self.check_usable()?;
        let header = dat::prepare(label, view, encoding, options)?;
        self.add_dat(label, header, &mut |sink| {
            dat::encode_payload(view, encoding, options, sink).map_err(|e| dat::with_label(label, e))
        })
    }

    /// Stream tensor `key` of `checkpoint` into `<label>.dat` as `encoding`, converted or
    /// quantized on the way, a window of the file mapped at a time (never the whole tensor
    /// in memory); returns the bytes written (header included). Every check that can fail
    /// before a byte is written (dtype, encoding, limits) runs first.
    pub fn add_checkpoint_tensor(
        &self,
        label: &str,
        checkpoint: &Checkpoint,
        key: &str,
        encoding: Encoding,
        options: &EncodeOptions,
    ) -> Result<u64> {
        self.check_usable()?;
        let header = checkpoint.prepare(label, key, encoding, options)?;
        // A converted payload (Q4_0, bf16 -> f16...) overlaps its conversion with the writes
        // (Q4_0 1.15-1.37x, bf16 -> f16 1.05-2.01x faster writer on a quiet machine,
        // benches/README.md); a copied one writes straight from the map (the overlap would
        // only add a copy of each piece).
        let converts = encoding.converts(checkpoint.src_dtype(key)?);
        self.add_dat(label, header, &mut |sink| {
            let mut payload = |piece_sink: &mut PieceSink<'_>| {
                checkpoint.encode_payload(key, encoding, options, piece_sink).map_err(|e| dat::with_label(label, e))
            };
            if converts { overlapped(&mut payload, sink) } else { payload(sink) }
        })
    }

    /// Add already-packed GGML-order Q4_0 `blocks` of a tensor of logical `shape` as
    /// `<label>.dat` stored as `encoding` (Q4_0 or Q4_0Legacy), without re-quantizing;
    /// returns the bytes written (header included).
    pub fn add_q4_0_blocks(&self, label: &str, blocks: &[u8], shape: &[usize], encoding: Encoding) -> Result<u64> {
        self.check_usable()?;
        let header = dat::prepare_q4_0_blocks(label, blocks.len(), shape, encoding)?;
        self.add_dat(label, header, &mut |sink| dat::q4_0_blocks_payload(blocks, encoding, sink))
    }

    /// Write `<label>.dat`: `header`, then the payload that `payload` streams into its sink
    /// piece by piece.
    fn add_dat(
        &self,
        label: &str,
        header: dat::Header,
        payload: &mut dyn FnMut(&mut PieceSink<'_>) -> Result<()>,
    ) -> Result<u64> {
        let name = format!("{label}.dat");
        self.claim(&name)?;
        let size = HEADER_LEN as u64 + u64::from(header.data_length);
        let tmp = self.tmp.join(&name);
        self.member(&name, size, &mut |w| {
            let io_err = |e| Error::io("cannot write", &tmp, e);
            w.write_all(&header.to_bytes()).map_err(io_err)?;
            payload(&mut |piece| w.write_all(piece).map_err(io_err))
        })?;
        Ok(size)
    }

    /// Close the stream and rename the temporary into place; returns the final path.
    /// A target that is a non-empty directory is never replaced.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.check_usable()?;
        let sink = self.sink.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take().expect("checked usable");
        let tmp = self.tmp.clone();
        let into_file = DirectFile::finish;
        let closed = match sink {
            Sink::Dir => Ok(None),
            Sink::Tar(t) => t.finish().and_then(into_file).map(Some),
            Sink::Tgz(t) => t.finish().and_then(ParallelGz::finish).and_then(into_file).map(Some),
        };
        let file = closed.map_err(|e| Error::io("cannot finish", &tmp, e))?;
        if let (Some(file), true) = (&file, self.unnamed) {
            link_unnamed(file, &tmp).map_err(|e| Error::io("cannot name the finished artefact", &tmp, e))?;
            self.unnamed = false; // from here on `tmp` exists and abort() removes it
        }
        if self.format == Format::Dir && self.target.is_dir() {
            let non_empty = fs::read_dir(&self.target)
                .map_err(|e| Error::io("cannot read", &self.target, e))?
                .next()
                .is_some();
            if non_empty {
                return Err(Error::io(
                    "refusing to replace the non-empty directory (remove it or choose another path)",
                    &self.target,
                    io::Error::from(io::ErrorKind::AlreadyExists),
                ));
            }
        }
        fs::rename(&self.tmp, &self.target).map_err(|e| {
            Error::io(&format!("cannot rename {} to", self.tmp.display()), &self.target, e)
        })?;
        // Renamed: nothing left for Drop to remove.
        self.tmp = PathBuf::new();
        Ok(self.target.clone())
    }

    /// Remove everything written so far. Idempotent.
    pub fn abort(&mut self) -> Result<()> {
        // Closes an unnamed file, which then vanishes.
        *self.sink.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        if self.tmp.as_os_str().is_empty() || self.unnamed {
            self.tmp = PathBuf::new();
            return Ok(());
        }
        let removed = match self.format {
            Format::Dir => fs::remove_dir_all(&self.tmp),
            Format::Tar | Format::Tgz => fs::remove_file(&self.tmp),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("cannot remove", &self.tmp, e)),
        }
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for ArtefactWriter {
    fn drop(&mut self) {
        // An unfinished writer leaves nothing behind; errors here have no one to report to.
        let _ = self.abort();
    }
}

/// Converted pieces in flight between the converting thread and the writing one: while
/// one is written the next converts (double buffering); memory stays bounded by these
/// pieces of [`dat::CHUNK_BYTES`] at most.
const PIECES_IN_FLIGHT: usize = 2;

/// Run `payload` on a scoped thread and `write` its pieces on this one as they come, so
/// that the conversion of a piece (rayon's pool) overlaps the kernel's copy of the previous
/// one into the file, which was serial with it. Pieces arrive in order, so the bytes are
/// the same as `payload(write)`. The first error wins: a failed write stops the converter
/// (its next send fails), a failed conversion ends the stream.
fn overlapped(
    payload: &mut (dyn FnMut(&mut PieceSink<'_>) -> Result<()> + Send),
    write: &mut PieceSink<'_>,
) -> Result<()> {
    let (full_tx, full_rx) = mpsc::sync_channel::<Vec<u8>>(PIECES_IN_FLIGHT);
    let (empty_tx, empty_rx) = mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        let converter = scope.spawn(move || {
            payload(&mut |piece: &[u8]| {
                // Reuse a buffer the writer is done with: no allocation per piece.
                let mut buffer = empty_rx.try_recv().unwrap_or_default();
                buffer.clear();
                buffer.extend_from_slice(piece);
                full_tx.send(buffer).map_err(|_| Error::InvalidArgument("the artefact's writer stopped".into()))
            })
        });
        let mut written = Ok(());
        for buffer in &full_rx {
            written = write(&buffer);
            if written.is_err() {
                break;
            }
            let _ = empty_tx.send(buffer); // the converter may have finished: nothing to recycle then
        }
        drop(full_rx); // unblocks a converter waiting to send after a failed write
        let converted = converter.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        written.and(converted)
    })
}

/// Run `body` on `out`, counting the bytes it writes.
fn counted(out: &mut dyn Write, body: &mut dyn FnMut(&mut dyn Write) -> Result<()>) -> Result<u64> {
    let mut counter = CountingWriter { inner: out, count: 0 };
    body(&mut counter)?;
    Ok(counter.count)
}

/// Counts bytes on their way to the member's writer.
struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    count: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Write one `.dat` file at `path` (temporary name beside it, then an atomic rename; an
/// existing file is replaced only on success). Returns the bytes written.
pub fn write_dat_file(
    path: &Path,
    label: &str,
    view: &TensorView<'_>,
    encoding: Encoding,
    options: &EncodeOptions,
) -> Result<u64> {
    let header = dat::prepare(label, view, encoding, options)?;
    write_dat_with(path, header, &mut |sink| {
        dat::encode_payload(view, encoding, options, sink).map_err(|e| dat::with_label(label, e))
    })
}

/// [`write_dat_file`] for tensor `key` of `checkpoint`, streamed from the file.
pub fn write_checkpoint_dat_file(
    path: &Path,
    label: &str,
    checkpoint: &Checkpoint,
    key: &str,
    encoding: Encoding,
    options: &EncodeOptions,
) -> Result<u64> {
    let header = checkpoint.prepare(label, key, encoding, options)?;
    write_dat_with(path, header, &mut |sink| {
        checkpoint.encode_payload(key, encoding, options, sink).map_err(|e| dat::with_label(label, e))
    })
}

fn write_dat_with(
    path: &Path,
    header: dat::Header,
    payload: &mut dyn FnMut(&mut PieceSink<'_>) -> Result<()>,
) -> Result<u64> {
    let tmp = temp_beside(path)?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, create_new(&tmp)?);
        let io_err = |e| Error::io("cannot write", &tmp, e);
        w.write_all(&header.to_bytes()).map_err(io_err)?;
        payload(&mut |piece| w.write_all(piece).map_err(io_err))?;
        w.flush().map_err(io_err)?;
        drop(w);
        fs::rename(&tmp, path).map_err(|e| Error::io("cannot rename into", path, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| HEADER_LEN as u64 + u64::from(header.data_length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        // flate2's single-member decoder, as tract uses.
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
        out
    }

    fn pseudo_random(n: usize) -> Vec<u8> {
        // Half compressible, half noise.
        let noise = deflate::test_noise(0x2545_f491_4f6c_dd1d, n);
        (0..n).map(|i| if (i / 4096) % 2 == 0 { (i % 251) as u8 } else { noise[i] }).collect()
    }

    fn gz(data: &[u8], level: u32, threads: usize, piece: usize) -> Vec<u8> {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut w = ParallelGz::new(Vec::new(), level).unwrap();
            for p in data.chunks(piece) {
                w.write_all(p).unwrap();
            }
            w.finish().unwrap()
        })
    }

    #[test]
    fn gzip_round_trips_and_is_deterministic_across_threads() {
        for &len in &[0, 1, GZ_CHUNK, 3 * GZ_CHUNK + 12345] {
            let data = pseudo_random(len);
            for level in [0, 1, 2, 3, 4, 6, 9] {
                let one = gz(&data, level, 1, 7777);
                let three = gz(&data, level, 3, 1 << 20);
                assert_eq!(one, three, "len {len} level {level}");
                assert_eq!(gunzip(&one), data);
                assert_eq!(&one[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, [0, 4, 0, 0, 0, 0, 0, 0, 0, 2][level as usize], 255]);
            }
        }
    }

    #[test]
    fn dictionary_keeps_ratio_close_to_one_stream() {
        let data: Vec<u8> = (0..4 * GZ_CHUNK).map(|i| b"the quick brown fox "[i % 20]).collect();
        let ours = gz(&data, 6, 2, 1 << 16);
        assert!(ours.len() < 64 * 1024, "repetitive data compressed to {} bytes", ours.len());
    }

    #[test]
    fn member_names_are_validated() {
        for good in ["graph.nnef", "a/b.dat", "layers.0.w.dat"] {
            validate_member_name(good).unwrap();
        }
        for bad in ["", "/abs", "a//b", "../x", "a/../b", ".hidden", "a/.b", "a/", "./a"] {
            assert!(validate_member_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pax_record_counts_its_own_length() {
        let r = pax_record("path", "x");
        assert_eq!(r, b"9 path=x\n");
        let long = "a".repeat(200);
        let r = String::from_utf8(pax_record("path", &long)).unwrap();
        let len: usize = r.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(len, r.len());
    }

    #[test]
    fn tar_members_parse_with_the_tar_crate() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.nnef.tar");
        let w = ArtefactWriter::create(&target, Format::Tar, 0, false).unwrap();
        w.add_file("graph.nnef", b"version 1.0;").unwrap();
        let vals: Vec<u8> = (0..10u8).collect();
        let view = TensorView::contiguous(&vals, dat::SrcDtype::U8, &[2, 5]).unwrap();
        let long = format!("{}/{}", "d".repeat(120), "w".repeat(120));
        assert_eq!(w.add_tensor(&long, &view, Encoding::U8, &EncodeOptions::default()).unwrap(), 138);
        assert!(w.add_tensor(&long, &view, Encoding::U8, &EncodeOptions::default()).is_err());
        let tmp = w.temp_path().to_path_buf();
        let done = w.finish().unwrap();
        assert!(!tmp.exists());
        let mut archive = tar::Archive::new(File::open(done).unwrap());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                assert_eq!(e.header().mtime().unwrap(), MTIME);
                assert_eq!(e.header().mode().unwrap(), 0o644);
                e.path().unwrap().to_string_lossy().into_owned()
            })
            .collect();
        assert_eq!(names, vec!["graph.nnef".to_string(), format!("{long}.dat")]);
    }

    #[test]
    fn members_added_from_several_threads_at_once_are_whole() {
        let dir = tempfile::tempdir().unwrap();
        // Several pieces each, so the threads' writes interleave.
        let n = 3 * dat::CHUNK_BYTES / 4;
        let tensors: Vec<Vec<u8>> =
            (0..8).map(|t| (0..n).flat_map(|i| ((i * 7 + t) as f32).sin().to_le_bytes()).collect()).collect();
        let views: Vec<TensorView<'_>> =
            tensors.iter().map(|b| TensorView::contiguous(b, dat::SrcDtype::F32, &[n]).unwrap()).collect();
        let expected: Vec<Vec<u8>> = views
            .iter()
            .enumerate()
            .map(|(t, v)| dat::encode(&format!("t{t}"), v, Encoding::F16, &EncodeOptions::default()).unwrap())
            .collect();
        for format in [Format::Dir, Format::Tar] {
            let target = dir.path().join(format!("m-{format:?}"));
            let w = ArtefactWriter::create(&target, format, 0, false).unwrap();
            std::thread::scope(|scope| {
                for (t, view) in views.iter().enumerate() {
                    let w = &w;
                    scope.spawn(move || w.add_tensor(&format!("t{t}"), view, Encoding::F16, &EncodeOptions::default()));
                }
            });
            // A label taken by another thread is still refused; a directory's member can be
            // removed and written again, an archive's cannot.
            assert!(w.add_tensor("t3", &views[3], Encoding::F16, &EncodeOptions::default()).is_err());
            if format == Format::Dir {
                w.remove_member("t3.dat").unwrap();
                assert!(w.remove_member("t3.dat").is_err());
                w.add_tensor("t3", &views[3], Encoding::F16, &EncodeOptions::default()).unwrap();
            } else {
                assert!(w.remove_member("t3.dat").unwrap_err().to_string().contains("only a directory"));
            }
            let done = w.finish().unwrap();
            let members: Vec<(String, Vec<u8>)> = match format {
                Format::Dir => (0..8).map(|t| (format!("t{t}.dat"), fs::read(done.join(format!("t{t}.dat"))).unwrap())).collect(),
                _ => tar::Archive::new(File::open(&done).unwrap())
                    .entries()
                    .unwrap()
                    .map(|e| {
                        let mut e = e.unwrap();
                        let mut bytes = Vec::new();
                        io::Read::read_to_end(&mut e, &mut bytes).unwrap();
                        (e.path().unwrap().to_string_lossy().into_owned(), bytes)
                    })
                    .collect(),
            };
            assert_eq!(members.len(), 8, "{format:?}");
            for (name, bytes) in members {
                let t: usize = name.trim_start_matches('t').trim_end_matches(".dat").parse().unwrap();
                assert!(bytes == expected[t], "{format:?}: {name} differs from its encoding alone");
            }
        }
    }

    #[test]
    fn packed_q4_0_blocks_equal_encoded_tensor_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("q");
        let vals: Vec<u8> = (0..4 * 64).flat_map(|i| ((i as f32) * 0.19).cos().to_le_bytes()).collect();
        let view = TensorView::contiguous(&vals, dat::SrcDtype::F32, &[4, 64]).unwrap();
        let direct = dat::encode("a", &view, Encoding::Q4_0, &EncodeOptions::default()).unwrap();
        let w = ArtefactWriter::create(&target, Format::Dir, 0, false).unwrap();
        w.add_tensor("a", &view, Encoding::Q4_0Legacy, &EncodeOptions::default()).unwrap();
        let size = w.add_q4_0_blocks("b", &direct[HEADER_LEN..], &[4, 64], Encoding::Q4_0Legacy).unwrap();
        assert_eq!(size, (HEADER_LEN + 8 * crate::quant::BLOCK_BYTES) as u64);
        assert!(w.add_q4_0_blocks("b", &direct[HEADER_LEN..], &[4, 64], Encoding::Q4_0).is_err());
        w.finish().unwrap();
        assert_eq!(fs::read(target.join("a.dat")).unwrap(), fs::read(target.join("b.dat")).unwrap());
    }

    #[test]
    fn checkpoint_tensors_stream_to_the_same_bytes_as_in_memory_ones() {
        let dir = tempfile::tempdir().unwrap();
        // Over one streaming window, so the windowed path is exercised.
        let n = (crate::checkpoint::STREAM_WINDOW as usize / 4) + 64 * 32;
        let f32s: Vec<u8> = (0..n).flat_map(|i| ((i as f32) * 0.37).sin().to_le_bytes()).collect();
        let bf16s: Vec<u8> = f32s.chunks(4).flat_map(|b| [b[2], b[3]]).collect();
        let ckpt_path = dir.path().join("c.safetensors");
        crate::checkpoint::tests::write_safetensors(
            &ckpt_path,
            &[("w", "F32", vec![n / 64, 64], f32s.clone()), ("b", "BF16", vec![n], bf16s.clone())],
        );
        let ckpt = Checkpoint::open(&ckpt_path).unwrap();
        let w = TensorView::contiguous(&f32s, dat::SrcDtype::F32, &[n / 64, 64]).unwrap();
        let b = TensorView::contiguous(&bf16s, dat::SrcDtype::Bf16, &[n]).unwrap();
        let opts = EncodeOptions::default();
        // Converted payloads are overlapped with their writes, copied ones are not: both kinds.
        let cases =
            [("w", &w, Encoding::Q4_0), ("w", &w, Encoding::F16), ("b", &b, Encoding::F32), ("b", &b, Encoding::F16),
             ("w", &w, Encoding::F32)];
        for (key, view, enc) in cases {
            let target = dir.path().join(format!("{key}-{enc}"));
            let writer = ArtefactWriter::create(&target, Format::Dir, 0, false).unwrap();
            writer.add_checkpoint_tensor("x", &ckpt, key, enc, &opts).unwrap();
            writer.finish().unwrap();
            let expected = dat::encode("x", view, enc, &opts).unwrap();
            assert!(fs::read(target.join("x.dat")).unwrap() == expected, "{key} as {enc}");
        }
        // A conversion the encoder has no plan for fails before anything is written.
        let writer = ArtefactWriter::create(dir.path().join("bad"), Format::Tar, 0, false).unwrap();
        let err = writer.add_checkpoint_tensor("x", &ckpt, "w", Encoding::I8, &opts).unwrap_err().to_string();
        assert!(err.contains("encoding 'i8' cannot take a float32 array"), "{err}");
    }

    #[test]
    fn overlapped_pieces_keep_their_order_and_the_first_error() {
        let pieces: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 1 + usize::from(i) * 7]).collect();
        let expected: Vec<u8> = pieces.concat();
        let mut produce = |sink: &mut PieceSink<'_>| pieces.iter().try_for_each(|p| sink(p));
        let mut got = Vec::new();
        overlapped(&mut produce, &mut |p| {
            got.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, expected);
        // A failed write stops the converter (which would otherwise block on a full channel)
        // and is the error returned.
        let mut writes = 0;
        let err = overlapped(&mut produce, &mut |_| {
            writes += 1;
            if writes == 3 { Err(Error::InvalidArgument("disk full".into())) } else { Ok(()) }
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        // A failed conversion ends the stream with its own error after the pieces before it.
        let mut failing = |sink: &mut PieceSink<'_>| {
            sink(b"ab")?;
            Err(Error::InvalidArgument("value overflows f16".into()))
        };
        let mut got = Vec::new();
        let err = overlapped(&mut failing, &mut |p| {
            got.extend_from_slice(p);
            Ok(())
        })
        .unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
        assert_eq!(got, b"ab");
    }

    #[test]
    fn incompressible_chunks_are_stored() {
        let noise = deflate::test_noise(0x9e37_79b9_7f4a_7c15, GZ_CHUNK * 2 + 100);
        for level in 0..=9 {
            let out = gz(&noise, level, 2, 1 << 16);
            let blocks = 2 * GZ_CHUNK.div_ceil(deflate::STORED_BLOCK) + 1;
            assert!(out.len() <= noise.len() + 5 * blocks + 18, "level {level}: {} bytes", out.len());
            assert_eq!(gunzip(&out), noise);
        }
    }

    #[test]
    fn dropping_or_failing_leaves_no_temp_and_keeps_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.tgz");
        fs::write(&target, b"old").unwrap();
        let w = ArtefactWriter::create(&target, Format::Tgz, 1, false).unwrap();
        w.add_file("graph.nnef", b"x").unwrap();
        let bad = [0u8; 4];
        let view = TensorView::contiguous(&bad, dat::SrcDtype::F32, &[1]).unwrap();
        assert!(w.add_tensor("x", &view, Encoding::I32, &EncodeOptions::default()).is_err());
        drop(w);
        assert_eq!(fs::read(&target).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

        let d = dir.path().join("out");
        fs::create_dir(&d).unwrap();
        fs::write(d.join("keep"), b"k").unwrap();
        let w = ArtefactWriter::create(&d, Format::Dir, 0, false).unwrap();
        w.add_file("graph.nnef", b"x").unwrap();
        assert!(w.finish().is_err());
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
