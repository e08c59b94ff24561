// Drives a real VS Code (code-server) in headless Chromium and asserts what a person sees with
// the Reel extension: the recorded result of each step inline, the code lenses above the flow,
// the hover of a step, diagnostics (squiggle, Problems panel, status bar), completion, the
// stale mark, the run picker, a fork preview and a fork; and, in a big generated flow, typing a
// step key by key: its error, its fix and the stale marks follow. Started by run.sh, which sets
// the REEL_E2E_* variables below.
//
// Every wait polls the page with a timeout; a failure prints what was expected and what was on
// the page, and saves a screenshot.
import { chromium } from 'playwright-core';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`e2e.mjs: ${name} is not set (start it with tests/vscode/run.sh)`);
    process.exit(2);
  }
  return v;
};
const URL = env('REEL_E2E_URL');
const SHOTS = env('REEL_E2E_SHOTS');
const RUN_ID = process.env.REEL_E2E_RUN_ID || '';
const OLDER_RUN_ID = process.env.REEL_E2E_OLDER_RUN_ID || '';
const HEADED = process.env.REEL_E2E_HEADED === '1';
const WORKSPACE = process.env.REEL_E2E_WORKSPACE || '';
mkdirSync(SHOTS, { recursive: true });

const t0 = Date.now();
const secs = () => ((Date.now() - t0) / 1000).toFixed(1);
const say = (msg) => console.log(`[e2e ${secs()}s] ${msg}`);

/** Polls `probe` until it returns `{ ok: true, ... }`; throws with the last thing it saw. */
async function waitFor(what, probe, timeout = 10_000, every = 150) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await probe();
    } catch (e) {
      last = { ok: false, seen: `error while probing: ${e.message.split('\n')[0]}` };
    }
    if (last?.ok) return last;
    if (Date.now() > end) {
      const seen = typeof last?.seen === 'string' ? last.seen : JSON.stringify(last?.seen, null, 2);
      throw new Error(`timed out after ${timeout / 1000}s waiting for ${what}\n  on the page: ${seen}`);
    }
    await new Promise((r) => setTimeout(r, every));
  }
}

const nbsp = (s) => (s ?? '').replace(/[\u00a0\u200a\u2009]/g, ' ');

// ---------------------------------------------------------------------------------------------
const browser = await chromium.launch({
  executablePath: process.env.REEL_E2E_CHROMIUM || '/usr/bin/chromium',
  headless: !HEADED,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-dev-shm-usage',
  ],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
const page = await context.newPage();
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));

async function shot(name) {
  // Let fade-ins (a hover, a panel) finish: wait until no finite animation runs.
  await waitFor('animations to settle', async () => ({
    ok: await page.evaluate(() => document.getAnimations().every((a) =>
      a.playState !== 'running' || a.effect?.getComputedTiming().iterations === Infinity)),
  }), 2_000, 50).catch(() => {});
  const path = join(SHOTS, `${name}.png`);
  await page.screenshot({ path });
  say(`screenshot ${path}`);
  return path;
}

const EDITOR = '.part.editor .editor-instance .monaco-editor';

/** The editor's rendered lines in line order: code text and inlay hint texts. */
async function editorLines() {
  return page.evaluate((sel) => {
    const ed = document.querySelector(sel);
    if (!ed) return [];
    const lines = [...ed.querySelectorAll('.view-lines .view-line')];
    lines.sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top));
    return lines.map((l) => {
      const hintEls = [...l.querySelectorAll('span[class*="dyn-rule"]')];
      const hints = hintEls.map((s) => s.textContent).filter((t) => t.replace(/[\s\u00a0\u200a]/g, '') !== '');
      const clone = l.cloneNode(true);
      clone.querySelectorAll('span[class*="dyn-rule"]').forEach((s) => s.remove());
      const r = l.getBoundingClientRect();
      return { text: clone.textContent, hints, top: r.top, bottom: r.bottom };
    });
  }, EDITOR).then((ls) => ls.map((l) => ({ ...l, text: nbsp(l.text), hints: l.hints.map(nbsp) })));
}

const show = (lines) => lines.map((l) => `${l.text}${l.hints.length ? '   «' + l.hints.join(' | ') + '»' : ''}`).join('\n    ');

/** The rendered line whose code matches `re`, or undefined. */
const lineOf = (lines, re) => lines.find((l) => re.test(l.text));

/** The centre of the `nth` occurrence of `word` on the editor line matching `lineRe`. */
async function wordPoint(lineRe, word) {
  const p = await page.evaluate(
    ({ sel, src, flags, word }) => {
      const re = new RegExp(src, flags);
      const ed = document.querySelector(sel);
      if (!ed) return null;
      for (const l of ed.querySelectorAll('.view-lines .view-line')) {
        const text = l.textContent.replace(/\u00a0/g, ' ');
        if (!re.test(text)) continue;
        const walker = document.createTreeWalker(l, NodeFilter.SHOW_TEXT);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          if (n.parentElement.closest('span[class*="dyn-rule"]')) continue;
          const i = n.textContent.replace(/\u00a0/g, ' ').search(new RegExp(`\\b${word}\\b`));
          if (i < 0) continue;
          const range = document.createRange();
          range.setStart(n, i);
          range.setEnd(n, i + word.length);
          const r = range.getBoundingClientRect();
          return { x: r.left + r.width / 2, y: r.top + r.height / 2 };
        }
      }
      return null;
    },
    { sel: EDITOR, src: lineRe.source, flags: lineRe.flags, word },
  );
  if (!p) throw new Error(`no word "${word}" on a line matching ${lineRe} in the editor`);
  return p;
}

/**
 * Selects `word` on the editor line matching `lineRe` by a double click, and checks that the
 * selection covers it. Lenses, hints or a panel closing can move the lines between finding the
 * word and clicking it (a CI run once typed over the line below), so a miss is tried again.
 */
async function selectWord(lineRe, word) {
  for (let attempt = 1; ; attempt++) {
    const p = await wordPoint(lineRe, word);
    await page.mouse.dblclick(p.x, p.y);
    await page.waitForTimeout(150);
    const w = await wordBox(lineRe, word);
    const boxes = await page.evaluate((sel) =>
      [...(document.querySelector(sel)?.querySelectorAll('.selected-text') ?? [])].map((el) => {
        const r = el.getBoundingClientRect();
        return { top: r.top, bottom: r.bottom, left: r.left, right: r.right };
      }), EDITOR);
    const covers = !!w && boxes.some((b) => b.top < w.bottom && b.bottom > w.top && b.left <= w.left + 1 && b.right >= w.right - 1);
    if (covers) return;
    if (attempt === 3) throw new Error(`a double click did not select "${word}" on the line matching ${lineRe} (word at ${JSON.stringify(w)}, selection ${JSON.stringify(boxes)})`);
  }
}

/** Puts the cursor at the end of the line matching `lineRe` (a click on its code, then End). */
async function cursorToEndOf(lineRe, word) {
  const p = await wordPoint(lineRe, word);
  await page.mouse.click(p.x, p.y);
  await page.keyboard.press('End');
}

async function statusText(id) {
  return page.evaluate((id) => {
    const el = document.querySelector(`[id="${id}"]`);
    return el ? `${el.getAttribute('aria-label') ?? ''} ${el.textContent}` : '';
  }, id);
}

// ---------------------------------------------------------------------------------------------
const results = [];
async function check(name, fn) {
  say(`--- ${name}`);
  try {
    await fn();
    results.push({ name, ok: true });
    say(`PASS ${name}`);
  } catch (e) {
    results.push({ name, ok: false, error: e.message });
    console.error(`[e2e ${secs()}s] FAIL ${name}\n  ${e.message}`);
    try {
      await shot(`failure-${name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`);
    } catch {}
  } finally {
    // Leave no widget open for the next check.
    await page.keyboard.press('Escape').catch(() => {});
    await page.mouse.move(200, 450).catch(() => {}); // the empty Explorer: no tooltip there
  }
}

/**
 * Opens `name` as a person would: a double click on it in the Explorer; Quick Open (Ctrl+P) when
 * the Explorer does not show it (its key press can be lost before the window has focus).
 */
async function openFile(name) {
  const tab = page.locator('.tabs-container .tab', { hasText: name });
  const row = page.locator('.explorer-folders-view .monaco-list-row', { hasText: name });
  await row.first().waitFor({ state: 'visible', timeout: 15_000 }).catch(() => {});
  if (await row.count()) {
    await row.first().dblclick();
    await tab.first().waitFor({ state: 'visible', timeout: 10_000 }).catch(() => {});
  }
  await waitFor(`the file ${name} opened`, async () => {
    if (await tab.count()) return { ok: true };
    say('  not opened from the Explorer: Quick Open');
    const input = page.locator('.quick-input-widget .quick-input-box input');
    if (!(await input.isVisible())) {
      await page.locator('.part.editor').click({ position: { x: 300, y: 300 } }).catch(() => {});
      await page.keyboard.press('Control+P');
      await input.waitFor({ state: 'visible', timeout: 2000 }).catch(() => {});
      if (!(await input.isVisible())) return { ok: false, seen: 'no Quick Open box after Ctrl+P' };
      await input.fill(name);
    }
    const pick = page.locator('.quick-input-list .monaco-list-row', { hasText: name });
    try {
      await pick.first().waitFor({ state: 'visible', timeout: 3000 });
    } catch {
      return { ok: false, seen: `Quick Open shows no ${name}` };
    }
    await page.keyboard.press('Enter');
    await tab.first().waitFor({ state: 'visible', timeout: 3000 }).catch(() => {});
    return { ok: (await tab.count()) > 0, seen: `no ${name} tab after Enter` };
  }, 30_000, 500);
}

// ---------------------------------------------------------------------------------------------
let opened = false;
await check('open the flow', async () => {
  await page.goto(URL, { waitUntil: 'domcontentloaded', timeout: 60_000 });
  await waitFor('the workbench', async () => ({
    ok: await page.locator('.monaco-workbench .part.statusbar').isVisible(),
    seen: await page.title(),
  }), 60_000);
  say('workbench up');
  await openFile('greet.reel');
  await waitFor('the flow text in the editor', async () => {
    const lines = await editorLines();
    return { ok: !!lineOf(lines, /^flow greet \{/), seen: show(lines) };
  }, 15_000);
  // The extension brings the language: the status bar names it once the extension is active.
  await waitFor('the language mode "Reel" in the status bar (the extension is active)', async () => {
    const lang = await statusText('status.editor.mode');
    return { ok: /reel/i.test(lang), seen: lang.trim() };
  }, 30_000);
  opened = true;
});

// 1. The inline results: one hint per step at the end of its header line.
const expectHints = [
  ['greeting', /^\s*step greeting = "hello/, /^✓ .*"hello, reel"/],
  ['shout', /^\s*step shout = echo \{/, /^✓ .*"HELLO, REEL"/],
  ['stats', /^\s*step stats = echo \{/, /^✓ .*\{.*"words":2/],
  ['whisper', /^\s*step whisper = echo \{/, /^↷ skipped: `when` was false/],
  ['broken', /^\s*step broken = exec \{/, /^✗ .*tool\.exec\.exit/],
];
if (opened) await check('inline results', async () => {
  await waitFor('an inlay hint on each step header line with its recorded result', async () => {
    const lines = await editorLines();
    const wrong = [];
    for (const [step, lineRe, hintRe] of expectHints) {
      const l = lineOf(lines, lineRe);
      if (!l) wrong.push(`no line for step ${step}`);
      else if (l.hints.length !== 1 || !hintRe.test(l.hints[0].trim()))
        wrong.push(`step ${step}: hints ${JSON.stringify(l.hints)}, want one matching ${hintRe}`);
    }
    // No hint anywhere but on step header lines.
    for (const l of lines)
      if (l.hints.length && !/^\s*step \w+ =/.test(l.text)) wrong.push(`unexpected hint on "${l.text.trim()}": ${l.hints}`);
    return { ok: wrong.length === 0, seen: `${wrong.join('; ')}\n    ${show(lines)}` };
  }, 30_000);
  const lines = await editorLines();
  for (const [step, lineRe] of expectHints) say(`  ${step}: ${lineOf(lines, lineRe).hints[0].trim()}`);
  // The picture is better with the lenses in it: give them a moment (they are checked below).
  await page.locator(`${EDITOR} .codelens-decoration`).first().waitFor({ state: 'visible', timeout: 5000 }).catch(() => {});
  await page.mouse.move(200, 450);
  await shot('inline-results');
});

// 2. The code lenses above the flow line.
if (opened) await check('code lenses', async () => {
  const seen = await waitFor('code lenses "▶ Run greet" and "Showing run …" above `flow greet`', async () => {
    const lenses = await page.evaluate((sel) => {
      const ed = document.querySelector(sel);
      return [...(ed?.querySelectorAll('.codelens-decoration') ?? [])].map((el) => {
        const r = el.getBoundingClientRect();
        return { text: el.textContent, top: r.top, bottom: r.bottom, visible: r.height > 0 };
      });
    }, EDITOR);
    const text = nbsp(lenses.map((l) => l.text).join(' | '));
    const lines = await editorLines();
    const flow = lineOf(lines, /^flow greet \{/);
    const ok = /▶ Run greet/.test(text) && /Showing run/.test(text) && /Pick run/.test(text);
    return { ok, seen: `lenses: ${JSON.stringify(text)}`, lenses, flow };
  }, 15_000);
  const text = nbsp(seen.lenses.map((l) => l.text).join(' | '));
  say(`  lenses: ${text}`);
  // The run the store holds: its (short) id and its status.
  if (RUN_ID && !new RegExp(`Showing run ${RUN_ID.slice(0, 6)}\\w* · failed`).test(text))
    throw new Error(`the lens does not show run ${RUN_ID} as failed: ${text}`);
  // They sit right above the flow's line.
  const lens = seen.lenses.find((l) => /Run greet/.test(nbsp(l.text)));
  if (!(lens.bottom <= seen.flow.top + 2 && seen.flow.top - lens.bottom < 30))
    throw new Error(`the lens (y ${lens.top}-${lens.bottom}) is not just above \`flow greet\` (y ${seen.flow.top})`);
});

/** The text of the hovers on screen (VS Code keeps hidden hover elements around). */
function visibleHoverText() {
  return page.evaluate(() =>
    [...document.querySelectorAll('.monaco-hover-content')]
      .filter((el) => el.getBoundingClientRect().height > 0 && el.checkVisibility())
      .map((el) => el.innerText)
      .join('\n'));
}

// 3. Hovering a step's name shows its recorded output.
if (opened) await check('hover', async () => {
  const p = await wordPoint(/^\s*step stats = echo/, 'stats');
  await waitFor('a hover over `stats` with the recorded output', async () => {
    await page.mouse.move(p.x - 2, p.y);
    await page.mouse.move(p.x, p.y);
    let text = '';
    for (let i = 0; i < 10 && !text; i++) {
      await page.waitForTimeout(150);
      text = nbsp(await visibleHoverText());
    }
    const ok = /Output/.test(text) && /"words": 2/.test(text) && /"text": "HELLO, REEL"/.test(text)
      && (!RUN_ID || text.includes(RUN_ID));
    return { ok, seen: text || 'no hover' };
  }, 15_000, 300);
  await shot('hover');
});

// 5. Completion after `input.` and after a step name and `.`.
async function suggestions() {
  return page.evaluate(() =>
    [...document.querySelectorAll('.editor-widget.suggest-widget.visible .monaco-list-row')].map(
      (r) => (r.querySelector('.label-name')?.textContent ?? r.getAttribute('aria-label') ?? '').trim(),
    ),
  );
}
async function expectCompletion(typed, want) {
  await page.keyboard.type(typed, { delay: 30 });
  let invoked = false;
  await waitFor(`completion after "${typed}" listing ${want.join(', ')}`, async () => {
    const got = await suggestions();
    if (!got.length && !invoked) {
      // The `.` should open it; if it did not within a moment, ask for it as a person would.
      invoked = true;
      await page.waitForTimeout(1500);
      if (!(await suggestions()).length) await page.keyboard.press('Control+Space');
    }
    return { ok: want.every((w) => got.includes(w)), seen: JSON.stringify(got) };
  }, 10_000);
  say(`  after "${typed}": ${JSON.stringify(await suggestions())}`);
}
if (opened) await check('completion', async () => {
  await cursorToEndOf(/^\s*step greeting = "hello/, 'greeting');
  await page.keyboard.press('Enter');
  await expectCompletion('step probe = input.', ['name', 'loud']);
  await shot('completion');
  await page.keyboard.press('Escape');
  for (let i = 0; i < 'input.'.length; i++) await page.keyboard.press('Backspace');
  await expectCompletion('stats.', ['words', 'text']);
  await page.keyboard.press('Escape');
  // Take the probe line out again.
  await page.keyboard.press('Control+Shift+K');
  await waitFor('the probe line removed', async () => {
    const lines = await editorLines();
    return { ok: !lineOf(lines, /probe/), seen: show(lines) };
  }, 5_000);
});

// 4. A mistake: squiggle, Problems panel entry, status bar count.
const MESSAGE = 'nothing called `shuot` is in scope';
if (opened) await check('diagnostics', async () => {
  await waitFor('no errors before the edit', async () => {
    const s = await statusText('status.problems');
    return { ok: /Errors: 0|No Problems/i.test(s) || !/Errors: [1-9]/.test(s), seen: s };
  }, 10_000);
  await cursorToEndOf(/^\s*step greeting = "hello/, 'greeting');
  await page.keyboard.press('Enter');
  await page.keyboard.insertText('step typo = upper(shuot)');
  await waitFor('a red squiggle under `shuot` on the new line', async () => {
    const lines = await editorLines();
    const typo = lineOf(lines, /step typo = upper\(shuot\)/);
    const squiggles = await page.evaluate((sel) =>
      [...document.querySelector(sel).querySelectorAll('.squiggly-error')].map((s) => {
        const r = s.getBoundingClientRect();
        return { top: r.top, bottom: r.bottom, left: r.left, width: r.width };
      }), EDITOR);
    const p = typo && (await wordPoint(/step typo = upper\(shuot\)/, 'shuot'));
    const on = typo && squiggles.some((s) => s.top < typo.bottom && s.bottom > typo.top
      && s.left <= p.x && s.left + s.width >= p.x);
    return { ok: !!on, seen: `line ${JSON.stringify(typo?.text)}; squiggles ${JSON.stringify(squiggles)}` };
  }, 15_000);
  await waitFor('the status bar counting one error', async () => {
    const s = await statusText('status.problems');
    return { ok: /Errors: 1\b/.test(s), seen: s };
  }, 10_000);
  // The Problems panel lists it with the message.
  await waitFor(`a Problems entry "${MESSAGE}"`, async () => {
    const panel = page.locator('.markers-panel');
    if (!(await panel.isVisible())) {
      await page.keyboard.press('Control+Shift+M');
      await panel.waitFor({ state: 'visible', timeout: 2000 }).catch(() => {});
    }
    const rows = await page.evaluate(() =>
      [...document.querySelectorAll('.markers-panel .monaco-list-row')].map((r) => r.getAttribute('aria-label') ?? r.textContent));
    return { ok: rows.some((r) => r.includes(MESSAGE)), seen: JSON.stringify(rows) };
  }, 10_000, 300);
  // A mistake in one step leaves the other steps' hints checked against the run: only a step
  // that does not check is marked `(?)`, and the new step has no recorded result.
  await waitFor('the other hints still unmarked while one step has an error', async () => {
    const lines = await editorLines();
    const l = lineOf(lines, /^\s*step shout = echo/);
    const typo = lineOf(lines, /step typo = upper\(shuot\)/);
    return { ok: !!l && l.hints.length === 1 && l.hints[0].trim().startsWith('✓') && typo?.hints.length === 0, seen: show(lines) };
  }, 10_000);
  await shot('problems');
});

// 6. Changing a step marks its result stale, and those of the steps after it, not the ones before.
if (opened) await check('stale mark', async () => {
  const p = await wordPoint(/step typo = upper\(shuot\)/, 'typo').catch(() => null);
  if (p) {
    await page.mouse.click(p.x, p.y);
    await page.keyboard.press('Control+Shift+K');
  }
  // The lines move up: wait for that before aiming at a word.
  await waitFor('the typo line removed', async () => {
    const lines = await editorLines();
    return { ok: !lineOf(lines, /step typo/), seen: show(lines) };
  }, 5_000);
  await selectWord(/^\s*value: upper\(greeting\)/, 'upper');
  await page.keyboard.insertText('lower');
  await waitFor('`shout` marked (stale), `greeting` not', async () => {
    const lines = await editorLines();
    const shout = lineOf(lines, /^\s*step shout = echo/);
    const greeting = lineOf(lines, /^\s*step greeting = "hello/);
    const ok = !!lineOf(lines, /value: lower\(greeting\)/)
      && shout?.hints.length === 1 && shout.hints[0].trim().startsWith('(stale) ✓')
      && greeting?.hints.length === 1 && greeting.hints[0].trim().startsWith('✓');
    return { ok, seen: show(lines) };
  }, 10_000);
  await page.keyboard.press('Escape'); // the completion that typing opened
  await shot('stale');
});

// 7. The run picker: the "Pick run…" lens lists the flow's runs, newest first; choosing the
// earlier one shows its results beside the steps (and the lens says it is pinned); "Follow the
// latest run" goes back to the newest.
async function pickRun(what, rowText) {
  const widget = page.locator('.quick-input-widget');
  const rows = page.locator('.quick-input-widget .quick-input-list .monaco-list-row');
  await waitFor(`the run picker listing ${what}`, async () => {
    if (!(await widget.isVisible())) {
      await page.locator(`${EDITOR} .codelens-decoration a`, { hasText: 'Pick run' }).first().click();
      await widget.waitFor({ state: 'visible', timeout: 3000 }).catch(() => {});
    }
    const texts = (await rows.allTextContents()).map(nbsp);
    return { ok: texts.some((t) => t.includes(rowText)), seen: JSON.stringify(texts) };
  }, 15_000, 300);
  return rows;
}
const hintsOn = async (re) => lineOf(await editorLines(), re)?.hints ?? [];
const lensText = async () => nbsp(await page.evaluate((sel) =>
  [...(document.querySelector(sel)?.querySelectorAll('.codelens-decoration') ?? [])]
    .map((el) => el.textContent).join(' | '), EDITOR));
if (opened) await check('pick a run', async () => {
  if (!RUN_ID || !OLDER_RUN_ID) throw new Error('REEL_E2E_RUN_ID and REEL_E2E_OLDER_RUN_ID must be set (run.sh sets them)');
  const rows = await pickRun('both runs of greet', OLDER_RUN_ID);
  const texts = (await rows.allTextContents()).map(nbsp);
  const at = (text) => texts.findIndex((t) => t.includes(text));
  if (at('Follow the latest run') < 0 || at(RUN_ID) < 0 || at(RUN_ID) > at(OLDER_RUN_ID))
    throw new Error(`want "Follow the latest run", then ${RUN_ID}, then ${OLDER_RUN_ID}: ${JSON.stringify(texts)}`);
  // Each run's inputs tell them apart.
  if (!texts[at(OLDER_RUN_ID)].includes('name: "earlier"') || !texts[at(RUN_ID)].includes('name: "reel"'))
    throw new Error(`each run should show its inputs: ${JSON.stringify(texts)}`);
  say(`  picker: ${JSON.stringify(texts)}`);
  await shot('run-picker');
  await rows.filter({ hasText: OLDER_RUN_ID }).first().click();
  await waitFor('the earlier run\'s results beside the steps, and the lens saying it is pinned', async () => {
    const hints = await hintsOn(/^\s*step greeting = "hello/);
    const lens = await lensText();
    const ok = hints.length === 1 && /^✓ .*"hello, earlier"/.test(hints[0].trim())
      && new RegExp(`Showing run ${OLDER_RUN_ID.slice(0, 6)}\\w* · failed.*pinned`).test(lens);
    return { ok, seen: `greeting: ${JSON.stringify(hints)}; lenses: ${lens}` };
  }, 15_000);
  await page.mouse.move(200, 450);
  await shot('picked-run');
  const again = await pickRun('"Follow the latest run"', 'Follow the latest run');
  await again.filter({ hasText: 'Follow the latest run' }).first().click();
  await waitFor('the newest run\'s results again', async () => {
    const hints = await hintsOn(/^\s*step greeting = "hello/);
    const lens = await lensText();
    const ok = hints.length === 1 && /^✓ .*"hello, reel"/.test(hints[0].trim()) && !/pinned/.test(lens)
      && new RegExp(`Showing run ${RUN_ID.slice(0, 6)}`).test(lens);
    return { ok, seen: `greeting: ${JSON.stringify(hints)}; lenses: ${lens}` };
  }, 15_000);
});

// 8. A fork preview and a fork: after the failed run, fix the failing step (and keep the edit of
// `shout` from the stale check); "Preview fork" marks each step above its line with what a fork
// would do, and follows the text as it changes; "Fork with these changes" saves the file, forks
// the run, and the fork's results appear inline.
/** The line number (1-based) of the first line of the workspace's greet.reel matching `re`. */
const lineNumber = (() => {
  const text = WORKSPACE ? readFileSync(join(WORKSPACE, 'greet.reel'), 'utf8').split('\n') : [];
  return (re) => text.findIndex((l) => re.test(l)) + 1;
})();
/** Scrolls the editor so that line `n` is in view (Go to Line). */
async function reveal(n) {
  await page.keyboard.press('Control+G');
  const input = page.locator('.quick-input-widget .quick-input-box input');
  await input.waitFor({ state: 'visible', timeout: 3000 });
  await input.fill(`:${n}`);
  await page.keyboard.press('Enter');
}
/** The code lenses' texts just above the editor line matching `re`. */
async function lensesAbove(re) {
  const lines = await editorLines();
  const line = lineOf(lines, re);
  if (!line) return { line: undefined, texts: [] };
  const lenses = await page.evaluate((sel) =>
    [...(document.querySelector(sel)?.querySelectorAll('.codelens-decoration') ?? [])].map((el) => {
      const r = el.getBoundingClientRect();
      return { text: el.textContent, top: r.top, bottom: r.bottom };
    }), EDITOR);
  const texts = lenses.filter((l) => l.bottom <= line.top + 2 && line.top - l.bottom < 30).map((l) => nbsp(l.text));
  return { line, texts };
}
const clickLens = (text) => page.locator(`${EDITOR} .codelens-decoration a`, { hasText: text }).first().click();
/** Waits until the lenses above each line of `want` ([line regex, lens regex]) match. */
async function expectMarks(what, want) {
  return waitFor(what, async () => {
    const seen = [];
    let ok = true;
    for (const [lineRe, lensRe] of want) {
      const { line, texts } = await lensesAbove(lineRe);
      seen.push(`${lineRe}: ${line ? JSON.stringify(texts) : 'not on screen'}`);
      if (!texts.some((t) => lensRe.test(t))) ok = false;
    }
    return { ok, seen: seen.join('\n    ') };
  }, 20_000, 300);
}
const BROKEN = /^\s*step broken = exec \{/;
if (opened) await check('preview a fork', async () => {
  if (!RUN_ID) throw new Error('REEL_E2E_RUN_ID must be set (run.sh sets it)');
  // Room for the whole flow: no panel under the editor.
  if (await page.locator('.part.panel').isVisible()) await page.keyboard.press('Control+J');
  await reveal(lineNumber(/step broken = exec/));
  await selectWord(/exit 3"/, '3');
  await page.keyboard.insertText('0');
  await page.keyboard.press('Escape');
  await reveal(lineNumber(/^flow greet/));
  await waitFor('the lenses "Preview fork" and "Fork with these changes" on the failed run', async () => {
    const lens = await lensText();
    return { ok: /Preview fork/.test(lens) && /Fork with these changes/.test(lens), seen: lens };
  }, 15_000);
  await clickLens('Preview fork');
  await reveal(lineNumber(/step stats = echo/));
  const run = new RegExp(`reused from run ${RUN_ID}`);
  await expectMarks('each step marked with what a fork would do', [
    [/^\s*step greeting = "hello/, run],
    [/^\s*step shout = echo \{/, /↻ runs live: changed arguments/],
    [/^\s*step stats = echo \{/, /↻ runs live/],
    [BROKEN, /↻ runs live/],
  ]);
  // VS Code may redraw the flow's lens line a moment after the new step lenses.
  await waitFor('the preview\'s summary above the flow', async () => {
    const lens = await lensText();
    return { ok: /Fork preview: \d+ reused · \d+ live/.test(lens) && !/Preview fork/.test(lens), seen: lens };
  }, 10_000);
  await page.mouse.move(200, 450);
  await shot('fork-preview');
  // Typing on: `shout` back as it ran. The preview follows: it is reused again, and so is `stats`.
  await selectWord(/^\s*value: lower\(greeting\)/, 'lower');
  await page.keyboard.insertText('upper');
  await page.keyboard.press('Escape');
  await expectMarks('the marks following the edit: `shout` and `stats` reused again', [
    [/^\s*step shout = echo \{/, run],
    [/^\s*step stats = echo \{/, run],
    [BROKEN, /↻ runs live: changed arguments/],
  ]);
  say(`  lenses: ${await lensText()}`);
  await page.mouse.move(200, 450);
  await shot('fork-preview-typed');
});

if (opened) await check('fork', async () => {
  if (!RUN_ID) throw new Error('REEL_E2E_RUN_ID must be set (run.sh sets it)');
  await reveal(lineNumber(/^flow greet/));
  await clickLens('Fork with these changes');
  await reveal(lineNumber(/step stats = echo/));
  // The file is saved, the fork runs, and its results replace the failed run's beside the steps.
  // (The terminal following the fork's log opens below and the editor shrinks: each line looked
  // at is brought into view first, VS Code does not redraw what is out of it.)
  await reveal(lineNumber(/step broken = exec/));
  await waitFor('the fork\'s results inline: `broken` succeeded', async () => {
    const lines = await editorLines();
    const broken = lineOf(lines, BROKEN);
    return { ok: !!broken && broken.hints.length === 1 && /^✓/.test(broken.hints[0].trim()), seen: show(lines) };
  }, 30_000);
  await reveal(lineNumber(/^flow greet/));
  await waitFor('the lens showing the new run as succeeded, and no preview', async () => {
    const lens = await lensText();
    const shown = /Showing run (\w+) · succeeded/.exec(lens);
    return { ok: !!shown && shown[1] !== RUN_ID && !/Fork preview/.test(lens), seen: `lenses: ${lens}` };
  }, 15_000);
  const tab = await page.locator('.part.editor .tabs-container .tab.active').getAttribute('class');
  if (/dirty/.test(tab ?? '')) throw new Error('the file was not saved before the fork');
  say(`  lenses: ${await lensText()}`);
  await page.mouse.move(200, 450);
  await shot('forked');
});

// 9. Typing into a big flow: a generated flow of thousands of steps, recorded by `reel run`. Far
// down the file a new step is typed key by key with an unknown name in it: its error appears at
// that line (a squiggle under the name, the Problems panel, the status bar), the hints of the
// steps around it stay as they were; the name is corrected by typing and the error goes away;
// then a step is made to read the new step, and its hint and those of the steps that read it are
// marked stale, and no other. The time from the last key to what it shows is printed, not
// asserted (figures belong to bench/).
const BIG_STEPS = Number(process.env.REEL_E2E_BIG_STEPS || 0);
const BIG_RUN_ID = process.env.REEL_E2E_BIG_RUN_ID || '';
/** The error squiggles on the editor line matching `lineRe`, and whether one covers `word` whole. */
async function squigglesOn(lineRe, word, kind = 'error') {
  const lines = await editorLines();
  const line = lineOf(lines, lineRe);
  if (!line) return { ok: false, line, squiggles: [], seen: `no line matching ${lineRe} on screen` };
  const squiggles = (await page.evaluate(({ sel, kind }) =>
    [...document.querySelector(sel).querySelectorAll(`.squiggly-${kind}`)].map((s) => {
      const r = s.getBoundingClientRect();
      return { top: r.top, bottom: r.bottom, left: r.left, right: r.right };
    }), { sel: EDITOR, kind })).filter((s) => s.top < line.bottom && s.bottom > line.top);
  let covers = false;
  if (word) {
    const w = await wordBox(lineRe, word);
    covers = !!w && squiggles.some((s) => s.left <= w.left + 1 && s.right >= w.right - 1);
  }
  return { ok: covers, line, squiggles, seen: `line ${JSON.stringify(line.text)}; ${kind} squiggles on it ${JSON.stringify(squiggles)}` };
}
/** The box of `word` in the code (not a hint) of the editor line matching `lineRe`. */
function wordBox(lineRe, word) {
  return page.evaluate(({ sel, src, flags, word }) => {
    const re = new RegExp(src, flags);
    for (const l of document.querySelector(sel)?.querySelectorAll('.view-lines .view-line') ?? []) {
      if (!re.test(l.textContent.replace(/\u00a0/g, ' '))) continue;
      const walker = document.createTreeWalker(l, NodeFilter.SHOW_TEXT);
      let text = '';
      const nodes = [];
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        if (n.parentElement.closest('span[class*="dyn-rule"]')) continue;
        nodes.push([n, text.length]);
        text += n.textContent.replace(/\u00a0/g, ' ');
      }
      // The word may be split over several spans (the tokens' colours): a range across them.
      const i = text.search(new RegExp(`\\b${word}\\b`));
      if (i < 0) return null;
      const at = (k) => {
        const [n, start] = nodes.findLast(([, s]) => s <= k);
        return [n, k - start];
      };
      const range = document.createRange();
      range.setStart(...at(i));
      range.setEnd(...at(i + word.length - 1));
      range.setEnd(range.endContainer, range.endOffset + 1);
      const r = range.getBoundingClientRect();
      return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    }
    return null;
  }, { sel: EDITOR, src: lineRe.source, flags: lineRe.flags, word });
}
/** The Problems panel's rows (their accessible text: the message, the source, the place). */
const problemRows = () => page.evaluate(() =>
  [...document.querySelectorAll('.markers-panel .monaco-list-row')].map((r) => r.getAttribute('aria-label') ?? r.textContent));
/**
 * The status bar's problem counts: its label says `Errors: N`, `Warnings: N` (a zero count left
 * out) or `No Problems`; `null` while it shows neither.
 */
async function problemCounts() {
  const s = await statusText('status.problems');
  const n = (re) => Number(re.exec(s)?.[1] ?? 0);
  const known = /No Problems|Errors: \d|Warnings: \d/i.test(s);
  return { errors: known ? n(/Errors: (\d+)/) : null, warnings: known ? n(/Warnings: (\d+)/) : null, seen: s.trim() };
}
/** Closes the completion list that typing opened (it can come back once, when a late answer arrives). */
async function closeSuggest() {
  await waitFor('no completion list open', async () => {
    const open = await page.locator('.editor-widget.suggest-widget.visible').count();
    if (open) await page.keyboard.press('Escape');
    return { ok: !open, seen: 'a completion list' };
  }, 5_000, 300);
}
/** Waits until `probe` holds, polling every 20 ms, and returns the milliseconds since `since`. */
async function msUntil(since, what, probe, timeout) {
  await waitFor(what, probe, timeout, 20);
  return Date.now() - since;
}
if (opened) await check('typing into a big flow', async () => {
  if (!(BIG_STEPS >= 20) || !BIG_RUN_ID || !WORKSPACE)
    throw new Error('REEL_E2E_BIG_STEPS (at least 20), REEL_E2E_BIG_RUN_ID and REEL_E2E_WORKSPACE must be set (run.sh sets them)');
  const source = readFileSync(join(WORKSPACE, 'big.reel'), 'utf8').replace(/\n$/, '').split('\n');
  const lineNo = (re) => {
    const i = source.findIndex((l) => re.test(l));
    if (i < 0) throw new Error(`big.reel has no line matching ${re}`);
    return i + 1;
  };
  // A chain far down the file: its first step `text_T`, read by `shout_{T+1}`, read by the rest.
  const T = 5 * Math.floor((BIG_STEPS / 5) * 0.85);
  const step = (kind, n) => new RegExp(`^\\s*step ${kind}_${n} = `);
  const TEXT = step('text', T), SHOUT = step('shout', T + 1), WORDS = step('words', T + 2);
  const COUNT = step('count', T + 3), LABEL = step('label', T + 4);
  const PREV = step('label', T - 1), NEXT = step('text', T + 5);
  const typo = `tetx_${T}`, name = `text_${T}`;
  const EXTRA = new RegExp(`^\\s*step extra = upper\\(`);
  const hint = (lines, re) => lineOf(lines, re)?.hints ?? null;
  const unmarked = (h, re = /^✓ /) => h?.length === 1 && re.test(h[0].trim());
  const stale = (h) => h?.length === 1 && /^\(stale\) ✓ /.test(h[0].trim());

  // Nothing below the editor but the Problems panel.
  if (await page.locator('.part.panel').isVisible()) await page.keyboard.press('Control+J');
  await openFile('big.reel');
  await waitFor(`the big flow in the editor, in Reel mode, showing its run ${BIG_RUN_ID}`, async () => {
    const lines = await editorLines();
    const lang = await statusText('status.editor.mode');
    const lens = await lensText();
    const ok = !!lineOf(lines, /^flow big \{/) && /reel/i.test(lang)
      && new RegExp(`Showing run ${BIG_RUN_ID.slice(0, 6)}\\w* · succeeded`).test(lens);
    return { ok, seen: `${lang}; lenses: ${lens}\n    ${show(lines.slice(0, 8))}` };
  }, 30_000);
  await page.keyboard.press('Control+Shift+M');
  await page.locator('.markers-panel').waitFor({ state: 'visible', timeout: 10_000 });
  await reveal(lineNo(TEXT));
  // The past run's results on the steps on screen, and no problem in the file.
  await waitFor(`the recorded results beside the steps around \`${name}\` (line ${lineNo(TEXT)} of ${source.length})`, async () => {
    const lines = await editorLines();
    const c = await problemCounts();
    const ok = unmarked(hint(lines, TEXT), new RegExp(`^✓ .*"item-${T}"`))
      && unmarked(hint(lines, SHOUT), new RegExp(`^✓ .*"ITEM-${T}"`))
      && unmarked(hint(lines, WORDS)) && c.errors === 0 && c.warnings === 0;
    return { ok, seen: `status bar: ${c.seen}\n    ${show(lines)}` };
  }, 60_000);
  await page.mouse.move(200, 450);
  await shot('typing-big-before');

  // A new step after `text_T`, typed key by key, with a mistake: an unknown name.
  await cursorToEndOf(TEXT, name);
  await page.keyboard.press('Enter');
  await page.keyboard.press('Enter');
  await page.keyboard.type(`step extra = upper(${typo})`, { delay: 60 });
  const lastKey = Date.now();
  const message = `nothing called \`${typo}\` is in scope`;
  const squiggleMs = await msUntil(lastKey, `a red squiggle under \`${typo}\``, () => squigglesOn(EXTRA, typo), 60_000);
  const problemMs = await msUntil(lastKey, `a Problems entry "${message}"`, async () => {
    const rows = await problemRows();
    return { ok: rows.some((r) => r.includes(message)), seen: JSON.stringify(rows) };
  }, 30_000);
  // At the typed line: the new step is two lines below `text_T`'s.
  const typedLine = lineNo(TEXT) + 2;
  const row = (await problemRows()).find((r) => r.includes(message));
  say(`  Problems: ${row}`);
  if (!new RegExp(`\\b${typedLine}\\b`).test(row)) throw new Error(`the Problems entry is not at line ${typedLine}: ${row}`);
  await closeSuggest();
  await waitFor('the status bar counting one error, and the typed line as typed', async () => {
    const c = await problemCounts();
    const lines = await editorLines();
    const extra = lineOf(lines, EXTRA);
    return { ok: c.errors === 1 && extra?.text.trim() === `step extra = upper(${typo})`, seen: `status bar: ${c.seen}; line ${JSON.stringify(extra?.text)}` };
  }, 10_000);
  say(`  last key → the error's squiggle: ${squiggleMs} ms; → its Problems entry: ${problemMs} ms (${BIG_STEPS} steps, ${source.length} lines)`);
  // A mistake in the new step leaves the other steps' results as they were: unmarked.
  await waitFor('the hints around the new step still shown and unmarked, none on the new step', async () => {
    const lines = await editorLines();
    const ok = unmarked(hint(lines, TEXT)) && unmarked(hint(lines, SHOUT)) && unmarked(hint(lines, WORDS))
      && hint(lines, EXTRA)?.length === 0;
    return { ok, seen: show(lines) };
  }, 15_000);
  await closeSuggest();
  await page.mouse.move(200, 450);
  await shot('typing-big-error');

  // The name corrected by typing: the error goes away (the new step, read by nothing, is only
  // warned about).
  await selectWord(EXTRA, typo);
  await page.keyboard.type(name, { delay: 60 });
  const fixKey = Date.now();
  const goneMs = await msUntil(fixKey, 'the error gone: no red squiggle on the line, no error counted', async () => {
    const sq = await squigglesOn(EXTRA, null);
    const c = await problemCounts();
    return { ok: !!sq.line && sq.squiggles.length === 0 && c.errors === 0, seen: `status bar: ${c.seen}; ${sq.seen}` };
  }, 60_000);
  await closeSuggest();
  await waitFor('the typed line corrected, and the Problems panel with no error but the unused new step', async () => {
    const lines = await editorLines();
    const rows = await problemRows();
    const ok = lineOf(lines, EXTRA)?.text.trim() === `step extra = upper(${name})`
      && !rows.some((r) => r.includes(message)) && rows.some((r) => /nothing uses the value of `extra`/.test(r));
    return { ok, seen: `rows ${JSON.stringify(rows)}\n    ${show(lines)}` };
  }, 15_000);
  say(`  last key of the fix → the error gone: ${goneMs} ms`);
  await waitFor('the hints still shown and unmarked after the fix', async () => {
    const lines = await editorLines();
    const ok = unmarked(hint(lines, TEXT)) && unmarked(hint(lines, SHOUT)) && unmarked(hint(lines, WORDS))
      && hint(lines, EXTRA)?.length === 0;
    return { ok, seen: show(lines) };
  }, 15_000);
  await closeSuggest();
  await page.mouse.move(200, 450);
  await shot('typing-big-fixed');

  // `shout_{T+1}` made to read the new step, by typing: its input changed, so its result and
  // those of the steps of its chain that read it are stale; the steps before it, and the next
  // chain, are not. The whole chain on screen: the panel closed, the editor scrolled to it.
  await page.keyboard.press('Control+J');
  await reveal(lineNo(COUNT));
  await selectWord(new RegExp(`^\\s*value: upper\\(${name}\\)`), name);
  await page.keyboard.type('extra', { delay: 60 });
  const staleKey = Date.now();
  const staleMs = await msUntil(staleKey, `\`shout_${T + 1}\` and the steps that read it marked (stale), the others not`, async () => {
    const lines = await editorLines();
    const c = await problemCounts();
    const ok = !!lineOf(lines, /^\s*value: upper\(extra\)/) && c.errors === 0
      && unmarked(hint(lines, PREV)) && unmarked(hint(lines, TEXT)) && hint(lines, EXTRA)?.length === 0
      && stale(hint(lines, SHOUT)) && stale(hint(lines, WORDS)) && stale(hint(lines, COUNT)) && stale(hint(lines, LABEL))
      && unmarked(hint(lines, NEXT));
    return { ok, seen: `status bar: ${c.seen}\n    ${show(lines)}` };
  }, 60_000);
  await closeSuggest();
  say(`  last key of the edit → the stale marks: ${staleMs} ms`);
  await waitFor('no problem left: the new step is read now', async () => {
    const c = await problemCounts();
    return { ok: c.errors === 0 && c.warnings === 0, seen: `status bar: ${c.seen}` };
  }, 15_000);
  await closeSuggest();
  await page.mouse.move(200, 450);
  await shot('typing-big-stale');
});

// ---------------------------------------------------------------------------------------------
await browser.close();
const failed = results.filter((r) => !r.ok);
console.log('');
for (const r of results) console.log(`${r.ok ? 'ok  ' : 'FAIL'} ${r.name}${r.ok ? '' : `\n     ${r.error.split('\n').join('\n     ')}`}`);
if (failed.length && pageErrors.length) console.log(`page errors:\n  ${pageErrors.slice(0, 10).join('\n  ')}`);
console.log(`screenshots in ${SHOTS}`);
console.log(`vscode e2e took ${secs()}s`);
console.log(`e2e: ${results.length - failed.length} passed, ${failed.length} failed`);
process.exit(failed.length ? 1 : 0);
