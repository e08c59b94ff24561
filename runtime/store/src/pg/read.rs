//! Reading a PostgreSQL store: a few reader threads, each with a connection of its own, and the
//! queries they run.
//!
//! The client library blocks on a runtime of its own, which must not happen on a thread that
//! runs async tasks; so a read is handed to a reader thread and its caller waits on a channel,
//! as writes are handed to the writer thread. A journal is read in pages, and each page's rows
//! are handed to the caller's callback on the caller's thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use postgres::types::{FromSql, ToSql};
use postgres::{Client, Row, Statement};
use serde_json::Value;

use super::conn::{Connector, pg};
use crate::api::{
    EventRow, Flow, JournalRow, LogRow, Owner, RunFilter, RunRow, RunStatus, SignalRow, StoreError,
};
use crate::writer::{lock, parse_durability};

/// How many reader threads (and so connections) a store may keep: a worker resuming many runs
/// at once reads each run's row, flow, journal and values, one round trip each, and more
/// connections keep more of those in flight.
const READERS: usize = 6;
/// How many journal rows one page of a read holds.
pub(crate) const PAGE: i64 = 1000;

type Job = Box<dyn FnOnce(&mut Option<Client>, &Connector) + Send>;

/// The reader threads and the queue of reads they take from. A thread, and its connection, is
/// started only when a read finds none idle: a command that reads one thing after another
/// (`reel events`, `reel runs`) keeps to the opening's connection, where each thread it
/// started would cost a connection (a server process forked and authenticated, 2-3 ms).
pub(crate) struct Readers {
    jobs: Mutex<Option<Sender<Job>>>,
    /// What a new thread needs; the threads started so far.
    started: Mutex<Started>,
    /// Threads waiting for a job.
    idle: Arc<AtomicUsize>,
}

/// The reader threads started, and what starts another.
struct Started {
    rx: Arc<Mutex<Receiver<Job>>>,
    connector: Connector,
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Readers {
    /// Starts the first reader thread, on `first`, a connection already open.
    pub(crate) fn start(
        connector: &Connector,
        first: Client,
        sent: &Arc<AtomicU64>,
    ) -> Result<Readers, StoreError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let readers = Readers {
            jobs: Mutex::new(Some(tx)),
            started: Mutex::new(Started {
                rx: Arc::new(Mutex::new(rx)),
                connector: connector.clone(),
                sent: Arc::clone(sent),
                threads: Vec::new(),
            }),
            idle: Arc::new(AtomicUsize::new(0)),
        };
        readers.spawn(&mut lock(&readers.started), Some(first))?;
        Ok(readers)
    }

    /// Starts one more reader thread, with `client` or connecting on its first job.
    fn spawn(&self, started: &mut Started, client: Option<Client>) -> Result<(), StoreError> {
        let rx = Arc::clone(&started.rx);
        let connector = started.connector.clone();
        let sent = Arc::clone(&started.sent);
        let idle = Arc::clone(&self.idle);
        // Counted idle from the start, so that the next read does not start another.
        idle.fetch_add(1, Ordering::SeqCst);
        let thread = std::thread::Builder::new()
            .name(format!("reel-store-pg-reader-{}", started.threads.len()))
            .spawn(move || serve(&rx, client, &connector, sent, &idle))
            .map_err(|e| {
                self.idle.fetch_sub(1, Ordering::SeqCst);
                StoreError::Io {
                    path: "reel-store-pg-reader".to_string(),
                    message: e.to_string(),
                }
            })?;
        started.threads.push(thread);
        Ok(())
    }

    /// Runs the read `f` on a reader's connection and waits for its answer. A read that
    /// fails because the server ended the connection (a restart, an administrator, an idle
    /// timeout) is run again on a new one, [`READ_ATTEMPTS`] times at least and for as long as
    /// the connector is patient (a server ending sessions faster than a loaded machine reads
    /// is there, and the read succeeds once one session lasts): a read changes
    /// nothing, so running it again is harmless, and a long-lived process (a worker, the
    /// language server) does not fail a read for each of its readers after the server came
    /// back. (A connection ended while it sat unused is found out only by the read that uses
    /// it next, which may be just when the server ends sessions again.)
    pub(crate) fn with<R: Send + 'static>(
        &self,
        f: impl Fn(&mut Client) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        self.run(move |client: &mut Option<Client>, connector: &Connector| {
            // edge: the patience is I/O timing, not a decision; it reads the monotonic clock.
            #[allow(clippy::disallowed_methods)]
            let began = std::time::Instant::now();
            let mut attempt = 1;
            loop {
                // Whether the read itself found its session ended: its error says so (the
                // server's `FATAL` may come before the client sees the connection close), or
                // the client saw it close (a read whose errors say otherwise, as a query's);
                // not a connection that could not be made, which `on_connection` already
                // waited for.
                let mut ended = false;
                let result = on_connection(client, connector, |c| {
                    let result = f(c);
                    ended = matches!(result, Err(StoreError::Unreachable(_))) || c.is_closed();
                    result
                });
                match result {
                    Err(_)
                        if ended && (attempt < READ_ATTEMPTS || connector.patient_since(began)) =>
                    {
                        *client = None;
                        attempt += 1;
                    }
                    result => return result,
                }
            }
        })
    }

    /// [`Readers::with`] for what must not run twice (a claim, which may have committed
    /// before the server ended the connection and its answer was lost): it fails instead.
    pub(crate) fn with_once<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        self.run(move |client: &mut Option<Client>, connector: &Connector| {
            on_connection(client, connector, f)
        })
    }

    /// Hands `job` to a reader thread and waits for its answer.
    fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Option<Client>, &Connector) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let idle = Arc::clone(&self.idle);
        let job: Job = Box::new(move |client, connector| {
            let result = job(client, connector);
            // Idle again before the caller hears: its next read finds this thread free.
            idle.fetch_add(1, Ordering::SeqCst);
            let _ = reply.send(result);
        });
        if self.idle.load(Ordering::SeqCst) == 0 {
            let mut started = lock(&self.started);
            // A thread that fails to start leaves the read to those there are.
            if started.threads.len() < READERS {
                let _ = self.spawn(&mut started, None);
            }
        }
        lock(&self.jobs)
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(job)
            .map_err(|_| StoreError::Closed)?;
        answer.recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Lets the reader threads end (each closing its connection) once they finish what they
    /// are doing, without waiting for them: the store's writer is stopped meanwhile.
    pub(crate) fn let_go(&self) {
        lock(&self.jobs).take();
    }

    /// Stops the reader threads once they finish what they are doing.
    pub(crate) fn stop(&mut self) {
        self.let_go();
        let threads = std::mem::take(&mut lock(&self.started).threads);
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// How many times a read is tried when the server ends its session each time, however soon
/// (see [`Readers::with`]); a patient store tries it for its patience.
const READ_ATTEMPTS: u32 = 4;

/// Runs `f` on the reader's connection, connecting first when it has none or the server
/// ended it (patiently, while the server is away).
fn on_connection<R>(
    client: &mut Option<Client>,
    connector: &Connector,
    f: impl FnOnce(&mut Client) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    // edge: how long the connection sat unused is I/O timing; it reads the monotonic clock.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::Instant::now();
    let idle = USED
        .with(|u| u.replace(Some(now)))
        .map(|used| now.duration_since(used));
    // A connection unused for a while is asked whether it still answers before the read is
    // sent (see `CHECK_AFTER_IDLE`): a claim, which must not run twice, then goes on a new
    // connection rather than failing on one the server ended meanwhile.
    if let Some(c) = client.as_mut()
        && idle.is_some_and(|idle| idle >= super::conn::CHECK_AFTER_IDLE)
        && c.is_valid(super::conn::CHECK_TIMEOUT).is_err()
    {
        *client = None;
    }
    let result = match client {
        Some(c) if !c.is_closed() => f(c),
        _ => {
            let c = connector.patiently(|| connector.connect())?;
            // The statements prepared on the old connection are gone with it.
            STATEMENTS.with(|s| {
                if let Some(cache) = s.borrow_mut().as_mut() {
                    cache.clear();
                }
            });
            f(client.insert(c))
        }
    };
    // The server ended the session under the read (`conn::pg` says so only then): the next
    // use connects again, whether or not the client has seen the socket close yet.
    if let Err(StoreError::Unreachable(_)) = result {
        *client = None;
    }
    result
}

fn serve(
    rx: &Mutex<Receiver<Job>>,
    mut client: Option<Client>,
    connector: &Connector,
    sent: Arc<AtomicU64>,
    idle: &AtomicUsize,
) {
    STATEMENTS.with(|s| *s.borrow_mut() = Some(HashMap::new()));
    SENT.with(|s| *s.borrow_mut() = Some(sent));
    loop {
        let job = match lock(rx).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        // The job counts the thread idle again once it has its answer.
        idle.fetch_sub(1, Ordering::SeqCst);
        job(&mut client, connector);
    }
}

thread_local! {
    /// A reader thread's statements, prepared once on its connection and kept by their SQL:
    /// a statement sent as text costs two round trips (prepare, then execute), a prepared one
    /// one. `None` on threads that are not readers (their statements are sent as text).
    static STATEMENTS: RefCell<Option<HashMap<String, Statement>>> = const { RefCell::new(None) };
    /// The store's count of statements its readers sent, on a reader thread.
    static SENT: RefCell<Option<Arc<AtomicU64>>> = const { RefCell::new(None) };
    /// When this reader thread last used its connection.
    static USED: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// Counts one statement sent by a reader thread.
fn count(n: u64) {
    SENT.with(|s| {
        if let Some(sent) = s.borrow().as_ref() {
            sent.fetch_add(n, Ordering::Relaxed);
        }
    });
}

/// Statements from the reader's cache: the read functions' fixed SQL, prepared once per
/// connection.
pub(crate) trait Prepared {
    /// `sql` prepared on this connection (once, on a reader thread).
    fn prepared(&mut self, sql: &str) -> Result<Statement, postgres::Error>;

    /// [`Client::query`] with the statement prepared once.
    fn query_prepared(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error>;

    /// [`Client::query_opt`] with the statement prepared once.
    fn query_opt_prepared(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error>;

    /// [`Client::query_one`] with the statement prepared once.
    fn query_one_prepared(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error>;
}

impl Prepared for Client {
    fn prepared(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        let known = STATEMENTS.with(|s| s.borrow().as_ref().map(|c| c.get(sql).cloned()));
        match known {
            Some(Some(statement)) => Ok(statement),
            Some(None) => {
                count(1);
                let statement = self.prepare(sql)?;
                STATEMENTS.with(|s| {
                    if let Some(cache) = s.borrow_mut().as_mut() {
                        cache.insert(sql.to_string(), statement.clone());
                    }
                });
                Ok(statement)
            }
            None => self.prepare(sql),
        }
    }

    fn query_prepared(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        count(1);
        self.query(&statement, params)
    }

    fn query_opt_prepared(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        count(1);
        self.query_opt(&statement, params)
    }

    fn query_one_prepared(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let statement = self.prepared(sql)?;
        count(1);
        self.query_one(&statement, params)
    }
}

/// The `runs` columns [`run_from`] reads, in its order.
pub(crate) const RUN_COLUMNS: &str = "id, flow, flow_digest, source, source_abs, cwd, parent,
    status, created_at, ended_at, due_at, waiting_on, signal_pending, lease_owner, lease_pid,
    lease_host, lease_started, lease_expires_at, lease_token, cancel_requested, output_digest,
    error, keep_for_ms, durability, next_seq";

/// A column, or a store error naming it when it does not read as `T`.
pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, at: usize) -> Result<T, StoreError> {
    row.try_get(at).map_err(|e| {
        StoreError::Postgres(format!(
            "column {} does not read: {e}",
            row.columns().get(at).map_or("?", |c| c.name())
        ))
    })
}

fn unsigned(n: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|e| StoreError::Postgres(format!("{what}: {e}")))
}

/// The lease holder stored in four columns from `at`, if any.
pub(crate) fn owner_at(r: &Row, at: usize) -> Option<Owner> {
    owner_of(
        r.try_get(at).ok()?,
        r.try_get(at + 1).ok()?,
        r.try_get(at + 2).ok()?,
        r.try_get(at + 3).ok()?,
    )
}

/// The lease holder of the four values a row stores it in (its id, pid, host and start), if
/// all are there and in range.
pub(crate) fn owner_of(
    id: Option<String>,
    pid: Option<i64>,
    host: Option<String>,
    started: Option<i64>,
) -> Option<Owner> {
    Some(Owner {
        id: id?,
        pid: u32::try_from(pid?).ok()?,
        host: host?,
        started: u64::try_from(started?).ok()?,
    })
}

/// The run of a row whose first columns are [`RUN_COLUMNS`].
pub(crate) fn run_from(r: &Row) -> Result<RunRow, StoreError> {
    let status: String = get(r, 7)?;
    let waiting_on: String = get(r, 11)?;
    let error: Option<String> = get(r, 21)?;
    let durability: String = get(r, 23)?;
    let bad = |what: &str, e: &dyn std::fmt::Display| StoreError::Postgres(format!("{what}: {e}"));
    Ok(RunRow {
        id: get(r, 0)?,
        flow: get(r, 1)?,
        flow_digest: get(r, 2)?,
        source: get(r, 3)?,
        source_abs: get(r, 4)?,
        cwd: get(r, 5)?,
        parent: get(r, 6)?,
        status: RunStatus::parse(&status).ok_or_else(|| bad("status", &status))?,
        created_at: get(r, 8)?,
        ended_at: get(r, 9)?,
        due_at: get(r, 10)?,
        waiting_on: serde_json::from_str(&waiting_on).map_err(|e| bad("waiting_on", &e))?,
        signal_pending: get(r, 12)?,
        lease_owner: owner_at(r, 13),
        lease_expires_at: get(r, 17)?,
        lease_token: unsigned(get(r, 18)?, "lease_token")?,
        cancel_requested: get(r, 19)?,
        output_digest: get(r, 20)?,
        error: error
            .map(|e| serde_json::from_str(&e))
            .transpose()
            .map_err(|e| bad("error", &e))?,
        keep_for_ms: get::<Option<i64>>(r, 22)?
            .map(|k| unsigned(k, "keep_for_ms"))
            .transpose()?,
        durability: parse_durability(&durability),
        next_seq: unsigned(get(r, 24)?, "next_seq")?,
    })
}

/// A run by id.
pub(crate) fn run(client: &mut Client, id: &str) -> Result<Option<RunRow>, StoreError> {
    client
        .query_opt_prepared(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
            &[&id],
        )
        .map_err(|e| pg(&e))?
        .map(|r| run_from(&r))
        .transpose()
}

/// Ids starting with `prefix`, in order (a range on the primary key, which sorts bytewise).
pub(crate) fn find_runs(client: &mut Client, prefix: &str) -> Result<Vec<String>, StoreError> {
    let upper = format!("{prefix}\u{10FFFF}");
    let rows = client
        .query_prepared(
            "SELECT id FROM runs WHERE id >= $1 AND id < $2 ORDER BY id",
            &[&prefix, &upper],
        )
        .map_err(|e| pg(&e))?;
    let mut ids = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: String = get(row, 0)?;
        if id.starts_with(prefix) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Runs matching `filter`, newest first.
pub(crate) fn list_runs(
    client: &mut Client,
    filter: &RunFilter,
) -> Result<Vec<RunRow>, StoreError> {
    let limit = filter
        .limit
        .map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
    // Only the filters given are in the statement (one statement per set of them, each
    // prepared once): a reader's session plans generically (`conn::session_settings`), and a
    // generic plan of `$1 IS NULL OR status = $1` could use no index for either case.
    let status = filter.status.map(RunStatus::as_str);
    let given: [(&str, Option<&str>); 3] = [
        ("status", status),
        ("flow", filter.flow.as_deref()),
        ("source_abs", filter.source_abs.as_deref()),
    ];
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&limit];
    let mut conditions = Vec::new();
    for (column, value) in &given {
        if let Some(value) = value {
            params.push(value);
            conditions.push(format!("{column} = ${}", params.len()));
        }
    }
    let conditions = match conditions.is_empty() {
        true => String::new(),
        false => format!("WHERE {}", conditions.join(" AND ")),
    };
    let rows = client
        .query_prepared(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs {conditions}
                 ORDER BY created_at DESC, id DESC LIMIT $1"
            ),
            &params,
        )
        .map_err(|e| pg(&e))?;
    rows.iter().map(run_from).collect()
}

/// A journal row's number and its event, or why it does not read.
pub(crate) type PageRow = (i64, Result<EventRow, String>);

/// Hands `rows` (in order, from `expected` on) to `f`, a row that does not read as a hole and
/// each one missing before a row as a hole too; `Stop` when `f` stopped. `expected` ends as
/// the position after the last row handed over.
pub(crate) fn hand_rows(
    rows: Vec<PageRow>,
    expected: &mut u64,
    f: &mut dyn FnMut(JournalRow) -> Flow,
) -> Flow {
    for (seq, event) in rows {
        let seq = u64::try_from(seq).unwrap_or(*expected);
        if let Flow::Stop = hand_missing(expected, seq, f) {
            return Flow::Stop;
        }
        let got = match event {
            Ok(event) => JournalRow::Event(event),
            Err(message) => JournalRow::Hole { seq, message },
        };
        if let Flow::Stop = f(got) {
            return Flow::Stop;
        }
        *expected = seq + 1;
    }
    Flow::Continue
}

/// Hands the rows from `expected` up to `end` to `f` as holes: they are missing.
pub(crate) fn hand_missing(
    expected: &mut u64,
    end: u64,
    f: &mut dyn FnMut(JournalRow) -> Flow,
) -> Flow {
    while *expected < end {
        let hole = JournalRow::Hole {
            seq: *expected,
            message: "the row is missing".to_string(),
        };
        if let Flow::Stop = f(hole) {
            return Flow::Stop;
        }
        *expected += 1;
    }
    Flow::Continue
}

/// One page of a run's journal from `from` (below `end`).
pub(crate) fn journal_page(
    client: &mut Client,
    run: &str,
    from: i64,
    end: i64,
) -> Result<Vec<PageRow>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT seq, at, kind, step, idx, attempt, data FROM journal
             WHERE run = $1 AND seq >= $2 AND seq < $3 ORDER BY seq LIMIT $4",
            &[&run, &from, &end, &PAGE],
        )
        .map_err(|e| pg(&e))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let seq: i64 = get(row, 0)?;
        out.push((seq, event_from(row, 0, run, seq)));
    }
    Ok(out)
}

/// A run's journal length with the first page of its journal from `from` (below that length)
/// in one round trip, or `None` when there is no such run: the journal's rows are read below
/// the length read first, and most journals are one page.
pub(crate) fn journal_head(
    client: &mut Client,
    run: &str,
    from: i64,
) -> Result<Option<(i64, Vec<PageRow>)>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT r.next_seq, j.seq, j.at, j.kind, j.step, j.idx, j.attempt, j.data
             FROM runs r LEFT JOIN LATERAL (
                 SELECT seq, at, kind, step, idx, attempt, data FROM journal
                 WHERE run = r.id AND seq >= $2 AND seq < r.next_seq ORDER BY seq LIMIT $3
             ) j ON TRUE
             WHERE r.id = $1",
            &[&run, &from, &PAGE],
        )
        .map_err(|e| pg(&e))?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let end: i64 = get(first, 0)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        // A journal with no row below `end` from `from` gives one row of NULLs.
        let Some(seq) = get::<Option<i64>>(row, 1)? else {
            continue;
        };
        out.push((seq, event_from(row, 1, run, seq)));
    }
    Ok(Some((end, out)))
}

/// The event of a journal row whose columns `seq, at, kind, step, idx, attempt, data` start at
/// column `first`.
pub(crate) fn event_from(row: &Row, first: usize, run: &str, seq: i64) -> Result<EventRow, String> {
    let err = |e: StoreError| e.to_string();
    let small = |n: Option<i64>, what: &str| {
        n.map(|n| u32::try_from(n).map_err(|e| format!("{what}: {e}")))
            .transpose()
    };
    let data: String = get(row, first + 6).map_err(err)?;
    Ok(EventRow {
        run: run.to_string(),
        seq: u64::try_from(seq).map_err(|e| e.to_string())?,
        at: get(row, first + 1).map_err(err)?,
        kind: get(row, first + 2).map_err(err)?,
        step: get(row, first + 3).map_err(err)?,
        index: small(get(row, first + 4).map_err(err)?, "idx")?,
        attempt: small(get(row, first + 5).map_err(err)?, "attempt")?,
        data: serde_json::from_str::<Value>(&data)
            .map_err(|e| format!("its data is not JSON: {e}"))?,
    })
}

/// Every `unknown_outcome` row whose columns read, by run and position, through the index of
/// such rows (`journal_unknown_outcome`); a row whose columns do not read is a hole, which
/// only a read of its journal reports. The SQLite store's statement, which reads alike here.
pub(crate) fn unknown_outcome_rows(client: &mut Client) -> Result<Vec<EventRow>, StoreError> {
    let rows = client
        .query_prepared(crate::read::UNKNOWN_OUTCOME_ROWS, &[])
        .map_err(|e| pg(&e))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let (Ok(seq), Ok(run)) = (get::<i64>(row, 0), get::<String>(row, 7)) else {
            continue;
        };
        if let Ok(event) = event_from(row, 0, &run, seq) {
            out.push(event);
        }
    }
    Ok(out)
}

/// The steps of a run with a `step_succeeded` row.
pub(crate) fn succeeded_steps(
    client: &mut Client,
    run: &str,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT step FROM journal
             WHERE run = $1 AND kind = 'step_succeeded' AND step IS NOT NULL",
            &[&run],
        )
        .map_err(|e| pg(&e))?;
    rows.iter().map(|r| get(r, 0)).collect()
}

/// What a run's tools printed, in order.
pub(crate) fn logs(client: &mut Client, run: &str) -> Result<Vec<LogRow>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT run, step, idx, attempt, at, text FROM logs WHERE run = $1 ORDER BY id",
            &[&run],
        )
        .map_err(|e| pg(&e))?;
    rows.iter().map(log_from).collect()
}

/// The log line of a row of `run, step, idx, attempt, at, text`.
pub(crate) fn log_from(r: &Row) -> Result<LogRow, StoreError> {
    let small = |n: i64| u32::try_from(n).map_err(|e| StoreError::Postgres(e.to_string()));
    Ok(LogRow {
        run: get(r, 0)?,
        step: get(r, 1)?,
        index: get::<Option<i64>>(r, 2)?.map(small).transpose()?,
        attempt: small(get(r, 3)?)?,
        at: get(r, 4)?,
        text: get(r, 5)?,
    })
}

/// A run's unconsumed signals in the order sent.
pub(crate) fn pending_signals(
    client: &mut Client,
    run: &str,
) -> Result<Vec<SignalRow>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT run, seq, name, payload_digest, sent_at, consumed_by FROM signals
             WHERE run = $1 AND consumed_by IS NULL ORDER BY seq",
            &[&run],
        )
        .map_err(|e| pg(&e))?;
    rows.iter().map(signal_from).collect()
}

/// A run's unconsumed signals named in `names`, in order, each with its payload's JSON text
/// (`None` when the value is gone): one statement.
pub(crate) fn pending_signals_with_payloads(
    client: &mut Client,
    run: &str,
    names: &[String],
) -> Result<Vec<(SignalRow, Option<String>)>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT s.run, s.seq, s.name, s.payload_digest, s.sent_at, s.consumed_by, v.json
             FROM signals s LEFT JOIN vals v ON v.digest = s.payload_digest
             WHERE s.run = $1 AND s.consumed_by IS NULL AND s.name = ANY($2)
             ORDER BY s.seq",
            &[&run, &names],
        )
        .map_err(|e| pg(&e))?;
    rows.iter()
        .map(|r| Ok((signal_from(r)?, get(r, 6)?)))
        .collect()
}

/// A signal of a row whose first columns are those [`pending_signals`] reads.
pub(crate) fn signal_from(r: &Row) -> Result<SignalRow, StoreError> {
    Ok(SignalRow {
        run: get(r, 0)?,
        seq: unsigned(get(r, 1)?, "seq")?,
        name: get(r, 2)?,
        payload_digest: get(r, 3)?,
        sent_at: get(r, 4)?,
        consumed_by: get::<Option<i64>>(r, 5)?
            .map(|n| unsigned(n, "consumed_by"))
            .transpose()?,
    })
}

/// Runs a worker should take up (see [`crate::StoreRead::due_runs`]): the same rule as the
/// SQLite store's.
pub(crate) fn due_runs(
    client: &mut Client,
    now_ms: i64,
    lease_now: Option<i64>,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut due = Vec::new();
    if limit == 0 {
        return Ok(due);
    }
    let waiting = client
        .query_prepared(
            "SELECT id, lease_owner, lease_pid, lease_host, lease_started, lease_expires_at
             FROM runs
             WHERE status = 'waiting'
               AND (due_at <= $1 OR cancel_requested
                    OR (signal_pending AND EXISTS (
                        SELECT 1 FROM signals s
                        WHERE s.run = runs.id AND s.consumed_by IS NULL
                          AND jsonb_exists(runs.waiting_on::jsonb, s.name))))
             ORDER BY due_at IS NULL, due_at, created_at",
            &[&now_ms],
        )
        .map_err(|e| pg(&e))?;
    // Leases are judged by the database's clock unless the store's clock is one of its own
    // (`claim.rs`).
    let lease_clock: i64 = client
        .query_one_prepared(
            &format!("SELECT {}", super::claim::lease_time(1)),
            &[&lease_now],
        )
        .map_err(|e| pg(&e))?
        .get(0);
    let host = Owner::this_process().host;
    let running = client
        .query_prepared(
            "SELECT id, lease_owner, lease_pid, lease_host, lease_started, lease_expires_at
             FROM runs
             WHERE status = 'running'
               AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $1
                    OR lease_host = $2)
             ORDER BY lease_expires_at, created_at",
            &[&lease_clock, &host],
        )
        .map_err(|e| pg(&e))?;
    for r in waiting.iter().chain(&running) {
        let id: String = get(r, 0)?;
        let holder = owner_at(r, 1);
        let expires: Option<i64> = get(r, 5)?;
        let held = holder.is_some_and(|h| expires.is_some_and(|e| e > lease_clock) && !h.is_dead());
        if !held {
            due.push(id);
            if due.len() >= limit {
                break;
            }
        }
    }
    Ok(due)
}

/// A value's stored JSON text.
pub(crate) fn value_text(client: &mut Client, digest: &str) -> Result<Option<String>, StoreError> {
    client
        .query_opt_prepared("SELECT json FROM vals WHERE digest = $1", &[&digest])
        .map_err(|e| pg(&e))?
        .map(|r| get(&r, 0))
        .transpose()
}

/// The values stored under `digests`, by digest (those not stored are absent).
pub(crate) fn value_texts(
    client: &mut Client,
    digests: &[String],
) -> Result<std::collections::HashMap<String, String>, StoreError> {
    let rows = client
        .query_prepared(
            "SELECT digest, json FROM vals WHERE digest = ANY($1)",
            &[&digests],
        )
        .map_err(|e| pg(&e))?;
    rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
}

/// The binary form of this build's layout of the FlowSpec `digest`, if the store keeps it.
pub(crate) fn spec_binary(
    client: &mut Client,
    digest: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    let layout = i32::try_from(reel_flowspec::BINARY_LAYOUT).unwrap_or(i32::MAX);
    client
        .query_opt_prepared(
            "SELECT bytes FROM spec_binaries WHERE digest = $1 AND layout = $2",
            &[&digest, &layout],
        )
        .map_err(|e| pg(&e))?
        .map(|r| get(&r, 0))
        .transpose()
}

/// Whether the store has the binary form of this build's layout of the FlowSpec `digest`.
pub(crate) fn has_spec_binary(client: &mut Client, digest: &str) -> Result<bool, StoreError> {
    let layout = i32::try_from(reel_flowspec::BINARY_LAYOUT).unwrap_or(i32::MAX);
    Ok(client
        .query_opt_prepared(
            "SELECT 1 FROM spec_binaries WHERE digest = $1 AND layout = $2",
            &[&digest, &layout],
        )
        .map_err(|e| pg(&e))?
        .is_some())
}

/// A FlowSpec's JSON by digest.
pub(crate) fn spec(client: &mut Client, digest: &str) -> Result<Option<String>, StoreError> {
    client
        .query_opt_prepared("SELECT json FROM specs WHERE digest = $1", &[&digest])
        .map_err(|e| pg(&e))?
        .map(|r| get(&r, 0))
        .transpose()
}

#[cfg(test)]
mod tests;
