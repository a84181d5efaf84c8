//! What the CLI shows while servers connect, on stderr (stdout keeps only the command's output).
//!
//! On a terminal: one spinner per connecting server, ticked by indicatif, each ending as its
//! server settles (connected with its tool count, needs-auth, failed), all cleared once every
//! server has settled, before the command prints. Elsewhere (a pipe, a log file): nothing while
//! startup is quick; after [`QUIET_FOR`] one line names the servers still connecting, then one
//! plain line per server as it settles. Server text (errors) is shown on one line without control
//! characters.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use mcp_harness_catalog::{ServerState, ServerStatus, Snapshot};
use mcp_harness_runtime::Runtime;

/// Plain mode says nothing for this long (most starts are quicker).
pub(crate) const QUIET_FOR: Duration = Duration::from_secs(1);

/// Waits (at most `deadline`) until every server has settled, showing progress meanwhile.
pub(crate) async fn settle(runtime: &Runtime, deadline: Duration) -> Arc<Snapshot> {
    let mut display = Display::new(std::io::stderr().is_terminal());
    let mut changes = runtime.watch();
    let settled = runtime.wait_settled(deadline);
    tokio::pin!(settled);
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let mut watching = true;
    loop {
        tokio::select! {
            snapshot = &mut settled => {
                display.update(&snapshot);
                display.finish();
                return snapshot;
            }
            changed = changes.changed(), if watching => match changed {
                Ok(()) => {
                    let snapshot = changes.borrow_and_update().clone();
                    display.update(&snapshot);
                }
                Err(_) => watching = false,
            },
            _ = ticker.tick() => {
                let snapshot = runtime.snapshot();
                display.update(&snapshot);
            }
        }
    }
}

/// A server's settled state as one line.
pub(crate) fn outcome(status: &ServerStatus, tools: usize) -> String {
    let one_line = |text: &str| -> String {
        let line = text.lines().next().unwrap_or_default();
        line.chars().filter(|c| !c.is_control()).collect()
    };
    match &status.state {
        ServerState::Connected => format!(
            "✓ {} connected ({})",
            status.name,
            crate::output::count(tools, "tool")
        ),
        ServerState::NeedsAuth { .. } => {
            format!("! {}{}", status.name, crate::explain::needs_auth(status))
        }
        ServerState::Failed { error } => format!("✗ {} failed: {}", status.name, one_line(error)),
        ServerState::Disabled => format!("- {} disabled", status.name),
        ServerState::Untrusted { .. } => format!("- {} untrusted", status.name),
        ServerState::Pending => format!("… {} connecting ({})", status.name, status.transport),
    }
}

enum Display {
    Terminal {
        bars: MultiProgress,
        spinners: BTreeMap<String, ProgressBar>,
    },
    Plain {
        started: Instant,
        /// Servers seen pending, and whether their outcome was printed.
        pending: BTreeMap<String, bool>,
        announced: bool,
    },
}

impl Display {
    fn new(terminal: bool) -> Self {
        if terminal {
            Display::Terminal {
                bars: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                spinners: BTreeMap::new(),
            }
        } else {
            Display::Plain {
                started: Instant::now(),
                pending: BTreeMap::new(),
                announced: false,
            }
        }
    }

    fn update(&mut self, snapshot: &Snapshot) {
        let tools = |name: &str| snapshot.catalogs.get(name).map_or(0, |c| c.tools.len());
        match self {
            Display::Terminal { bars, spinners } => {
                for (name, status) in &snapshot.servers {
                    let pending = status.state == ServerState::Pending;
                    match spinners.get(name) {
                        None if pending => {
                            let bar = bars.add(ProgressBar::new_spinner());
                            bar.set_style(
                                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                            );
                            bar.set_message(format!(
                                "{} connecting ({})",
                                status.name, status.transport
                            ));
                            bar.enable_steady_tick(Duration::from_millis(100));
                            spinners.insert(name.clone(), bar);
                        }
                        Some(bar) if !pending && !bar.is_finished() => {
                            bar.set_style(
                                ProgressStyle::with_template("{msg}")
                                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                            );
                            bar.finish_with_message(outcome(status, tools(name)));
                        }
                        _ => {}
                    }
                }
            }
            Display::Plain {
                started,
                pending,
                announced,
            } => {
                for (name, status) in &snapshot.servers {
                    if status.state == ServerState::Pending {
                        pending.entry(name.clone()).or_insert(false);
                    }
                }
                if started.elapsed() < QUIET_FOR {
                    return;
                }
                let waiting: Vec<&str> = snapshot
                    .servers
                    .values()
                    .filter(|s| s.state == ServerState::Pending)
                    .map(|s| s.name.as_str())
                    .collect();
                if !*announced && !waiting.is_empty() {
                    *announced = true;
                    // Only what settles from now on is news.
                    for (name, printed) in pending.iter_mut() {
                        *printed = snapshot
                            .servers
                            .get(name)
                            .is_none_or(|s| s.state.is_settled());
                    }
                    note!(
                        "waiting for {}: {}",
                        crate::output::count(waiting.len(), "server"),
                        waiting.join(", ")
                    );
                }
                for (name, printed) in pending.iter_mut() {
                    let Some(status) = snapshot.servers.get(name) else {
                        continue;
                    };
                    if !*printed && *announced && status.state.is_settled() {
                        *printed = true;
                        note!(
                            "{} after {:.1}s",
                            outcome(status, tools(name)),
                            started.elapsed().as_secs_f32()
                        );
                    }
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Display::Terminal { bars, spinners } = self {
            for bar in spinners.values() {
                bar.finish_and_clear();
            }
            let _ = bars.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_one_clean_line() {
        let mut status = ServerStatus::new("gh", "http", ServerState::Connected);
        assert_eq!(outcome(&status, 3), "✓ gh connected (3 tools)");
        status.state = ServerState::Failed {
            error: "boom\u{1b}[2J\nstderr tail: secret-free noise".into(),
        };
        assert_eq!(outcome(&status, 0), "✗ gh failed: boom[2J");
        status.state = ServerState::NeedsAuth {
            reason: "401".into(),
        };
        assert_eq!(
            outcome(&status, 0),
            "! gh needs authorization: run `mcp-harness login gh`"
        );
        status.transport = "sse".into();
        assert!(
            outcome(&status, 0).contains("in its `headers`"),
            "{}",
            outcome(&status, 0)
        );
    }
}
