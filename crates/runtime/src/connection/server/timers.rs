//! The server actor's timers: reconnect backoff, the health check of a remote session, and the
//! watch of a needs-auth server's stored credentials.
//!
//! Invariants: each timer is owned by the state it belongs to (`BackingOff`'s retry, `Live`'s
//! health check, `NeedsAuth`'s watch) and is cancelled when that state is left, so a pending
//! reconnect can never bring back a stopped, restarted or replaced server (R6); a server that
//! is backing off has no catalog (its tools cannot be called) until an attempt succeeds; a
//! needs-auth server is never probed, only its local credentials are read (R4).

use std::time::SystemTime;

use actix::prelude::*;

use super::phase::{BackingOff, Pace, Phase, Run};
use super::{CREDENTIALS_POLL, ServerActor};

/// A stable per-server number, so reconnect jitter differs between servers.
pub(super) fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl ServerActor {
    /// → `BackingOff` (from `Connecting`, or from `Live` with a new `run`): schedules the next
    /// attempt with backoff and jitter. While `fast` and fast attempts remain, the server is
    /// pending with its error and the time of the next attempt; after them (or when not `fast`)
    /// it is failed, its error saying so, and probed at the capped interval for as long as it
    /// is configured, the time of the next probe in its status.
    pub(super) fn back_off(
        &mut self,
        mut run: Run,
        error: &str,
        fast: bool,
        ctx: &mut Context<Self>,
    ) {
        let policy = self.settings.reconnect.clone();
        self.record.attempts += 1;
        let seed = self.epoch ^ fnv(&self.config.name);
        let delay = policy.delay(self.record.attempts, seed);
        // A server already probed in the background stays failed between probes: a probe
        // that fails is no fast retry (it made the server pending again, and every listing
        // waited for the retries that followed).
        let probing = matches!(run.pace, Pace::Probing);
        let fast = fast && !probing && self.record.attempts <= policy.max_attempts;
        let retry = Some(ctx.run_later(delay, |act, ctx| act.retry_after_backoff(ctx)));
        let at = SystemTime::now() + delay;
        self.record.last_error = Some(error.to_string());
        if fast {
            self.phase = Phase::BackingOff(BackingOff {
                run,
                retry,
                at,
                failure: None,
            });
            self.mark_state();
            tracing::info!(server = %self.name(), attempt = self.record.attempts, delay_ms = delay.as_millis() as u64, "reconnecting after backoff");
            self.report(format!(
                "reconnect {} of {} in {:.1}s",
                self.record.attempts,
                policy.max_attempts,
                delay.as_secs_f64()
            ));
            return;
        }
        // A startup that ended here is over: calls waiting for it get the error now.
        let first = !probing;
        run.pace = Pace::Probing;
        if first {
            tracing::warn!(server = %self.name(), error, "unreachable; probing in the background");
        }
        let tried = match self.record.attempts - 1 {
            0 => String::new(),
            1 => "1 reconnect attempt failed; ".to_string(),
            n => format!("{n} reconnect attempts failed; "),
        };
        let error = format!(
            "{error} ({tried}probing again in the background, backing off to every {}s; `restart` tries now)",
            policy.max_delay.as_secs_f64()
        );
        let revival = if first { run.revival.take() } else { None };
        self.phase = Phase::BackingOff(BackingOff {
            run,
            retry,
            at,
            failure: Some(error.clone()),
        });
        self.mark_state();
        self.report(format!("next probe in {:.1}s", delay.as_secs_f64()));
        self.finish_revival(revival, Err(error));
    }

    /// Pings a remote session; two unanswered pings in a row close it (rmcp does not notice a
    /// dead HTTP server by itself).
    pub(super) fn health_check(&mut self, ctx: &mut Context<Self>) {
        let Phase::Live(live) = &self.phase else {
            return;
        };
        let (peer, epoch, limit) = (
            live.session.peer().clone(),
            self.epoch,
            self.settings.reconnect.ping_timeout,
        );
        let ping = async move {
            let request = rmcp::model::ClientRequest::PingRequest(Default::default());
            matches!(
                tokio::time::timeout(limit, peer.send_request(request)).await,
                Ok(Ok(_))
            )
        };
        ctx.spawn(ping.into_actor(self).map(move |answered, act, ctx| {
            // Only the connection that was pinged counts its missed pings.
            let Phase::Live(live) = &mut act.phase else {
                return;
            };
            if epoch != act.epoch {
                return;
            }
            if answered {
                live.missed_pings = 0;
                return;
            }
            live.missed_pings += 1;
            tracing::warn!(server = %act.config.name, missed = live.missed_pings, "no answer to ping");
            if live.missed_pings >= 2 {
                act.lose_connection(epoch, "the server stopped answering pings".into(), ctx);
            }
        }));
    }

    /// In `NeedsAuth` the server is not probed (R4); its stored credentials are watched
    /// instead, and a change (a login, from any process) connects it again.
    pub(super) fn watch_credentials(&mut self, ctx: &mut Context<Self>) {
        let Phase::NeedsAuth { watch, .. } = &mut self.phase else {
            return;
        };
        let Some(before) = self.connector.credentials_stamp(&self.config.name) else {
            return;
        };
        if let Some(handle) = watch.take() {
            ctx.cancel_future(handle);
        }
        *watch = Some(ctx.run_interval(CREDENTIALS_POLL, move |act, ctx| {
            if !matches!(act.phase, Phase::NeedsAuth { .. }) {
                return;
            }
            if act.connector.credentials_stamp(act.name()).as_ref() != Some(&before) {
                tracing::info!(server = %act.name(), "stored credentials changed; connecting");
                act.reconnect_after_login(ctx);
            }
        }));
    }
}
