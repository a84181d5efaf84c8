//! Applying listings to a live connection's catalog generation: notifications become listings
//! through the catalog's dependency graph, listings become the catalog.
//!
//! Invariants:
//! - what a notification refreshes is decided by the catalog's dependency graph
//!   ([`mcp_harness_catalog::graph::plan`]), never by code here;
//! - per kind, one listing is in flight at a time with one trailing listing, two listings start
//!   at least the relist window apart (`RuntimeBuilder::relist_window`), and only a listing
//!   newer than the last applied one is applied ([`Refreshes`](crate::connection::refresh::Refreshes)), so
//!   interleaved notifications can never leave a stale last write and a flood costs one listing
//!   per window;
//! - a listing is complete or an error; a failed re-listing keeps the previous generation and
//!   records the error (two-phase sync, R15);
//! - derived kinds (commands) are rebuilt from the listing cache after any of their inputs
//!   change; an input missing from the cache (evicted, or the server opted out of caching) is
//!   fetched first, and that listing rebuilds without reading again (so this never loops);
//! - a listing is applied only to the `Live` connection of the epoch that started it.

use std::collections::BTreeSet;
use std::sync::Arc;

use actix::prelude::*;
use mcp_harness_catalog::Kind;
use mcp_harness_catalog::graph::{self, Trigger};

use super::ServerActor;
use super::phase::Phase;
use crate::connection::listing::{Listed, list_kind};

/// The cause of a listing made because a derived kind needed an input the cache no longer had.
const REREAD: &str = "re-reading an input of a derived kind";

impl ServerActor {
    /// Stores a complete listing (newest wins) and puts it into the current generation.
    pub(super) fn apply(&mut self, kind: Kind, ticket: u64, listed: Arc<Listed>) {
        let Phase::Live(live) = &mut self.phase else {
            return;
        };
        let name = &self.config.name;
        if live.cacheable {
            self.settings
                .cache
                .store(name, kind, self.epoch, ticket, listed.clone());
        }
        let limits = &self.settings.metadata;
        let catalog = &mut live.catalog;
        match &*listed {
            Listed::Tools(t) => {
                catalog.set_tools(name, t.clone(), limits);
                self.filter.apply(name, catalog);
            }
            Listed::Prompts(p) => catalog.set_prompts(name, p.clone(), limits),
            Listed::Resources(r) => catalog.set_resources(name, r.clone(), limits),
            Listed::Templates(t) => catalog.set_templates(name, t.clone(), limits),
            Listed::Skills(k) => catalog.set_skills(name, k.clone(), limits),
        }
        // R15 rolls a kind with two entries under one name back to none of them: said, not
        // only kept for `tools --hidden`.
        if let Some(conflict) = catalog
            .hidden
            .iter()
            .find(|h| h.kind == kind && h.reason.starts_with("name conflict"))
        {
            tracing::warn!(
                server = %name,
                kind = ?kind,
                reason = %conflict.reason,
                "the server lists two entries under one name: none of this kind of its is shown (`mcp-harness tools --hidden` lists them)"
            );
        }
    }

    /// Rebuilds each derived kind in `kinds` from the current generation of its inputs. An
    /// input that is declared, not `fresh` (just listed) and not in the cache (evicted, or the
    /// server opted out of caching) is read again when `may_reread`; its listing then triggers
    /// one more rebuild (which reads nothing again, so this never loops).
    pub(super) fn rebuild_derived(
        &mut self,
        kinds: &BTreeSet<Kind>,
        fresh: &[Kind],
        may_reread: bool,
        ctx: &mut Context<Self>,
    ) {
        for &derived in kinds {
            let Phase::Live(live) = &self.phase else {
                return;
            };
            if may_reread {
                let stale: Vec<Kind> = graph::inputs_of(derived)
                    .iter()
                    .copied()
                    .filter(|k| live.declared.contains(k) && !fresh.contains(k))
                    .filter(|k| {
                        self.settings
                            .cache
                            .get(&self.config.name, *k, self.epoch)
                            .is_none()
                    })
                    .collect();
                for kind in stale {
                    self.fetch(kind, REREAD, ctx);
                }
            }
            let Phase::Live(live) = &mut self.phase else {
                return;
            };
            match derived {
                Kind::Commands => live.catalog.rebuild_commands(&self.config.name),
                other => tracing::error!(kind = %other, "no rebuild rule for a derived kind"),
            }
        }
    }

    /// Lists again what a list-changed notification makes stale (only while live).
    pub(super) fn on_trigger(&mut self, trigger: Trigger, ctx: &mut Context<Self>) {
        let Phase::Live(live) = &self.phase else {
            return;
        };
        let plan = graph::plan(trigger);
        let declared: Vec<Kind> = plan
            .refetch
            .into_iter()
            .filter(|kind| live.declared.contains(kind))
            .collect();
        if declared.is_empty() {
            tracing::debug!(server = %self.name(), method = trigger.method(), "notification for a kind the server did not declare");
        }
        for kind in declared {
            self.fetch(kind, trigger.method(), ctx);
        }
    }

    fn fetch(&mut self, kind: Kind, cause: &'static str, ctx: &mut Context<Self>) {
        let Phase::Live(live) = &mut self.phase else {
            return;
        };
        let Some(start) = live.refreshes.request(kind, tokio::time::Instant::now()) else {
            return; // in flight or waiting; it (or the one after it) covers this
        };
        self.start_fetch(kind, start, cause, ctx);
    }

    /// Starts the listing `start` now, or at the end of the relist window.
    fn start_fetch(
        &mut self,
        kind: Kind,
        start: crate::connection::refresh::Start,
        cause: &'static str,
        ctx: &mut Context<Self>,
    ) {
        let now = tokio::time::Instant::now();
        if start.at <= now {
            self.spawn_fetch(kind, start.ticket, cause, ctx);
            return;
        }
        let epoch = self.epoch;
        ctx.run_later(start.at - now, move |act, ctx| {
            if act.epoch == epoch {
                act.spawn_fetch(kind, start.ticket, cause, ctx);
            }
        });
    }

    fn spawn_fetch(
        &mut self,
        kind: Kind,
        ticket: u64,
        cause: &'static str,
        ctx: &mut Context<Self>,
    ) {
        let Phase::Live(live) = &mut self.phase else {
            return;
        };
        if !live
            .refreshes
            .started(kind, ticket, tokio::time::Instant::now())
        {
            return; // no longer wanted (a newer connection reset the bookkeeping)
        }
        let epoch = self.epoch;
        // What this listing covers: the notifications that had arrived when it started.
        let covered = live.session.wire().tools_changed();
        let fut = list_kind(
            live.session.peer().clone(),
            live.session.wire().clone(),
            kind,
            self.settings.limits,
            self.config.startup_timeout,
        );
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            act.on_fetched(
                epoch,
                (kind, ticket, covered),
                result.map_err(|f| f.message),
                cause,
                ctx,
            )
        }));
    }

    /// A listing of `kind` (its ticket, and the tool notifications it covers) came back.
    fn on_fetched(
        &mut self,
        epoch: u64,
        (kind, ticket, covered): (Kind, u64, u64),
        result: Result<Listed, String>,
        cause: &'static str,
        ctx: &mut Context<Self>,
    ) {
        let Phase::Live(live) = &mut self.phase else {
            return;
        };
        if epoch != self.epoch {
            return;
        }
        let completion = live
            .refreshes
            .complete(kind, ticket, tokio::time::Instant::now());
        // Applied or failed, the notifications before it are answered: calls waiting for
        // them go on (against the new definitions, or the kept ones).
        if completion.apply && kind == Kind::Tools {
            live.tools_covered = live.tools_covered.max(covered);
        }
        if let Some(next) = completion.next {
            self.start_fetch(kind, next, cause, ctx);
        }
        if !completion.apply {
            tracing::debug!(server = %self.name(), %kind, ticket, "dropping a listing older than the one applied");
            return;
        }
        match result {
            Ok(listed) => {
                self.apply(kind, ticket, Arc::new(listed));
                let dependents: BTreeSet<Kind> = graph::DERIVED
                    .into_iter()
                    .filter(|d| graph::inputs_of(*d).contains(&kind))
                    .collect();
                self.rebuild_derived(&dependents, &[kind], cause != REREAD, ctx);
                self.report(cause);
            }
            Err(message) => {
                tracing::warn!(server = %self.name(), %kind, error = %message, "re-listing failed; keeping the previous generation");
                self.record.last_error = Some(format!(
                    "{message} (after {cause}; the previous {kind} are kept)"
                ));
                self.report(format!("{cause}: re-listing failed"));
            }
        }
    }
}
