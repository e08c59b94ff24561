-- A minimal Neovim 0.11 configuration for Reel, as a user would write it: `.reel` files get the
-- `reel` filetype, and `reel lsp` is configured and enabled with the 0.11 API
-- (`vim.lsp.config` / `vim.lsp.enable`), which starts it when a `reel` buffer opens.
-- The test sets REEL_BIN to the binary under test; a user would write `'reel'`.

vim.filetype.add({ extension = { reel = 'reel' } })

vim.lsp.config('reel', {
  cmd = { os.getenv('REEL_BIN') or 'reel', 'lsp' },
  filetypes = { 'reel' },
  root_markers = { 'reel.toml', '.git' },
})
vim.lsp.enable('reel')

-- Results of past runs are inlay hints: show them in every buffer the server attaches to.
vim.api.nvim_create_autocmd('LspAttach', {
  callback = function(args)
    vim.lsp.inlay_hint.enable(true, { bufnr = args.buf })
  end,
})
