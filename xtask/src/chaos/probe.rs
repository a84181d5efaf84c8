//! `cargo xtask chaos-probe SPEC`: the harness process of one chaos run. It starts a runtime on
//! the run's config (a faulty server `faulty` beside a healthy fixture `healthy`), waits for both
//! to settle, calls the faulty server's tool while calling the healthy one, calls the healthy one
//! again, prints one JSON line with what happened, and shuts the runtime down.
//!
//! Invariant: the result line is printed before the shutdown starts, so a shutdown that hangs is
//! told apart from a fault that hangs; every wait here is bounded by the config's deadlines (the
//! driver kills the probe at the case's deadline in any case).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcp_harness_runtime::catalog::ServerState;
use mcp_harness_runtime::{CallError, CallOptions, Config, ErrorClass, Runtime};
use serde_json::{Value, json};

/// Name of the faulty server in a run's config.
pub(crate) const FAULTY: &str = "faulty";
/// Name of the healthy server in a run's config.
pub(crate) const HEALTHY: &str = "healthy";

pub(crate) fn main(args: &[String]) -> ExitCode {
    let Some(spec) = args
        .first()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
    else {
        eprintln!("usage: cargo xtask chaos-probe SPEC_JSON");
        return ExitCode::from(2);
    };
    let Some(path) = spec.get("config").and_then(Value::as_str) else {
        eprintln!("chaos-probe: the spec has no `config`");
        return ExitCode::from(2);
    };
    let config = match Config::load(std::path::Path::new(path)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("chaos-probe: {e}");
            return ExitCode::from(2);
        }
    };
    let settle = Duration::from_millis(spec["settle_ms"].as_u64().unwrap_or(30_000));
    let call = spec.get("call").and_then(Value::as_str).map(str::to_owned);
    let call_args = spec
        .get("args")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos-probe: no async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        let start = Instant::now();
        // The probe is the harness of the run, as the CLI is: a child subreaper, so a server's
        // `setsid` descendants come back to it and die with it.
        let runtime = match mcp_harness_runtime::RuntimeBuilder::new(config)
            .child_subreaper(true)
            .start()
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("chaos-probe: {e}");
                return ExitCode::from(1);
            }
        };
        let snapshot = runtime.wait_settled(settle).await;
        let (state, last_error) = match snapshot.servers.get(FAULTY) {
            Some(s) => (
                s.state.label().to_owned(),
                s.last_error.clone().unwrap_or_default(),
            ),
            None => ("absent".to_owned(), String::new()),
        };
        let connected = snapshot
            .servers
            .get(FAULTY)
            .is_some_and(|s| s.state == ServerState::Connected);
        let mut outcome = state;
        let mut detail = last_error;
        let mut healthy = Vec::new();
        if let (Some(tool), true) = (call, connected) {
            let qualified = format!("mcp__{FAULTY}__{tool}");
            let faulty_call =
                runtime.call_tool_with(&qualified, Some(call_args), CallOptions::default());
            let during = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                healthy_call(&runtime).await
            };
            let (result, during) = tokio::join!(faulty_call, during);
            healthy.push(during);
            let class = match &result {
                Ok(r) if r.is_error() => "tool-error".to_owned(),
                Ok(_) => "ok".to_owned(),
                Err(e) => {
                    detail = e.to_string();
                    error_class(e)
                }
            };
            outcome = format!("{outcome}/{class}");
        }
        let outcome_ms = start.elapsed().as_millis() as u64;
        healthy.push(healthy_call(&runtime).await);
        let healthy_ok = healthy.iter().all(Result::is_ok);
        let healthy_detail = healthy
            .iter()
            .filter_map(|r| r.as_ref().err().cloned())
            .collect::<Vec<_>>()
            .join("; ");
        let line = json!({
            "outcome": outcome,
            "outcome_ms": outcome_ms,
            "detail": truncate(&detail, 300),
            "healthy_ok": healthy_ok,
            "healthy_detail": truncate(&healthy_detail, 300),
            "hwm_kib": super::procs::peak_rss_kib(std::process::id()),
        });
        {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        runtime.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Calls the healthy server's `echo` with its own short timeout.
async fn healthy_call(runtime: &Runtime) -> Result<(), String> {
    let args = json!({"message": "still here"});
    let options = CallOptions {
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    match runtime
        .call_tool_with(
            &format!("mcp__{HEALTHY}__echo"),
            args.as_object().cloned(),
            options,
        )
        .await
    {
        Ok(r) if !r.is_error() => Ok(()),
        Ok(_) => Err("the healthy echo returned a tool error".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The call's outcome class: `timeout`, or the R32 class.
fn error_class(e: &CallError) -> String {
    if matches!(e, CallError::Timeout { .. }) {
        return "timeout".into();
    }
    match e.class() {
        ErrorClass::Transport => "transport",
        ErrorClass::Protocol => "protocol",
        ErrorClass::Catalog => "catalog",
        ErrorClass::Permission => "permission",
        ErrorClass::Tool => "tool",
        ErrorClass::Output => "output",
    }
    .into()
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}
