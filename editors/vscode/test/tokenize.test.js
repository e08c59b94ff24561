// Tokenizes Reel sources with the extension's TextMate grammar, as VS Code does, and checks
// the scopes: every example of the repository, specific tokens, hand-picked edge cases, and a pinned
// snapshot of test/fixtures/sample.reel (UPDATE_SNAPSHOT=1 rewrites it; review the diff).
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { loadGrammar, tokenize, ROOT } = require('./grammar');

// The language reference's examples, in the repository (examples/reference).
const EXAMPLES = path.resolve(ROOT, '../../examples/reference');
// The repository's own examples.
const REPO_EXAMPLES = path.resolve(ROOT, '../../examples');
const FIXTURE = path.join(__dirname, 'fixtures', 'sample.reel');
const SNAPSHOT = path.join(__dirname, 'fixtures', 'sample.tokens.json');

function reelFiles(dir) {
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.reel'))
    .sort()
    .map((f) => path.join(dir, f));
}

function exampleFiles() {
  assert.ok(
    fs.existsSync(EXAMPLES) && fs.statSync(EXAMPLES).isDirectory(),
    `the reference examples are missing: expected the directory ${EXAMPLES} ` +
      '(examples/reference in the repository). The grammar is tested against them; ' +
      'this test fails rather than skips without them.',
  );
  const files = reelFiles(EXAMPLES);
  assert.ok(files.length > 0, `no .reel file in ${EXAMPLES}`);
  return files;
}

let grammarPromise;
const grammar = () => (grammarPromise ??= loadGrammar());

async function tokenizeFile(file) {
  return tokenize(await grammar(), fs.readFileSync(file, 'utf8'));
}

const isString = (s) => s.startsWith('string.');
const isComment = (s) => s.startsWith('comment.');

/**
 * Problems with the structure of a tokenized file: a line that ends inside a string (outside
 * an interpolation, which may span lines) or a comment, a top-level declaration that does not
 * start at the top level, scopes still open at the end, text that got no scope but meta ones,
 * and (unless allowed) illegal tokens.
 */
function structuralProblems(lines, { allowInvalid = false } = {}) {
  const problems = [];
  let before = [];
  lines.forEach(({ line, tokens, open }, i) => {
    const where = `line ${i + 1} \`${line}\``;
    const lastString = open.findLastIndex(isString);
    const lastInterpolation = open.findLastIndex((s) => s.startsWith('meta.interpolation.'));
    if (lastString > lastInterpolation) {
      problems.push(`${where} ends inside a string: ${open.join(' ')}`);
    }
    if (open.some(isComment)) {
      problems.push(`${where} ends inside a comment: ${open.join(' ')}`);
    }
    if (/^(flow|tool)\b/.test(line) && before.length > 0) {
      problems.push(`${where} declares at the top level but is inside ${before.join(' ')}`);
    }
    for (const t of tokens) {
      if (t.text.trim() !== '' && t.scopes.every((s) => s.startsWith('meta.'))) {
        problems.push(`${where}: \`${t.text}\` has no scope of its own (${t.scopes.join(' ') || 'none'})`);
      }
      if (!allowInvalid && t.scopes.some((s) => s.startsWith('invalid.'))) {
        problems.push(`${where}: \`${t.text}\` is marked ${t.scopes.join(' ')}`);
      }
    }
    before = open;
  });
  if (before.length > 0) {
    problems.push(`the file ends inside ${before.join(' ')}`);
  }
  return problems;
}

/** The scopes of the `nth` token whose text is `text`, on the first line that contains `lineHas`. */
function scopesOf(lines, lineHas, text, nth = 0) {
  const line = lines.find((l) => l.line.includes(lineHas));
  assert.ok(line, `no line contains \`${lineHas}\``);
  const found = line.tokens.filter((t) => t.text === text);
  assert.ok(
    found.length > nth,
    `\`${line.line}\` has no token #${nth} \`${text}\`; its tokens: ${line.tokens.map((t) => JSON.stringify(t.text)).join(' ')}`,
  );
  return found[nth].scopes;
}

function expectScopes(lines, lineHas, text, { nth = 0, has = [], not = [] }) {
  const scopes = scopesOf(lines, lineHas, text, nth);
  for (const s of has) {
    assert.ok(scopes.includes(s), `\`${text}\` in \`${lineHas}\` should have ${s}; it has ${scopes.join(' ')}`);
  }
  for (const s of not) {
    assert.ok(
      !scopes.some((x) => x === s || x.startsWith(`${s}.`)),
      `\`${text}\` in \`${lineHas}\` should not have ${s}; it has ${scopes.join(' ')}`,
    );
  }
}

async function example(name) {
  const file = exampleFiles().find((f) => path.basename(f) === name);
  assert.ok(file, `the reference example ${name} is missing from ${EXAMPLES}`);
  return tokenizeFile(file);
}

// ---------------------------------------------------------------------------------------------

test('every reference example tokenizes cleanly', async () => {
  for (const file of exampleFiles()) {
    const problems = structuralProblems(await tokenizeFile(file));
    assert.deepEqual(problems, [], `${file}:\n  ${problems.join('\n  ')}`);
  }
});

test("the repository's examples tokenize cleanly", async () => {
  const files = reelFiles(REPO_EXAMPLES);
  assert.ok(files.length > 0, `no .reel file in ${REPO_EXAMPLES}`);
  for (const file of files) {
    const problems = structuralProblems(await tokenizeFile(file));
    assert.deepEqual(problems, [], `${file}:\n  ${problems.join('\n  ')}`);
  }
});

test('declarations and keywords', async () => {
  const hello = await example('hello.reel');
  expectScopes(hello, 'flow hello {', 'flow', { has: ['storage.type.flow.reel'] });
  expectScopes(hello, 'flow hello {', 'hello', { has: ['entity.name.function.flow.reel'] });
  expectScopes(hello, 'input times: int = 3', 'input', { has: ['storage.type.input.reel'] });
  expectScopes(hello, 'input times: int = 3', 'times', { has: ['variable.parameter.input.reel'] });
  expectScopes(hello, 'input times: int = 3', 'int', { has: ['support.type.primitive.reel'] });
  expectScopes(hello, 'step shout = echo {', 'step', { has: ['storage.type.step.reel'] });
  expectScopes(hello, 'step shout = echo {', 'shout', { has: ['entity.name.function.step.reel'] });
  expectScopes(hello, 'step shout = echo {', 'echo', { has: ['support.function.tool.reel'] });
  expectScopes(hello, 'step greeting =', 'greeting', { has: ['entity.name.function.step.reel'] });
  expectScopes(hello, 'output {', 'output', { has: ['storage.type.output.reel'] });
  expectScopes(hello, 'lines: [for r in repeated', 'for', { has: ['keyword.control.loop.for.reel'] });
  expectScopes(hello, 'lines: [for r in repeated', 'in', { has: ['keyword.control.loop.in.reel'] });
  expectScopes(hello, 'foreach: range(input.times)', 'foreach', { has: ['keyword.other.meta-argument.reel'] });
  expectScopes(hello, 'foreach: range(input.times)', 'range', { has: ['support.function.builtin.reel'] });
  expectScopes(hello, 'value: upper(greeting)', 'value', {
    has: ['variable.parameter.argument.reel'],
    not: ['keyword'],
  });

  const tools = await example('tools.reel');
  expectScopes(tools, 'tool score {', 'tool', { has: ['storage.type.tool.reel'] });
  expectScopes(tools, 'tool score {', 'score', { has: ['entity.name.function.tool.reel'] });
  expectScopes(tools, 'step scored = score {', 'score', { has: ['entity.name.function.tool.reel'] });
  expectScopes(tools, 'output { words: int, score: float }', 'float', {
    has: ['meta.schema.reel', 'support.type.primitive.reel'],
  });

  const http = await example('http.reel');
  expectScopes(http, 'secret api_token', 'secret', { has: ['storage.type.secret.reel'] });
  expectScopes(http, 'secret api_token', 'api_token', { has: ['variable.other.constant.secret.reel'] });
  expectScopes(http, 'bearer: secret.api_token', 'secret', { has: ['variable.language.secret.reel'] });
  expectScopes(http, 'step data = http.get {', 'http.get', { has: ['support.function.tool.reel'] });
  expectScopes(http, 'retry: {', 'retry', { has: ['keyword.other.meta-argument.reel'] });

  const approval = await example('approval.reel');
  // `for:` of sleep is an argument name, not the comprehension keyword.
  expectScopes(approval, 'for: input.cooldown', 'for', {
    has: ['variable.parameter.argument.reel'],
    not: ['keyword.control'],
  });
  expectScopes(approval, 'when: decision.approved == true', 'when', { has: ['keyword.other.meta-argument.reel'] });
  expectScopes(approval, 'when: decision.approved == true', 'true', { has: ['constant.language.boolean.true.reel'] });

  const files = await example('files.reel');
  expectScopes(files, 'input files: list<string>', 'list', { has: ['support.type.list.reel'] });
  expectScopes(files, 'input files: list<string>', 'string', { has: ['meta.type.list.reel', 'support.type.primitive.reel'] });
  expectScopes(files, 'concurrency: 2', 'concurrency', { has: ['keyword.other.meta-argument.reel'] });
  expectScopes(files, 'concurrency: 2', '2', { has: ['constant.numeric.integer.reel'] });
});

test('numbers and durations', async () => {
  const approval = await example('approval.reel');
  expectScopes(approval, 'timeout: 7d', '7', { has: ['constant.numeric.duration.reel'] });
  expectScopes(approval, 'timeout: 7d', 'd', { has: ['constant.numeric.duration.reel', 'keyword.other.unit.reel'] });
  expectScopes(approval, 'input cooldown: duration = 2s', '2', { has: ['constant.numeric.duration.reel'] });
  expectScopes(approval, 'input cooldown: duration = 2s', 'duration', { has: ['support.type.primitive.reel'] });

  const files = await example('files.reel');
  expectScopes(files, 'base: 100ms', '100', { has: ['constant.numeric.duration.reel'] });
  expectScopes(files, 'base: 100ms', 'ms', { has: ['keyword.other.unit.reel'] });
  expectScopes(files, 'timeout: 5s', '5', { has: ['constant.numeric.duration.reel'] });

  const hello = await example('hello.reel');
  expectScopes(hello, 'input times: int = 3', '3', {
    has: ['constant.numeric.integer.reel'],
    not: ['constant.numeric.duration'],
  });

  const g = await grammar();
  const lines = tokenize(g, 'flow f {\n  step s = 1.5 + 2 + 5m + 1h + 1.5s + 10sec\n}\n');
  expectScopes(lines, 'step s', '1.5', { has: ['constant.numeric.float.reel'] });
  expectScopes(lines, 'step s', '2', { has: ['constant.numeric.integer.reel'] });
  expectScopes(lines, 'step s', 'm', { has: ['keyword.other.unit.reel'] });
  expectScopes(lines, 'step s', 'h', { has: ['keyword.other.unit.reel'] });
  expectScopes(lines, 'step s', '1.5s', { has: ['invalid.illegal.duration.reel'] });
  expectScopes(lines, 'step s', '10sec', { has: ['invalid.illegal.duration.reel'] });
});

test('strings, escapes and interpolation', async () => {
  const hello = await example('hello.reel');
  const line = 'step greeting = "hello, ${input.name}"';
  expectScopes(hello, line, 'hello, ', { has: ['string.quoted.double.reel'] });
  expectScopes(hello, line, '${', { has: ['meta.interpolation.reel', 'punctuation.definition.interpolation.begin.reel'] });
  expectScopes(hello, line, 'input', {
    has: ['string.quoted.double.reel', 'meta.interpolation.reel', 'meta.embedded.line.reel', 'variable.language.input.reel'],
  });
  expectScopes(hello, line, 'name', { has: ['meta.interpolation.reel', 'variable.other.input.reel'] });
  expectScopes(hello, line, '}', { has: ['punctuation.definition.interpolation.end.reel'] });

  const approval = await example('approval.reel');
  expectScopes(approval, 'value: "approved by ${decision.by} at ${now()}"', 'now', {
    has: ['meta.interpolation.reel', 'support.function.builtin.reel'],
  });

  const g = await grammar();
  // Nested interpolation: a string inside `${ }` with its own `${ }`.
  const nested = tokenize(g, 'flow f {\n  step s = "x ${"in ${n}"} y"\n  step t = 1\n}\n');
  assert.deepEqual(structuralProblems(nested), []);
  const n = scopesOf(nested, 'step s', 'n');
  assert.equal(n.filter((s) => s === 'meta.interpolation.reel').length, 2, `n: ${n.join(' ')}`);
  assert.equal(n.filter((s) => s === 'string.quoted.double.reel').length, 2, `n: ${n.join(' ')}`);
  expectScopes(nested, 'step s', ' y', { has: ['string.quoted.double.reel'], not: ['meta.interpolation'] });
  expectScopes(nested, 'step t', 'step', { has: ['storage.type.step.reel'], not: ['string'] });

  // Escapes, a lone `$`, a bad escape.
  const esc = tokenize(g, 'flow f {\n  step s = "a\\"b\\\\c\\n\\t\\$d $e \\q"\n}\n');
  for (const e of ['\\"', '\\\\', '\\n', '\\t', '\\$']) {
    expectScopes(esc, 'step s', e, { has: ['constant.character.escape.reel'] });
  }
  expectScopes(esc, 'step s', '\\q', { has: ['invalid.illegal.escape.reel'] });
  assert.ok(
    !esc[1].tokens.some((t) => t.scopes.includes('meta.interpolation.reel')),
    '`$e` and `\\$` must not start an interpolation',
  );

  // An unterminated string ends with its line; the next line is code again.
  const open = tokenize(g, 'flow f {\n  step s = "no end\n  step t = 1\n}\n');
  expectScopes(open, 'step t', 'step', { has: ['storage.type.step.reel'], not: ['string'] });
  expectScopes(open, 'step t', '1', { has: ['constant.numeric.integer.reel'] });
  assert.deepEqual(open[open.length - 1].open, []);

  // An interpolation may span lines; the string resumes after it.
  const multi = tokenize(g, 'flow f {\n  step s = "a ${\n    len(x)\n  } b"\n  step t = 1\n}\n');
  assert.deepEqual(structuralProblems(multi), []);
  expectScopes(multi, 'len(x)', 'len', { has: ['meta.interpolation.reel', 'support.function.builtin.reel'] });
  expectScopes(multi, '} b"', ' b', { has: ['string.quoted.double.reel'], not: ['meta.interpolation'] });
});

test('doc comments and line comments', async () => {
  const hello = await example('hello.reel');
  expectScopes(hello, '/// The smallest useful flow', ' The smallest useful flow: inputs, a pure step, recorded effects.', {
    has: ['comment.line.documentation.reel'],
    not: ['comment.line.double-slash'],
  });

  const g = await grammar();
  const lines = tokenize(
    g,
    '/// doc\n// plain\n//// four: plain again\nflow f {\n  step a = 1 // trailing\n  step b = "not // a comment"\n}\n',
  );
  expectScopes(lines, '/// doc', ' doc', { has: ['comment.line.documentation.reel'] });
  expectScopes(lines, '// plain', ' plain', {
    has: ['comment.line.double-slash.reel'],
    not: ['comment.line.documentation'],
  });
  expectScopes(lines, '//// four', '// four: plain again', {
    has: ['comment.line.double-slash.reel'],
    not: ['comment.line.documentation'],
  });
  expectScopes(lines, 'step a', ' trailing', { has: ['comment.line.double-slash.reel'] });
  expectScopes(lines, 'step b', 'not // a comment', { has: ['string.quoted.double.reel'], not: ['comment'] });
  assert.deepEqual(structuralProblems(lines), []);
});

test('operators and types', async () => {
  const approval = await example('approval.reel');
  expectScopes(approval, 'message: done ?? "rejected"', '??', { has: ['keyword.operator.coalesce.reel'] });
  expectScopes(approval, 'when: decision.approved == true', '==', { has: ['keyword.operator.comparison.reel'] });

  const http = await example('http.reel');
  expectScopes(http, 'step items = data.body.items ?? []', '??', { has: ['keyword.operator.coalesce.reel'] });
  expectScopes(http, 'doubled: item.value * 2', '*', { has: ['keyword.operator.arithmetic.reel'] });

  const g = await grammar();
  const lines = tokenize(
    g,
    [
      'flow f {',
      '  input a: string? = null',
      '  input b: list<{ x: int? }>? = null',
      '  step c = a?.b ?? 1 <= 2 && !false || 3 % 2 != 1',
      '  step d = if true then body.in else x.for',
      '}',
      '',
    ].join('\n'),
  );
  assert.deepEqual(structuralProblems(lines), []);
  expectScopes(lines, 'input a', 'string', { has: ['support.type.primitive.reel'] });
  expectScopes(lines, 'input a', '?', { has: ['keyword.operator.optional.reel'] });
  expectScopes(lines, 'input a', 'null', { has: ['constant.language.null.reel'] });
  expectScopes(lines, 'input b', '?', { nth: 0, has: ['meta.type.record.reel', 'keyword.operator.optional.reel'] });
  expectScopes(lines, 'input b', '?', { nth: 1, has: ['keyword.operator.optional.reel'], not: ['meta.type.list'] });
  expectScopes(lines, 'step c', '?.', { has: ['punctuation.accessor.optional.reel'] });
  expectScopes(lines, 'step c', '??', { has: ['keyword.operator.coalesce.reel'] });
  expectScopes(lines, 'step c', '<=', { has: ['keyword.operator.comparison.reel'] });
  expectScopes(lines, 'step c', '&&', { has: ['keyword.operator.logical.reel'] });
  expectScopes(lines, 'step c', '!', { has: ['keyword.operator.logical.reel'] });
  expectScopes(lines, 'step c', '||', { has: ['keyword.operator.logical.reel'] });
  expectScopes(lines, 'step c', '%', { has: ['keyword.operator.arithmetic.reel'] });
  expectScopes(lines, 'step c', '!=', { has: ['keyword.operator.comparison.reel'] });
  expectScopes(lines, 'step d', 'if', { has: ['keyword.control.conditional.reel'] });
  expectScopes(lines, 'step d', 'then', { has: ['keyword.control.conditional.reel'] });
  expectScopes(lines, 'step d', 'else', { has: ['keyword.control.conditional.reel'] });
  // A keyword right after `.` is a member name.
  expectScopes(lines, 'step d', 'in', { has: ['variable.other.property.reel'], not: ['keyword'] });
  expectScopes(lines, 'step d', 'for', { has: ['variable.other.property.reel'], not: ['keyword'] });
});

test('the sample matches its pinned tokens', async () => {
  const lines = await tokenizeFile(FIXTURE);
  const actual = lines.map(({ line, tokens }) => ({
    line,
    tokens: tokens.filter((t) => t.text.trim() !== '').map((t) => [t.text, t.scopes.join(' ')]),
  }));
  if (process.env.UPDATE_SNAPSHOT === '1') {
    fs.writeFileSync(SNAPSHOT, `${JSON.stringify(actual, null, 1)}\n`);
    return;
  }
  assert.ok(fs.existsSync(SNAPSHOT), `${SNAPSHOT} is missing; run UPDATE_SNAPSHOT=1 npm test and review it`);
  const expected = JSON.parse(fs.readFileSync(SNAPSHOT, 'utf8'));
  assert.equal(actual.length, expected.length, 'the sample and its snapshot have different numbers of lines');
  actual.forEach((l, i) => {
    assert.deepEqual(
      l,
      expected[i],
      `line ${i + 1} of ${FIXTURE} tokenizes differently from ${SNAPSHOT} ` +
        '(if the change is intended: UPDATE_SNAPSHOT=1 npm test, and review the diff)',
    );
  });
  // The sample has deliberately bad durations; nothing else in it is illegal or unbalanced.
  const problems = structuralProblems(lines, { allowInvalid: true });
  assert.deepEqual(problems, []);
  const illegal = lines.flatMap((l) => l.tokens.filter((t) => t.scopes.some((s) => s.startsWith('invalid.'))).map((t) => t.text));
  assert.deepEqual(illegal, ['1.5s', '10sec']);
});
