//! A case's verdict from its runs, and the table that shows every case's.
//!
//! Invariant: a case fails iff one of its runs hung, leaked a process, lost the healthy server,
//! went over the memory bound or ended in an outcome the case does not expect; the verdict
//! names each such failure.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::Run;
use super::cases::{self, Case};

/// Why a case fails, from its runs.
pub(super) struct Verdict {
    pub(super) failures: Vec<String>,
    outcomes: BTreeMap<String, usize>,
    p50: Duration,
    max: Duration,
    peak_rss_mib: u64,
    leaks: usize,
    healthy_ok: usize,
    healthy_checked: usize,
}

impl Verdict {
    pub(super) fn of(case: &Case, runs: &[Run]) -> Self {
        let mut outcomes = BTreeMap::new();
        for r in runs {
            *outcomes.entry(r.outcome.clone()).or_insert(0) += 1;
        }
        let mut times: Vec<Duration> = runs.iter().map(|r| r.time).collect();
        times.sort_unstable();
        let p50 = times.get(times.len() / 2).copied().unwrap_or_default();
        let max = times.last().copied().unwrap_or_default();
        let peak_rss_mib = runs.iter().map(|r| r.peak_rss_kib).max().unwrap_or(0) / 1024;
        let leaks = runs.iter().map(|r| r.leaks.len()).sum();
        let healthy_checked = runs.iter().filter(|r| r.healthy.is_some()).count();
        let healthy_ok = runs.iter().filter(|r| r.healthy == Some(true)).count();
        let mut failures = Vec::new();
        let hung = runs.iter().filter(|r| r.hung).count();
        if hung > 0 {
            failures.push(format!("{hung} hung past {}s", case.deadline.as_secs()));
        }
        if leaks > 0 {
            failures.push(format!("{leaks} processes left"));
        }
        if healthy_ok < healthy_checked {
            failures.push(format!(
                "healthy server lost in {} runs",
                healthy_checked - healthy_ok
            ));
        }
        if peak_rss_mib > case.rss_bound_mib {
            failures.push(format!("peak RSS over {} MiB", case.rss_bound_mib));
        }
        let unexpected = runs
            .iter()
            .filter(|r| {
                !r.hung
                    && !case.expect.is_empty()
                    && !case.expect.iter().any(|e| r.outcome.starts_with(e))
            })
            .count();
        if unexpected > 0 {
            failures.push(format!(
                "{unexpected} outcomes not in {}",
                case.expect.join("|")
            ));
        }
        for (text, point) in case.reject_detail {
            let hits = runs.iter().filter(|r| r.detail.contains(text)).count();
            if hits > 0 {
                failures.push(format!("{hits} messages show `{text}` (#13.{point})"));
            }
        }
        if runs.is_empty() {
            failures.push("no run finished".into());
        }
        Verdict {
            failures,
            outcomes,
            p50,
            max,
            peak_rss_mib,
            leaks,
            healthy_ok,
            healthy_checked,
        }
    }

    fn outcomes_text(&self) -> String {
        self.outcomes
            .iter()
            .map(|(o, n)| format!("{o}×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn healthy_text(&self) -> String {
        if self.healthy_checked == 0 {
            "-".into()
        } else {
            format!("{}/{}", self.healthy_ok, self.healthy_checked)
        }
    }

    pub(super) fn to_json(&self, case: &Case, runs: &[Run]) -> Value {
        json!({
            "case": case.name,
            "known_failing_point": cases::known_point(&case.name),
            "ok": self.failures.is_empty(),
            "failures": self.failures,
            "outcomes": self.outcomes,
            "p50_ms": self.p50.as_millis() as u64,
            "max_ms": self.max.as_millis() as u64,
            "deadline_ms": case.deadline.as_millis() as u64,
            "peak_rss_mib": self.peak_rss_mib,
            "rss_bound_mib": case.rss_bound_mib,
            "leaks": self.leaks,
            "healthy_ok": self.healthy_ok,
            "healthy_checked": self.healthy_checked,
            "runs": runs.iter().map(|r| json!({
                "outcome": r.outcome,
                "ms": r.time.as_millis() as u64,
                "peak_rss_kib": r.peak_rss_kib,
                "left": r.leaks,
                "healthy_ok": r.healthy,
                "hung": r.hung,
                "detail": r.detail,
            })).collect::<Vec<_>>(),
        })
    }
}

pub(super) fn print_table(cases: &[Case], verdicts: &[Verdict], runs: usize, took: Duration) {
    let header = [
        "case", "runs", "outcomes", "p50", "max", "peak RSS", "leaks", "healthy", "verdict",
    ];
    let mut rows: Vec<[String; 9]> = Vec::new();
    for (case, v) in cases.iter().zip(verdicts) {
        let name = match cases::known_point(&case.name) {
            Some(p) => format!("{} (#13.{p})", case.name),
            None => case.name.clone(),
        };
        rows.push([
            name,
            runs.to_string(),
            v.outcomes_text(),
            format!("{:.1}s", v.p50.as_secs_f64()),
            format!("{:.1}s", v.max.as_secs_f64()),
            format!("{} MiB", v.peak_rss_mib),
            v.leaks.to_string(),
            v.healthy_text(),
            if v.failures.is_empty() {
                "ok".into()
            } else {
                format!("FAIL: {}", v.failures.join("; "))
            },
        ]);
    }
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(cell);
                out.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        out
    };
    println!("{}", line(header.to_vec()));
    for row in &rows {
        println!("{}", line(row.iter().map(String::as_str).collect()));
    }
    let failed: Vec<&str> = cases
        .iter()
        .zip(verdicts)
        .filter(|(_, v)| !v.failures.is_empty())
        .map(|(c, _)| c.name.as_str())
        .collect();
    let fixed: Vec<&str> = cases
        .iter()
        .zip(verdicts)
        .filter(|(c, v)| v.failures.is_empty() && cases::known_point(&c.name).is_some())
        .map(|(c, _)| c.name.as_str())
        .collect();
    println!(
        "\n{} cases × {runs} runs in {:.0}s: {} failed{}",
        cases.len(),
        took.as_secs_f64(),
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join(", "))
        }
    );
    if !fixed.is_empty() {
        println!(
            "known-failing cases that passed: {} (remove them from cases::KNOWN_FAILING)",
            fixed.join(", ")
        );
    }
}
