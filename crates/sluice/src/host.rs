//! How the command line hears a load: the engine's events rendered on stderr (narration
//! silenced by `-q`, notices and warnings never), its progress shown as bars or lines, its
//! commit phase guarded against Ctrl-C, and its named points turned into `kill -9` for tests.

use crate::progress::{self, Display};
use sluice_engine::events::{Event, Host};
use std::sync::Mutex;

/// The command line's host of a load.
pub struct CliHost {
    quiet: bool,
    display: Mutex<Option<Display>>,
}

impl CliHost {
    pub fn new(quiet: bool) -> CliHost {
        CliHost {
            quiet,
            display: Mutex::new(None),
        }
    }

    /// A line on stderr, on a line of its own while progress bars are drawn.
    fn say(&self, prefix: &str, message: &str) {
        let drawing = self.display.lock().map(|d| d.is_some()).unwrap_or(false);
        let lead = if drawing { "\n" } else { "" };
        // A message of several lines (a rerun's decisions, one a table) has the prefix on each.
        let lines: Vec<String> = message.lines().map(|l| format!("{prefix}{l}")).collect();
        eprintln!("{lead}{}", lines.join("\n"));
    }
}

impl Host for CliHost {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Info(m) if !self.quiet => self.say("sluice: ", &m),
            Event::Info(_) => {}
            Event::Notice(m) => self.say("sluice: ", &m),
            Event::Warning(m) => self.say("warning: ", &m),
            Event::Job { id } => crate::signals::set_resume_hint(&format!(
                "run the same command again to resume job {id} (`sluice jobs` lists it)"
            )),
            Event::Progress(p) => {
                let shown = progress::start(
                    progress::Mode::choose(self.quiet),
                    p.tables.clone(),
                    p.bytes.clone(),
                    p.chunks.clone(),
                    p.counters.clone(),
                    p.verb,
                );
                if let Ok(mut d) = self.display.lock() {
                    *d = Some(shown);
                }
            }
            Event::ProgressDone => {
                let shown = self.display.lock().ok().and_then(|mut d| d.take());
                drop(shown);
            }
            Event::Point(name) => crate::faults::point(name),
        }
    }

    fn commit_begins(&self) {
        crate::signals::enter_commit();
    }

    fn commit_ends(&self) -> bool {
        crate::signals::leave_commit()
    }

    fn stops_at(&self, point: &str) -> bool {
        crate::faults::stops_at(point)
    }
}

/// This machine's name, as `hostname` prints it, for a crew's ledger rows and messages.
pub fn name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown host".into())
}
