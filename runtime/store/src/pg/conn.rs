//! Reaching the server: the URL (read once, never shown with its password), TLS with rustls,
//! and connections set up for the store (its own schema on the search path).

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use postgres::{Client, NoTls};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Config, Socket};

use crate::api::StoreError;

/// The schema the store's tables live in, so that a database shared with other programs keeps
/// them apart.
pub(crate) const SCHEMA: &str = "reel";

/// What each connection sets first: the store's schema, that a transaction left idle (a
/// stuck process) does not hold rows others need, and generic plans.
///
/// Every statement of the store is prepared once per session and runs with the plan the server
/// makes for any parameters: each finds its rows by a run's id, a value's digest, arrays of
/// them, or a time that bounds an index, for which that plan is the one the server would keep;
/// a statement with optional filters is written per set of filters given (`read::list_runs`).
/// Left to choose, the server planned again at every execution what it judged cheaper for the
/// parameters at hand: the writer's `append_many` (about 180 µs a batch in a store of 50,000
/// runs) and a worker's look (1.4 ms of its 1.6, at every look).
fn session_settings() -> String {
    format!(
        "SET search_path TO {SCHEMA}; SET idle_in_transaction_session_timeout = '60s'; \
         SET plan_cache_mode = force_generic_plan"
    )
}

/// How long a connection being closed may take to tell the server.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a connection attempt may take before it fails, unless the URL says
/// (`connect_timeout`, seconds, as libpq): the socket's connect, and for a store's opening the
/// whole attempt, the server's answers included (see [`Connector::connect_told_within`]).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a TCP connection sits idle before the client asks whether the server is still
/// there, unless the URL says (`keepalives_idle`, as libpq): below the idle timeouts of the
/// NAT gateways, load balancers and firewalls between machines (about four minutes and up),
/// which drop an idle connection silently, so a worker's listening connection, idle between
/// notifications, stays open through them; and a server that is gone (a network cut, a
/// machine that died) is found out within about a minute rather than libpq's two hours, by a
/// connection idle or waiting for an answer. Data sent and not acknowledged is retransmitted
/// for as long as the system does (a quarter of an hour on Linux), so a batch sent into a cut
/// goes through when the network is mended, unless the URL's `tcp_user_timeout` (milliseconds,
/// as libpq reads it) gives up sooner.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);
/// Between those questions, unless the URL says (`keepalives_interval`).
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(10);
/// How many go unanswered before the connection is taken for gone, unless the URL says
/// (`keepalives_retries`).
const KEEPALIVES_RETRIES: u32 = 3;

/// How long a connection is tried again while the server is away (a restart, a failover)
/// before what needed it fails: nothing has been sent on it yet, so waiting loses nothing,
/// and a run driven meanwhile goes on when the server is back.
const RECONNECT_PATIENCE: Duration = Duration::from_secs(20);
/// The pause between those tries.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// How many times a store's opening tries a session while nothing answers (see
/// [`Connector::opened`]).
const OPEN_TRIES: u32 = 4;
/// A connection unused for this long is asked whether it still answers before a write or a
/// read is sent on it: a server that restarted or ended an idle session meanwhile is found
/// out while nothing has been sent, rather than by a batch or a claim whose fate would be
/// unknown.
pub(crate) const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);
/// How long that question may take before the connection is taken for gone.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a password comes from when the URL has none, as the program's edge read it: a
/// variable (`REEL_STORE_PASSWORD`), else a password file in libpq's format (`PGPASSFILE`, or
/// `~/.pgpass`).
#[derive(Clone, Default)]
pub struct PgAuth {
    /// The password itself.
    pub password: Option<String>,
    /// A password file: lines of `host:port:database:user:password`, `*` matching anything.
    pub passfile: Option<PathBuf>,
}

impl std::fmt::Debug for PgAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAuth")
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("passfile", &self.passfile)
            .finish()
    }
}

/// The password a libpq password file gives for this connection, if any.
fn from_passfile(text: &str, config: &Config) -> Option<String> {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(_)) | None => "localhost".to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or(user);
    let wanted = [host.as_str(), port.as_str(), db, user];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_passfile_line(line);
        let [h, p, d, u, password] = fields.as_slice() else {
            continue;
        };
        let fits = [h, p, d, u]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field.as_str() == "*" || field.as_str() == want);
        if fits {
            return Some(password.clone());
        }
    }
    None
}

/// A password file line's fields: `:` separates, `\` escapes.
fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().expect("one field at least").push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field at least").push(c),
        }
    }
    fields
}

/// How to open a connection to the store's database.
#[derive(Clone)]
pub(crate) struct Connector {
    config: Config,
    /// TLS roots when the URL asks for TLS (`sslmode=require`, `verify-ca`, `verify-full`).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The URL without its password, for messages.
    shown: String,
    /// How long a connection is tried again while the server is away: `RECONNECT_PATIENCE`,
    /// or none for a store opened read-only (the language server's reads of past runs must
    /// not hang an editor while the server is down; they show nothing instead).
    patience: Duration,
}

/// Whether `url` names a PostgreSQL database (rather than a SQLite store directory).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The URL as it may be shown: user, hosts, ports and database, never a password or options.
pub fn redact_url(url: &str) -> String {
    match parse(url) {
        Ok((config, _, _)) => shown(&config),
        Err(_) => "postgres://…".to_string(),
    }
}

fn shown(config: &Config) -> String {
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let host = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}{}/{db}", hosts.join(","))
}

/// Splits off what the client library does not read itself (`sslrootcert`, the
/// `verify-ca`/`verify-full` modes, which rustls always does, and `tcp_user_timeout`, which
/// libpq reads in milliseconds and the library in seconds), parses the rest, and sets the
/// keepalives the URL does not name (see [`KEEPALIVES_IDLE`]).
fn parse(url: &str) -> Result<(Config, bool, Option<PathBuf>), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let mut named = Vec::new();
    let mut root_cert = None;
    let mut verify = false;
    let mut user_timeout = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        named.push(key);
        match key {
            "sslrootcert" => root_cert = Some(PathBuf::from(percent_decode(value))),
            "sslmode" if value == "verify-ca" || value == "verify-full" => {
                verify = true;
                kept.push("sslmode=require".to_string());
            }
            // As libpq: milliseconds, 0 for the system's default.
            "tcp_user_timeout" => {
                let ms: u64 = value
                    .parse()
                    .map_err(|_| "invalid value for option `tcp_user_timeout`".to_string())?;
                user_timeout = (ms > 0).then(|| Duration::from_millis(ms));
            }
            _ => kept.push(pair.to_string()),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    // The library's message names the option at fault, never the URL or its password.
    let mut config = Config::from_str(&url).map_err(|e| e.to_string())?;
    if let Some(timeout) = user_timeout {
        config.tcp_user_timeout(timeout);
    }
    if !named.contains(&"keepalives_idle") {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if !named.contains(&"keepalives_interval") {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if !named.contains(&"keepalives_retries") {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
    Ok((config, verify, root_cert))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Connector {
    /// Reads `url` (with `auth` for a password it lacks); a malformed one is an `Open` error
    /// that does not repeat it.
    pub(crate) fn new(url: &str, auth: &PgAuth) -> Result<Connector, StoreError> {
        let (mut config, verify, root_cert) = parse(url).map_err(|message| StoreError::Open {
            path: "postgres://…".to_string(),
            message: format!("the store URL is not valid: {message}"),
        })?;
        let shown = shown(&config);
        let open_error = |message: String| StoreError::Open {
            path: shown.clone(),
            message,
        };
        if config.get_password().is_none() {
            let from_file = || {
                let path = auth.passfile.as_ref()?;
                let text = std::fs::read_to_string(path).ok()?;
                from_passfile(&text, &config)
            };
            if let Some(password) = auth.password.clone().or_else(from_file) {
                config.password(password);
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("reel");
        // TLS when the URL asks for it; the server's certificate is then always verified
        // (rustls has no unverified mode), against `sslrootcert` or the system's roots.
        let wants_tls = verify || root_cert.is_some() || config.get_ssl_mode() == SslMode::Require;
        let tls = if wants_tls {
            Some(Arc::new(tls_config(root_cert).map_err(open_error)?))
        } else {
            None
        };
        Ok(Connector {
            config,
            tls,
            shown,
            patience: RECONNECT_PATIENCE,
        })
    }

    /// The same, trying a connection only once however the server is (see `patience`).
    pub(crate) fn impatient(mut self) -> Connector {
        self.patience = Duration::ZERO;
        self
    }

    /// `connect`, tried again while its error says the server is away, for up to the
    /// connector's patience; any other error, or the last, is returned.
    pub(crate) fn patiently<T>(
        &self,
        mut connect: impl FnMut() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // edge: the patience is I/O timing, not a decision; it reads the monotonic clock.
        #[allow(clippy::disallowed_methods)]
        let began = std::time::Instant::now();
        loop {
            match connect() {
                Err(e) if e.is_transient() && self.patient_since(began) => {
                    std::thread::sleep(RECONNECT_PAUSE);
                }
                result => return result,
            }
        }
    }

    /// Whether what began at `began` may still be tried again (see `patience`).
    pub(crate) fn patient_since(&self, began: std::time::Instant) -> bool {
        began.elapsed() < self.patience
    }

    /// The URL without its password.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// A new connection with the store's settings.
    pub(crate) fn connect(&self) -> Result<Client, StoreError> {
        self.connect_told().map_err(|(e, _)| e)
    }

    /// [`Connector::connect`], its error told with whether the server answered: a server
    /// that sent an error (ended the session as it started, is starting, is full) is there,
    /// where a refused or reset socket may have nothing behind it.
    fn connect_told(&self) -> Result<Client, (StoreError, bool)> {
        let config = postgres::Config::from(self.config.clone());
        let client = match &self.tls {
            Some(tls) => config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(
                (**tls).clone(),
            )),
            None => config.connect(NoTls),
        };
        let answered = |e: &postgres::Error| e.as_db_error().is_some();
        let mut client = client.map_err(|e| (self.error(&e), answered(&e)))?;
        client
            .batch_execute(&session_settings())
            .map_err(|e| (self.error(&e), true))?;
        Ok(client)
    }

    /// [`Connector::connect_told`] on a thread of its own, waited for at most the connect
    /// timeout. The client library bounds only the socket's connect: a server that accepted
    /// the connection and never answers (a stopped or wedged server, whose system still
    /// accepts into its backlog; a proxy with nothing behind it; another program on the port)
    /// would otherwise hold the opening, and a person's `reel runs`, for ever. Such a server
    /// is there but not answering, so the opening fails at once rather than try again. The
    /// thread is left behind; it ends when the server answers (its connection then dropped) or
    /// with the process.
    fn connect_told_within(&self) -> Result<Client, (StoreError, bool)> {
        let (answer, told) = mpsc::sync_channel(1);
        let connector = self.clone();
        let spawned = std::thread::Builder::new()
            .name("reel-pg-connect".into())
            .spawn(move || {
                let _ = answer.send(connector.connect_told());
            });
        let open_error = |message: String| {
            let error = StoreError::Open {
                path: self.shown.clone(),
                message,
            };
            (error, false)
        };
        if let Err(e) = spawned {
            return Err(open_error(format!(
                "cannot start a connection's thread: {e}"
            )));
        }
        let timeout = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(CONNECT_TIMEOUT);
        match told.recv_timeout(timeout) {
            Ok(result) => result,
            Err(_) => Err(open_error(format!(
                "the server accepted the connection but did not answer within {} s: check that \
                 the URL names a PostgreSQL server and that it is running, not stopped or \
                 overloaded (`connect_timeout=SECONDS` in the URL waits longer)",
                timeout.as_secs_f64()
            ))),
        }
    }

    /// A store's first connection, on which `prepare` (the schema's check) succeeded. While
    /// nothing answers (no server listens, the socket is refused or reset) it is tried
    /// [`OPEN_TRIES`] times, [`RECONNECT_PAUSE`] apart, so a person typing `reel runs` while
    /// the server is down learns so within a second. While the server answers but ends each
    /// session before the check is done (a restart under way, an administrator or a pooler
    /// ending sessions, a server too loaded to finish before the next end) it is tried for
    /// the connector's patience, as the writer and the readers wait: the server is there.
    pub(crate) fn opened(
        &self,
        mut prepare: impl FnMut(&mut Client) -> Result<(), StoreError>,
    ) -> Result<Client, StoreError> {
        // edge: the patience is I/O timing, not a decision; it reads the monotonic clock.
        #[allow(clippy::disallowed_methods)]
        let began = std::time::Instant::now();
        let mut tries = 1;
        loop {
            let (result, answered) = match self.connect_told_within() {
                Ok(mut client) => (prepare(&mut client).map(|()| client), true),
                Err((e, answered)) => (Err(e), answered),
            };
            match result {
                Err(e)
                    if e.is_transient()
                        && (tries < OPEN_TRIES || answered && self.patient_since(began)) =>
                {
                    tries += 1;
                    std::thread::sleep(RECONNECT_PAUSE);
                }
                result => return result,
            }
        }
    }

    /// A new connection with the store's settings that can send statements without waiting
    /// for the answers of those before (see [`Pipelined`]).
    pub(crate) fn connect_pipelined(&self) -> Result<Pipelined, StoreError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Open {
                path: self.shown.clone(),
                message: format!("the connection's runtime does not start: {e}"),
            })?;
        let connected = rt.block_on(async {
            match &self.tls {
                Some(tls) => {
                    let tls = tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone());
                    driven(&self.config, tls).await
                }
                None => driven(&self.config, NoTls).await,
            }
        });
        let (client, connection) = connected.map_err(|e| self.error(&e))?;
        let conn = Pipelined {
            rt,
            client: Some(client),
            connection: Some(connection),
        };
        conn.block_on(conn.client().batch_execute(&session_settings()))
            .map_err(|e| self.error(&e))?;
        Ok(conn)
    }

    /// A connection failure as an error naming the server without its password:
    /// `Unreachable` when the server is away for now (see [`away`]), else `Open`.
    pub(crate) fn error(&self, e: &postgres::Error) -> StoreError {
        if away(e) {
            return StoreError::Unreachable(format!(
                "the store's server at {} cannot be reached now: {}",
                self.shown,
                describe(e)
            ));
        }
        StoreError::Open {
            path: self.shown.clone(),
            message: describe(e),
        }
    }
}

/// A client of `config` (over `tls`) and the task that drives its connection, spawned on the
/// current runtime. A connection's error ends the task; the client's next request then fails
/// with it.
async fn driven<T>(
    config: &Config,
    tls: T,
) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, connection) = config.connect(tls).await?;
    Ok((client, tokio::spawn(async { drop(connection.await) })))
}

/// A connection whose statements can be sent together and answered together: a
/// [`tokio_postgres::Client`] with a runtime of its own on the thread that uses it, as the
/// synchronous client is, but whose requests go out before earlier ones are answered when they
/// are awaited together (one round trip to the server for many statements). The writer's
/// batches send their opening, values and appends this way.
pub(crate) struct Pipelined {
    /// Drives the connection whenever the client waits on it.
    rt: tokio::runtime::Runtime,
    /// The connection's client; taken only when it is dropped.
    client: Option<tokio_postgres::Client>,
    /// The task that drives the connection.
    connection: Option<tokio::task::JoinHandle<()>>,
}

impl Pipelined {
    /// The connection's client.
    pub(crate) fn client(&self) -> &tokio_postgres::Client {
        self.client
            .as_ref()
            .expect("the client goes only when the connection is dropped")
    }

    /// Waits for `future`, driving the connection meanwhile.
    pub(crate) fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.rt.block_on(future)
    }

    /// Whether the server still answers on this connection (an empty query, one round trip,
    /// within `within`): a session the server ended while it sat unused (a restart, an idle
    /// timeout, an administrator) is known only once something is sent on it.
    pub(crate) fn answers(&self, within: Duration) -> bool {
        let client = self.client();
        // The timer is made inside the runtime, which it needs.
        !client.is_closed()
            && self
                .block_on(async { tokio::time::timeout(within, client.simple_query("")).await })
                .is_ok_and(|answer| answer.is_ok())
    }
}

impl Drop for Pipelined {
    /// Says goodbye to the server: once its client is gone, the connection sends `Terminate`
    /// and ends, when it is driven once more (a dropped runtime would only cut it off).
    fn drop(&mut self) {
        drop(self.client.take());
        if let Some(connection) = self.connection.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(CLOSE_TIMEOUT, connection).await });
        }
    }
}

fn tls_config(root_cert: Option<PathBuf>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| format!("cannot read sslrootcert {}: {e}", path.display()))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| format!("cannot read sslrootcert {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A system certificate rustls cannot use is skipped, as browsers do.
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The statement with which a session ends itself, as `pg_terminate_backend` from a server's
/// restart or an administrator would end it (the tests' faults, see `writer::faults`).
#[cfg(debug_assertions)]
pub(crate) const END_OWN_SESSION: &str = "SELECT pg_terminate_backend(pg_backend_pid())";

/// A PostgreSQL error as text: the server's message (with its detail) when there is one.
pub(crate) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = match db.detail() {
                Some(detail) => format!("{} ({detail})", db.message()),
                None => db.message().to_string(),
            };
            if session_swapped(db) {
                text.push_str(POOLED_IN_TRANSACTIONS);
            }
            text
        }
        // Why a connection failed (a certificate not trusted, a refused port) is in the
        // error's causes, which never hold the URL.
        None => {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                text.push_str(": ");
                text.push_str(&c.to_string());
                cause = c.source();
            }
            text
        }
    }
}

/// What an error [`session_swapped`] tells adds: `reel` sets up each connection's server
/// session once (its prepared statements, its `search_path`) and keeps it, so a statement that
/// meets another session is behind a pooler that hands a client's transactions to any one.
const POOLED_IN_TRANSACTIONS: &str = ": the statement met another server session than the one \
    its connection set up, which is what a connection pooler in transaction mode does \
    (PgBouncer's `pool_mode = transaction`); reel keeps a session for each connection (its \
    prepared statements, its settings, its wait for notifications), so point the URL at the \
    server or at a pool in session mode";

/// The store's own tables, as the server names them when a session lost its `search_path`.
const OWN_TABLES: &[&str] = &[
    "meta",
    "runs",
    "journal",
    "vals",
    "specs",
    "spec_binaries",
    "signals",
    "logs",
    "refs",
];

/// Whether `db` says the statement met a server session other than the one its connection
/// set up: one of the session's prepared statements found already there, missing, or of
/// another shape (the client library names them `s0`, `s1`, …), or one of the store's own
/// tables not found (the session's `search_path` is not the store's; the schema was checked
/// when the store was opened). Told by codes and names, not by the server's words, which
/// may be in another language.
fn session_swapped(db: &postgres::error::DbError) -> bool {
    use postgres::error::SqlState;
    let code = db.code();
    let names_a_statement = || {
        db.message().split('"').skip(1).step_by(2).any(|name| {
            name.len() > 1 && name.starts_with('s') && name[1..].bytes().all(|b| b.is_ascii_digit())
        })
    };
    *code == SqlState::DUPLICATE_PSTATEMENT
        || *code == SqlState::INVALID_SQL_STATEMENT_NAME
        || *code == SqlState::PROTOCOL_VIOLATION && names_a_statement()
        || *code == SqlState::UNDEFINED_TABLE
            && OWN_TABLES
                .iter()
                .any(|table| db.message().contains(&format!("\"{table}\"")))
}

/// A failed statement as a store error: the session's end (the connection closed, or the
/// server's `FATAL`, as a restart, `pg_terminate_backend` or an idle timeout sends) is
/// `Unreachable`, anything else the database's own error.
pub(crate) fn pg(e: &postgres::Error) -> StoreError {
    if ended(e) {
        StoreError::Unreachable(format!(
            "the connection to the store's server was lost: {}",
            describe(e)
        ))
    } else {
        StoreError::Postgres(describe(e))
    }
}

/// Whether `e` says the session is over: the client saw the connection close or reset, or the
/// server ended it with a `FATAL` (or `PANIC`) error. The connection cannot be used again.
pub(crate) fn ended(e: &postgres::Error) -> bool {
    use std::io::ErrorKind;
    e.is_closed()
        || e.as_db_error()
            .is_some_and(|db| matches!(db.severity(), "FATAL" | "PANIC"))
        // The server's process gone before the client read its `FATAL`: the socket reset.
        || io_kind(e).is_some_and(|kind| {
            matches!(
                kind,
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
                    // Keepalives or sent data unanswered (see `KEEPALIVES_IDLE`).
                    | ErrorKind::TimedOut
            )
        })
}

/// The kind of the I/O error among `e`'s causes, if one is.
fn io_kind(e: &postgres::Error) -> Option<std::io::ErrorKind> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cause = c.source();
    }
    None
}

/// Whether a failed connection attempt says the server is away for now rather than that
/// something must change: it refused or dropped the connection, is starting, stopping or
/// full, or does not take connections to the database for now. A password refused, a
/// database missing or a certificate not trusted are not.
fn away(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    use std::io::ErrorKind;
    if let Some(code) = e.code() {
        return [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            // "database … is not currently accepting connections": an administrator's pause.
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        ]
        .contains(code);
    }
    if let Some(kind) = io_kind(e) {
        return matches!(
            kind,
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::NotFound
                | ErrorKind::TimedOut
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof
                | ErrorKind::AddrNotAvailable
        );
    }
    e.is_closed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a pooler in transaction mode makes of a session's prepared statements, made here
    /// on one real session: the error says what to change.
    #[test]
    fn a_prepared_statement_met_twice_or_missing_names_a_pooler_in_transaction_mode() {
        let (_, mut client) = crate::pg::schema_database("reel_pooled");
        client.batch_execute("PREPARE s0 AS SELECT 1").unwrap();
        for statement in ["PREPARE s0 AS SELECT 1", "EXECUTE s1"] {
            let e = client.batch_execute(statement).unwrap_err();
            let text = describe(&e);
            assert!(
                text.contains("pooler in transaction mode")
                    && text.contains("pool in session mode"),
                "{statement}: {text}"
            );
        }
        // A statement of another shape under the name the client gave its own: the server's
        // protocol error when the client binds it.
        let mine = client.prepare("SELECT $1::int AS mine").unwrap();
        let name: String = client
            .query_one(
                "SELECT name FROM pg_prepared_statements WHERE statement LIKE '%AS mine'",
                &[],
            )
            .unwrap()
            .get(0);
        client
            .batch_execute(&format!("DEALLOCATE {name}; PREPARE {name} AS SELECT 1"))
            .unwrap();
        let e = client.query(&mine, &[&1i32]).unwrap_err();
        assert!(
            describe(&e).contains("pool in session mode"),
            "{}",
            describe(&e)
        );
        // A session whose search path is not the store's: its tables are not found.
        client.batch_execute("SET search_path TO public").unwrap();
        let e = client.batch_execute("SELECT value FROM meta").unwrap_err();
        assert!(
            describe(&e).contains("pool in session mode"),
            "{}",
            describe(&e)
        );
        for other in ["SELECT nope FROM reel.runs", "SELECT 1 FROM runz"] {
            let e = client.batch_execute(other).unwrap_err();
            assert!(
                !describe(&e).contains("pooler"),
                "{other}: other errors say nothing of it"
            );
        }
    }

    #[test]
    fn tcp_keepalives_are_set_unless_the_url_names_them_and_a_user_timeout_is_read_as_libpq() {
        let (config, ..) = parse("postgres://reel@db.example/runs").unwrap();
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), KEEPALIVES_IDLE);
        assert_eq!(config.get_keepalives_interval(), Some(KEEPALIVES_INTERVAL));
        assert_eq!(config.get_keepalives_retries(), Some(KEEPALIVES_RETRIES));
        assert_eq!(config.get_tcp_user_timeout(), None, "the system's");
        let (config, ..) = parse(
            "postgres://reel@db.example/runs?keepalives=0&keepalives_idle=300\
             &keepalives_interval=7&keepalives_retries=9&tcp_user_timeout=2500",
        )
        .unwrap();
        assert!(!config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(300));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(config.get_keepalives_retries(), Some(9));
        // Milliseconds, as libpq reads it.
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_millis(2500))
        );
        let (config, ..) = parse("postgres://reel@db.example/runs?tcp_user_timeout=0").unwrap();
        assert_eq!(config.get_tcp_user_timeout(), None, "the system's default");
        let err = parse("postgres://reel@db.example/runs?tcp_user_timeout=soon").unwrap_err();
        assert!(err.contains("tcp_user_timeout"), "{err}");
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        let url = "postgres://reel:s3cret@db.example:5433/runs?sslmode=disable";
        assert_eq!(redact_url(url), "postgres://reel@db.example:5433/runs");
        let err = Connector::new(
            "postgres://reel:s3cret@db.example/runs?bogus=1",
            &PgAuth::default(),
        )
        .err()
        .unwrap();
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(err.to_string().contains("URL is not valid"), "{err}");
        assert!(!redact_url("postgres://u:pw@%2Ftmp%2Fsock/db").contains("pw"));
        assert!(is_postgres_url("postgresql://x/y"));
        assert!(!is_postgres_url("/home/me/.reel"));
    }

    #[test]
    fn a_password_comes_from_the_url_the_variable_or_the_password_file() {
        let file = "# comment\nother:5432:*:reel:nope\ndb.example:*:runs:reel:fr\\:om-file\n";
        let config = Config::from_str("postgres://reel@db.example/runs").unwrap();
        assert_eq!(from_passfile(file, &config).as_deref(), Some("fr:om-file"));
        let config = Config::from_str("postgres://else@db.example/runs").unwrap();
        assert_eq!(from_passfile(file, &config), None);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, file).unwrap();
        let by_file = PgAuth {
            password: None,
            passfile: Some(path),
        };
        let url = "postgres://reel@db.example/runs";
        let c = Connector::new(url, &by_file).unwrap();
        assert_eq!(c.config.get_password(), Some(&b"fr:om-file"[..]));
        let by_variable = PgAuth {
            password: Some("from-variable".to_string()),
            ..by_file.clone()
        };
        let c = Connector::new(url, &by_variable).unwrap();
        assert_eq!(c.config.get_password(), Some(&b"from-variable"[..]));
        let c = Connector::new("postgres://reel:in-url@db.example/runs", &by_variable).unwrap();
        assert_eq!(c.config.get_password(), Some(&b"in-url"[..]));
        assert!(!format!("{by_variable:?}").contains("from-variable"));
    }

    #[test]
    fn verify_modes_and_a_root_certificate_are_read_here() {
        let (config, verify, root) =
            parse("postgres://u@h/d?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem").unwrap();
        assert!(verify);
        assert_eq!(root, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        let err = Connector::new(
            "postgres://u@h/d?sslrootcert=/nonexistent/ca.pem",
            &PgAuth::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("sslrootcert"), "{err}");
    }
}
