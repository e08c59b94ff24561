//! The LSP server: open documents in one salsa database, edits applied in order, every request
//! answered from a database snapshot on a blocking thread with salsa cancellation caught.
//!
//! tower-lsp-server runs handlers concurrently, interleaving them at `.await`; so `did_open` and
//! `did_change` set the salsa input before their first `.await`, which keeps edits in arrival
//! order, and no lock is ever held across an `.await`.
//!
//! A request made stale stops working: an edit (a salsa write) cancels every snapshot in use,
//! and a request the client cancels (`$/cancelRequest`, which drops its future) cancels its own
//! snapshot through its token; either way the work unwinds at its next query and the request
//! answers `ContentModified` (or the client's cancellation). Diagnostics are computed by one
//! task, always for the latest version of a document: an edit marks the document due and wakes
//! it, and a computation an edit cancelled is redone for the newer text, so a burst of edits
//! queues nothing.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reel_compiler::queries::line_index;
use reel_compiler::{RootDb, SourceFile, file_diagnostics};
use reel_store::Clock;
use salsa::{Database as _, Setter};
use tower_lsp_server::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp_server::lsp_types::*;
use tower_lsp_server::{Client, LanguageServer, UriExt};

use crate::Capabilities;
use crate::commands::{self, Launcher};
use crate::diagnostics::to_lsp;
use crate::hints::{self, Watched};
use crate::ide::completion::{self, ItemKind};
use crate::ide::{Ctx, edits, hover, names, outline, signature, tokens};
use crate::lenses;
use crate::position::Lines;
use crate::prepared::Prepared;
use crate::preview::Previews;
use crate::runs::{Pins, Stores, Views};

/// An open document: its salsa input and the editor's version of it.
struct Doc {
    file: SourceFile,
    version: i32,
    /// The last version whose diagnostics were published.
    published: Option<i32>,
}

/// The database and the open documents.
#[derive(Default)]
struct State {
    db: RootDb,
    docs: HashMap<Uri, Doc>,
}

/// The documents whose diagnostics are due or being computed, the signal that wakes the task
/// publishing them, and the one it gives when it is done with a document.
#[derive(Default)]
struct Due {
    docs: Mutex<DueDocs>,
    wake: tokio::sync::Notify,
    settled: tokio::sync::Notify,
}

/// What the publisher has to do, and what it is doing.
#[derive(Default)]
struct DueDocs {
    due: HashSet<Uri>,
    running: Option<Uri>,
}

impl Due {
    fn docs(&self) -> MutexGuard<'_, DueDocs> {
        self.docs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `uri` due and wakes the publisher (a wake-up sent while it works is kept).
    fn mark(&self, uri: Uri) {
        self.docs().due.insert(uri);
        self.wake.notify_one();
    }

    /// A document that is due, now the one being computed.
    fn take(&self) -> Option<Uri> {
        let mut docs = self.docs();
        let uri = docs.due.iter().next().cloned()?;
        docs.due.remove(&uri);
        docs.running = Some(uri.clone());
        Some(uri)
    }

    /// The publisher is done with the document it took.
    fn done(&self) {
        self.docs().running = None;
        self.settled.notify_waiters();
    }

    /// Whether the diagnostics of `uri`'s latest version are still to be published.
    fn busy(&self, uri: &Uri) -> bool {
        let docs = self.docs();
        docs.due.contains(uri) || docs.running.as_ref() == Some(uri)
    }

    /// Waits until the diagnostics of `uri`'s latest version are published (or were not,
    /// because the document closed).
    async fn settled(&self, uri: &Uri) {
        loop {
            // Made before the check, so a `done` between the two is not missed.
            let settled = self.settled.notified();
            if !self.busy(uri) {
                return;
            }
            settled.await;
        }
    }
}

/// The last semantic tokens answered for each document, by result id, for deltas: kept as the
/// segments' shared tokens, not as the encoded list. The last [`KEPT_TOKEN_ANSWERS`], not only
/// the last: while keys come, the editor cancels answers it has not applied and asks for the
/// next delta from the last one it did apply, which a server keeping only its newest answer
/// would have to answer with the whole list (megabytes at 10,000 steps), itself likely to be
/// cancelled by the next key. Unchanged segments are shared among the kept answers.
type KeptTokens = Mutex<HashMap<Uri, VecDeque<(String, Arc<tokens::TokenAnswer>)>>>;

/// How many token answers are kept per document (see [`KeptTokens`]).
const KEPT_TOKEN_ANSWERS: usize = 8;

/// Cancels a request's snapshot when the request's future is dropped before its work finished
/// (the client sent `$/cancelRequest`, and tower-lsp-server dropped the handler).
struct CancelOnDrop(Option<salsa::CancellationToken>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.cancel();
        }
    }
}

/// The language server of one editor session.
pub struct Backend {
    client: Client,
    state: Arc<Mutex<State>>,
    due: Arc<Due>,
    publisher: std::sync::Once,
    kept_tokens: KeptTokens,
    next_tokens: AtomicU64,
    stores: Stores,
    pins: Pins,
    views: Views,
    watched: Watched,
    previews: Previews,
    launcher: Launcher,
    refresh_support: AtomicBool,
    lens_refresh_support: AtomicBool,
    /// What time it is: the server shows ages of runs, and reads no other time.
    clock: Arc<dyn Clock>,
    /// Where the biggest answers go as ready JSON when the server runs behind the relay.
    prepared: Option<Arc<Prepared>>,
    /// The JSON of each group's document symbols in the last answer, per document (see
    /// `outline::document_symbols_json`).
    kept_symbols: Mutex<HashMap<Uri, Arc<Mutex<outline::SymbolsJson>>>>,
}

impl Backend {
    /// A server talking to `client`, with an empty database and what its starter handed it.
    pub fn new(client: Client, given: Capabilities) -> Self {
        Backend {
            client,
            state: Arc::default(),
            due: Arc::default(),
            publisher: std::sync::Once::new(),
            kept_tokens: Mutex::default(),
            next_tokens: AtomicU64::new(1),
            stores: Stores::new(given.reel_home.clone())
                .with_store_url(given.store_url, given.store_auth),
            clock: given.clock,
            pins: Pins::default(),
            views: Views::default(),
            watched: Watched::default(),
            previews: Previews::default(),
            launcher: Launcher::new(given.reel_exe, given.reel_home, given.scratch_dir),
            refresh_support: AtomicBool::new(false),
            lens_refresh_support: AtomicBool::new(false),
            prepared: None,
            kept_symbols: Mutex::default(),
        }
    }

    /// The same server behind the stdio relay, which puts `prepared` answers in place of their
    /// stand-ins (see [`crate::prepared`]).
    pub fn with_prepared(mut self, prepared: Arc<Prepared>) -> Self {
        self.prepared = Some(prepared);
        self
    }

    /// `answer` as the server returns it: behind the relay, serialized off the async threads
    /// and replaced by `stand_in` of its ticket, so tower-lsp-server never builds its tree.
    async fn prepare<T: serde::Serialize + Send + 'static>(
        &self,
        answer: T,
        stand_in: impl FnOnce(String) -> T,
    ) -> Result<T> {
        let Some(prepared) = self.prepared.clone() else {
            return Ok(answer);
        };
        match tokio::task::spawn_blocking(move || prepared.hold(&answer).map_err(|_| answer)).await
        {
            Ok(Ok(ticket)) => Ok(stand_in(ticket)),
            Ok(Err(answer)) => Ok(answer),
            Err(e) => Err(Error {
                code: ErrorCode::InternalError,
                message: format!("the request failed: {e}").into(),
                data: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Starts the task that publishes diagnostics (once).
    fn start_publisher(&self) {
        self.publisher.call_once(|| {
            let (state, client, due) = (self.state.clone(), self.client.clone(), self.due.clone());
            tokio::spawn(publish_loop(state, client, due));
        });
    }

    /// Sets the text of `uri` (creating its input on first sight). Synchronous on purpose.
    fn set_text(&self, uri: &Uri, text: String, version: i32) {
        let mut state = self.lock();
        let state = &mut *state;
        match state.docs.get_mut(uri) {
            Some(doc) => {
                doc.file.set_text(&mut state.db).to(text.into());
                doc.version = version;
                doc.published = None;
            }
            None => {
                let (path, tool_dir) = paths(uri);
                let file = SourceFile::new(&state.db, path, tool_dir, text.into());
                state.docs.insert(
                    uri.clone(),
                    Doc {
                        file,
                        version,
                        published: None,
                    },
                );
            }
        }
    }

    /// Applies `changes` in order to the open text of `uri` (ranges in the text as each change
    /// finds it, as the protocol says); a change without a range replaces the whole text.
    /// Synchronous on purpose, like [`Backend::set_text`]. Unknown documents are ignored.
    fn apply_changes(&self, uri: &Uri, changes: Vec<TextDocumentContentChangeEvent>, version: i32) {
        let mut state = self.lock();
        let state = &mut *state;
        let Some(doc) = state.docs.get_mut(uri) else {
            return;
        };
        let old: &str = doc.file.text(&state.db);
        let mut text: Option<String> = None;
        for change in changes {
            match change.range {
                Some(range) => {
                    // The first change is in the text the database holds, which is most often
                    // indexed already (by the last diagnostics); later ones in the new text.
                    let span = match &text {
                        None => Lines::indexed(old, line_index(&state.db, doc.file)).span(range),
                        Some(t) => Lines::new(t).span(range),
                    };
                    let before = text.as_deref().unwrap_or(old);
                    let (from, to) = (span.start as usize, span.end as usize);
                    let mut next =
                        String::with_capacity(before.len() - (to - from) + change.text.len());
                    next.push_str(&before[..from]);
                    next.push_str(&change.text);
                    next.push_str(&before[to..]);
                    text = Some(next);
                }
                None => text = Some(change.text),
            }
        }
        if let Some(text) = text {
            doc.file.set_text(&mut state.db).to(text.into());
        }
        doc.version = version;
    }

    /// Runs `f` on a snapshot of the database for `uri` (see [`query`]), once the diagnostics
    /// of its latest version are published: after a key, the editor sees its mistakes first,
    /// and the requests then share what the check computed.
    async fn query<T: Send + 'static>(
        &self,
        uri: &Uri,
        f: impl FnOnce(&Ctx<'_>) -> T + Send + 'static,
    ) -> Result<Option<T>> {
        self.due.settled(uri).await;
        query(&self.state, uri, f).await
    }

    /// The semantic tokens of `uri`, kept under a new result id for the next delta. `last`, an
    /// answer of the same text, is reused as it is.
    async fn full_tokens(
        &self,
        uri: &Uri,
        last: Option<Arc<tokens::TokenAnswer>>,
    ) -> Result<Option<(String, Arc<tokens::TokenAnswer>)>> {
        let Some(data) = self
            .query(uri, move |cx| match last {
                Some(last) if Arc::ptr_eq(&last.text, cx.file.text(cx.db)) => last,
                _ => Arc::new(tokens::TokenAnswer::of(cx)),
            })
            .await?
        else {
            return Ok(None);
        };
        let id = self.next_tokens.fetch_add(1, Ordering::Relaxed).to_string();
        let mut kept = self.kept_tokens.lock().unwrap_or_else(|p| p.into_inner());
        let answers = kept.entry(uri.clone()).or_default();
        if answers.len() == KEPT_TOKEN_ANSWERS {
            answers.pop_front();
        }
        answers.push_back((id.clone(), data.clone()));
        Ok(Some((id, data)))
    }
}

/// Full semantic tokens that stand in for a prepared answer: no data, the ticket as result id.
fn tokens_stand_in(ticket: String) -> SemanticTokensResult {
    SemanticTokensResult::Tokens(SemanticTokens {
        result_id: Some(ticket),
        data: Vec::new(),
    })
}

/// Document symbols that stand in for a prepared answer: one symbol named by the ticket.
fn symbols_stand_in(ticket: String) -> DocumentSymbolResponse {
    #[allow(deprecated)] // `deprecated` is a field lsp-types still requires
    DocumentSymbolResponse::Nested(vec![DocumentSymbol {
        name: ticket,
        detail: None,
        kind: SymbolKind::NULL,
        tags: None,
        deprecated: None,
        range: Range::default(),
        selection_range: Range::default(),
        children: None,
    }])
}

/// Folding ranges that stand in for a prepared answer: one range whose collapsed text is the
/// ticket.
fn folds_stand_in(ticket: String) -> Vec<FoldingRange> {
    vec![FoldingRange {
        start_line: 0,
        start_character: None,
        end_line: 0,
        end_character: None,
        kind: None,
        collapsed_text: Some(ticket),
    }]
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock cannot leave the database half-written (setters are
    // atomic), so a poisoned lock is still usable.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on a snapshot of the database for `uri`, off the async threads; `Ok(None)` when the
/// document is not open, `ContentModified` when an edit cancelled it. Dropped before it is done
/// (the client cancelled the request), it cancels the snapshot, so the work stops too.
async fn query<T: Send + 'static>(
    state: &Mutex<State>,
    uri: &Uri,
    f: impl FnOnce(&Ctx<'_>) -> T + Send + 'static,
) -> Result<Option<T>> {
    let (db, file) = {
        let state = lock(state);
        let Some(doc) = state.docs.get(uri) else {
            return Ok(None);
        };
        (state.db.clone(), doc.file)
    };
    let mut cancel = CancelOnDrop(Some(db.cancellation_token()));
    let joined = tokio::task::spawn_blocking(move || {
        salsa::Cancelled::catch(AssertUnwindSafe(|| f(&Ctx::new(&db, file))))
    })
    .await;
    cancel.0 = None;
    match joined {
        Ok(Ok(v)) => Ok(Some(v)),
        Ok(Err(_)) => Err(Error {
            code: ErrorCode::ContentModified,
            message: "the document changed; ask again".into(),
            data: None,
        }),
        Err(e) => Err(Error {
            code: ErrorCode::InternalError,
            message: format!("the request failed: {e}").into(),
            data: None,
        }),
    }
}

/// Publishes the diagnostics of the documents marked due, one at a time, each for its latest
/// version: computed on a snapshot, published only if no edit came in between (the edit that
/// came marked the document due again, and its own computation follows).
///
/// Once nothing has been due for [`WARM_AFTER`], it warms what the first request after a check
/// would otherwise compute on its own (see [`warm`]). Not sooner: while keys keep coming, each
/// warm-up would be cancelled by the next key after taking a core from the next check and the
/// requests waiting for it (at 10,000 steps the tree costs as much as the check).
async fn publish_loop(state: Arc<Mutex<State>>, client: Client, due: Arc<Due>) {
    loop {
        due.wake.notified().await;
        let mut last = None;
        loop {
            while let Some(uri) = due.take() {
                publish_one(&state, &client, uri.clone()).await;
                due.done();
                last = Some(uri);
            }
            tokio::select! {
                // An edit came: publish it, and wait for quiet again.
                () = due.wake.notified() => continue,
                () = tokio::time::sleep(WARM_AFTER) => break,
            }
        }
        if let Some(uri) = last {
            warm(&state, &uri).await;
        }
    }
}

/// How long the documents must be quiet (no edit due) before the publish loop warms the last
/// one: longer than the pause between two keys of someone typing.
const WARM_AFTER: Duration = Duration::from_millis(300);

/// Computes, for `uri`'s current version, the syntax tree that hover, definition and
/// references read (assembled once per revision), so that the first of them after an edit does
/// not pay for it. On a snapshot like any request: the next edit cancels it.
async fn warm(state: &Mutex<State>, uri: &Uri) {
    let _ = query(state, uri, |cx| {
        let _ = cx.parsed();
    })
    .await;
}

/// Computes and publishes the diagnostics of `uri`'s current version, unless an edit comes first.
async fn publish_one(state: &Mutex<State>, client: &Client, uri: Uri) {
    // An edit that came while this version was being published marked it due again.
    let Some(version) = lock(state)
        .docs
        .get(&uri)
        .filter(|d| d.published != Some(d.version))
        .map(|d| d.version)
    else {
        return;
    };
    let for_uri = uri.clone();
    let Ok(Some(diags)) = query(state, &uri, move |cx| {
        file_diagnostics(cx.db, cx.file)
            .iter()
            .map(|d| to_lsp(d, &cx.lines, &for_uri))
            .collect::<Vec<_>>()
    })
    .await
    else {
        return;
    };
    let current = match lock(state).docs.get_mut(&uri) {
        Some(doc) if doc.version == version => {
            doc.published = Some(version);
            true
        }
        _ => false,
    };
    if current {
        client.publish_diagnostics(uri, diags, Some(version)).await;
    }
}

/// The path the compiler sees for a document, and the directory its user tools run in.
fn paths(uri: &Uri) -> (String, String) {
    match uri.to_file_path() {
        Some(path) => {
            let dir = path
                .parent()
                .unwrap_or(Path::new("."))
                .to_string_lossy()
                .into_owned();
            (path.to_string_lossy().into_owned(), dir)
        }
        None => (uri.as_str().to_string(), ".".to_string()),
    }
}

fn failed(message: String) -> Error {
    Error {
        code: ErrorCode::ServerError(-32803),
        message: message.into(),
        data: None,
    }
}

fn lsp_kind(kind: ItemKind) -> CompletionItemKind {
    match kind {
        ItemKind::Step => CompletionItemKind::VARIABLE,
        ItemKind::Variable => CompletionItemKind::FIELD,
        ItemKind::Field => CompletionItemKind::FIELD,
        ItemKind::Function => CompletionItemKind::FUNCTION,
        ItemKind::Tool => CompletionItemKind::MODULE,
        ItemKind::Property => CompletionItemKind::PROPERTY,
        ItemKind::Keyword => CompletionItemKind::KEYWORD,
    }
}

fn workspace_edit(uri: &Uri, edits: Vec<TextEdit>) -> WorkspaceEdit {
    WorkspaceEdit {
        changes: Some(HashMap::from([(uri.clone(), edits)])),
        ..Default::default()
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        self.start_publisher();
        let workspace = params.capabilities.workspace;
        let refresh = workspace
            .as_ref()
            .and_then(|w| w.inlay_hint.as_ref())
            .and_then(|h| h.refresh_support)
            .unwrap_or(false);
        self.refresh_support.store(refresh, Ordering::Relaxed);
        let lens_refresh = workspace
            .as_ref()
            .and_then(|w| w.code_lens.as_ref())
            .and_then(|l| l.refresh_support)
            .unwrap_or(false);
        self.lens_refresh_support
            .store(lens_refresh, Ordering::Relaxed);
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "reel".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            capabilities: ServerCapabilities {
                // Incremental: a keystroke in a large file sends one character, not the file.
                text_document_sync: Some(TextDocumentSyncCapability::Kind(
                    TextDocumentSyncKind::INCREMENTAL,
                )),
                hover_provider: Some(HoverProviderCapability::Simple(true)),
                definition_provider: Some(OneOf::Left(true)),
                references_provider: Some(OneOf::Left(true)),
                rename_provider: Some(OneOf::Left(true)),
                document_symbol_provider: Some(OneOf::Left(true)),
                folding_range_provider: Some(FoldingRangeProviderCapability::Simple(true)),
                document_formatting_provider: Some(OneOf::Left(true)),
                completion_provider: Some(CompletionOptions {
                    trigger_characters: Some(vec![".".into()]),
                    ..Default::default()
                }),
                signature_help_provider: Some(SignatureHelpOptions {
                    trigger_characters: Some(vec!["(".into(), ",".into()]),
                    ..Default::default()
                }),
                code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
                inlay_hint_provider: Some(OneOf::Left(true)),
                code_lens_provider: Some(CodeLensOptions {
                    resolve_provider: Some(false),
                }),
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands: commands::ALL.iter().map(|c| c.to_string()).collect(),
                    ..Default::default()
                }),
                semantic_tokens_provider: Some(
                    SemanticTokensServerCapabilities::SemanticTokensOptions(
                        SemanticTokensOptions {
                            legend: tokens::legend(),
                            // Deltas and ranges: a big file's tokens are not sent whole per key.
                            full: Some(SemanticTokensFullOptions::Delta { delta: Some(true) }),
                            range: Some(true),
                            ..Default::default()
                        },
                    ),
                ),
                ..Default::default()
            },
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        if !self.refresh_support.load(Ordering::Relaxed) {
            return;
        }
        // Live refresh: while the editor is open, watch the latest runs of the flows whose hints
        // were asked for, and ask for new hints when one changed (a run started, its journal grew).
        let client = self.client.clone();
        let stores = self.stores.clone();
        let pins = self.pins.clone();
        let watched = self.watched.clone();
        let lenses = self.lens_refresh_support.load(Ordering::Relaxed);
        tokio::spawn(async move {
            let mut last = BTreeMap::new();
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let (s, p, w) = (stores.clone(), pins.clone(), watched.clone());
                let Ok(now) =
                    tokio::task::spawn_blocking(move || hints::fingerprint(&s, &p, &w)).await
                else {
                    continue;
                };
                if hints::changed(&last, &now) {
                    if client.inlay_hint_refresh().await.is_err() {
                        break;
                    }
                    // The lens naming the shown run changes with it (a new run, a new status).
                    if lenses {
                        let _ = client.code_lens_refresh().await;
                    }
                }
                last = now;
            }
        });
    }

    async fn semantic_tokens_full(
        &self,
        params: SemanticTokensParams,
    ) -> Result<Option<SemanticTokensResult>> {
        let Some((id, data)) = self.full_tokens(&params.text_document.uri, None).await? else {
            return Ok(None);
        };
        let answer = SemanticTokensResult::Tokens(SemanticTokens {
            result_id: Some(id),
            data: data.encode(),
        });
        Ok(Some(self.prepare(answer, tokens_stand_in).await?))
    }

    async fn semantic_tokens_full_delta(
        &self,
        params: SemanticTokensDeltaParams,
    ) -> Result<Option<SemanticTokensFullDeltaResult>> {
        let uri = params.text_document.uri;
        let previous = self
            .kept_tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&uri)
            .and_then(|answers| {
                answers
                    .iter()
                    .rev()
                    .find(|(id, _)| *id == params.previous_result_id)
            })
            .map(|(_, data)| data.clone());
        let Some((id, data)) = self.full_tokens(&uri, previous.clone()).await? else {
            return Ok(None);
        };
        Ok(Some(match previous {
            Some(old) => SemanticTokensFullDeltaResult::TokensDelta(SemanticTokensDelta {
                result_id: Some(id),
                edits: data.delta_from(&old),
            }),
            // Not a result this server still keeps: the whole list.
            None => {
                let answer = SemanticTokensFullDeltaResult::Tokens(SemanticTokens {
                    result_id: Some(id),
                    data: data.encode(),
                });
                self.prepare(answer, |ticket| match tokens_stand_in(ticket) {
                    SemanticTokensResult::Tokens(tokens) => {
                        SemanticTokensFullDeltaResult::Tokens(tokens)
                    }
                    SemanticTokensResult::Partial(_) => unreachable!("a stand-in is whole"),
                })
                .await?
            }
        }))
    }

    async fn semantic_tokens_range(
        &self,
        params: SemanticTokensRangeParams,
    ) -> Result<Option<SemanticTokensRangeResult>> {
        let range = params.range;
        self.query(&params.text_document.uri, move |cx| {
            SemanticTokensRangeResult::Tokens(SemanticTokens {
                result_id: None,
                data: tokens::semantic_tokens_in(cx, cx.lines.span(range)),
            })
        })
        .await
    }

    async fn inlay_hint(&self, params: InlayHintParams) -> Result<Option<Vec<InlayHint>>> {
        let uri = params.text_document.uri.clone();
        let (stores, pins, views, watched) = (
            self.stores.clone(),
            self.pins.clone(),
            self.views.clone(),
            self.watched.clone(),
        );
        let range = params.range;
        self.query(&params.text_document.uri, move |cx| {
            // The editor asks for the lines it shows.
            let mut all = hints::inlay_hints(cx, &uri, &stores, &pins, &views, &watched);
            all.retain(|h| range.start <= h.position && h.position <= range.end);
            all
        })
        .await
    }

    async fn code_lens(&self, params: CodeLensParams) -> Result<Option<Vec<CodeLens>>> {
        let uri = params.text_document.uri.clone();
        let (stores, pins, views) = (self.stores.clone(), self.pins.clone(), self.views.clone());
        let (previews, launcher) = (self.previews.clone(), self.launcher.clone());
        let client = self.client.clone();
        let refresh = self.lens_refresh_support.load(Ordering::Relaxed);
        let now = self.clock.now_ms();
        self.query(&params.text_document.uri, move |cx| {
            // A fork preview that is on follows the text: each lens request after an edit.
            let previewed = lenses::previewed(cx, &uri, &previews);
            let errors = !previewed.is_empty()
                && file_diagnostics(cx.db, cx.file)
                    .iter()
                    .any(|d| d.is_error());
            for (_, flow) in previewed {
                let key = (uri.as_str().to_string(), flow);
                if errors {
                    previews.cannot_check(&key, cx.text, "fix the errors in the text first");
                } else {
                    let path = Path::new(cx.file.path(cx.db));
                    let client = refresh.then_some(&client);
                    previews.follow(&key, cx.text, path, &launcher, client);
                }
            }
            lenses::code_lenses(cx, &uri, &stores, &pins, &views, &previews, now)
        })
        .await
    }

    async fn execute_command(
        &self,
        params: ExecuteCommandParams,
    ) -> Result<Option<tower_lsp_server::lsp_types::LSPAny>> {
        let open_text = params
            .arguments
            .first()
            .and_then(|v| v.as_str())
            .and_then(|u| u.parse::<Uri>().ok())
            .and_then(|uri| {
                let state = self.lock();
                let doc = state.docs.get(&uri)?;
                Some(doc.file.text(&state.db).clone())
            });
        let env = commands::Env {
            client: self.client.clone(),
            stores: self.stores.clone(),
            pins: self.pins.clone(),
            previews: self.previews.clone(),
            launcher: self.launcher.clone(),
            now_ms: self.clock.now_ms(),
            refresh_hints: self.refresh_support.load(Ordering::Relaxed),
            refresh_lenses: self.lens_refresh_support.load(Ordering::Relaxed),
            open_text,
        };
        commands::execute(&env, &params.command, &params.arguments).await
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let doc = params.text_document;
        self.set_text(&doc.uri, doc.text, doc.version);
        self.start_publisher();
        self.due.mark(doc.uri);
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let doc = params.text_document;
        self.apply_changes(&doc.uri, params.content_changes, doc.version);
        self.due.mark(doc.uri);
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let uri = params.text_document.uri;
        self.lock().docs.remove(&uri);
        self.kept_tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uri);
        self.kept_symbols
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uri);
        self.client.publish_diagnostics(uri, Vec::new(), None).await;
    }

    async fn hover(&self, params: HoverParams) -> Result<Option<Hover>> {
        let p = params.text_document_position_params;
        let (stores, pins, views) = (self.stores.clone(), self.pins.clone(), self.views.clone());
        Ok(self
            .query(&p.text_document.uri, move |cx| {
                let offset = cx.lines.offset(p.position);
                let (mut text, span) = hover::hover(cx, offset)?;
                if let Some(run) = hints::step_details(cx, offset, &stores, &pins, &views) {
                    text.push_str("\n\n---\n\n");
                    text.push_str(&run);
                }
                Some(Hover {
                    contents: HoverContents::Markup(MarkupContent {
                        kind: MarkupKind::Markdown,
                        value: text,
                    }),
                    range: Some(cx.lines.range(span)),
                })
            })
            .await?
            .flatten())
    }

    async fn goto_definition(
        &self,
        params: GotoDefinitionParams,
    ) -> Result<Option<GotoDefinitionResponse>> {
        let p = params.text_document_position_params;
        let uri = p.text_document.uri.clone();
        Ok(self
            .query(&p.text_document.uri, move |cx| {
                let file = &cx.parsed().file;
                let occ = names::occurrence_at(file, cx.lines.offset(p.position))?;
                let def = names::declaration(file, &occ.symbol)?;
                Some(GotoDefinitionResponse::Scalar(Location::new(
                    uri,
                    cx.lines.range(def),
                )))
            })
            .await?
            .flatten())
    }

    async fn references(&self, params: ReferenceParams) -> Result<Option<Vec<Location>>> {
        let p = params.text_document_position;
        let with_decl = params.context.include_declaration;
        let uri = p.text_document.uri.clone();
        Ok(self
            .query(&p.text_document.uri, move |cx| {
                let file = &cx.parsed().file;
                let occ = names::occurrence_at(file, cx.lines.offset(p.position))?;
                Some(
                    names::occurrences_of(file, &occ.symbol)
                        .iter()
                        .filter(|o| with_decl || !o.definition)
                        .map(|o| Location::new(uri.clone(), cx.lines.range(o.span)))
                        .collect(),
                )
            })
            .await?
            .flatten())
    }

    async fn rename(&self, params: RenameParams) -> Result<Option<WorkspaceEdit>> {
        let p = params.text_document_position;
        let uri = p.text_document.uri.clone();
        let new_name = params.new_name;
        let result = self
            .query(&p.text_document.uri, move |cx| {
                edits::rename(cx, cx.lines.offset(p.position), &new_name).map(|edits| {
                    edits
                        .into_iter()
                        .map(|(span, text)| TextEdit::new(cx.lines.range(span), text))
                        .collect::<Vec<_>>()
                })
            })
            .await?;
        match result {
            None => Ok(None),
            Some(Ok(edits)) => Ok(Some(workspace_edit(&uri, edits))),
            Some(Err(why)) => Err(failed(why)),
        }
    }

    async fn document_symbol(
        &self,
        params: DocumentSymbolParams,
    ) -> Result<Option<DocumentSymbolResponse>> {
        if let Some(prepared) = self.prepared.clone() {
            // Behind the relay: made JSON from the last answer's pieces, on the blocking thread.
            let uri = &params.text_document.uri;
            let kept = self
                .kept_symbols
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(uri.clone())
                .or_default()
                .clone();
            let Some(json) = self
                .query(uri, move |cx| {
                    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                    outline::document_symbols_json(cx, &mut kept)
                })
                .await?
            else {
                // Not an open document: keep nothing for it.
                self.kept_symbols
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(uri);
                return Ok(None);
            };
            if let Ok(json) = json {
                return Ok(Some(symbols_stand_in(prepared.hold_json(json))));
            }
        }
        let Some(answer) = self
            .query(&params.text_document.uri, |cx| {
                DocumentSymbolResponse::Nested(outline::document_symbols(cx))
            })
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(self.prepare(answer, symbols_stand_in).await?))
    }

    async fn folding_range(&self, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
        let Some(answer) = self
            .query(&params.text_document.uri, outline::folding_ranges)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(self.prepare(answer, folds_stand_in).await?))
    }

    async fn formatting(&self, params: DocumentFormattingParams) -> Result<Option<Vec<TextEdit>>> {
        Ok(self
            .query(&params.text_document.uri, |cx| {
                let formatted = edits::format(cx)?;
                let whole = cx.lines.range(reel_syntax::Span::new(0, cx.text.len()));
                Some(vec![TextEdit::new(whole, formatted)])
            })
            .await?
            .flatten())
    }

    async fn completion(&self, params: CompletionParams) -> Result<Option<CompletionResponse>> {
        let p = params.text_document_position;
        self.query(&p.text_document.uri, move |cx| {
            let proposals = completion::complete(cx, cx.lines.offset(p.position));
            let items = proposals
                .items
                .into_iter()
                .map(|i| CompletionItem {
                    label: i.label,
                    kind: Some(lsp_kind(i.kind)),
                    detail: i.detail,
                    ..Default::default()
                })
                .collect();
            CompletionResponse::List(CompletionList {
                is_incomplete: proposals.incomplete,
                items,
            })
        })
        .await
    }

    async fn signature_help(&self, params: SignatureHelpParams) -> Result<Option<SignatureHelp>> {
        let p = params.text_document_position_params;
        Ok(self
            .query(&p.text_document.uri, move |cx| {
                let (builtin, arg) = signature::call_at(cx.text, cx.lines.offset(p.position))?;
                Some(SignatureHelp {
                    signatures: builtin
                        .signatures
                        .iter()
                        .map(|s| SignatureInformation {
                            label: s.to_string(),
                            documentation: Some(Documentation::String(builtin.doc.into())),
                            parameters: None,
                            active_parameter: None,
                        })
                        .collect(),
                    active_signature: Some(0),
                    active_parameter: Some(arg),
                })
            })
            .await?
            .flatten())
    }

    async fn code_action(&self, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
        let uri = params.text_document.uri.clone();
        let range = params.range;
        let (stores, pins, views) = (self.stores.clone(), self.pins.clone(), self.views.clone());
        let previews = self.previews.clone();
        let now = self.clock.now_ms();
        self.query(&params.text_document.uri, move |cx| {
            let diags = file_diagnostics(cx.db, cx.file);
            let at = cx.lines.span(range).start as usize;
            let flows = lenses::flow_lenses(cx, &uri, &stores, &pins, &views, &previews, now);
            let actions = lenses::fork_actions(cx, &uri, at, flows);
            edits::fixes(cx, cx.lines.span(range))
                .into_iter()
                .map(|(title, idx, (span, text))| {
                    CodeActionOrCommand::CodeAction(CodeAction {
                        title,
                        kind: Some(CodeActionKind::QUICKFIX),
                        diagnostics: Some(vec![to_lsp(&diags[idx], &cx.lines, &uri)]),
                        edit: Some(workspace_edit(
                            &uri,
                            vec![TextEdit::new(cx.lines.range(span), text)],
                        )),
                        is_preferred: Some(true),
                        ..Default::default()
                    })
                })
                .chain(actions.into_iter().map(|command| {
                    CodeActionOrCommand::CodeAction(CodeAction {
                        title: command.title.clone(),
                        command: Some(command),
                        ..Default::default()
                    })
                }))
                .collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    const SRC: &str = "flow f {\n  step a = 1\n  step b = a + 1\n  output b\n}\n";

    fn state_with(text: &str) -> (Arc<Mutex<State>>, Uri) {
        let uri: Uri = "file:///t.reel".parse().unwrap();
        let mut state = State::default();
        let file = SourceFile::new(&state.db, "t.reel".into(), ".".into(), text.into());
        state.docs.insert(
            uri.clone(),
            Doc {
                file,
                version: 1,
                published: None,
            },
        );
        (Arc::new(Mutex::new(state)), uri)
    }

    /// Says, when dropped, whether the work it stands for got to its end.
    struct Finished(mpsc::Sender<bool>, bool);

    impl Drop for Finished {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }

    /// A request held at its start: the task answering it, a channel saying when its work has
    /// started, the one that lets it go on, and the one saying whether it finished.
    type Held = (
        tokio::task::JoinHandle<Result<Option<()>>>,
        mpsc::Receiver<()>,
        mpsc::Sender<()>,
        mpsc::Receiver<bool>,
    );

    /// A request whose work waits for `go` and then asks the checker for the diagnostics.
    fn held_request(state: &Arc<Mutex<State>>, uri: &Uri) -> Held {
        let (started_tx, started) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel();
        let (state, uri) = (state.clone(), uri.clone());
        let task = tokio::spawn(async move {
            query(&state, &uri, move |cx| {
                let mut finished = Finished(done_tx, false);
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                let _ = file_diagnostics(cx.db, cx.file);
                finished.1 = true;
            })
            .await
        });
        (task, started, go, done)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_the_client_cancels_stops_its_work() {
        let (state, uri) = state_with(SRC);
        let (task, started, go, done) = held_request(&state, &uri);
        started.recv().unwrap();
        // What tower-lsp-server does on `$/cancelRequest`: drop the request's future.
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        go.send(()).unwrap();
        assert_eq!(done.recv_timeout(Duration::from_secs(30)), Ok(false));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_an_edit_made_stale_answers_content_modified() {
        let (state, uri) = state_with(SRC);
        let (task, started, go, done) = held_request(&state, &uri);
        started.recv().unwrap();
        // The edit waits for the request's snapshot; the request stops at its next query.
        let edit = {
            let state = state.clone();
            let uri = uri.clone();
            std::thread::spawn(move || {
                let mut state = lock(&state);
                let state = &mut *state;
                let file = state.docs[&uri].file;
                file.set_text(&mut state.db)
                    .to("flow f {\n  output 1\n}\n".into());
            })
        };
        // The edit holds the state's lock while it waits for the snapshot, and raises salsa's
        // cancellation flag first thing: once it has the lock, give it a moment for that.
        while state.try_lock().is_ok() {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        go.send(()).unwrap();
        let answer = task.await.unwrap();
        assert_eq!(
            answer.map_err(|e| e.code),
            Err(ErrorCode::ContentModified),
            "the stale request is not answered from the old text"
        );
        assert_eq!(done.recv_timeout(Duration::from_secs(30)), Ok(false));
        edit.join().unwrap();
    }
}
