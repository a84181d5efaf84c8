//! Metrics, their summaries (median, p99) and the printed / JSON report.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::Options;

/// How the samples of one side are summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stat {
    Median,
    /// 99th percentile (nearest rank).
    P99,
}

impl Stat {
    fn label(self) -> &'static str {
        match self {
            Stat::Median => "median",
            Stat::P99 => "p99",
        }
    }

    fn of(self, values: &[f64]) -> f64 {
        match self {
            Stat::Median => median(values),
            Stat::P99 => percentile(values, 99.0),
        }
    }
}

/// What a metric's samples count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Seconds,
    /// User-space instructions, as valgrind's callgrind counts them.
    Instructions,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Instructions => "instructions",
        }
    }

    /// A value in this unit, shown the way that suits it.
    fn show(self, value: f64) -> String {
        match self {
            Unit::Seconds => human(value),
            Unit::Instructions => format!("{:.1}k", value / 1e3),
        }
    }
}

/// One metric: samples of both sides (rounds or individual events), in seconds unless its
/// `unit` says otherwise.
pub(super) struct Metric {
    pub name: String,
    pub what: String,
    pub harness: Vec<f64>,
    pub baseline: Vec<f64>,
    pub stat: Stat,
    pub unit: Unit,
    /// Per-call metrics show a throughput column.
    pub per_call: bool,
    /// Ratios of harness/baseline measurements taken back to back (echo chunks, cold-start
    /// rounds). When present,
    /// the metric's ratio is their median: each pair shares the machine's state of the moment,
    /// so load that comes and goes cancels within a pair instead of between the two medians.
    pub pairs: Option<Vec<f64>>,
}

impl Metric {
    pub(super) fn new(
        name: impl Into<String>,
        what: impl Into<String>,
        h: Vec<f64>,
        b: Vec<f64>,
    ) -> Self {
        Metric {
            name: name.into(),
            what: what.into(),
            harness: h,
            baseline: b,
            stat: Stat::Median,
            unit: Unit::Seconds,
            per_call: false,
            pairs: None,
        }
    }

    /// The same samples summarised as p99, under `<name>_p99`.
    pub(super) fn p99(&self) -> Metric {
        Metric {
            name: format!("{}_p99", self.name),
            what: format!("{} (p99)", self.what),
            harness: self.harness.clone(),
            baseline: self.baseline.clone(),
            stat: Stat::P99,
            unit: self.unit,
            per_call: self.per_call,
            pairs: None,
        }
    }

    pub(super) fn harness_value(&self) -> f64 {
        self.stat.of(&self.harness)
    }
    pub(super) fn baseline_value(&self) -> f64 {
        self.stat.of(&self.baseline)
    }
    /// The median of the paired ratios when there are pairs, else the ratio of the two sides'
    /// summaries.
    pub(super) fn ratio(&self) -> f64 {
        match &self.pairs {
            Some(pairs) if !pairs.is_empty() => median(pairs),
            _ => self.ratio_of_summaries(),
        }
    }

    pub(super) fn ratio_of_summaries(&self) -> f64 {
        self.harness_value() / self.baseline_value()
    }
}

pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile `p` (0 < p ≤ 100).
pub(super) fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Seconds, shown in the unit that suits them.
pub(super) fn human(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.1}µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.2}ms", seconds * 1e3)
    } else {
        format!("{seconds:.2}s")
    }
}

/// The samples of one side: every value when there are few, else their count and range.
fn samples(values: &[f64], unit: Unit) -> String {
    if values.len() <= 7 {
        let all: Vec<String> = values.iter().map(|v| unit.show(*v)).collect();
        return all.join(" ");
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "n={} min {} max {}",
        values.len(),
        unit.show(min),
        unit.show(max)
    )
}

pub(super) struct Report {
    pub metrics: Vec<Metric>,
    /// Fixture processes of this run alive at the end.
    pub leftover: usize,
    /// Any `mcp-fixture-server` alive at the end (other users of the machine included).
    pub any_fixture: usize,
    pub elapsed: Duration,
}

impl Report {
    pub(super) fn print(&self, options: &Options, tag: &str) {
        println!(
            "\nharness vs baseline in the same run ({} rounds for echo/cold start, cold start {} servers {} at a time, {} changes, {} builds; sides interleaved, order alternating)\n",
            options.rounds, options.servers, options.parallel, options.changes, options.builds
        );
        println!(
            "{:<34} {:<10} {:>6} {:>11} {:>9}  samples",
            "metric", "side", "stat", "value", "calls/s"
        );
        for m in &self.metrics {
            for (side, values, value) in [
                ("harness", &m.harness, m.harness_value()),
                ("baseline", &m.baseline, m.baseline_value()),
            ] {
                let rate = if m.per_call {
                    format!("{:.0}", 1.0 / value)
                } else {
                    "-".into()
                };
                println!(
                    "{:<34} {:<10} {:>6} {:>11} {:>9}  {}",
                    m.name,
                    side,
                    m.stat.label(),
                    m.unit.show(value),
                    rate,
                    samples(values, m.unit)
                );
            }
            println!(
                "{:<34} {:<10} {:>6} {:>11}  ({})",
                m.name,
                "ratio",
                "",
                format!("{:.2}x", m.ratio()),
                m.what
            );
            if let Some(pairs) = &m.pairs {
                println!(
                    "{:<34} {:<10} {:>6} {:>11}  ratio of the medians; the ratio above is the median of {} paired ratios, p10 {:.2}x, p90 {:.2}x",
                    m.name,
                    "medians",
                    "",
                    format!("{:.2}x", m.ratio_of_summaries()),
                    pairs.len(),
                    percentile(pairs, 10.0),
                    percentile(pairs, 90.0),
                );
            }
        }
        println!(
            "\nfixture processes of this run left (pgrep -f {tag}): {}; any mcp-fixture-server running: {}",
            self.leftover, self.any_fixture
        );
        println!("measured in {:.1}s\n", self.elapsed.as_secs_f64());
        for m in &self.metrics {
            let paired = match &m.pairs {
                Some(_) => format!(
                    " (median of paired ratios; ratio of medians {:.2}x)",
                    m.ratio_of_summaries()
                ),
                None => String::new(),
            };
            println!(
                "bench {}: harness {} vs baseline {} = {:.2}x{paired}",
                m.name,
                m.unit.show(m.harness_value()),
                m.unit.show(m.baseline_value()),
                m.ratio()
            );
        }
    }

    pub(super) fn write_json(&self, path: &Path, options: &Options) -> std::io::Result<()> {
        let metrics: Vec<Value> = self
            .metrics
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "what": m.what,
                    "unit": m.unit.label(),
                    "stat": m.stat.label(),
                    "harness": m.harness_value(),
                    "baseline": m.baseline_value(),
                    "ratio": m.ratio(),
                    "ratio_of_medians": m.ratio_of_summaries(),
                    "paired_ratios": m.pairs,
                    "harness_rounds": m.harness,
                    "baseline_rounds": m.baseline,
                })
            })
            .collect();
        let doc = json!({
            "options": {
                "calls": options.calls,
                "servers": options.servers,
                "parallel": options.parallel,
                "rounds": options.rounds,
                "warmup": options.warmup,
                "changes": options.changes,
                "builds": options.builds,
                "only": options.only,
            },
            "metrics": metrics,
            "leftover_fixture_processes": self.leftover,
            "measured_seconds": self.elapsed.as_secs_f64(),
        });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn p99_is_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 198.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert!(percentile(&[], 99.0).is_nan());
    }
}
