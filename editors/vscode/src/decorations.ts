// Colour for the results of past runs. VS Code draws every inlay hint in one colour, so the
// extension marks the lines of steps whose hint says something to look at, in the overview
// ruler (the scroll bar) and the gutter: a failure, a result that may be out of date, a step
// still waiting. What a hint says is read from its label, as the server words it (docs/editor.md).
// No `vscode` import: this part is unit-tested without VS Code.

/** What a hint says that deserves a colour. */
export type Standing = 'failed' | 'stale' | 'waiting';

/** The standings, in the order their colours are drawn. */
export const STANDINGS: readonly Standing[] = ['failed', 'stale', 'waiting'];

/**
 * What the label of a step's hint says: `failed` (`✗ …`), `stale` (marked `(stale)` or `(?)`:
 * the result may not be what the text computes now), `waiting` (`⏸ …`, `◌ pending`,
 * `… running`), or nothing to colour (`✓ …`, `↷ skipped`).
 */
export function classify(label: string): Standing | undefined {
  const rest = label.replace(/^\((stale|\?)\) /, '');
  if (rest.startsWith('✗')) {
    return 'failed';
  }
  if (rest !== label) {
    return 'stale';
  }
  if (/^[⏸◌…]/u.test(rest)) {
    return 'waiting';
  }
  return undefined;
}

/**
 * The colourable lines of one document, kept across the requests for parts of it (VS Code asks
 * for the hints of the visible range): an answer for lines `start`..`end` replaces what was known
 * of those lines only.
 */
export class HintLines {
  private readonly lines = new Map<number, Standing>();

  update(start: number, end: number, hints: readonly { line: number; label: string }[]): void {
    for (const line of [...this.lines.keys()]) {
      if (line >= start && line <= end) {
        this.lines.delete(line);
      }
    }
    for (const { line, label } of hints) {
      const standing = classify(label);
      if (standing !== undefined) {
        this.lines.set(line, standing);
      }
    }
  }

  /** The lines of each standing, in order. */
  linesOf(standing: Standing): number[] {
    return [...this.lines.entries()]
      .filter(([, s]) => s === standing)
      .map(([line]) => line)
      .sort((a, b) => a - b);
  }
}
