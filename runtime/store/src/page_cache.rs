//! SQLite's own page cache, except that a commit's "drop the pages past the database's end"
//! costs nothing when there are none.
//!
//! At the end of every write transaction SQLite asks its page cache to drop the pages past the
//! database's last (`xTruncate`). Its default cache does that by scanning only the hash slots
//! between that page and the highest key it has ever held, or, when that distance is larger
//! than the hash table, every slot of the table. When a b-tree balance puts new sibling pages
//! in order, SQLite parks one of them for a moment under the key of the page that holds the
//! locking byte (262,145 with 4 KiB pages), so the highest key ever held jumps far past the
//! database's end and the next commit scans the whole table: one slot per page cached. With
//! the store's 64 MiB cache that is up to 16,384 slots, about 100 µs, and random digests in
//! the values index make such a balance every six to ten durable commits: a cost per commit
//! that grew with the store (13 % of a 30,000-step durable run, `bench/README.md`, session
//! 21).
//!
//! This cache forwards every call to SQLite's default one and keeps, for each cache, the pages
//! it holds under a key at or past the last truncation's limit (new pages of the open
//! transaction, and the parked one while it is parked). A truncation is forwarded when one of
//! them is at or past the new limit, or when the limit is lower than the last (a rollback, a
//! database made smaller): exactly the truncations that drop a page. The others drop nothing
//! in the default cache either, so skipping them changes nothing but the time.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

/// SQLite's default page cache, whose methods every call goes to.
static DEFAULT: OnceLock<Methods> = OnceLock::new();

/// A page cache's methods, as SQLite takes and gives them.
struct Methods(ffi::sqlite3_pcache_methods2);

// SAFETY: the methods are functions, and the argument pointer is SQLite's own (null in
// this cache's), which SQLite shares between threads itself.
unsafe impl Send for Methods {}
// SAFETY: as above; the table is only read.
unsafe impl Sync for Methods {}

/// Installs this cache as the process's page cache, once. It must come before SQLite starts
/// (before the first connection opens); when something has started SQLite already the
/// process keeps the default cache, which is slower but just as correct. Returns whether this
/// cache is installed.
pub(crate) fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        let mut default = ffi::sqlite3_pcache_methods2 {
            iVersion: 0,
            pArg: std::ptr::null_mut(),
            xInit: None,
            xShutdown: None,
            xCreate: None,
            xCachesize: None,
            xPagecount: None,
            xFetch: None,
            xUnpin: None,
            xRekey: None,
            xTruncate: None,
            xDestroy: None,
            xShrink: None,
        };
        // SAFETY: both calls are made before SQLite starts (SQLite refuses them with
        // SQLITE_MISUSE otherwise, and nothing is changed); the methods table handed to SQLite
        // is static.
        unsafe {
            if ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETPCACHE2, &raw mut default)
                != ffi::SQLITE_OK
                || default.xCreate.is_none()
                || DEFAULT.set(Methods(default)).is_err()
            {
                return false;
            }
            ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &raw const METHODS.0) == ffi::SQLITE_OK
        }
    })
}

/// The methods SQLite calls.
static METHODS: Methods = Methods(ffi::sqlite3_pcache_methods2 {
    iVersion: 1,
    pArg: std::ptr::null_mut(),
    xInit: Some(init),
    xShutdown: Some(shutdown),
    xCreate: Some(create),
    xCachesize: Some(cachesize),
    xPagecount: Some(pagecount),
    xFetch: Some(fetch),
    xUnpin: Some(unpin),
    xRekey: Some(rekey),
    xTruncate: Some(truncate),
    xDestroy: Some(destroy),
    xShrink: Some(shrink),
});

/// One cache (one connection's pager): SQLite's own, and the pages under high keys.
struct Cache {
    /// SQLite's default cache.
    inner: *mut ffi::sqlite3_pcache,
    /// Every page this cache holds under a key at or past this one is in `above`. No page is
    /// known before the first truncation, so it starts past every key and the first one is
    /// forwarded.
    floor: c_uint,
    /// Pages (by address) and their keys, for every page at or past `floor`; it may also hold
    /// pages SQLite's cache has since freed on its own, which only makes a truncation forwarded
    /// that need not be.
    above: HashMap<usize, c_uint>,
}

#[cfg(test)]
thread_local! {
    /// Truncations sent on to SQLite's cache by this thread's connections.
    static FORWARDED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Pages parked past the database's end by this thread's connections.
    static PARKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// SQLite's default methods.
fn default() -> &'static ffi::sqlite3_pcache_methods2 {
    // Set before the methods were handed to SQLite, so before any of them is called.
    &DEFAULT.get().expect("installed before SQLite starts").0
}

/// # Safety
/// `cache` was made by [`create`] and not destroyed.
unsafe fn cache<'a>(cache: *mut ffi::sqlite3_pcache) -> &'a mut Cache {
    // SQLite calls one cache's methods from one connection at a time.
    unsafe { &mut *cache.cast::<Cache>() }
}

unsafe extern "C" fn init(_: *mut c_void) -> c_int {
    let d = default();
    d.xInit.map_or(ffi::SQLITE_OK, |f| unsafe { f(d.pArg) })
}

unsafe extern "C" fn shutdown(_: *mut c_void) {
    let d = default();
    if let Some(f) = d.xShutdown {
        unsafe { f(d.pArg) }
    }
}

unsafe extern "C" fn create(
    page: c_int,
    extra: c_int,
    purgeable: c_int,
) -> *mut ffi::sqlite3_pcache {
    let Some(make) = default().xCreate else {
        return std::ptr::null_mut();
    };
    let inner = unsafe { make(page, extra, purgeable) };
    if inner.is_null() {
        return inner;
    }
    Box::into_raw(Box::new(Cache {
        inner,
        floor: c_uint::MAX,
        above: HashMap::new(),
    }))
    .cast()
}

unsafe extern "C" fn cachesize(me: *mut ffi::sqlite3_pcache, pages: c_int) {
    if let Some(f) = default().xCachesize {
        unsafe { f(cache(me).inner, pages) }
    }
}

unsafe extern "C" fn pagecount(me: *mut ffi::sqlite3_pcache) -> c_int {
    default()
        .xPagecount
        .map_or(0, |f| unsafe { f(cache(me).inner) })
}

unsafe extern "C" fn fetch(
    me: *mut ffi::sqlite3_pcache,
    key: c_uint,
    create: c_int,
) -> *mut ffi::sqlite3_pcache_page {
    let me = unsafe { cache(me) };
    let Some(f) = default().xFetch else {
        return std::ptr::null_mut();
    };
    let page = unsafe { f(me.inner, key, create) };
    // A page found without creating already holds `key`; one had with `create` may be a new
    // page or an old one reused under a new key.
    if create != 0 && !page.is_null() {
        if key >= me.floor {
            me.above.insert(page as usize, key);
        } else if !me.above.is_empty() {
            me.above.remove(&(page as usize));
        }
    }
    page
}

unsafe extern "C" fn unpin(
    me: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    discard: c_int,
) {
    let me = unsafe { cache(me) };
    if let Some(f) = default().xUnpin {
        unsafe { f(me.inner, page, discard) }
    }
    if discard != 0 && !me.above.is_empty() {
        me.above.remove(&(page as usize));
    }
}

unsafe extern "C" fn rekey(
    me: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    old: c_uint,
    new: c_uint,
) {
    let me = unsafe { cache(me) };
    if let Some(f) = default().xRekey {
        unsafe { f(me.inner, page, old, new) }
    }
    if new >= me.floor {
        #[cfg(test)]
        PARKED.with(|n| n.set(n.get() + 1));
        me.above.insert(page as usize, new);
    } else if !me.above.is_empty() {
        me.above.remove(&(page as usize));
    }
}

unsafe extern "C" fn truncate(me: *mut ffi::sqlite3_pcache, limit: c_uint) {
    let me = unsafe { cache(me) };
    // Below the floor, pages this cache does not follow may be dropped.
    if limit < me.floor || me.above.values().any(|&key| key >= limit) {
        #[cfg(test)]
        FORWARDED.with(|n| n.set(n.get() + 1));
        if let Some(f) = default().xTruncate {
            unsafe { f(me.inner, limit) }
        }
    }
    // No page at or past `limit` is left, so none needs following until one comes.
    me.floor = limit;
    me.above.clear();
    if me.above.capacity() > 1024 {
        me.above.shrink_to(64);
    }
}

unsafe extern "C" fn destroy(me: *mut ffi::sqlite3_pcache) {
    // SAFETY: SQLite destroys a cache once, after its last use.
    let me = unsafe { Box::from_raw(me.cast::<Cache>()) };
    if let Some(f) = default().xDestroy {
        unsafe { f(me.inner) }
    }
}

unsafe extern "C" fn shrink(me: *mut ffi::sqlite3_pcache) {
    if let Some(f) = default().xShrink {
        unsafe { f(cache(me).inner) }
    }
}

#[cfg(test)]
mod tests;
