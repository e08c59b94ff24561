// The Reel extension: starts `reel lsp` as a language client and adds the client-side commands
// that the server's code lenses call (run a flow in a terminal, pick which past run to show).

import * as vscode from 'vscode';
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
} from 'vscode-languageclient/node';

import { resolveReelPath, findExecutable, ResolvedPath } from './reelPath';
import { commandLine } from './shell';
import { TraceChannel } from './trace';
import { HintLines, STANDINGS, Standing } from './decorations';

/** One run of a flow, as `reel.server.listRuns` returns it (newest first). */
interface RunSummary {
  id: string;
  status: string;
  started_at: string;
  ended_at: string | null;
  label: string;
  /** How long ago it started ("5 min ago"), worded by the server as its code lens words it. */
  age: string;
  detail: string;
}

/** Commands the server provides (vscode-languageclient registers them for us). */
const LIST_RUNS = 'reel.server.listRuns';
const SHOW_RUN = 'reel.server.showRun';

let client: LanguageClient | undefined;
let output: vscode.LogOutputChannel;
/** Where the protocol is traced: on as soon as `reel.trace.server` is, with no level to raise. */
let traceOutput: TraceChannel;
/** The colourable lines of each document with hints, by URI. */
const hintLines = new Map<string, HintLines>();
/** How each standing is drawn: a mark in the overview ruler and the gutter's edge. */
let hintDecorations: Map<Standing, vscode.TextEditorDecorationType>;
/** Start and stop requests run one after another, never interleaved. */
let lifecycle: Promise<void> = Promise.resolve();

export function activate(context: vscode.ExtensionContext): void {
  // vscode-languageclient 10+ needs a log output channel; without `log: true` start() fails
  // with an error that hides the real cause.
  output = vscode.window.createOutputChannel('Reel', { log: true });
  context.subscriptions.push(output);
  traceOutput = new TraceChannel(
    vscode.window.createOutputChannel('Reel Trace'),
    () => vscode.workspace.getConfiguration('reel').get<string>('trace.server'),
    new vscode.EventEmitter<vscode.LogLevel>(),
  );
  context.subscriptions.push(traceOutput);
  const colours: Record<Standing, string> = {
    failed: 'editorError.foreground',
    stale: 'editorWarning.foreground',
    waiting: 'editorInfo.foreground',
  };
  hintDecorations = new Map(
    STANDINGS.map((s) => {
      const colour = new vscode.ThemeColor(colours[s]);
      const type = vscode.window.createTextEditorDecorationType({
        overviewRulerColor: colour,
        overviewRulerLane: vscode.OverviewRulerLane.Right,
        borderColor: colour,
        borderStyle: 'solid',
        borderWidth: '0 0 0 2px',
      });
      context.subscriptions.push(type);
      return [s, type];
    }),
  );
  context.subscriptions.push(
    vscode.window.onDidChangeVisibleTextEditors((editors) => editors.forEach(decorate)),
    vscode.workspace.onDidCloseTextDocument((d) => hintLines.delete(d.uri.toString())),
  );

  context.subscriptions.push(
    vscode.commands.registerCommand('reel.restartServer', () => restart()),
    vscode.commands.registerCommand('reel.runFlow', (uri?: unknown, flow?: unknown) =>
      runFlow(uri, flow),
    ),
    vscode.commands.registerCommand('reel.pickRun', (uri?: unknown, flow?: unknown) =>
      pickRun(uri, flow),
    ),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('reel.path')) {
        output.info('reel.path changed: restarting the language server');
        void restart();
      }
      if (e.affectsConfiguration('reel.trace.server')) {
        traceOutput.settingChanged();
      }
    }),
    vscode.workspace.onDidChangeWorkspaceFolders(() => {
      // `${workspaceFolder}` in reel.path may now mean another folder.
      const configured = vscode.workspace.getConfiguration('reel').get<string>('path', 'reel');
      if (configured.includes('${workspaceFolder}') || isRelativePath(configured)) {
        void restart();
      }
    }),
  );

  void schedule(() => startClient());
}

export function deactivate(): Thenable<void> | undefined {
  return schedule(() => stopClient());
}

function schedule(task: () => Promise<void>): Promise<void> {
  lifecycle = lifecycle.then(task, task);
  return lifecycle;
}

function restart(): Promise<void> {
  return schedule(async () => {
    await stopClient();
    await startClient();
  });
}

function isRelativePath(p: string): boolean {
  return (p.startsWith('./') || p.startsWith('../') || p.startsWith('.\\') || p.startsWith('..\\'));
}

function reelPath(): ResolvedPath {
  const configured = vscode.workspace.getConfiguration('reel').get<string>('path', 'reel');
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  return resolveReelPath(configured, folder, process.env);
}

async function startClient(): Promise<void> {
  const path = reelPath();
  const command = findExecutable(path.resolved, process.env);
  if (command === undefined) {
    output.error(`cannot start the language server: ${describe(path)} was not found`);
    void cannotStart(path, 'was not found');
    return;
  }

  const serverOptions: ServerOptions = {
    // No `transport`: an Executable without one talks over stdio and gets no `--stdio` flag.
    command,
    args: ['lsp'],
    options: { cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath, env: process.env },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { language: 'reel', scheme: 'file' },
      { language: 'reel', scheme: 'untitled' },
    ],
    outputChannel: output,
    traceOutputChannel: traceOutput,
    middleware: {
      // The hints as they arrive colour their lines: no request of its own.
      provideInlayHints: async (document, viewPort, token, next) => {
        const hints = await next(document, viewPort, token);
        noteHints(document, viewPort, hints ?? []);
        return hints;
      },
    },
  };

  // The id `reel` makes the client read how much to trace (`messages`, `verbose`) from
  // `reel.trace.server`; the trace channel's level, which decides whether it traces at all,
  // follows the same setting.
  const next = new LanguageClient('reel', 'Reel Language Server', serverOptions, clientOptions);
  output.info(`starting ${command} lsp`);
  try {
    await next.start();
    client = next;
    output.info('language server started');
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    output.error(`cannot start the language server with ${describe(path)}: ${message}`);
    try {
      await next.dispose();
    } catch {
      // The client never ran; nothing to stop.
    }
    void cannotStart(path, `could not be started (${message})`);
  }
}

async function stopClient(): Promise<void> {
  const current = client;
  client = undefined;
  if (current === undefined) {
    return;
  }
  try {
    await current.stop();
  } catch (err) {
    output.warn(`stopping the language server: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function describe(path: ResolvedPath): string {
  return path.configured === path.resolved
    ? `\`${path.resolved}\``
    : `\`${path.resolved}\` (from \`${path.configured}\`)`;
}

async function cannotStart(path: ResolvedPath, what: string): Promise<void> {
  const choice = await vscode.window.showErrorMessage(
    `Reel: the language server ${describe(path)} ${what}. Install reel on your PATH or set ` +
      `the "reel.path" setting to the reel binary, then run "Reel: Restart Language Server".`,
    'Open Settings',
    'Show Output',
  );
  if (choice === 'Open Settings') {
    await vscode.commands.executeCommand('workbench.action.openSettings', 'reel.path');
  } else if (choice === 'Show Output') {
    output.show(true);
  }
}

// ---------------------------------------------------------------------------------------------
// Which document and flow a command is about.

interface Target {
  document: vscode.TextDocument;
  flow: string;
}

/**
 * The document and flow a command is about: the arguments a code lens passes
 * (`[uri, flow]`), or else the active Reel editor and a flow picked from it.
 */
async function target(uriArg: unknown, flowArg: unknown, action: string): Promise<Target | undefined> {
  if (typeof uriArg === 'string' || uriArg instanceof vscode.Uri) {
    const uri = typeof uriArg === 'string' ? vscode.Uri.parse(uriArg) : uriArg;
    const document = await vscode.workspace.openTextDocument(uri);
    const flow = typeof flowArg === 'string' ? flowArg : await pickFlow(document, undefined, action);
    return flow === undefined ? undefined : { document, flow };
  }
  const editor = vscode.window.activeTextEditor;
  if (editor === undefined || editor.document.languageId !== 'reel') {
    void vscode.window.showWarningMessage(`Reel: open a .reel file to ${action}.`);
    return undefined;
  }
  const flow = await pickFlow(editor.document, editor.selection.active, action);
  return flow === undefined ? undefined : { document: editor.document, flow };
}

interface FlowSymbol {
  name: string;
  range: vscode.Range;
}

/** The flows of a document: the server's top-level symbols for `flow` declarations. */
async function flowsOf(document: vscode.TextDocument): Promise<FlowSymbol[]> {
  let symbols: (vscode.DocumentSymbol | vscode.SymbolInformation)[] | undefined;
  try {
    symbols = await vscode.commands.executeCommand<
      (vscode.DocumentSymbol | vscode.SymbolInformation)[] | undefined
    >('vscode.executeDocumentSymbolProvider', document.uri);
  } catch {
    symbols = undefined;
  }
  if (symbols !== undefined && symbols.length > 0) {
    // The server reports a flow as a Module whose detail is "flow"; tools are Interfaces.
    return symbols
      .filter((s) => ('detail' in s ? s.detail === 'flow' : s.kind === vscode.SymbolKind.Module))
      .map((s) => ({ name: s.name, range: 'range' in s ? s.range : s.location.range }));
  }
  // No symbols (the server is not running): find `flow NAME {` declarations in the text.
  const flows: FlowSymbol[] = [];
  const re = /^[ \t]*flow[ \t]+([\p{L}_][\p{L}\p{N}_]*)/gmu;
  const text = document.getText();
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const start = document.positionAt(m.index);
    flows.push({ name: m[1] ?? '', range: new vscode.Range(start, start) });
  }
  return flows;
}

async function pickFlow(
  document: vscode.TextDocument,
  cursor: vscode.Position | undefined,
  action: string,
): Promise<string | undefined> {
  const flows = await flowsOf(document);
  if (flows.length === 0) {
    void vscode.window.showWarningMessage(`Reel: ${vscode.workspace.asRelativePath(document.uri)} declares no flow.`);
    return undefined;
  }
  const first = flows[0];
  if (flows.length === 1 && first !== undefined) {
    return first.name;
  }
  // The flow around the cursor comes first.
  const around = cursor === undefined ? undefined : flows.find((f) => f.range.contains(cursor));
  const ordered = around === undefined ? flows : [around, ...flows.filter((f) => f !== around)];
  const picked = await vscode.window.showQuickPick(
    ordered.map((f) => ({ label: f.name, description: f === around ? 'at the cursor' : undefined })),
    { title: `Reel: ${action}`, placeHolder: 'Which flow?' },
  );
  return picked?.label;
}

// ---------------------------------------------------------------------------------------------
// reel.runFlow

async function runFlow(uriArg: unknown, flowArg: unknown): Promise<void> {
  const t = await target(uriArg, flowArg, 'run a flow');
  if (t === undefined) {
    return;
  }
  const { document, flow } = t;
  if (document.uri.scheme !== 'file') {
    void vscode.window.showWarningMessage('Reel: save the file to disk before running its flow.');
    return;
  }
  if (document.isDirty && !(await document.save())) {
    void vscode.window.showErrorMessage(`Reel: could not save ${document.fileName}; the flow was not run.`);
    return;
  }
  const path = reelPath();
  const file = document.uri.fsPath;
  const cwd = vscode.Uri.joinPath(document.uri, '..').fsPath;
  const name = `Reel: ${flow}`;

  let terminal = vscode.window.terminals.find((t) => t.name === name && t.exitStatus === undefined);
  const terminalCwd = terminal && (terminal.creationOptions as vscode.TerminalOptions).cwd;
  const sameCwd =
    terminalCwd !== undefined &&
    (typeof terminalCwd === 'string' ? terminalCwd : terminalCwd.fsPath) === cwd;
  if (terminal !== undefined && !sameCwd) {
    // The same flow name in another directory: its runs live in another store.
    terminal.dispose();
    terminal = undefined;
  }
  terminal ??= vscode.window.createTerminal({ name, cwd, iconPath: new vscode.ThemeIcon('play') });
  terminal.show(true);
  // The binary the server runs, found on the extension host's PATH: the terminal's shell may
  // have another PATH.
  const reel = findExecutable(path.resolved, process.env) ?? path.resolved;
  terminal.sendText(commandLine([reel, 'run', file, '--flow', flow], vscode.env.shell), true);
}

// ---------------------------------------------------------------------------------------------
// reel.pickRun

async function runningClient(): Promise<LanguageClient | undefined> {
  await lifecycle;
  if (client === undefined || !client.isRunning()) {
    const choice = await vscode.window.showErrorMessage(
      'Reel: the language server is not running, so past runs cannot be listed.',
      'Restart Language Server',
      'Show Output',
    );
    if (choice === 'Restart Language Server') {
      await restart();
    } else if (choice === 'Show Output') {
      output.show(true);
    }
    return undefined;
  }
  return client;
}

type RunItem = vscode.QuickPickItem & { runId: string | null };

async function pickRun(uriArg: unknown, flowArg: unknown): Promise<void> {
  const t = await target(uriArg, flowArg, 'show another run');
  if (t === undefined || (await runningClient()) === undefined) {
    return;
  }
  const uri = t.document.uri.toString();
  let runs: RunSummary[];
  try {
    runs = (await vscode.commands.executeCommand<RunSummary[] | null>(LIST_RUNS, uri, t.flow)) ?? [];
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    output.error(`${LIST_RUNS}: ${message}`);
    void vscode.window.showErrorMessage(`Reel: could not list the runs of ${t.flow}: ${message}`);
    return;
  }
  if (runs.length === 0) {
    const choice = await vscode.window.showInformationMessage(
      `Reel: flow ${t.flow} has no recorded runs yet.`,
      'Run Flow',
    );
    if (choice === 'Run Flow') {
      await runFlow(uri, t.flow);
    }
    return;
  }
  const items: RunItem[] = [
    {
      label: '$(sync) Follow the latest run',
      description: 'show each new run as it is recorded',
      runId: null,
    },
    { label: 'Runs', kind: vscode.QuickPickItemKind.Separator, runId: null },
    ...runs.map((r) => ({
      label: r.label || r.id,
      description: `${r.status} · ${r.age}`,
      detail: r.detail || undefined,
      runId: r.id,
    })),
  ];
  const picked = await vscode.window.showQuickPick(items, {
    title: `Reel: runs of ${t.flow}`,
    placeHolder: 'Show which run’s results beside the steps?',
    matchOnDescription: true,
    matchOnDetail: true,
  });
  if (picked === undefined) {
    return;
  }
  try {
    await vscode.commands.executeCommand(SHOW_RUN, uri, t.flow, picked.runId);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    output.error(`${SHOW_RUN}: ${message}`);
    void vscode.window.showErrorMessage(`Reel: could not show that run: ${message}`);
  }
}

/** Records the hints of `range` of `document` and colours the editors showing it. */
function noteHints(document: vscode.TextDocument, range: vscode.Range, hints: vscode.InlayHint[]): void {
  const key = document.uri.toString();
  const lines = hintLines.get(key) ?? new HintLines();
  hintLines.set(key, lines);
  const label = (h: vscode.InlayHint) =>
    typeof h.label === 'string' ? h.label : h.label.map((p) => p.value).join('');
  lines.update(
    range.start.line,
    range.end.line,
    hints.map((h) => ({ line: h.position.line, label: label(h) })),
  );
  vscode.window.visibleTextEditors.filter((e) => e.document === document).forEach(decorate);
}

/** Draws the colour marks of the editor's document. */
function decorate(editor: vscode.TextEditor): void {
  const lines = hintLines.get(editor.document.uri.toString());
  for (const [standing, type] of hintDecorations) {
    const ranges = (lines?.linesOf(standing) ?? [])
      .filter((line) => line < editor.document.lineCount)
      .map((line) => editor.document.lineAt(line).range);
    editor.setDecorations(type, ranges);
  }
}
