//! The ids a [`super::Sealer`] opened lately, with what they hold, so each request's id is
//! opened (base64, AES-GCM, JSON) once, not once per look: the layer, then rmcp's session
//! manager twice (`has_session`, then `create_stream` or `accept_message`).
//!
//! Invariants:
//! - an entry is put in only for an id that opened under one of the keys, and an id's content
//!   never changes (a re-sealed id is another string), so a hit says exactly what opening
//!   would; what depends on the time or on this replica (expiry, an ended session) is checked
//!   by the caller on every use, hit or not;
//! - it holds at most [`CAPACITY`] ids: full, it is emptied and fills again (costing a miss
//!   each, never a wrong answer); the sweep after sessions end drops the ids of sessions this
//!   replica no longer holds.

use std::sync::Arc;

use dashmap::DashMap;

use super::Payload;

/// At most this many ids are remembered (a few hundred bytes each, with their payloads).
const CAPACITY: usize = 4096;

/// Opened ids → what they hold. Hashed with foldhash, not SipHash: each request looks its id
/// (a few hundred bytes) up several times, and only ids that opened under our keys go in, so a
/// client cannot choose the keys.
#[derive(Default)]
pub(super) struct Recent {
    opened: DashMap<Box<str>, Arc<Payload>, foldhash::quality::RandomState>,
}

impl Recent {
    /// What `token` holds, when it opened lately.
    pub(super) fn get(&self, token: &str) -> Option<Arc<Payload>> {
        self.opened.get(token).map(|entry| entry.value().clone())
    }

    /// Remembers that `token` opened to `payload`.
    pub(super) fn insert(&self, token: &str, payload: Arc<Payload>) {
        if self.opened.len() >= CAPACITY {
            self.opened.clear();
        }
        self.opened.insert(token.into(), payload);
    }

    /// Keeps only the ids of sessions `held` names, and gives memory back.
    pub(super) fn retain(&self, held: impl Fn(&str) -> bool) {
        self.opened.retain(|_, payload| held(&payload.session));
        self.opened.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(session: &str) -> Arc<Payload> {
        Arc::new(Payload {
            session: session.into(),
            expires: 0,
            init: None,
            profile: None,
            listed: None,
        })
    }

    #[test]
    fn holds_at_most_its_capacity_and_keeps_what_the_sweep_keeps() {
        let recent = Recent::default();
        for n in 0..CAPACITY {
            recent.insert(&format!("t{n}"), payload(&format!("s{}", n % 2)));
        }
        assert_eq!(
            recent.get("t3").map(|p| p.session.clone()),
            Some("s1".into())
        );
        recent.retain(|session| session == "s0");
        assert!(recent.get("t3").is_none());
        assert_eq!(recent.opened.len(), CAPACITY / 2);
        for n in 0..CAPACITY {
            recent.insert(&format!("u{n}"), payload("s2"));
        }
        assert!(recent.opened.len() <= CAPACITY);
        assert!(recent.get(&format!("u{}", CAPACITY - 1)).is_some());
    }
}
