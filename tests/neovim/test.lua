-- The Neovim test's cases, run in a headless Neovim 0.11 started with init.lua beside this file
-- (see run.sh): each case is a function that fails with `error()`; the first failure ends the
-- test with exit status 1, and a summary line `neovim: N passed` means every case passed.
--
-- Environment (run.sh sets it): REEL_NVIM_FLOW, the flow in a temporary project holding two
-- recorded runs of it, REEL_NVIM_FIRST_RUN and REEL_NVIM_LATEST_RUN, their ids.

local TIMEOUT = 20000

local flow_path = assert(os.getenv('REEL_NVIM_FLOW'), 'REEL_NVIM_FLOW is not set')
local first_run = assert(os.getenv('REEL_NVIM_FIRST_RUN'), 'REEL_NVIM_FIRST_RUN is not set')
local latest_run = assert(os.getenv('REEL_NVIM_LATEST_RUN'), 'REEL_NVIM_LATEST_RUN is not set')

local function say(text)
  io.stdout:write(text .. '\n')
end

--- Waits until `check()` returns a true value (which it returns); else fails with `what` and
--- what `seen()` says was there instead.
local function wait_for(what, check, seen)
  local got
  local ok = vim.wait(TIMEOUT, function()
    got = check()
    return got
  end, 50)
  if not ok then
    error(('timed out waiting for %s; seen: %s'):format(what, seen and seen() or '(nothing)'), 0)
  end
  return got
end

local ctx = {}

--- The Reel client attached to the flow's buffer.
local function client()
  return vim.lsp.get_clients({ bufnr = ctx.buf, name = 'reel' })[1]
end

--- The buffer's line (1-based) holding `text`.
local function line_of(text)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(ctx.buf, 0, -1, false)) do
    if l:find(text, 1, true) then
      return i
    end
  end
  error(('no line holds `%s`'):format(text), 0)
end

--- The inlay hints' labels by line (1-based), and every hint as `line: label` for messages.
local function hints()
  local by_line, shown = {}, {}
  for _, h in ipairs(vim.lsp.inlay_hint.get({ bufnr = ctx.buf })) do
    local label = h.inlay_hint.label
    if type(label) == 'table' then
      label = table.concat(vim.tbl_map(function(p) return p.value end, label))
    end
    local line = h.inlay_hint.position.line + 1
    by_line[line] = label
    table.insert(shown, ('%d: %s'):format(line, label))
  end
  return by_line, table.concat(shown, ' | ')
end

--- Waits until the hint on the line holding `text` contains `want`; returns the hint.
local function hint_on(text, want)
  local line = line_of(text)
  return wait_for(('a hint with `%s` on `%s`'):format(want, text), function()
    local by_line = hints()
    local h = by_line[line]
    return h and h:find(want, 1, true) and h
  end, function()
    return select(2, hints())
  end)
end

--- The code lenses of the buffer, refreshed: a list of { line, title, command }.
local function lenses()
  local out = {}
  for _, l in ipairs(vim.lsp.codelens.get(ctx.buf)) do
    if l.command then
      table.insert(out, { line = l.range.start.line + 1, title = l.command.title, command = l.command.command })
    end
  end
  return out
end

local function show_lenses()
  return table.concat(vim.tbl_map(function(l) return ('%d: %s [%s]'):format(l.line, l.title, l.command) end, lenses()), ' | ')
end

--- Waits until a lens whose title contains `want` is there; returns it.
local function lens_titled(want)
  return wait_for(('a code lens titled `%s`'):format(want), function()
    vim.lsp.codelens.refresh({ bufnr = ctx.buf })
    for _, l in ipairs(lenses()) do
      if l.title:find(want, 1, true) then
        return l
      end
    end
  end, show_lenses)
end

--- Runs the lens titled `title` as a user does: the cursor on its line, `vim.lsp.codelens.run()`,
--- and, when the line has several lenses, that one chosen from the `vim.ui.select` list.
local function run_lens(title)
  local lens = lens_titled(title)
  vim.api.nvim_win_set_cursor(0, { lens.line, 0 })
  local select = vim.ui.select
  local offered
  vim.ui.select = function(items, opts, on_choice)
    offered = vim.tbl_map(opts.format_item, items)
    for _, item in ipairs(items) do
      if opts.format_item(item):find(title, 1, true) then
        return on_choice(item)
      end
    end
    on_choice(nil)
  end
  local ok, err = pcall(vim.lsp.codelens.run)
  vim.ui.select = select
  if not ok then
    error(err, 0)
  end
  return offered
end

--- A server command through the client, synchronously: its result.
local function execute(command, arguments)
  local r = client():request_sync('workspace/executeCommand', { command = command, arguments = arguments }, TIMEOUT, ctx.buf)
  if not r or r.err then
    error(('%s failed: %s'):format(command, vim.inspect(r and r.err)), 0)
  end
  return r.result
end

local cases = {
  { 'Neovim is 0.11 or newer', function()
    local v = vim.version()
    if vim.version.lt(v, { 0, 11, 0 }) then
      error(('Neovim %s is too old: the test needs 0.11 (vim.lsp.config)'):format(tostring(v)), 0)
    end
  end },

  { 'the flow opens and `reel lsp` attaches', function()
    vim.cmd.edit(vim.fn.fnameescape(flow_path))
    ctx.buf = vim.api.nvim_get_current_buf()
    if vim.bo[ctx.buf].filetype ~= 'reel' then
      error(('filetype is `%s`, not `reel`'):format(vim.bo[ctx.buf].filetype), 0)
    end
    wait_for('the reel client to attach', function() return client() and client().initialized end)
    ctx.uri = vim.uri_from_bufnr(ctx.buf)
  end },

  { 'each step shows the latest run’s result as an inlay hint', function()
    local a = hint_on('step a = echo', '{"x":5}')
    local b = hint_on('step b = a.x + 1', '✓ 6')
    say(('  step a: %s\n  step b: %s'):format(a, b))
    if not a:find('^✓') then
      error(('the hint of step a should start with ✓: %s'):format(a), 0)
    end
    local by_line, shown = hints()
    if vim.tbl_count(by_line) ~= 2 then
      error(('hints on exactly the two step lines, not: %s'):format(shown), 0)
    end
  end },

  { 'the lenses name the shown run', function()
    lens_titled('▶ Run pipeline')
    lens_titled('Showing run ' .. latest_run)
    lens_titled('Pick run')
    say('  lenses: ' .. show_lenses())
  end },

  { 'the pick-run lens shows the earlier run: the server asks, the user picks', function()
    -- `reel.server.pickRun` asks with window/showMessageRequest; the user picks the earlier run.
    local offered
    local handlers = client().handlers
    local ask = handlers['window/showMessageRequest']
    handlers['window/showMessageRequest'] = function(_, params)
      offered = vim.tbl_map(function(a) return a.title end, params.actions or {})
      for _, action in ipairs(params.actions or {}) do
        if action.title:find(first_run, 1, true) then
          return action
        end
      end
      return vim.NIL
    end
    -- The question comes after the lens's command is sent: the answer stays until it is used.
    local ok, err = pcall(function()
      run_lens('Pick run')
      -- The server tells the editor to refresh; the hints follow without a keystroke.
      hint_on('step a = echo', '{"x":2}')
      hint_on('step b = a.x + 1', '✓ 3')
      lens_titled('Showing run ' .. first_run)
    end)
    handlers['window/showMessageRequest'] = ask
    if not ok then
      error(err, 0)
    end
    local a = hint_on('step a = echo', '{"x":2}')
    if not offered or #offered ~= 3 or offered[1] ~= 'Follow the latest run' then
      error(('want the latest-run choice and the two runs: %s'):format(vim.inspect(offered)), 0)
    end
    say(('  offered %s; step a: %s'):format(table.concat(offered, ' | '), a))
  end },

  { 'the run lens runs the flow through the server, and the hints follow the new run', function()
    local before = vim.tbl_map(function(r) return r.id end, execute('reel.server.listRuns', { ctx.uri, 'pipeline' }))
    run_lens('▶ Run pipeline')
    local runs = wait_for('a third run of the flow', function()
      local now = execute('reel.server.listRuns', { ctx.uri, 'pipeline' })
      return #now == #before + 1 and now
    end)
    local new = runs[1].id
    if vim.tbl_contains(before, new) then
      error(('the newest run %s is not new'):format(new), 0)
    end
    lens_titled('Showing run ' .. new)
    local a = hint_on('step a = echo', '{"x":2}')
    say(('  ran %s; step a: %s'):format(new, a))
  end },
}

local passed = 0
for _, case in ipairs(cases) do
  local name, run = case[1], case[2]
  local ok, err = pcall(run)
  if not ok then
    say(('FAIL %s: %s'):format(name, err))
    say(('neovim: %d passed, 1 failed'):format(passed))
    vim.cmd('cquit 1')
  end
  say('ok   ' .. name)
  passed = passed + 1
end
say(('neovim: %d passed, 0 failed'):format(passed))
vim.cmd('qall!')
