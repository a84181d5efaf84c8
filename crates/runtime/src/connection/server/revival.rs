//! Restarting a crashed stdio server for the calls bound to it (R7).
//!
//! Invariants: one restart per exit, shared by every call that asks while it runs (the exit is
//! the `Exited` state, which the restart leaves, and a restart that fails leaves the server
//! `Failed`, not `Exited`); every waiting call is answered exactly once, with the restart's
//! outcome or with the stop that cut it short; a call bound to a connection older than the last
//! restart's crash gets that restart's outcome, never a second restart.

use actix::prelude::*;
use mcp_harness_catalog::ServerState;

use super::ServerActor;
use super::phase::{Connecting, Pace, Phase, Revival, Revive};

/// Asked by a call bound to connection `bound_epoch` that is no longer current (R7): restart the
/// server once if its stdio process exited, and say which connection the call may use.
#[derive(Message)]
#[rtype(result = "Revival")]
pub(crate) struct ReviveForCall {
    pub(crate) bound_epoch: u64,
}

/// The last restart for calls: the epoch that crashed (or every epoch before a replacement),
/// the new epoch or the error, and whether it was a replacement.
pub(super) type Revived = (u64, Result<u64, String>, bool);

impl ServerActor {
    /// `Exited` → `Connecting`: restarts the process once, for the calls that ask.
    fn revive(&mut self, ctx: &mut Context<Self>) {
        let revive = Revive {
            origin: self.epoch,
            replaced: false,
            waiters: Vec::new(),
        };
        self.record.attempts = 0;
        let _ = self.leave(ctx);
        self.begin_attempt(Connecting::new(Pace::Recovering, Some(revive)), ctx);
    }

    /// Answers every call waiting for `revival` (if it is one) with how it ended, and keeps the
    /// outcome for calls that ask later.
    pub(super) fn finish_revival(&mut self, revival: Option<Revive>, outcome: Result<u64, String>) {
        let Some(revive) = revival else {
            return;
        };
        let answer = match &outcome {
            Ok(epoch) => Revival::Connected { epoch: *epoch },
            Err(error) => Revival::Failed {
                error: error.clone(),
                replaced: revive.replaced,
            },
        };
        for waiter in revive.waiters {
            let _ = waiter.send(answer.clone());
        }
        self.revived = Some((revive.origin, outcome, revive.replaced));
    }

    /// What a call bound to `bound_epoch` gets (see [`ReviveForCall`]); `None` when it has to
    /// wait for the restart in flight.
    fn revival_for(&mut self, bound_epoch: u64, ctx: &mut Context<Self>) -> Option<Revival> {
        if matches!(self.phase, Phase::Stopped) {
            return Some(Revival::NotApplicable);
        }
        if self
            .phase
            .run_mut()
            .is_some_and(|run| run.revival.is_some())
        {
            return None;
        }
        if matches!(self.phase, Phase::Exited { .. }) && bound_epoch <= self.epoch {
            tracing::info!(server = %self.name(), "the process exited; restarting it once for a call");
            self.revive(ctx);
            return None;
        }
        let failed = matches!(self.phase.public_state(), Some(ServerState::Failed { .. }));
        match &self.revived {
            // The connection that replaced the bound one came from a restart for calls.
            Some((origin, Ok(epoch), _))
                if *origin >= bound_epoch
                    && *epoch == self.epoch
                    && matches!(self.phase, Phase::Live(_)) =>
            {
                Some(Revival::Connected { epoch: *epoch })
            }
            Some((origin, Err(error), replaced)) if *origin >= bound_epoch && failed => {
                Some(Revival::Failed {
                    error: error.clone(),
                    replaced: *replaced,
                })
            }
            _ => Some(Revival::NotApplicable),
        }
    }
}

impl Handler<ReviveForCall> for ServerActor {
    type Result = ResponseFuture<Revival>;

    fn handle(&mut self, msg: ReviveForCall, ctx: &mut Self::Context) -> Self::Result {
        if let Some(answer) = self.revival_for(msg.bound_epoch, ctx) {
            return Box::pin(std::future::ready(answer));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Some(revive) = self.phase.run_mut().and_then(|run| run.revival.as_mut()) {
            revive.waiters.push(tx);
        }
        Box::pin(async move {
            rx.await.unwrap_or(Revival::Failed {
                error: "the server was stopped while it restarted".into(),
                replaced: false,
            })
        })
    }
}
