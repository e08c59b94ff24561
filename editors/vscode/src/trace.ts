// The channel the language client writes its trace of the protocol to. vscode-languageclient
// (10 and later) traces only while its trace channel's log level is Trace, so with a log output
// channel `reel.trace.server` alone showed nothing until the user also raised the channel's
// level. This channel's level follows the setting instead, and it writes every line it is given.
// Only types come from `vscode`, so it is unit-tested without VS Code.

import type { Event, LogLevel, LogOutputChannel, OutputChannel, ViewColumn } from 'vscode';

/** `vscode.LogLevel.Off` and `.Trace` (the enum's values; the enum needs VS Code at run time). */
const OFF = 0 as LogLevel;
const TRACE = 1 as LogLevel;

/** The log level that makes the client trace as `reel.trace.server` says: Trace unless `off`. */
export function traceLevel(setting: string | undefined): LogLevel {
  return setting !== undefined && setting !== 'off' ? TRACE : OFF;
}

/** What `vscode.EventEmitter` offers that the channel uses. */
export interface Emitter<T> {
  event: Event<T>;
  fire(value: T): void;
  dispose(): void;
}

/** A log channel over a plain output channel, whose level is `reel.trace.server`'s. */
export class TraceChannel implements LogOutputChannel {
  constructor(
    private readonly channel: OutputChannel,
    private readonly setting: () => string | undefined,
    private readonly changed: Emitter<LogLevel>,
  ) {}

  get name(): string {
    return this.channel.name;
  }

  get logLevel(): LogLevel {
    return traceLevel(this.setting());
  }

  get onDidChangeLogLevel(): Event<LogLevel> {
    return this.changed.event;
  }

  /** To call when `reel.trace.server` changed: the client reads the level again and tells the server. */
  settingChanged(): void {
    this.changed.fire(this.logLevel);
  }

  trace(message: string): void {
    this.channel.appendLine(message);
  }

  debug(message: string): void {
    this.channel.appendLine(message);
  }

  info(message: string): void {
    this.channel.appendLine(message);
  }

  warn(message: string): void {
    this.channel.appendLine(message);
  }

  error(error: string | Error): void {
    this.channel.appendLine(error instanceof Error ? error.message : error);
  }

  append(value: string): void {
    this.channel.append(value);
  }

  appendLine(value: string): void {
    this.channel.appendLine(value);
  }

  replace(value: string): void {
    this.channel.replace(value);
  }

  clear(): void {
    this.channel.clear();
  }

  show(preserveFocus?: boolean): void;
  show(column?: ViewColumn, preserveFocus?: boolean): void;
  show(first?: boolean | ViewColumn, preserveFocus?: boolean): void {
    this.channel.show(typeof first === 'boolean' ? first : preserveFocus);
  }

  hide(): void {
    this.channel.hide();
  }

  dispose(): void {
    this.changed.dispose();
    this.channel.dispose();
  }
}
