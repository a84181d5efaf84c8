//! The connect stage: one attempt per epoch (a connection-queue slot, spawn and handshake, the
//! first listing of every declared kind), run on the I/O threads, and what its outcome makes of
//! the server.
//!
//! Invariants:
//! - the outcome of an attempt is applied only while the server is still `Connecting` with the
//!   attempt's epoch; a session from an older attempt is closed unused;
//! - a server is connected only once it is listed: a failed first listing fails the attempt;
//! - a queue slot is held for the spawn and handshake only, and for at most the slot hold;
//! - the era fallback (R8) is tried once, only when a remote server refused the handshake itself
//!   (not a 5xx/429, not a needs-auth, not a failure of the listing after it), and undone when
//!   `server/discover` is refused too;
//! - at startup, `startupTimeoutSec` bounds all attempts together.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use mcp_harness_transport::{
    ConnectOptions, EventSink, HarnessClient, ServerEvent, Session, TransportError,
};
use rmcp::model::ProtocolVersion;

use super::phase::{Connecting, Pace, Phase};
use super::timers::fnv;
use super::{Notified, ServerActor, ServerLog, TaskStatusUpdate, unavailable};
use crate::connection::listing::{Listed, declared_kinds, list_kind};
use crate::connection::supervision::Slot;

/// A connected session, its first listings, and what of them failed without failing the
/// server (see `attempt`).
pub(super) struct Attempted {
    pub(super) session: Session,
    pub(super) listed: Vec<(mcp_harness_catalog::Kind, Listed)>,
    pub(super) partial: Vec<String>,
    /// The tool-list notifications the connection had received when its listings started:
    /// what the first tool listing covers.
    pub(super) tools_covered: u64,
}

/// Where a connect attempt failed: the handshake, or the first listing after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Handshake,
    Listing,
}

impl ServerActor {
    /// Enters `Connecting` with a new epoch and starts its attempt. The state left before
    /// must already have been left (`leave`).
    pub(super) fn begin_attempt(&mut self, connecting: Connecting, ctx: &mut Context<Self>) {
        self.settings.cache.drop_server(&self.config.name);
        self.epoch = super::next_epoch();
        let epoch = self.epoch;
        // At startup, `startupTimeoutSec` is the budget of all attempts together.
        // (The first attempt has all of it: it starts with the budget.)
        let budget = match connecting.run.pace {
            Pace::Startup { deadline } if self.record.attempts > 0 => deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .max(Duration::from_millis(1)),
            _ => self.config.startup_timeout,
        };
        let probing = matches!(connecting.run.pace, Pace::Probing);
        // This attempt has what is left of the startup budget: a listing it cannot finish in
        // that is the budget running out, said with the error of the attempt before it.
        let leftover =
            matches!(connecting.run.pace, Pace::Startup { .. }) && self.record.attempts > 0;
        self.phase = Phase::Connecting(connecting);
        if !probing {
            self.mark_state();
            self.report(if self.record.attempts > 0 {
                "reconnecting"
            } else {
                "connecting"
            });
        }

        let weak = ctx.address().downgrade();
        let (progress, server) = (self.settings.progress.clone(), self.config.name.clone());
        let logs = self.settings.logs.clone();
        let task_statuses = self.settings.task_statuses.clone();
        let sink: EventSink = Arc::new(move |event| {
            if let ServerEvent::TaskStatus(params) = event {
                // Straight to the listeners, no actor hop, in the order the server sent them.
                if let Some(update) = task_status(&server, params) {
                    tracing::debug!(server = %server, task = %update.task_id, status = %update.status, "task status");
                    let _ = task_statuses.send(update);
                }
                return;
            }
            #[allow(deprecated)] // logging: every protocol before 2026-07-28
            if let ServerEvent::Log(params) = event {
                // Straight to the listeners, no actor hop: a call's log lines are broadcast
                // before its result is handed back (no receiver is fine).
                tracing::debug!(target: "mcp_harness::server_log", server = %server, level = ?params.level, "{}", params.data);
                let _ = logs.send(ServerLog {
                    server: server.to_string(),
                    params,
                    received: std::time::Instant::now(),
                });
                return;
            }
            if let ServerEvent::Progress(p) = event {
                // Straight to the waiting caller, no actor hop.
                if !progress.deliver(&server, epoch, p) {
                    tracing::trace!(server = %server, "progress not (yet) forwarded to a caller");
                }
                return;
            }
            if let Some(addr) = weak.upgrade() {
                addr.do_send(Notified { epoch, event });
            }
        });
        let handler = HarnessClient::new(sink)
            .with_protocol_version(
                self.fallback
                    .clone()
                    .or_else(|| self.config.protocol_version.clone())
                    .or_else(|| self.settings.protocol_version.clone()),
            )
            .with_callbacks(&self.config.name, self.settings.callbacks.clone())
            // The actor thread's runtime: its workers run nothing else, so an embedder's
            // callback that blocks stalls no connection.
            .with_callback_runtime(tokio::runtime::Handle::try_current().ok());
        let options = ConnectOptions {
            server: self.name().to_string(),
            startup_timeout: budget,
            wire: Default::default(),
            max_message_bytes: self.config.max_message_bytes,
        };
        let connecting = self.connector.connect(handler, options);
        let limits = self.settings.limits;
        let page_timeout = budget;
        let slot_hold = self.settings.queues.slot_hold;
        let attempt = async move |slot: Slot| {
            // One slot of the local or remote queue while connecting, for at most `slot_hold`:
            // a slow server keeps connecting but stops holding up the queue.
            let mut slot = Some(slot);
            let mut connecting = connecting;
            let session = tokio::select! {
                result = &mut connecting => result,
                () = tokio::time::sleep(slot_hold) => {
                    slot = None;
                    connecting.await
                }
            }
            .map_err(|e| (e, Stage::Handshake))?;
            // The slot is for starting the server (spawn + initialize); the listing that follows
            // is ordinary traffic on a running server, so the next server starts meanwhile.
            drop(slot);
            // The first listing belongs to startup: a server is connected only once listed.
            let tools_covered = session.wire().tools_changed();
            let kinds = declared_kinds(session.info());
            let listings = futures::future::join_all(kinds.iter().map(|&k| {
                list_kind(
                    session.peer().clone(),
                    session.wire().clone(),
                    k,
                    limits,
                    page_timeout,
                )
            }))
            .await;
            let mut listed = Vec::new();
            let mut partial = Vec::new();
            for (kind, result) in kinds.into_iter().zip(listings) {
                match result {
                    Ok(l) => listed.push((kind, l)),
                    // A server whose prompts, resources, templates or skills cannot be listed
                    // (an older server answering -32601 for templates, a cursor that loops)
                    // still serves its tools: that kind stays empty until a list_changed lists
                    // it again, and the server's last error says why.
                    Err(failure)
                        if kind != mcp_harness_catalog::Kind::Tools && !failure.auth_required =>
                    {
                        if let Some(empty) = Listed::empty(kind) {
                            listed.push((kind, empty));
                        }
                        partial.push(format!(
                            "the first {kind} listing failed, so it lists no {kind} until it \
                             announces a change (list_changed): {}",
                            failure.message
                        ));
                    }
                    Err(failure) if failure.timed_out && leftover => {
                        session.shutdown().await;
                        let error = TransportError::StartupTimeout {
                            timeout: page_timeout,
                            stderr_tail: None,
                        };
                        return Err((error, Stage::Listing));
                    }
                    Err(failure) => {
                        session.shutdown().await;
                        // A 401 while listing (an expired or missing token) means needs-auth.
                        let error = TransportError::Initialize {
                            message: format!(
                                "the first {kind} listing failed: {}",
                                failure.message
                            ),
                            auth_required: failure.auth_required,
                            stderr_tail: None,
                        };
                        return Err((error, Stage::Listing));
                    }
                }
            }
            Ok(Attempted {
                session,
                listed,
                partial,
                tools_covered,
            })
        };
        // The attempt runs on the I/O threads (the embedder's runtime if it gave one), not on
        // the actor thread: spawning a process blocks its thread until the child execs, and
        // every actor and the publisher share the actor thread. The actor holds the attempt and
        // cancels it when it drops it (the actor stopped), which drops whatever the attempt
        // started; the session it made is owned by the actor and closed with it.
        let (done, outcome) = tokio::sync::oneshot::channel();
        let attempt = self.settings.queues.start(
            self.connector.is_remote(),
            &self.settings.io,
            async move |slot| {
                let _ = done.send(attempt(slot).await);
            },
        );
        let outcome = async move {
            let _attempt = attempt;
            outcome.await
        };
        let handle = ctx.spawn(outcome.into_actor(self).map(move |outcome, act, ctx| {
            let result = outcome.unwrap_or_else(|_| {
                Err((TransportError::Initialize {
                    message: "the connect attempt ended without an outcome (it panicked, or its I/O thread stopped)".into(),
                    auth_required: false,
                    stderr_tail: None,
                }, Stage::Handshake))
            });
            act.on_attempted(epoch, result, ctx)
        }));
        if let Phase::Connecting(connecting) = &mut self.phase {
            connecting.attempt = Some(handle);
        }
    }

    fn on_attempted(
        &mut self,
        epoch: u64,
        result: Result<Attempted, (TransportError, Stage)>,
        ctx: &mut Context<Self>,
    ) {
        if epoch != self.epoch || !matches!(self.phase, Phase::Connecting(_)) {
            if let Ok(attempted) = result {
                actix::spawn(attempted.session.shutdown());
            }
            return;
        }
        // Ended: nothing to cancel when the phase is left.
        if let Phase::Connecting(connecting) = &mut self.phase {
            connecting.attempt = None;
        }
        match result {
            Ok(attempted) => self.go_live(attempted, ctx),
            Err((e, stage)) => self.attempt_failed(e, stage, ctx),
        }
    }

    /// Decides what a failed attempt makes of the server: the era fallback, a backoff, or
    /// giving up.
    fn attempt_failed(&mut self, e: TransportError, stage: Stage, ctx: &mut Context<Self>) {
        tracing::warn!(server = %self.name(), error = %e, "connect failed");
        // The server answered, but not to `initialize`/`server/discover` as such: a
        // refusal of the handshake itself (not a 5xx/429, not a needs-auth, not a
        // failure of the listing after it, not an unreachable server).
        // (Not legacy SSE: no server of that era speaks it, and its stream without an
        // endpoint never got as far as `initialize`.)
        let refused_handshake = stage == Stage::Handshake
            && self.connector.is_remote()
            && !matches!(
                self.config.transport,
                crate::config::TransportConfig::LegacySse { .. }
            )
            && !unavailable(&e)
            && matches!(
                e,
                TransportError::Initialize {
                    auth_required: false,
                    ..
                }
            );
        if refused_handshake
            && self.settings.protocol_version.is_none()
            && self.config.protocol_version.is_none()
        {
            if self.fallback.is_none() {
                // A server of the 2026-07-28 era may refuse the `initialize` handshake:
                // try `server/discover` once before giving up (R8: fall back across eras).
                tracing::info!(server = %self.name(), "initialize refused; trying server/discover (protocol 2026-07-28)");
                self.fallback = Some(ProtocolVersion::V_2026_07_28);
                self.retry_with_discover(e.to_string(), ctx);
                return;
            }
            // `server/discover` was refused as well: not a server of that era after
            // all; the next attempt (or a restart) opens with `initialize` again.
            tracing::info!(server = %self.name(), "server/discover refused too; the next attempt uses initialize");
            self.fallback = None;
        }
        let Some(mut connecting) = self.leave(ctx) else {
            return;
        };
        let mut message = match connecting.refused_initialize.take() {
            Some(first) if refused_handshake => first,
            _ => e.to_string(),
        };
        let run = connecting.run;
        if self.connector.is_remote() && e.retryable() {
            let deadline = run.pace.deadline();
            // The attempt after the next backoff would start past the startup budget.
            let next = self.settings.reconnect.delay(
                self.record.attempts + 1,
                self.epoch ^ fnv(&self.config.name),
            );
            let now = tokio::time::Instant::now();
            let out_of_time = deadline.is_some_and(|d| now + next >= d);
            let budget = self.config.startup_timeout.as_secs_f64();
            match (&e, self.record.last_error.as_deref()) {
                // The last attempt had only what was left of the budget: say the
                // budget, and the error of the attempt before it.
                (TransportError::StartupTimeout { .. }, Some(last))
                    if deadline.is_some() && self.record.attempts > 0 =>
                {
                    message = format!(
                        "startup gave up after {budget}s of attempts (raise `startupTimeoutSec`); the last error: {last}"
                    );
                }
                (TransportError::StartupTimeout { .. }, _) => {}
                _ if out_of_time => {
                    // Said as it happened: the time spent, and why the next attempt was not
                    // made. Raising the budget helps a server slow to come up, not one that
                    // answers with an error each time.
                    let spent = deadline.map_or(0, |d| {
                        let left = d.saturating_duration_since(now);
                        self.config.startup_timeout.saturating_sub(left).as_secs()
                    });
                    let attempts = match self.record.attempts + 1 {
                        1 => "1 attempt".to_string(),
                        n => format!("{n} attempts"),
                    };
                    let hint = match e.kind() {
                        mcp_harness_transport::ErrorKind::Unavailable
                        | mcp_harness_transport::ErrorKind::Unreachable
                        | mcp_harness_transport::ErrorKind::Closed => {
                            "; raise it if the server needs longer to come up"
                        }
                        _ => "",
                    };
                    message = format!(
                        "{message} (gave up starting after {attempts} in {spent}s: another would pass `startupTimeoutSec` ({budget}s){hint})"
                    );
                }
                _ => {}
            }
            // A connection refused, a host that does not resolve, a failed TLS handshake or
            // a 404 at startup fails at once: the next attempts would meet the same, and
            // waiting through them only delays saying so (probing goes on in the background).
            let refused_at_startup = deadline.is_some() && e.fails_fast();
            let fast = !out_of_time && !refused_at_startup;
            self.back_off(run, &message, fast, ctx);
            return;
        }
        self.give_up(run, message, e.needs_auth(), ctx);
    }
}

/// The broadcast form of a task status notification's `params` (the handler let through only
/// params with a string `taskId` and `status`).
fn task_status(server: &str, params: rmcp::model::JsonObject) -> Option<TaskStatusUpdate> {
    let text = |key: &str| params.get(key)?.as_str().map(str::to_string);
    Some(TaskStatusUpdate {
        server: server.to_string(),
        task_id: text("taskId")?,
        status: text("status")?,
        params,
    })
}
