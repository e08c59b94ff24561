//! The writer's SQLite VFS: the system's own, except that a commit's WAL frames reach the file
//! in one write.
//!
//! SQLite writes each WAL frame as two `pwrite`s (its 24-byte header, then the page), so a
//! commit of eight pages makes sixteen system calls. On the disks measured (see
//! `bench/README.md`, session 20), sixteen writes and a sync cost 165–170 µs where one write of
//! the same bytes and a sync cost 142–149 µs, and the one-block probe that durable mode is held
//! against 133–144 µs: the writes, not the sync, were most of what kept a durable step from the
//! disk's ceiling. Without a sync the writes are all a commit's system calls: a 1,000-step
//! `reel run` made 3,665 of them, 475 with the frames held (session 26).
//!
//! Frames are held from a transaction's first write until SQLite ends its commit, and sent in
//! one write then, at any level of `synchronous`:
//! - At `FULL` (or `EXTRA`) SQLite syncs the WAL at every commit before it publishes the commit
//!   in the WAL index: the sync sends the frames first, and a failed write is the failed sync's
//!   error, which fails the commit, as SQLite's own failed write would.
//! - At `NORMAL` (or `OFF`) nothing syncs: the write of the commit frame's page (the frame whose
//!   header carries the database's size) sends them, and its error fails the commit. What the
//!   transaction writes after that (checksums SQLite rewrites in place after a transaction
//!   spilled frames and then changed a spilled page) goes straight through.
//!
//! Anything else that looks at the file (a read, its size, a truncation, a file control) sends
//! the frames first, and so does the database's shared-memory barrier, which SQLite passes before
//! any reader can see a new commit, whatever the level (by then nothing is held: the commit sent
//! it). Frames are only ever written under the WAL's write lock: those still held when SQLite
//! lets it go (or closes the file) belong to a transaction that rolled back, and are dropped.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::{align_of, size_of};
use std::ptr::{self, null_mut};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's registered name, for `Connection::open_with_flags_and_vfs`.
const NAME: &CStr = c"reel-wal-batch";

/// Frames held at most before they are sent anyway (a transaction too big for the page cache
/// spills frames before its commit).
const HELD_AT_MOST: usize = 4 << 20;

/// Bytes given to the system VFS's write at once: its unix write sends at most 128 KiB less a
/// byte a call (it masks the length with `0x1ffff`), so a length of exactly 128 KiB would write
/// nothing and read as a full disk.
const WRITE_AT_MOST: usize = 127 * 1024;

/// What a WAL's growth writes.
static ZEROS: [u8; WRITE_AT_MOST] = [0; WRITE_AT_MOST];

/// The size a WAL whose frames end at `end` grows to: the next power of two from 64 KiB, then
/// the next MiB. (On ext4 a sync that makes a file longer also commits the file system's
/// journal: a commit that appended its frames cost 223–257 µs, one into blocks grown a MiB at
/// a time 154–202 µs, see `bench/README.md`, session 20.)
fn grown_to(end: i64) -> i64 {
    const MIB: u64 = 1 << 20;
    let end = end.max(64 << 10).unsigned_abs();
    let to = if end < MIB {
        end.next_power_of_two()
    } else {
        end.next_multiple_of(MIB)
    };
    i64::try_from(to).unwrap_or(i64::MAX)
}

/// The file SQLite sees: this header, then the system VFS's own file object.
#[repr(C)]
struct File {
    /// What SQLite reads: the methods below.
    base: ffi::sqlite3_file,
    /// The system VFS's file, in the same allocation after this header.
    real: *mut ffi::sqlite3_file,
    /// A WAL file's database file (null for any other file).
    db: *mut File,
    /// A database file's WAL file while that is open (null otherwise).
    wal: *mut File,
    /// A database file: whether its connection syncs the WAL at every commit.
    syncs_every_commit: bool,
    /// A WAL file: frames written and not yet sent, contiguous from `held_at`.
    held: Vec<u8>,
    /// Where `held` goes in the file.
    held_at: i64,
    /// A WAL file: its size as far as this connection's writes know it.
    end: i64,
    /// A WAL file: the last write held was a commit frame's header, so the next is its page.
    commit_page_next: bool,
    /// A WAL file: the transaction under the write lock has sent its commit (at a level that
    /// does not sync), so what it writes now goes straight through.
    committed: bool,
}

/// Where the system VFS's file starts in the allocation SQLite makes for a [`File`].
const REAL_AT: usize = size_of::<File>().next_multiple_of(16);

/// The name of the VFS, registered on first use: the system's default VFS with writes to a
/// WAL batched as the module says. `None` when SQLite has no default VFS to wrap.
pub(crate) fn name() -> Option<&'static str> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS, which lives as long as the
        // process; the VFS registered here is leaked, so it does too.
        unsafe {
            let real = ffi::sqlite3_vfs_find(ptr::null());
            if real.is_null() || (*real).xOpen.is_none() {
                return false;
            }
            let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
                iVersion: 1,
                szOsFile: (*real).szOsFile + REAL_AT as c_int,
                mxPathname: (*real).mxPathname,
                pNext: null_mut(),
                zName: NAME.as_ptr(),
                pAppData: real.cast::<c_void>(),
                xOpen: Some(open),
                xDelete: Some(delete),
                xAccess: Some(access),
                xFullPathname: Some(full_pathname),
                // Loading extensions is the system VFS's own, which takes no state from the
                // VFS it is handed.
                xDlOpen: (*real).xDlOpen,
                xDlError: (*real).xDlError,
                xDlSym: (*real).xDlSym,
                xDlClose: (*real).xDlClose,
                xRandomness: Some(randomness),
                xSleep: Some(sleep),
                xCurrentTime: Some(current_time),
                xGetLastError: Some(last_error),
                xCurrentTimeInt64: None,
                xSetSystemCall: None,
                xGetSystemCall: None,
                xNextSystemCall: None,
            }));
            ffi::sqlite3_vfs_register(vfs, 0) == ffi::SQLITE_OK
        }
    });
    ok.then(|| NAME.to_str().unwrap_or_default())
}

/// The system VFS this one wraps.
///
/// # Safety
/// `vfs` is the VFS registered by [`name`].
unsafe fn real_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    unsafe { (*vfs).pAppData.cast::<ffi::sqlite3_vfs>() }
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    debug_assert!(align_of::<File>() <= 16);
    // SAFETY: SQLite hands in `szOsFile` bytes, aligned for any object, for `file`; the header
    // is written before anything reads it, and the system's file follows it at `REAL_AT`.
    unsafe {
        let real_vfs = real_vfs(vfs);
        let me = file.cast::<File>();
        let real = file.cast::<u8>().add(REAL_AT).cast::<ffi::sqlite3_file>();
        ptr::write(
            me,
            File {
                base: ffi::sqlite3_file {
                    pMethods: ptr::null(),
                },
                real,
                db: null_mut(),
                wal: null_mut(),
                syncs_every_commit: false,
                held: Vec::new(),
                held_at: 0,
                end: 0,
                commit_page_next: false,
                committed: false,
            },
        );
        let Some(real_open) = (*real_vfs).xOpen else {
            ptr::drop_in_place(me);
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = real_open(real_vfs, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK || (*real).pMethods.is_null() {
            // SQLite calls no method of a file whose open failed.
            ptr::drop_in_place(me);
            (*file).pMethods = ptr::null();
            return rc;
        }
        if flags & ffi::SQLITE_OPEN_WAL != 0 && !name.is_null() {
            let db = ffi::sqlite3_database_file_object(name).cast::<File>();
            if !db.is_null() && ptr::eq((*db).base.pMethods, &METHODS) {
                (*me).db = db;
                (*db).wal = me;
                if let Some(size) = (*(*real).pMethods).xFileSize {
                    let _ = size(real, &mut (*me).end);
                }
            }
        }
        (*me).base.pMethods = &METHODS;
        rc
    }
}

/// Defines methods of this VFS that hand their arguments to the same method of the VFS it wraps,
/// or give `$or` when that VFS lacks the method.
macro_rules! to_real_vfs {
    ($($name:ident => $method:ident($($arg:ident: $ty:ty),*) or $or:expr;)*) => {$(
        unsafe extern "C" fn $name(vfs: *mut ffi::sqlite3_vfs, $($arg: $ty),*) -> c_int {
            // SAFETY: forwarded as received to the VFS this one wraps.
            unsafe {
                let real = real_vfs(vfs);
                (*real).$method.map_or($or, |f| f(real, $($arg),*))
            }
        }
    )*};
}

to_real_vfs! {
    delete => xDelete(name: *const c_char, sync_dir: c_int) or ffi::SQLITE_IOERR_DELETE;
    access => xAccess(name: *const c_char, flags: c_int, out: *mut c_int)
        or ffi::SQLITE_IOERR_ACCESS;
    full_pathname => xFullPathname(name: *const c_char, n: c_int, out: *mut c_char)
        or ffi::SQLITE_CANTOPEN;
    randomness => xRandomness(n: c_int, out: *mut c_char) or 0;
    sleep => xSleep(micros: c_int) or 0;
    current_time => xCurrentTime(out: *mut f64) or ffi::SQLITE_ERROR;
    last_error => xGetLastError(n: c_int, out: *mut c_char) or 0;
}

/// Defines file methods that hand their arguments to the system's file, or give `$or` when its
/// methods lack one; those marked `send rc` send the frames held first (`rc` names the
/// outcome of the send), since they look at the file.
macro_rules! to_real_file {
    ($($name:ident => $method:ident($($arg:ident: $ty:ty),*) $(send $send:tt)? or $or:expr;)*) => {$(
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: SQLite calls a method of a file it opened, with its own arguments.
            unsafe {
                $(
                    let $send = send(file.cast());
                    if $send != ffi::SQLITE_OK {
                        return $send;
                    }
                )?
                let (real, m) = real(file);
                m.$method.map_or($or, |f| f(real, $($arg),*))
            }
        }
    )*};
}

to_real_file! {
    read => xRead(buf: *mut c_void, n: c_int, at: ffi::sqlite3_int64) send rc
        or ffi::SQLITE_IOERR_READ;
    sync => xSync(flags: c_int) send rc or ffi::SQLITE_IOERR_FSYNC;
    file_size => xFileSize(out: *mut ffi::sqlite3_int64) send rc or ffi::SQLITE_IOERR_FSTAT;
    lock => xLock(level: c_int) or ffi::SQLITE_IOERR_LOCK;
    unlock => xUnlock(level: c_int) or ffi::SQLITE_IOERR_UNLOCK;
    check_reserved_lock => xCheckReservedLock(out: *mut c_int)
        or ffi::SQLITE_IOERR_CHECKRESERVEDLOCK;
    sector_size => xSectorSize() or 4096;
    device_characteristics => xDeviceCharacteristics() or 0;
    shm_map => xShmMap(page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void)
        or ffi::SQLITE_IOERR_SHMMAP;
}

/// The methods of every file this VFS opens.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// The system's file and its methods.
///
/// # Safety
/// `file` was opened by [`open`] and not closed.
unsafe fn real(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // The system VFS's methods are a static table of its own.
    unsafe {
        let real = (*file.cast::<File>()).real;
        (real, &*(*real).pMethods)
    }
}

/// Sends the frames held, if any, in one write; at a level that syncs every commit, a WAL they
/// make longer grows ahead of them.
///
/// # Safety
/// `me` was opened by [`open`] and not closed.
unsafe fn send(me: *mut File) -> c_int {
    unsafe {
        let me = &mut *me;
        if me.held.is_empty() {
            return ffi::SQLITE_OK;
        }
        let Some(write) = (*(*me.real).pMethods).xWrite else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        let mut rc = ffi::SQLITE_OK;
        let mut at = me.held_at;
        for chunk in me.held.chunks(WRITE_AT_MOST) {
            #[cfg(test)]
            tests::WAL_WRITES.with(|n| n.set(n.get() + 1));
            // A chunk is under 128 KiB, so its length fits.
            rc = write(me.real, chunk.as_ptr().cast(), chunk.len() as c_int, at);
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += chunk.len() as i64;
        }
        // Sent or failed, they are SQLite's to write again: a failed write fails the sync or
        // the read that sent it, and with it the transaction.
        me.held.clear();
        if rc == ffi::SQLITE_OK && at > me.end && !me.db.is_null() && (*me.db).syncs_every_commit {
            // The frames made the file longer: it grows ahead of them by written zeros, so the
            // next commits' syncs write data into blocks the file has, not blocks and a new
            // size. Zeros are no frame (their salt is wrong): SQLite's recovery stops at them,
            // as it stops at a torn frame. A failed write of them costs only the growth.
            let grow_to = grown_to(at);
            while at < grow_to {
                let n = ((grow_to - at) as usize).min(ZEROS.len());
                if write(me.real, ZEROS.as_ptr().cast(), n as c_int, at) != ffi::SQLITE_OK {
                    break;
                }
                at += n as i64;
            }
            me.end = at;
        } else if rc == ffi::SQLITE_OK {
            // Without syncs a longer file costs no journal commit of the file system: no
            // growth ahead, whose zeros would be written for nothing.
            me.end = me.end.max(at);
        }
        rc
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file it opened, once; the header is dropped after the system's
    // file is closed, and the link between a database and its WAL is cut on either side.
    unsafe {
        let me = file.cast::<File>();
        if !(*me).wal.is_null() {
            (*(*me).wal).held.clear();
        }
        // Frames still held here belong to a transaction that did not commit (see
        // `shm_lock`): SQLite would have written them past the WAL's last frame, where
        // nothing reads them.
        (*me).held.clear();
        if !(*me).db.is_null() {
            (*(*me).db).wal = null_mut();
        }
        if !(*me).wal.is_null() {
            (*(*me).wal).db = null_mut();
        }
        let (real, m) = real(file);
        let closed = m.xClose.map_or(ffi::SQLITE_OK, |f| f(real));
        ptr::drop_in_place(me);
        closed
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    n: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened, with `n` readable bytes at `buf`.
    unsafe {
        let me = file.cast::<File>();
        let wal = !(*me).db.is_null() && n > 0;
        let syncs = wal && (*(*me).db).syncs_every_commit;
        let holds = wal && (syncs || !(*me).committed);
        let (held, held_at) = (&(*me).held, (*me).held_at);
        let joins = held.is_empty()
            || (at == held_at + held.len() as i64 && held.len() + n as usize <= HELD_AT_MOST);
        if !(holds && joins) {
            // What is held goes first: this write does not follow it, or is not held.
            let rc = send(me);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        if holds {
            if (*me).held.is_empty() {
                (*me).held_at = at;
            }
            let bytes = std::slice::from_raw_parts(buf.cast::<u8>(), n as usize);
            (*me).held.extend_from_slice(bytes);
            if !syncs {
                // No sync will send the frames: the commit frame's page does, and its error
                // is the commit's.
                if (*me).commit_page_next {
                    (*me).commit_page_next = false;
                    (*me).committed = true;
                    return send(me);
                }
                (*me).commit_page_next = is_commit_frame_header(bytes);
            }
            return ffi::SQLITE_OK;
        }
        #[cfg(test)]
        if !(*me).db.is_null() {
            tests::WAL_WRITES.with(|n| n.set(n.get() + 1));
            if (*me).committed {
                tests::AFTER_COMMIT.with(|n| n.set(n.get() + 1));
            }
        }
        let (real, m) = real(file);
        let rc = m
            .xWrite
            .map_or(ffi::SQLITE_IOERR_WRITE, |f| f(real, buf, n, at));
        if rc == ffi::SQLITE_OK {
            (*me).end = (*me).end.max(at + i64::from(n));
        }
        rc
    }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened, with its own arguments.
    unsafe {
        let rc = send(file.cast());
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let (real, m) = real(file);
        let rc = m
            .xTruncate
            .map_or(ffi::SQLITE_IOERR_TRUNCATE, |f| f(real, size));
        if rc == ffi::SQLITE_OK {
            (*file.cast::<File>()).end = size;
        }
        rc
    }
}

/// Whether `bytes`, written to a WAL, are the header of a frame that commits a transaction:
/// 24 bytes whose second big-endian word, the database's size in pages after the commit, is not
/// zero (it is zero in every other frame's header).
fn is_commit_frame_header(bytes: &[u8]) -> bool {
    bytes.len() == 24 && bytes[4..8] != [0; 4]
}

/// Whether `PRAGMA synchronous = value` makes SQLite sync the WAL at every commit.
fn syncs_every_commit(value: &[u8]) -> bool {
    [&b"full"[..], b"extra", b"2", b"3"]
        .iter()
        .any(|level| value.eq_ignore_ascii_case(level))
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened; for `SQLITE_FCNTL_PRAGMA` `arg` is its
    // array of strings: [error out, the pragma's name, its value or NULL].
    unsafe {
        let me = file.cast::<File>();
        if !(*me).db.is_null() {
            let rc = send(me);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        } else if op == ffi::SQLITE_FCNTL_PRAGMA && !arg.is_null() {
            // SQLite offers every pragma to the file before it runs it; a changed level of
            // `synchronous` is seen here on its way, and the pragma still runs as SQLite's own.
            let args = arg.cast::<*mut c_char>();
            let (pragma, value) = (*args.add(1), *args.add(2));
            if !pragma.is_null()
                && !value.is_null()
                && CStr::from_ptr(pragma)
                    .to_bytes()
                    .eq_ignore_ascii_case(b"synchronous")
            {
                // Frames held at the old level go out at the WAL's next write or sync.
                (*me).syncs_every_commit = syncs_every_commit(CStr::from_ptr(value).to_bytes());
            }
        }
        let (real, m) = real(file);
        m.xFileControl
            .map_or(ffi::SQLITE_NOTFOUND, |f| f(real, op, arg))
    }
}

unsafe extern "C" fn shm_lock(
    file: *mut ffi::sqlite3_file,
    at: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened, with its own arguments.
    // The WAL's write lock is the shared memory's first lock slot. Frames are held only
    // between a transaction's first write and its commit's sync, inside that lock: what is
    // still held when it is let go belongs to a transaction that rolled back, and is dropped
    // (SQLite would have written it past the WAL's last frame, where nothing reads it), so
    // this VFS never writes to the WAL without the lock.
    const WRITE_LOCK: c_int = 0;
    unsafe {
        let me = file.cast::<File>();
        let releases_write_lock = flags == ffi::SQLITE_SHM_UNLOCK | ffi::SQLITE_SHM_EXCLUSIVE
            && at == WRITE_LOCK
            && n >= 1;
        if releases_write_lock && !(*me).wal.is_null() {
            let wal = &mut *(*me).wal;
            wal.held.clear();
            wal.commit_page_next = false;
            wal.committed = false;
        }
        let (real, m) = real(file);
        m.xShmLock
            .map_or(ffi::SQLITE_IOERR_SHMLOCK, |f| f(real, at, n, flags))
    }
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite calls a method of a file it opened. SQLite passes this barrier between
    // the two copies of a new WAL index header: the frames a reader may now look for are sent
    // first. (The commit's sync or its commit frame sent them already, so none are left here;
    // this method has no way to report a failed write.)
    unsafe {
        let me = file.cast::<File>();
        if !(*me).wal.is_null() {
            #[cfg(test)]
            if !(*(*me).wal).held.is_empty() {
                tests::HELD_AT_BARRIER.with(|n| n.set(n.get() + 1));
            }
            let _ = send((*me).wal);
        }
        let (real, m) = real(file);
        if let Some(f) = m.xShmBarrier {
            f(real);
        }
    }
}

unsafe extern "C" fn shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened, with its own arguments.
    unsafe {
        let me = file.cast::<File>();
        if !(*me).wal.is_null() {
            let rc = send((*me).wal);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let (real, m) = real(file);
        m.xShmUnmap.map_or(ffi::SQLITE_OK, |f| f(real, delete))
    }
}

unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    at: ffi::sqlite3_int64,
    n: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened, with its own arguments; without a
    // memory map, a fetch gives no page and SQLite reads instead.
    unsafe {
        let (real, m) = real(file);
        match m.xFetch {
            Some(f) if m.iVersion >= 3 => f(real, at, n, out),
            _ => {
                *out = null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    at: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    // SAFETY: SQLite calls a method of a file it opened, with its own arguments.
    unsafe {
        let (real, m) = real(file);
        match m.xUnfetch {
            Some(f) if m.iVersion >= 3 => f(real, at, p),
            _ => ffi::SQLITE_OK,
        }
    }
}

#[cfg(test)]
mod tests;
