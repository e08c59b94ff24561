//! The fork preview: what a fork of a flow's shown run would do with the text in the editor, step
//! by step: reuse the run's record, run live (and why), or run a new step.
//!
//! The verdicts are the CLI's own (`reel replay RUN --flow FILE --json`, the check `reel fork`
//! makes), so the editor and the terminal never disagree; the server starts that command on the
//! editor's text, written to a file of its own. While a preview is on, each change of the text
//! starts a new check after a short pause; a check the text has moved past is killed. The lenses
//! (`lenses.rs`) show the last finished check on each step's line.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tower_lsp_server::Client;

use crate::commands::{Launcher, message};

/// How long the text must rest before a new check starts.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// One step's verdict, as `reel replay --flow --json` gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The step's name.
    pub step: String,
    /// Whether the fork reuses the run's record of it.
    pub reuse: bool,
    /// Why it runs live (for those that do).
    pub reason: Option<String>,
}

/// What a fork would do with one step, as the editor marks it.
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    /// Reused from the run.
    Reused,
    /// Runs live, and why.
    Live(String),
    /// A step the run did not have.
    New,
    /// A step of the run that the text no longer has.
    Removed,
}

impl Verdict {
    /// How the editor marks it.
    pub fn mark(&self) -> Mark {
        match (self.reuse, self.reason.as_deref()) {
            (true, _) => Mark::Reused,
            (false, Some("new step")) => Mark::New,
            (false, Some("removed step")) => Mark::Removed,
            (false, reason) => Mark::Live(reason.unwrap_or("it changed").to_string()),
        }
    }
}

/// A finished check: the run it compared with and each step's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The run a fork would start from.
    pub parent: String,
    /// The verdicts, in the flow's order, then the removed steps.
    pub steps: Vec<Verdict>,
}

impl Plan {
    /// Reads the JSON of `reel replay RUN --flow FILE --json`.
    pub fn from_json(v: &Value) -> Option<Plan> {
        let steps = v["steps"]
            .as_array()?
            .iter()
            .map(|s| {
                Some(Verdict {
                    step: s["step"].as_str()?.to_string(),
                    reuse: s["reuse"].as_bool()?,
                    reason: s["reason"].as_str().map(str::to_string),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Plan {
            parent: v["parent"].as_str()?.to_string(),
            steps,
        })
    }

    /// How many steps are reused, run live, new and removed.
    pub fn counts(&self) -> [usize; 4] {
        let mut n = [0; 4];
        for s in &self.steps {
            n[match s.mark() {
                Mark::Reused => 0,
                Mark::Live(_) => 1,
                Mark::New => 2,
                Mark::Removed => 3,
            }] += 1;
        }
        n
    }
}

/// What a preview shows now.
#[derive(Clone, Debug, PartialEq)]
pub enum Shown {
    /// The first check has not finished.
    Checking,
    /// The last finished check.
    Plan(Plan),
    /// The last check could not be made (the text has errors, the run is gone): `reel`'s message.
    Failed(String),
}

/// One flow's preview.
struct Preview {
    /// The run a fork would start from.
    run: String,
    /// Where `reel` is started (the document's directory: it finds the store from there).
    cwd: PathBuf,
    /// Counts the checks started; a check whose number is not the last is superseded.
    generation: u64,
    /// The hash of the text of the last check started.
    asked: Option<u64>,
    shown: Shown,
}

/// A flow's preview key: (document URI, flow name).
pub type Key = (String, String);

/// The fork previews that are on, by document and flow.
#[derive(Clone, Default)]
pub struct Previews(Arc<Mutex<HashMap<Key, Preview>>>);

fn hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Previews {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Preview>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns the preview of `key` on against `run` (again: a new run, nothing checked yet).
    pub fn start(&self, key: Key, run: String, cwd: PathBuf) {
        let mut map = self.lock();
        let generation = map.get(&key).map_or(0, |p| p.generation + 1);
        map.insert(
            key,
            Preview {
                run,
                cwd,
                generation,
                asked: None,
                shown: Shown::Checking,
            },
        );
    }

    /// Turns the preview of `flow` in `uri` off; whether it was on.
    pub fn stop(&self, uri: &str, flow: &str) -> bool {
        self.lock()
            .remove(&(uri.to_string(), flow.to_string()))
            .is_some()
    }

    /// The run a preview of `key` compares with, and what it shows; `None` when it is off.
    pub fn get(&self, uri: &str, flow: &str) -> Option<(String, Shown)> {
        self.lock()
            .get(&(uri.to_string(), flow.to_string()))
            .map(|p| (p.run.clone(), p.shown.clone()))
    }

    /// Marks a check of `text` as started, superseding the others; its number and what it
    /// needs, or `None` when the preview is off or this text is already checked or being checked.
    fn ask(&self, key: &Key, text: &str, again: bool) -> Option<(u64, String, PathBuf)> {
        let mut map = self.lock();
        let p = map.get_mut(key)?;
        let h = hash(text);
        if p.asked == Some(h) && !again {
            return None;
        }
        p.asked = Some(h);
        p.generation += 1;
        Some((p.generation, p.run.clone(), p.cwd.clone()))
    }

    fn current(&self, key: &Key, generation: u64) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|p| p.generation == generation)
    }

    /// Keeps what a check found, unless a later one was started meanwhile; whether it was kept.
    fn finish(&self, key: &Key, generation: u64, shown: Shown) -> bool {
        let mut map = self.lock();
        match map.get_mut(key) {
            Some(p) if p.generation == generation => {
                p.shown = shown;
                true
            }
            _ => false,
        }
    }

    /// Checks `text` now, waiting for the answer (the `previewFork` command): the plan as JSON, or
    /// `reel`'s message.
    pub async fn check_now(
        &self,
        key: &Key,
        text: String,
        launcher: &Launcher,
        path: &Path,
    ) -> Result<Value, String> {
        let Some((generation, run, cwd)) = self.ask(key, &text, true) else {
            return Err("the fork preview is off".into());
        };
        let shown = check(launcher, &cwd, &run, path, &text).await;
        self.finish(key, generation, shown.clone());
        match shown {
            Shown::Plan(plan) => Ok(plan_json(&plan)),
            Shown::Failed(why) => Err(why),
            Shown::Checking => Ok(Value::Null),
        }
    }

    /// Follows an edit to a text that cannot be checked (it has errors: `reel` would refuse it):
    /// a check under way is dropped and the preview says `why` until the text changes.
    pub fn cannot_check(&self, key: &Key, text: &str, why: &str) {
        if let Some((generation, _, _)) = self.ask(key, text, false) {
            self.finish(key, generation, Shown::Failed(why.to_string()));
        }
    }

    /// Follows an edit: when the preview of `key` is on and `text` is not the text last checked,
    /// starts a check after a pause (dropped if the text changes again meanwhile, killed if it
    /// changes while it runs), then asks `client` for new lenses (`None`: a client that cannot
    /// be asked). Needs a tokio runtime.
    pub fn follow(
        &self,
        key: &Key,
        text: &str,
        path: &Path,
        launcher: &Launcher,
        client: Option<&Client>,
    ) {
        let Some((generation, run, cwd)) = self.ask(key, text, false) else {
            return;
        };
        let (this, key, text, path) = (
            self.clone(),
            key.clone(),
            text.to_string(),
            path.to_path_buf(),
        );
        let (launcher, client) = (launcher.clone(), client.cloned());
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            tokio::time::sleep(DEBOUNCE).await;
            if !this.current(&key, generation) {
                return;
            }
            let superseded = async {
                while this.current(&key, generation) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            // Dropping the check kills its process (`kill_on_drop`).
            let shown = tokio::select! {
                shown = check(&launcher, &cwd, &run, &path, &text) => shown,
                () = superseded => return,
            };
            if this.finish(&key, generation, shown)
                && let Some(client) = client
            {
                let _ = client.code_lens_refresh().await;
            }
        });
    }
}

/// The plan as the `previewFork` command answers it: the CLI's JSON, with each step's mark.
pub fn plan_json(plan: &Plan) -> Value {
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| {
            let (mark, reason) = match s.mark() {
                Mark::Reused => ("reused", None),
                Mark::Live(why) => ("live", Some(why)),
                Mark::New => ("new", None),
                Mark::Removed => ("removed", None),
            };
            serde_json::json!({ "step": s.step, "mark": mark, "reason": reason })
        })
        .collect();
    serde_json::json!({ "parent": plan.parent, "steps": steps })
}

/// A file of the editor's text, removed when its check ends (also when the check is dropped).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `reel replay RUN --flow FILE --json` on `text` (written to a file named as the document,
/// so `reel`'s messages name it) and reads its verdicts.
async fn check(launcher: &Launcher, cwd: &Path, run: &str, path: &Path, text: &str) -> Shown {
    let name = path
        .file_name()
        .map_or("preview.reel".into(), |n| n.to_string_lossy().into_owned());
    let file = match launcher.scratch_file(&name) {
        Ok(f) => Scratch(f),
        Err(e) => return Shown::Failed(e),
    };
    let file = &file.0;
    if let Err(e) = std::fs::write(file, text) {
        return Shown::Failed(format!("cannot write {}: {e}", file.display()));
    }
    let args = [
        OsStr::new("replay"),
        OsStr::new(run),
        OsStr::new("--flow"),
        file.as_os_str(),
        OsStr::new("--json"),
    ];
    let out = match launcher.command(cwd, &args) {
        Ok(mut cmd) => cmd.kill_on_drop(true).output().await,
        Err(e) => return Shown::Failed(e),
    };
    let out = match out {
        Ok(out) => out,
        Err(e) => return Shown::Failed(format!("cannot start `reel`: {e}")),
    };
    // Exit 1 with the plan is a fork that diverges: the usual case, not a failure.
    let plan = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .as_ref()
        .and_then(Plan::from_json);
    match plan {
        Some(plan) => Shown::Plan(plan),
        // `reel` names the file it was given; the user knows it as the document.
        None => Shown::Failed(
            message(&String::from_utf8_lossy(&out.stderr))
                .replace(&file.display().to_string(), &path.display().to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clis_plan_reads_as_marks() {
        let v = serde_json::json!({
            "parent": "r1",
            "compatible": false,
            "steps": [
                { "step": "a", "reuse": true, "reason": null, "reused_calls": 1, "live_calls": 0 },
                { "step": "b", "reuse": false, "reason": "changed expression", "reused_calls": 0, "live_calls": 0 },
                { "step": "c", "reuse": false, "reason": "new step", "reused_calls": 0, "live_calls": 1 },
                { "step": "d", "reuse": false, "reason": "removed step", "reused_calls": 0, "live_calls": 0 },
            ],
        });
        let plan = Plan::from_json(&v).unwrap();
        assert_eq!(plan.parent, "r1");
        let marks: Vec<Mark> = plan.steps.iter().map(Verdict::mark).collect();
        assert_eq!(
            marks,
            [
                Mark::Reused,
                Mark::Live("changed expression".into()),
                Mark::New,
                Mark::Removed
            ]
        );
        assert_eq!(plan.counts(), [1, 1, 1, 1]);
        assert_eq!(Plan::from_json(&serde_json::json!({ "error": "x" })), None);
    }

    /// A stand-in for `reel replay … --flow FILE --json`: it takes a moment, then records that
    /// it finished checking the text in FILE and answers an empty plan.
    #[cfg(unix)]
    fn slow_reel(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("reel");
        let script = format!(
            "#!/bin/sh\ntext=$(cat \"$6\")\nsleep 1\ntouch \"{}/finished-$text\"\necho '{{\"parent\":\"r1\",\"steps\":[]}}'\n",
            dir.display()
        );
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }

    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_check_the_text_moved_past_is_killed_and_the_last_one_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("scratch");
        let launcher = Launcher::new(Some(slow_reel(dir.path())), None, scratch.clone());
        let previews = Previews::default();
        let key = ("file:///a.reel".to_string(), "f".to_string());
        let doc = dir.path().join("a.reel");
        previews.start(key.clone(), "r1".into(), dir.path().to_path_buf());
        previews.follow(&key, "first", &doc, &launcher, None);
        // Past the pause: the first check runs when the text changes again.
        tokio::time::sleep(Duration::from_millis(600)).await;
        previews.follow(&key, "second", &doc, &launcher, None);
        let plan = Shown::Plan(Plan {
            parent: "r1".into(),
            steps: Vec::new(),
        });
        for _ in 0..100 {
            if previews.get(&key.0, &key.1).map(|(_, s)| s) == Some(plan.clone()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(previews.get(&key.0, &key.1), Some(("r1".into(), plan)));
        // The first check would have finished by now, had it not been killed.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(dir.path().join("finished-second").exists());
        assert!(!dir.path().join("finished-first").exists(), "not killed");
        // Neither check left its copy of the text behind.
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    }

    #[test]
    fn a_text_is_checked_once_and_a_new_text_supersedes_the_check_before() {
        let previews = Previews::default();
        let key = ("file:///a.reel".to_string(), "f".to_string());
        assert!(
            previews.ask(&key, "x", false).is_none(),
            "off: nothing to check"
        );
        previews.start(key.clone(), "r1".into(), PathBuf::from("/"));
        let (first, run, _) = previews.ask(&key, "x", false).unwrap();
        assert_eq!(run, "r1");
        assert!(previews.ask(&key, "x", false).is_none(), "the same text");
        let (second, _, _) = previews.ask(&key, "y", false).unwrap();
        assert!(!previews.finish(&key, first, Shown::Failed("old".into())));
        assert_eq!(
            previews.get(&key.0, &key.1),
            Some(("r1".into(), Shown::Checking))
        );
        assert!(previews.finish(&key, second, Shown::Failed("new".into())));
        assert_eq!(
            previews.get(&key.0, &key.1),
            Some(("r1".into(), Shown::Failed("new".into())))
        );
        assert!(previews.stop(&key.0, &key.1));
        assert_eq!(previews.get(&key.0, &key.1), None);
    }
}
