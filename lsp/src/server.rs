//! The LSP server: open documents in one salsa database, edits applied in order, every request
//! answered from a database snapshot on a blocking thread with salsa cancellation caught.
//!
//! tower-lsp-server runs handlers concurrently, interleaving them at `.await`; so `did_open` and
//! `did_change` set the salsa input before their first `.await`, which keeps edits in arrival
//! order, and no lock is ever held across an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reel_compiler::queries::line_index;
use reel_compiler::{RootDb, SourceFile, file_diagnostics};
use reel_store::Clock;
use salsa::Setter;
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
use crate::preview::Previews;
use crate::runs::{Pins, Stores, Views};

/// An open document: its salsa input and the editor's version of it.
struct Doc {
    file: SourceFile,
    version: i32,
}

/// The database and the open documents.
#[derive(Default)]
struct State {
    db: RootDb,
    docs: HashMap<Uri, Doc>,
}

/// The language server of one editor session.
pub struct Backend {
    client: Client,
    state: Arc<Mutex<State>>,
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
}

impl Backend {
    /// A server talking to `client`, with an empty database and what its starter handed it.
    pub fn new(client: Client, given: Capabilities) -> Self {
        Backend {
            client,
            state: Arc::default(),
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
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the database half-written (setters are
        // atomic), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the text of `uri` (creating its input on first sight). Synchronous on purpose.
    fn set_text(&self, uri: &Uri, text: String, version: i32) {
        let mut state = self.lock();
        let state = &mut *state;
        match state.docs.get_mut(uri) {
            Some(doc) => {
                doc.file.set_text(&mut state.db).to(text.into());
                doc.version = version;
            }
            None => {
                let (path, tool_dir) = paths(uri);
                let file = SourceFile::new(&state.db, path, tool_dir, text.into());
                state.docs.insert(uri.clone(), Doc { file, version });
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

    /// Runs `f` on a snapshot of the database for `uri`, off the async threads; `Ok(None)` when
    /// the document is not open, `ContentModified` when an edit cancelled it.
    async fn query<T: Send + 'static>(
        &self,
        uri: &Uri,
        f: impl FnOnce(&Ctx<'_>) -> T + Send + 'static,
    ) -> Result<Option<T>> {
        let (db, file) = {
            let state = self.lock();
            let Some(doc) = state.docs.get(uri) else {
                return Ok(None);
            };
            (state.db.clone(), doc.file)
        };
        let joined = tokio::task::spawn_blocking(move || {
            salsa::Cancelled::catch(AssertUnwindSafe(|| f(&Ctx::new(&db, file))))
        })
        .await;
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

    async fn publish(&self, uri: Uri) {
        // The version before the snapshot: if it is still current after the query, nothing was
        // set in between, so the diagnostics are of that version; otherwise a later edit
        // publishes its own.
        let Some(version) = self.version(&uri) else {
            return;
        };
        let for_uri = uri.clone();
        let Ok(Some(diags)) = self
            .query(&uri, move |cx| {
                file_diagnostics(cx.db, cx.file)
                    .iter()
                    .map(|d| to_lsp(d, &cx.lines, &for_uri))
                    .collect::<Vec<_>>()
            })
            .await
        else {
            return;
        };
        if self.version(&uri) == Some(version) {
            self.client
                .publish_diagnostics(uri, diags, Some(version))
                .await;
        }
    }

    fn version(&self, uri: &Uri) -> Option<i32> {
        self.lock().docs.get(uri).map(|d| d.version)
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
                            full: Some(SemanticTokensFullOptions::Bool(true)),
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
        self.query(&params.text_document.uri, |cx| {
            SemanticTokensResult::Tokens(SemanticTokens {
                result_id: None,
                data: tokens::semantic_tokens(cx),
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
        self.query(&params.text_document.uri, move |cx| {
            hints::inlay_hints(cx, &uri, &stores, &pins, &views, &watched)
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
        self.publish(doc.uri).await;
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let doc = params.text_document;
        self.apply_changes(&doc.uri, params.content_changes, doc.version);
        self.publish(doc.uri).await;
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let uri = params.text_document.uri;
        self.lock().docs.remove(&uri);
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
                let occs = names::occurrences(&cx.parsed().file);
                let occ = names::at(&occs, cx.lines.offset(p.position))?;
                let def = names::definition(&occs, &occ.symbol)?;
                Some(GotoDefinitionResponse::Scalar(Location::new(
                    uri,
                    cx.lines.range(def.span),
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
                let occs = names::occurrences(&cx.parsed().file);
                let occ = names::at(&occs, cx.lines.offset(p.position))?;
                let symbol = occ.symbol.clone();
                Some(
                    occs.iter()
                        .filter(|o| o.symbol == symbol && (with_decl || !o.definition))
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
        self.query(&params.text_document.uri, |cx| {
            DocumentSymbolResponse::Nested(outline::document_symbols(cx))
        })
        .await
    }

    async fn folding_range(&self, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
        self.query(&params.text_document.uri, outline::folding_ranges)
            .await
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
            let items = completion::complete(cx, cx.lines.offset(p.position))
                .into_iter()
                .map(|i| CompletionItem {
                    label: i.label,
                    kind: Some(lsp_kind(i.kind)),
                    detail: i.detail,
                    ..Default::default()
                })
                .collect();
            CompletionResponse::Array(items)
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
