//! What the command says to people on stderr (errors, diagnostics, summaries) and the color decision.

use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};

use reel_compiler::render::render_terminal;
use reel_syntax::Diagnostic;

use super::{ColorChoice, Failure};

/// What the environment says about color: whether stderr is a terminal and the variables read.
#[derive(Debug, Default)]
pub struct ColorEnv {
    /// Whether stderr is a terminal.
    pub is_terminal: bool,
    /// `NO_COLOR`: set to anything non-empty, no color (no-color.org).
    pub no_color: Option<OsString>,
    /// `CLICOLOR_FORCE`: set to anything but `0`, color even when stderr is not a terminal.
    pub clicolor_force: Option<OsString>,
    /// `TERM`: `dumb` means no color.
    pub term: Option<OsString>,
}

impl ColorEnv {
    /// The environment of this process.
    // edge: whether to color is the user's environment, read once where the program starts.
    #[allow(clippy::disallowed_methods)]
    pub fn current() -> Self {
        ColorEnv {
            is_terminal: io::stderr().is_terminal(),
            no_color: std::env::var_os("NO_COLOR"),
            clicolor_force: std::env::var_os("CLICOLOR_FORCE"),
            term: std::env::var_os("TERM"),
        }
    }
}

/// Whether to color stderr, from `--color` and the environment.
///
/// With `auto`, NO_COLOR wins over CLICOLOR_FORCE, which wins over the terminal test; an explicit
/// `--color always` or `never` wins over all of them, as a per-invocation choice should.
pub fn use_color(choice: ColorChoice, env: &ColorEnv) -> bool {
    let set = |v: &Option<OsString>| v.as_ref().is_some_and(|v| !v.is_empty());
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto if set(&env.no_color) => false,
        ColorChoice::Auto if set(&env.clicolor_force) && env.clicolor_force != Some("0".into()) => {
            true
        }
        ColorChoice::Auto => env.is_terminal && env.term.as_ref().is_none_or(|t| t != "dumb"),
    }
}

/// How a piece of a message is styled when colors are on.
#[derive(Clone, Copy, Debug)]
pub enum Style {
    /// Errors: bold red.
    Error,
    /// Warnings: bold yellow.
    Warning,
    /// All clear: bold green.
    Good,
}

/// The stderr side of the command: knows whether to color.
#[derive(Debug)]
pub struct Ui {
    color: bool,
}

impl Ui {
    /// A UI for this process, coloring as `choice` and the environment say.
    pub fn new(choice: ColorChoice) -> Self {
        Ui {
            color: use_color(choice, &ColorEnv::current()),
        }
    }

    /// Whether colors are on.
    pub fn colored(&self) -> bool {
        self.color
    }

    /// `text` in `style` when colors are on, else as is.
    pub fn paint(&self, text: &str, style: Style) -> String {
        if !self.color {
            return text.to_string();
        }
        let code = match style {
            Style::Error => "1;31",
            Style::Warning => "1;33",
            Style::Good => "1;32",
        };
        format!("\u{1b}[{code}m{text}\u{1b}[0m")
    }

    /// Prints `error: message` on stderr.
    pub fn error(&self, message: &str) {
        self.line(&format!("{} {message}", self.paint("error:", Style::Error)));
    }

    /// Prints `warning: message` on stderr.
    pub fn warning(&self, message: &str) {
        self.line(&format!(
            "{} {message}",
            self.paint("warning:", Style::Warning)
        ));
    }

    /// Prints one line on stderr.
    pub fn line(&self, text: &str) {
        // A closed stderr leaves nobody to tell; the exit status still says how it went.
        let _ = writeln!(io::stderr().lock(), "{text}");
    }

    /// Renders the diagnostics of one file on stderr, with source excerpts.
    pub fn diagnostics(&self, path: &str, text: &str, diags: &[Diagnostic]) {
        if diags.is_empty() {
            return;
        }
        let rendered = render_terminal(path, text, diags, self.color);
        let _ = io::stderr().lock().write_all(rendered.as_bytes());
    }

    /// `N errors, M warnings` for a summary line, colored, or `no problems`.
    pub fn counts(&self, errors: usize, warnings: usize) -> String {
        let mut parts = Vec::new();
        if errors > 0 {
            parts.push(self.paint(&plural(errors, "error"), Style::Error));
        }
        if warnings > 0 {
            parts.push(self.paint(&plural(warnings, "warning"), Style::Warning));
        }
        if parts.is_empty() {
            self.paint("no problems", Style::Good)
        } else {
            parts.join(", ")
        }
    }
}

/// `1 file`, `2 files`.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Writes `text` to stdout; a reader that went away (a closed pipe) is not an error.
pub fn print_stdout(text: &str) -> Result<(), Failure> {
    write_stdout(|out| out.write_all(text.as_bytes()))
}

/// Writes what `write` writes to stdout, buffered (as [`super::sources::write_atomically_with`]
/// is), for a text too big to assemble first; a reader that went away (a closed pipe) is not an
/// error.
pub fn write_stdout(
    write: impl FnOnce(&mut io::BufWriter<io::StdoutLock<'static>>) -> io::Result<()>,
) -> Result<(), Failure> {
    let mut out =
        io::BufWriter::with_capacity(super::sources::WRITTEN_AT_ONCE, io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::usage(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    fn terminal() -> ColorEnv {
        ColorEnv {
            is_terminal: true,
            term: os("xterm"),
            ..ColorEnv::default()
        }
    }

    #[test]
    fn auto_colors_a_terminal_only() {
        assert!(use_color(ColorChoice::Auto, &terminal()));
        assert!(!use_color(ColorChoice::Auto, &ColorEnv::default()));
    }

    #[test]
    fn no_color_counts_when_not_empty() {
        let no_color = |v| ColorEnv {
            no_color: os(v),
            ..terminal()
        };
        assert!(!use_color(ColorChoice::Auto, &no_color("1")));
        assert!(use_color(ColorChoice::Auto, &no_color("")));
    }

    #[test]
    fn clicolor_force_colors_a_pipe_unless_no_color_is_set() {
        let forced = ColorEnv {
            clicolor_force: os("1"),
            ..ColorEnv::default()
        };
        assert!(use_color(ColorChoice::Auto, &forced));
        let off = ColorEnv {
            clicolor_force: os("0"),
            ..ColorEnv::default()
        };
        assert!(!use_color(ColorChoice::Auto, &off));
        let both = ColorEnv {
            no_color: os("1"),
            ..forced
        };
        assert!(!use_color(ColorChoice::Auto, &both));
    }

    #[test]
    fn a_dumb_terminal_gets_no_color() {
        let dumb = ColorEnv {
            term: os("dumb"),
            ..terminal()
        };
        assert!(!use_color(ColorChoice::Auto, &dumb));
    }

    #[test]
    fn the_flag_wins() {
        let env = ColorEnv {
            no_color: os("1"),
            term: os("dumb"),
            ..ColorEnv::default()
        };
        assert!(use_color(ColorChoice::Always, &env));
        assert!(!use_color(ColorChoice::Never, &terminal()));
    }

    #[test]
    fn counts_read_naturally() {
        let ui = Ui { color: false };
        assert_eq!(ui.counts(0, 0), "no problems");
        assert_eq!(ui.counts(1, 0), "1 error");
        assert_eq!(ui.counts(2, 1), "2 errors, 1 warning");
        assert_eq!(ui.counts(0, 3), "3 warnings");
    }

    #[test]
    fn paint_is_plain_without_color() {
        assert_eq!(Ui { color: false }.paint("x", Style::Error), "x");
        assert_eq!(
            Ui { color: true }.paint("x", Style::Error),
            "\u{1b}[1;31mx\u{1b}[0m"
        );
    }
}
