// Loads syntaxes/reel.tmLanguage.json with vscode-textmate and the Oniguruma WebAssembly build
// that VS Code itself uses, and tokenizes text line by line.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const vsctm = require('vscode-textmate');
const oniguruma = require('vscode-oniguruma');

const ROOT = path.join(__dirname, '..');
const GRAMMAR = path.join(ROOT, 'syntaxes', 'reel.tmLanguage.json');

let registryPromise;

function registry() {
  registryPromise ??= (async () => {
    const wasm = fs.readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm'));
    await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
    return new vsctm.Registry({
      onigLib: Promise.resolve({
        createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
        createOnigString: (s) => new oniguruma.OnigString(s),
      }),
      loadGrammar: async (scopeName) => {
        if (scopeName !== 'source.reel') {
          return null;
        }
        return vsctm.parseRawGrammar(fs.readFileSync(GRAMMAR, 'utf8'), GRAMMAR);
      },
    });
  })();
  return registryPromise;
}

async function loadGrammar() {
  const grammar = await (await registry()).loadGrammar('source.reel');
  if (!grammar) {
    throw new Error(`could not load ${GRAMMAR}`);
  }
  return grammar;
}

/**
 * Tokenizes `text`. Returns one entry per line: its text, its tokens ({ text, scopes }) and
 * `open`, the scopes still open once the line has ended (what a line holding only a space
 * right after it would be inside), without the root `source.reel`.
 */
function tokenize(grammar, text) {
  const lines = text.split(/\r?\n/);
  if (lines.length > 1 && lines[lines.length - 1] === '') {
    lines.pop();
  }
  let state = vsctm.INITIAL;
  const out = [];
  for (const line of lines) {
    const result = grammar.tokenizeLine(line, state);
    const tokens = result.tokens.map((t, i) => ({
      text: line.slice(t.startIndex, i + 1 < result.tokens.length ? result.tokens[i + 1].startIndex : line.length),
      scopes: t.scopes.slice(1),
    }));
    state = result.ruleStack;
    const probe = grammar.tokenizeLine(' ', state);
    out.push({ line, tokens, open: probe.tokens[0].scopes.slice(1) });
  }
  return out;
}

module.exports = { loadGrammar, tokenize, ROOT };
