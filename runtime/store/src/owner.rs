//! Lease holders: this process's identity, and whether another holder is certainly dead.

use std::sync::OnceLock;

use crate::api::Owner;

impl Owner {
    /// This process as a lease holder: `host:pid:start-time` (computed once).
    pub fn this_process() -> Owner {
        static ME: OnceLock<Owner> = OnceLock::new();
        ME.get_or_init(|| {
            let host = host_name();
            let pid = std::process::id();
            let started = match process_state(pid) {
                ProcState::Alive { started, .. } => started,
                ProcState::Gone | ProcState::Unknown => 0,
            };
            Owner {
                id: format!("{host}:{pid}:{started}"),
                pid,
                host,
                started,
            }
        })
        .clone()
    }

    /// Whether the holder is certainly gone: it ran on this host and its pid no longer exists,
    /// is a zombie, or now belongs to a process started at another time. A holder on another
    /// host is never known to be dead (its lease has to expire).
    pub fn is_dead(&self) -> bool {
        if self.host != Owner::this_process().host {
            return false;
        }
        match process_state(self.pid) {
            ProcState::Gone => true,
            // A start time of 0 means the holder's platform could not tell it, so a live pid
            // is all there is to go on.
            ProcState::Alive { started, zombie } => {
                zombie || (self.started != 0 && started != 0 && started != self.started)
            }
            ProcState::Unknown => false,
        }
    }
}

/// What the OS says about a pid.
#[derive(Debug, PartialEq, Eq)]
enum ProcState {
    /// No such process.
    Gone,
    /// A process with this start time (0 when the platform does not tell).
    Alive { started: u64, zombie: bool },
    /// The OS could not be asked.
    Unknown,
}

#[cfg(target_os = "linux")]
fn process_state(pid: u32) -> ProcState {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => match parse_stat(&text) {
            Some((state, started)) => ProcState::Alive {
                started,
                zombie: state == 'Z' || state == 'X',
            },
            None => ProcState::Unknown,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ProcState::Gone,
        Err(_) => ProcState::Unknown,
    }
}

#[cfg(not(target_os = "linux"))]
fn process_state(pid: u32) -> ProcState {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return ProcState::Unknown;
    };
    // SAFETY: signal 0 only checks that the pid exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        return ProcState::Alive {
            started: 0,
            zombie: false,
        };
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => ProcState::Gone,
        // EPERM: it exists but belongs to someone else.
        Some(libc::EPERM) => ProcState::Alive {
            started: 0,
            zombie: false,
        },
        _ => ProcState::Unknown,
    }
}

/// The state letter (field 3) and start time (field 22) of a `/proc/<pid>/stat` line.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_stat(text: &str) -> Option<(char, u64)> {
    // The command name (field 2) is in parentheses and may itself hold spaces and parentheses,
    // so the fields are counted from the last closing one.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some((state, started))
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length, which is what we pass.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<libc::c_char>(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_is_alive_and_identified() {
        let me = Owner::this_process();
        assert_eq!(me.pid, std::process::id());
        assert!(me.id.starts_with(&format!("{}:{}:", me.host, me.pid)));
        assert!(!me.is_dead());
        if cfg!(target_os = "linux") {
            assert_ne!(me.started, 0);
        }
    }

    #[test]
    fn a_vanished_or_recycled_pid_on_this_host_is_dead() {
        let me = Owner::this_process();
        let gone = Owner {
            pid: u32::MAX - 7,
            ..me.clone()
        };
        assert!(gone.is_dead());
        if cfg!(target_os = "linux") {
            let recycled = Owner {
                started: me.started + 1,
                ..me.clone()
            };
            assert!(recycled.is_dead());
        }
        let elsewhere = Owner {
            host: format!("{}-elsewhere", me.host),
            ..gone
        };
        assert!(!elsewhere.is_dead());
    }
}
