// The Reel extension: starts `reel lsp` as a language client and puts VS Code's own UI in front of
// the commands the server executes: the server's lenses and code actions name server commands
// (`reel.server.*`, which work in any client); here they are pointed at client commands that
// add a quick pick of runs, an input box for a signal's payload, a terminal that follows the
// run's log, and saving the file before a run or a fork, and then call the server's command.

import * as vscode from 'vscode';
import * as fs from 'fs';
import {
  LanguageClient,
  LanguageClientOptions,
  Middleware,
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
const SERVER = {
  run: 'reel.server.run',
  signal: 'reel.server.signal',
  cancel: 'reel.server.cancel',
  resume: 'reel.server.resume',
  previewFork: 'reel.server.previewFork',
  stopPreview: 'reel.server.stopPreview',
  fork: 'reel.server.fork',
} as const;

/**
 * The client command that stands in front of each server command a lens or code action names:
 * same arguments, VS Code's UI first. A server command not listed here runs as it is.
 */
const IN_FRONT: Record<string, string> = {
  'reel.server.run': 'reel.runFlow',
  'reel.server.pickRun': 'reel.pickRun',
  'reel.server.signal': 'reel.sendSignal',
  'reel.server.cancel': 'reel.cancelRun',
  'reel.server.resume': 'reel.resumeRun',
  'reel.server.previewFork': 'reel.previewFork',
  'reel.server.stopPreview': 'reel.stopPreview',
  'reel.server.fork': 'reel.fork',
};

/** What a server command that starts `reel` answers. */
interface Started {
  log?: string;
  command?: string[];
  cwd?: string;
  run?: string;
  parent?: string;
}

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
    vscode.commands.registerCommand('reel.sendSignal', (...args: unknown[]) => sendSignal(args)),
    vscode.commands.registerCommand('reel.cancelRun', (...args: unknown[]) =>
      onRun(args, SERVER.cancel, 'cancel a run'),
    ),
    vscode.commands.registerCommand('reel.resumeRun', (...args: unknown[]) =>
      onRun(args, SERVER.resume, 'resume a run'),
    ),
    vscode.commands.registerCommand('reel.previewFork', (...args: unknown[]) =>
      onRun(args, SERVER.previewFork, 'preview a fork'),
    ),
    vscode.commands.registerCommand('reel.stopPreview', (...args: unknown[]) =>
      onRun(args, SERVER.stopPreview, 'stop the fork preview'),
    ),
    vscode.commands.registerCommand('reel.fork', (...args: unknown[]) => fork(args)),
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
    middleware,
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
// Lenses and code actions: VS Code's UI in front of the server's commands.

function inFront(command: vscode.Command | undefined): void {
  const client = command === undefined ? undefined : IN_FRONT[command.command];
  if (command !== undefined && client !== undefined) {
    command.command = client;
  }
}

const middleware: Middleware = {
  // The hints as they arrive colour their lines: no request of its own.
  async provideInlayHints(document, viewPort, token, next) {
    const hints = await next(document, viewPort, token);
    noteHints(document, viewPort, hints ?? []);
    return hints;
  },
  async provideCodeLenses(document, token, next) {
    const lenses = await next(document, token);
    for (const lens of lenses ?? []) {
      inFront(lens.command);
    }
    return lenses;
  },
  async provideCodeActions(document, range, context, token, next) {
    const actions = await next(document, range, context, token);
    for (const action of actions ?? []) {
      if (action instanceof vscode.CodeAction) {
        inFront(action.command);
      } else {
        inFront(action);
      }
    }
    return actions;
  },
};

/** Runs a server command; `undefined` when it failed (the server has shown why). */
async function server<T>(command: string, args: unknown[]): Promise<T | undefined> {
  if ((await runningClient()) === undefined) {
    return undefined;
  }
  try {
    return (await vscode.commands.executeCommand<T>(command, ...args)) ?? undefined;
  } catch (err) {
    // The server reports a failed command itself (window/showMessage); log it only.
    output.error(`${command}: ${err instanceof Error ? err.message : String(err)}`);
    return undefined;
  }
}

/** A file flow saved to disk, for a command that runs it: `undefined` when it cannot be. */
async function saved(t: Target, what: string): Promise<boolean> {
  if (t.document.uri.scheme !== 'file') {
    void vscode.window.showWarningMessage(`Reel: save the file to disk before ${what}.`);
    return false;
  }
  if (t.document.isDirty && !(await t.document.save())) {
    void vscode.window.showErrorMessage(`Reel: could not save ${t.document.fileName}; nothing was started.`);
    return false;
  }
  return true;
}

/** The run a lens names (third argument), if any. */
const runArg = (args: unknown[]): string | null => (typeof args[2] === 'string' ? args[2] : null);

// ---------------------------------------------------------------------------------------------
// reel.runFlow, reel.fork, reel.resumeRun: the server starts `reel`; a terminal follows its log.

async function runFlow(uriArg: unknown, flowArg: unknown): Promise<void> {
  const t = await target(uriArg, flowArg, 'run a flow');
  if (t === undefined || !(await saved(t, 'running its flow'))) {
    return;
  }
  const started = await server<Started>(SERVER.run, [t.document.uri.toString(), t.flow]);
  follow(started, `Reel: ${t.flow}`);
}

async function fork(args: unknown[]): Promise<void> {
  const t = await target(args[0], args[1], 'fork a run');
  if (t === undefined || !(await saved(t, 'forking a run with it'))) {
    return;
  }
  const started = await server<Started>(SERVER.fork, [t.document.uri.toString(), t.flow, runArg(args)]);
  follow(started, `Reel: fork of ${t.flow}`);
}

/** A server command about a run: `[uri, flow, run?]`; a log it starts is followed in a terminal. */
async function onRun(args: unknown[], command: string, action: string): Promise<void> {
  const t = await target(args[0], args[1], action);
  if (t === undefined) {
    return;
  }
  const answer = await server<Started>(command, [t.document.uri.toString(), t.flow, runArg(args)]);
  follow(answer, `Reel: ${t.flow}`);
}

async function sendSignal(args: unknown[]): Promise<void> {
  const t = await target(args[0], args[1], 'send a signal');
  if (t === undefined) {
    return;
  }
  const name = typeof args[3] === 'string' ? args[3] : null;
  const payload = await vscode.window.showInputBox({
    title: `Reel: signal ${name === null ? '' : `\`${name}\` `}to the run of ${t.flow}`,
    prompt: 'The payload, as JSON (empty: null)',
    placeHolder: '{"approved": true}',
    validateInput: (text) => {
      if (text.trim() === '') {
        return undefined;
      }
      try {
        JSON.parse(text);
        return undefined;
      } catch (err) {
        return `not JSON: ${err instanceof Error ? err.message : String(err)}`;
      }
    },
  });
  if (payload === undefined) {
    return;
  }
  const value: unknown = payload.trim() === '' ? null : JSON.parse(payload);
  const answer = await server<Started>(SERVER.signal, [
    t.document.uri.toString(),
    t.flow,
    runArg(args),
    name,
    value,
  ]);
  follow(answer, `Reel: ${t.flow}`);
}

/** Terminals following logs, by name: a new command of the same name replaces the old one. */
const following = new Map<string, vscode.Terminal>();

/** Shows the log of a `reel` the server started in a terminal that follows it as it grows. */
function follow(started: Started | undefined, name: string): void {
  const log = started?.log;
  if (log === undefined) {
    return;
  }
  following.get(name)?.dispose();
  const write = new vscode.EventEmitter<string>();
  let timer: NodeJS.Timeout | undefined;
  let offset = 0;
  const poll = (): void => {
    fs.stat(log, (err, stat) => {
      if (err !== null || stat.size <= offset) {
        return;
      }
      const stream = fs.createReadStream(log, { start: offset, end: stat.size - 1 });
      offset = stat.size;
      stream.on('data', (chunk) => write.fire(chunk.toString().replace(/\r?\n/g, '\r\n')));
    });
  };
  const pty: vscode.Pseudoterminal = {
    onDidWrite: write.event,
    open: () => {
      if (started?.command !== undefined) {
        write.fire(`$ ${commandLine(started.command, vscode.env.shell)}\r\n`);
      }
      poll();
      timer = setInterval(poll, 250);
    },
    close: () => {
      if (timer !== undefined) {
        clearInterval(timer);
      }
      if (following.get(name) === terminal) {
        following.delete(name);
      }
    },
  };
  const terminal = vscode.window.createTerminal({ name, pty, iconPath: new vscode.ThemeIcon('play') });
  following.set(name, terminal);
  terminal.show(true);
  output.info(`${name}: ${log}`);
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
