// A command line for the default shell of a VS Code terminal, each argument quoted so that the
// shell passes it through unchanged. No `vscode` import, so it is unit-tested.

type Dialect = 'posix' | 'powershell' | 'cmd';

export function dialectOf(shellPath: string): Dialect {
  const base = shellPath.replace(/\\/g, '/').split('/').pop()?.toLowerCase() ?? '';
  if (base.startsWith('pwsh') || base.startsWith('powershell')) {
    return 'powershell';
  }
  if (base === 'cmd' || base === 'cmd.exe') {
    return 'cmd';
  }
  return 'posix'; // bash, zsh, sh, dash, fish, ksh, nu ... all honour single quotes
}

export function quote(arg: string, dialect: Dialect): string {
  switch (dialect) {
    case 'posix':
      return /^[A-Za-z0-9_\/.,:@+-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
    case 'powershell':
      return /^[A-Za-z0-9_\/\\.,:=@+-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, "''")}'`;
    case 'cmd':
      return /^[A-Za-z0-9_\/\\.,:=@+-]+$/.test(arg) ? arg : `"${arg.replace(/"/g, '""')}"`;
  }
}

/** `argv` as one line for the shell at `shellPath`. */
export function commandLine(argv: readonly string[], shellPath: string): string {
  const dialect = dialectOf(shellPath);
  const line = argv.map((a) => quote(a, dialect)).join(' ');
  // PowerShell runs a quoted program name only through the call operator.
  return dialect === 'powershell' ? `& ${line}` : line;
}
