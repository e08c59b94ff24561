// Where the `reel` binary is: the `reel.path` setting with its variables expanded, and the
// executable it names looked up as a shell would. No `vscode` import, so it is unit-tested.

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export interface ResolvedPath {
  /** The setting as written. */
  configured: string;
  /** With `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~` expanded. */
  resolved: string;
}

/**
 * Expands the variables of `reel.path`. A relative path with a directory part
 * (`./target/debug/reel`) is taken from the first workspace folder; a bare name (`reel`) is
 * left for a PATH lookup.
 */
export function resolveReelPath(
  configured: string,
  workspaceFolder: string | undefined,
  env: NodeJS.ProcessEnv,
): ResolvedPath {
  const trimmed = configured.trim() === '' ? 'reel' : configured.trim();
  let resolved = trimmed
    .replace(/\$\{workspaceFolder\}/g, workspaceFolder ?? '.')
    .replace(/\$\{workspaceRoot\}/g, workspaceFolder ?? '.')
    .replace(/\$\{userHome\}/g, os.homedir())
    .replace(/\$\{env:([^}]+)\}/g, (_, name: string) => env[name] ?? '');
  if (resolved === '~' || resolved.startsWith('~/') || resolved.startsWith('~\\')) {
    resolved = path.join(os.homedir(), resolved.slice(1));
  }
  if (hasDirectory(resolved) && !path.isAbsolute(resolved) && workspaceFolder !== undefined) {
    resolved = path.join(workspaceFolder, resolved);
  }
  return { configured, resolved };
}

function hasDirectory(p: string): boolean {
  return p.includes('/') || (process.platform === 'win32' && p.includes('\\'));
}

function isExecutableFile(p: string): boolean {
  try {
    if (!fs.statSync(p).isFile()) {
      return false;
    }
    if (process.platform !== 'win32') {
      fs.accessSync(p, fs.constants.X_OK);
    }
    return true;
  } catch {
    return false;
  }
}

/**
 * The executable a command names: a path is checked as it is, a bare name is looked up on
 * PATH (with PATHEXT on Windows). Undefined when there is none.
 */
export function findExecutable(command: string, env: NodeJS.ProcessEnv): string | undefined {
  const exts =
    process.platform === 'win32'
      ? ['', ...(env.PATHEXT ?? '.EXE;.CMD;.BAT;.COM').split(';').filter((e) => e !== '')]
      : [''];
  if (hasDirectory(command) || path.isAbsolute(command)) {
    for (const ext of exts) {
      if (isExecutableFile(command + ext)) {
        return command + ext;
      }
    }
    return undefined;
  }
  const dirs = (env.PATH ?? env.Path ?? '').split(path.delimiter).filter((d) => d !== '');
  for (const dir of dirs) {
    for (const ext of exts) {
      const candidate = path.join(dir, command + ext);
      if (isExecutableFile(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}
