//! The managed server policy of the user config (`allowedServers`, `deniedServers`): which
//! server names may be loaded.
//!
//! Invariant: a name matching `deniedServers` is always refused, whatever `allowedServers` says.

use serde_json::{Map, Value};

use crate::config::ConfigError;

/// Managed settings of the user config: which server names may be loaded. Patterns are globs
/// (`*` any run of characters, `?` one character). A name matching `deniedServers` is refused;
/// with `allowedServers` set, a name matching none of it is refused too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `allowedServers`: when set, only names matching one of these globs are loaded.
    pub allowed: Option<Vec<String>>,
    /// `deniedServers`: names matching one of these globs are refused.
    pub denied: Vec<String>,
}

impl Policy {
    pub(super) fn from_json(
        file: &str,
        allowed: Option<Value>,
        denied: Option<Value>,
    ) -> Result<Policy, ConfigError> {
        let list = |key: &str, v: Value| -> Result<Vec<String>, ConfigError> {
            let items = v.as_array().filter(|a| {
                a.iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.trim().is_empty()))
            });
            match items {
                Some(a) => Ok(a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()),
                None => Err(ConfigError {
                    location: format!("{file}: {key}"),
                    message: "must be a list of server names or globs (`*`, `?`)".into(),
                }),
            }
        };
        Ok(Policy {
            allowed: allowed.map(|v| list("allowedServers", v)).transpose()?,
            denied: denied
                .map(|v| list("deniedServers", v))
                .transpose()?
                .unwrap_or_default(),
        })
    }

    /// The policy as our config keys (`allowedServers`, `deniedServers`).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        if let Some(allowed) = &self.allowed {
            out.insert("allowedServers".into(), allowed.clone().into());
        }
        if !self.denied.is_empty() {
            out.insert("deniedServers".into(), self.denied.clone().into());
        }
        out
    }

    /// Why `name` is refused, or `None` when it may load.
    pub fn refusal(&self, name: &str) -> Option<String> {
        if let Some(p) = self.denied.iter().find(|p| glob(p, name)) {
            return Some(format!("denied by the policy (`deniedServers` \"{p}\")"));
        }
        match &self.allowed {
            Some(allowed) if !allowed.iter().any(|p| glob(p, name)) => {
                Some("not in the policy's `allowedServers`".to_string())
            }
            _ => None,
        }
    }
}

/// `*` matches any run of characters, `?` one; everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}
