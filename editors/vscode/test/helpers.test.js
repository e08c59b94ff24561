// The extension's helpers that do not need VS Code: quoting a command line for the terminal,
// resolving `reel.path`. Runs against the compiled out/ files.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const OUT = path.join(__dirname, '..', 'out');
assert.ok(fs.existsSync(path.join(OUT, 'shell.js')), `${OUT} is not built: run npm run build first`);
const { commandLine, dialectOf } = require('../out/shell.js');
const { resolveReelPath, findExecutable } = require('../out/reelPath.js');

const awkward = [
  '/tmp/my flows/it\'s "here"/a.reel',
  'plain',
  '$HOME `x` $(y) \\z ; & | * ? ~ # !',
  '',
  'ünïcode dir/f.reel',
];

test('POSIX shells get every argument back unchanged', () => {
  assert.equal(dialectOf('/bin/bash'), 'posix');
  assert.equal(dialectOf('/usr/bin/zsh'), 'posix');
  const line = commandLine(['printf', '%s\\n', ...awkward], '/bin/bash');
  for (const sh of ['/bin/sh', '/bin/bash']) {
    if (!fs.existsSync(sh)) continue;
    const printed = execFileSync(sh, ['-c', line], { encoding: 'utf8' });
    assert.deepEqual(printed.split('\n').slice(0, -1), awkward, `${sh} -c ${line}`);
  }
  assert.equal(commandLine(['reel', 'run', '/a/b.reel', '--flow', 'hello'], '/bin/bash'), 'reel run /a/b.reel --flow hello');
});

test('PowerShell and cmd quoting', () => {
  assert.equal(dialectOf('C:\\Program Files\\PowerShell\\7\\pwsh.exe'), 'powershell');
  assert.equal(dialectOf('C:\\Windows\\System32\\cmd.exe'), 'cmd');
  assert.equal(
    commandLine(['C:\\Program Files\\reel.exe', 'run', "C:\\it's\\a.reel", '--flow', 'f'], 'pwsh.exe'),
    "& 'C:\\Program Files\\reel.exe' run 'C:\\it''s\\a.reel' --flow f",
  );
  assert.equal(
    commandLine(['C:\\Program Files\\reel.exe', 'run', 'C:\\a b\\x.reel'], 'cmd.exe'),
    '"C:\\Program Files\\reel.exe" run "C:\\a b\\x.reel"',
  );
});

test('reel.path: variables expanded, relative paths from the workspace folder', () => {
  const env = { REEL_BIN: '/opt/reel/bin' };
  assert.equal(resolveReelPath('reel', '/ws', env).resolved, 'reel');
  assert.equal(resolveReelPath('  ', '/ws', env).resolved, 'reel');
  assert.equal(resolveReelPath('${workspaceFolder}/target/debug/reel', '/ws', env).resolved, '/ws/target/debug/reel');
  assert.equal(resolveReelPath('./target/release/reel', '/ws', env).resolved, path.join('/ws', 'target/release/reel'));
  assert.equal(resolveReelPath('~/bin/reel', '/ws', env).resolved, path.join(os.homedir(), 'bin/reel'));
  assert.equal(resolveReelPath('${userHome}/reel', '/ws', env).resolved, `${os.homedir()}/reel`);
  assert.equal(resolveReelPath('${env:REEL_BIN}/reel', '/ws', env).resolved, '/opt/reel/bin/reel');
  assert.equal(resolveReelPath('${workspaceFolder}/reel', '/ws', env).configured, '${workspaceFolder}/reel');
});

test('the executable is found on PATH or at its path, and not when it is not there', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'reel-path-'));
  const exe = path.join(dir, 'reel');
  fs.writeFileSync(exe, '#!/bin/sh\n', { mode: 0o755 });
  const notExe = path.join(dir, 'reel-data');
  fs.writeFileSync(notExe, '', { mode: 0o644 });
  try {
    assert.equal(findExecutable('reel', { PATH: `/nonexistent${path.delimiter}${dir}` }), exe);
    assert.equal(findExecutable(exe, { PATH: '' }), exe);
    assert.equal(findExecutable('reel', { PATH: '/nonexistent' }), undefined);
    assert.equal(findExecutable(path.join(dir, 'missing'), { PATH: dir }), undefined);
    if (process.platform !== 'win32') {
      assert.equal(findExecutable(notExe, { PATH: '' }), undefined);
      assert.equal(findExecutable(dir, { PATH: '' }), undefined, 'a directory is not an executable');
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('reel.trace.server alone turns the trace on: the trace channel’s level follows it', () => {
  const { TraceChannel, traceLevel } = require('../out/trace.js');
  // vscode.LogLevel: Off = 0, Trace = 1. The language client traces only at Trace.
  assert.equal(traceLevel('off'), 0);
  assert.equal(traceLevel(undefined), 0);
  assert.equal(traceLevel('messages'), 1);
  assert.equal(traceLevel('verbose'), 1);

  const lines = [];
  const channel = {
    name: 'Reel Trace',
    appendLine: (l) => lines.push(l),
    append: (t) => lines.push(t),
    dispose: () => lines.push('<disposed>'),
  };
  const listeners = [];
  const emitter = {
    event: (f) => listeners.push(f),
    fire: (v) => listeners.forEach((f) => f(v)),
    dispose: () => {},
  };
  let setting = 'off';
  const trace = new TraceChannel(channel, () => setting, emitter);
  const seen = [];
  trace.onDidChangeLogLevel((level) => seen.push(level));
  assert.equal(trace.name, 'Reel Trace');
  assert.equal(trace.logLevel, 0);
  setting = 'verbose';
  trace.settingChanged();
  assert.equal(trace.logLevel, 1);
  setting = 'off';
  trace.settingChanged();
  assert.deepEqual(seen, [1, 0]);
  // Whatever the client hands it is written, at any level: the level only says whether to trace.
  trace.trace("[Trace - 10:00:00] Sending request 'initialize - (0)'.");
  trace.error(new Error('boom'));
  trace.dispose();
  assert.deepEqual(lines, ["[Trace - 10:00:00] Sending request 'initialize - (0)'.", 'boom', '<disposed>']);
});

test('hint colours: what a label says, and lines kept across requests for parts of a file', () => {
  const { classify, HintLines } = require('../out/decorations.js');
  assert.equal(classify('✓ 200 {"items":[1,2,3]} · 340ms'), undefined);
  assert.equal(classify('↷ skipped: `when` was false'), undefined);
  assert.equal(classify('✗ tool.http.status: HTTP 404 f… · 2 retries'), 'failed');
  assert.equal(classify('(stale) ✗ tool.exec.exit: …'), 'failed');
  assert.equal(classify('(stale) ✓ 3'), 'stale');
  assert.equal(classify('(?) ✓ 30'), 'stale');
  assert.equal(classify('⏸ waiting for signal `go`'), 'waiting');
  assert.equal(classify('◌ pending'), 'waiting');
  assert.equal(classify('… running · 2 calls'), 'waiting');

  const lines = new HintLines();
  lines.update(0, 50, [
    { line: 3, label: '✗ boom' },
    { line: 9, label: '(stale) ✓ 3' },
    { line: 40, label: '✓ fine' },
    { line: 45, label: '◌ pending' },
  ]);
  // A request for lines 30..60 replaces what was known there, and only there.
  lines.update(30, 60, [{ line: 55, label: '✗ later' }]);
  assert.deepEqual(lines.linesOf('failed'), [3, 55]);
  assert.deepEqual(lines.linesOf('stale'), [9]);
  assert.deepEqual(lines.linesOf('waiting'), []);
});
