//! Artefact files written past the page cache (`O_DIRECT`) where the filesystem allows it.
//!
//! Through the page cache every byte written is first copied into the cache; under memory
//! pressure (an export reads a checkpoint as large as what it writes) the kernel then
//! reclaims pages for it and writes the dirty ones back. On this project's 2-core VM,
//! 8 GiB written that way took 16.0 s of system CPU in 16.4 s (`dd bs=8M`), against 1.3 s
//! in 5.0 s with `oflag=direct` (benches/README.md, "Artefacts written past the page
//! cache"): the cache copy, not the disk, was the writer's limit, and it took the core
//! the rest of the export needed. An artefact is written once and read later (by tract,
//! often elsewhere): caching it buys little and evicts the checkpoint being read.
//!
//! [`DirectFile`] gathers the stream in an aligned buffer and writes each full buffer with
//! `O_DIRECT` (offsets, lengths and the buffer's address multiples of [`ALIGN`], enough
//! for any logical block size); the tail that does not fill one goes through the cache.
//! Where `O_DIRECT` is refused (tmpfs, some network or FUSE filesystems, other systems
//! than Linux), by the flag or by a write, the same bytes go through the cache instead.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Mutex;

/// Alignment of `O_DIRECT` offsets, lengths and buffers: the largest logical block size.
pub const ALIGN: usize = 4096;
/// Bytes gathered per direct write: large enough that each write's wait is amortized.
pub const BUFFER: usize = 8 << 20;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// A file written front to back through an aligned buffer, with `O_DIRECT` where it can
/// (see the module docs). [`DirectFile::finish`] writes what is left; dropping it without
/// that loses the buffered bytes (the artefact is being aborted then).
pub struct DirectFile {
    file: Option<File>,
    pages: Vec<Page>,
    filled: usize,
    offset: u64,
    direct: bool,
}

/// Files smaller than this go through the cache.
const MIN_DIRECT: u64 = 1 << 20;
/// The buffer of a file written through the cache (`BufWriter`'s role before).
const CACHED_BUFFER: usize = 1 << 20;
/// Buffers of [`BUFFER`] bytes kept for the next files: fresh memory costs its first touch
/// (on this VM about as much as writing it), and a directory writes one file after another.
const KEPT_BUFFERS: usize = 2;
static SPARE_BUFFERS: Mutex<Vec<Vec<Page>>> = Mutex::new(Vec::new());

impl DirectFile {
    /// Write into `file` (open for writing, empty), which will hold about `expected` bytes
    /// (`u64::MAX` when unknown), past the cache if `past_cache` and the file takes it. A
    /// file through the cache (under [`MIN_DIRECT`], or not `past_cache`) gets a buffer of
    /// its size up to [`CACHED_BUFFER`] that only gathers small writes: larger ones go
    /// straight to the file, as `BufWriter` does (no copy of the tensor bytes).
    pub fn new(file: File, expected: u64, past_cache: bool) -> Self {
        let direct = past_cache && expected >= MIN_DIRECT && set_direct(&file, true).is_ok();
        let pages = if direct {
            let spare = SPARE_BUFFERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop();
            spare.unwrap_or_else(|| vec![Page([0; ALIGN]); BUFFER / ALIGN])
        } else {
            vec![Page([0; ALIGN]); (expected.min(CACHED_BUFFER as u64) as usize).div_ceil(ALIGN).max(1)]
        };
        DirectFile { file: Some(file), pages, filled: 0, offset: 0, direct }
    }

    fn capacity(&self) -> usize {
        self.pages.len() * ALIGN
    }

    fn buffer(&mut self) -> &mut [u8] {
        let len = self.capacity();
        // SAFETY: `pages` is `len` bytes of initialised, contiguous `u8` arrays (`Page` is
        // `repr(C)` around one), borrowed mutably with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), len) }
    }

    /// Write the first `len` buffered bytes at the file's end: directly when they are whole
    /// pages and the file takes it, else through the cache (and the file stays so from
    /// then on); the rest moves to the buffer's start.
    fn write_out(&mut self, len: usize) -> io::Result<()> {
        let file = self.file.as_ref().expect("not finished");
        if self.direct && !len.is_multiple_of(ALIGN) {
            self.direct = false; // the tail: O_DIRECT would refuse its length
            set_direct(file, false)?;
        }
        let (bytes, offset) = (leading_bytes(&self.pages, len), self.offset);
        if let Err(e) = write_all_at(file, bytes, offset) {
            if !self.direct {
                return Err(e);
            }
            // Refused by this filesystem after all (EINVAL, EOPNOTSUPP...): the same bytes
            // through the cache, whose error, if any, is the one reported.
            self.direct = false;
            set_direct(file, false)?;
            write_all_at(file, bytes, offset)?;
        }
        let filled = self.filled;
        self.buffer().copy_within(len..filled, 0);
        self.offset += len as u64;
        self.filled -= len;
        Ok(())
    }

    /// Write what is buffered (its whole pages directly where the file takes it, the tail
    /// through the cache); returns the file.
    pub fn finish(mut self) -> io::Result<File> {
        let head = self.filled / ALIGN * ALIGN;
        if self.direct && head > 0 {
            self.write_out(head)?;
        }
        if self.filled > 0 {
            self.write_out(self.filled)?;
        }
        Ok(self.file.take().expect("finished once"))
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        if self.pages.len() == BUFFER / ALIGN {
            let mut spare = SPARE_BUFFERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if spare.len() < KEPT_BUFFERS {
                spare.push(std::mem::take(&mut self.pages));
            }
        }
    }
}

impl Write for DirectFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if !self.direct && self.filled + data.len() > self.capacity() {
            if self.filled > 0 {
                self.write_out(self.filled)?;
            }
            if data.len() >= self.capacity() {
                // Through the cache, a large piece needs no gathering: straight to the file.
                write_all_at(self.file.as_ref().expect("not finished"), data, self.offset)?;
                self.offset += data.len() as u64;
                return Ok(data.len());
            }
        }
        let start = self.filled;
        let n = data.len().min(self.capacity() - start);
        self.buffer()[start..start + n].copy_from_slice(&data[..n]);
        self.filled += n;
        if self.filled == self.capacity() {
            self.write_out(self.filled)?;
        }
        Ok(n)
    }

    /// Nothing: bytes leave in whole buffers, the rest at [`DirectFile::finish`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The first `len` bytes of `pages`.
fn leading_bytes(pages: &[Page], len: usize) -> &[u8] {
    assert!(len <= pages.len() * ALIGN);
    // SAFETY: `pages` is initialised, contiguous `u8` arrays (`Page` is `repr(C)` around
    // one) of at least `len` bytes, borrowed for the result's lifetime.
    unsafe { std::slice::from_raw_parts(pages.as_ptr().cast::<u8>(), len) }
}

#[cfg(unix)]
fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset)
}

#[cfg(not(unix))]
fn write_all_at(mut file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(bytes)
}

/// Turn `O_DIRECT` on or off for `file` (Linux; an error elsewhere, or where refused).
#[cfg(target_os = "linux")]
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, wanted) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_file: &File, on: bool) -> io::Result<()> {
    if on { Err(io::Error::from(io::ErrorKind::Unsupported)) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(pieces: &[usize], expected: u64, dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, bool) {
        let path = dir.join(format!("f-{}-{expected}", pieces.len()));
        let mut out = DirectFile::new(File::create(&path).unwrap(), expected, true);
        let direct = out.direct;
        let mut all = Vec::new();
        for (i, &n) in pieces.iter().enumerate() {
            let piece: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
            out.write_all(&piece).unwrap();
            all.extend_from_slice(&piece);
        }
        out.finish().unwrap();
        (std::fs::read(&path).unwrap(), all, direct)
    }

    #[test]
    fn bytes_written_whole_whatever_the_pieces() {
        // Under /tmp on this project's VM (ext4) the files are direct; on tmpfs (/dev/shm)
        // or another system they may not be, and the bytes must be the same either way.
        for root in [std::env::temp_dir(), std::path::PathBuf::from("/dev/shm")] {
            if root.is_dir() {
                written_whole_under(&root);
            }
        }
    }

    fn written_whole_under(root: &std::path::Path) {
        let dir = root.join(format!("fastnnef-direct-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for pieces in [vec![], vec![1], vec![BUFFER], vec![BUFFER, 1], vec![3 * BUFFER + 517, 12, BUFFER - 12, 4096],
                       vec![1 << 20; 20]] {
            let (got, want, _) = written(&pieces, u64::MAX, &dir);
            assert_eq!(got.len(), want.len());
            assert!(got == want, "pieces {pieces:?}");
        }
        let (got, want, direct) = written(&[1000, 24], 1024, &dir);
        assert!(got == want && !direct, "a small file: one write through the cache");
        let mut cached = DirectFile::new(File::create(dir.join("cached")).unwrap(), u64::MAX, false);
        assert!(!cached.direct && cached.capacity() == CACHED_BUFFER, "through the cache when asked");
        let pieces: Vec<Vec<u8>> = [5, CACHED_BUFFER + 3, 7, CACHED_BUFFER - 1, 2 * CACHED_BUFFER]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 13 + j * 3) as u8).collect())
            .collect();
        for piece in &pieces {
            cached.write_all(piece).unwrap();
        }
        cached.finish().unwrap();
        assert!(std::fs::read(dir.join("cached")).unwrap() == pieces.concat(), "large pieces straight through");
        for size in [MIN_DIRECT as usize, MIN_DIRECT as usize + 100, 3 * ALIGN * 1000 + 5] {
            let (got, want, _) = written(&[size / 3, size - size / 3], size as u64, &dir);
            assert!(got == want, "a file of {size} bytes: whole pages directly, the tail through the cache");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
