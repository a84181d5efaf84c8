//! What `--all` runs: the suites, their spec versions and the scenarios of each.
//!
//! Invariant: `--all` runs every client scenario the suites list (a listed scenario missing
//! from the matrix fails the run: `baseline::not_in_matrix`).

use std::path::{Path, PathBuf};

/// Scenarios the project is required to pass, run when none are named.
pub(super) const REQUIRED_SCENARIOS: &[&str] = &["initialize", "tools_call"];

/// Scenarios of the issue-4 call path, at the protocol versions before 2026-07-28.
pub(super) const CALL_PATH_LEGACY: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
];

/// The next suite at 2025-11-25 adds the schema-preservation scenario.
pub(super) const CALL_PATH_NEXT_2025: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "json-schema-2020-12-preservation",
];

/// Scenarios at protocol 2026-07-28 (`initialize` does not exist there).
pub(super) const CALL_PATH_2026: &[&str] = &[
    "tools_call",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
];

/// Authorization scenarios passing on every suite and version.
pub(super) const AUTH_COMMON: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

/// Further authorization scenarios of the stable suite.
pub(super) const AUTH_STABLE: &[&str] = &[
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
];

/// Further authorization scenarios at 2026-07-28.
pub(super) const AUTH_2026: &[&str] = &[
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
];

/// What `--all` runs: (suite, spec version, scenarios).
pub(super) const MATRIX: &[(Suite, Option<&str>, &[&str])] = &[
    (Suite::Stable, None, CALL_PATH_LEGACY),
    (Suite::Stable, None, AUTH_COMMON),
    (Suite::Stable, None, AUTH_STABLE),
    (Suite::Next, Some("2025-11-25"), CALL_PATH_NEXT_2025),
    (Suite::Next, Some("2025-11-25"), AUTH_COMMON),
    (Suite::Next, Some("2026-07-28"), CALL_PATH_2026),
    (Suite::Next, Some("2026-07-28"), AUTH_COMMON),
    (Suite::Next, Some("2026-07-28"), AUTH_2026),
    (Suite::Next, Some("2025-03-26"), AUTH_2025_03_26),
    // Extension scenarios run without a spec version (with one they are skipped).
    (Suite::Stable, None, EXTENSIONS_STABLE),
    (Suite::Next, None, EXTENSIONS_NEXT),
];

/// The 2025-03-26 back-compat scenarios, which the next suite runs only at that version.
pub(super) const AUTH_2025_03_26: &[&str] = &[
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
];

/// The stable suite's extension scenarios (a known failure would be in `BASELINE_FILE` (`xtask/conformance-baseline.txt`)).
pub(super) const EXTENSIONS_STABLE: &[&str] = &[
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
];

/// The next suite's extension scenarios: SEP-2640 skills, the authorization extensions (a known
/// failure would be in `BASELINE_FILE` (`xtask/conformance-baseline.txt`)).
pub(super) const EXTENSIONS_NEXT: &[&str] = &[
    "sep-2640-client-no-prefetch",
    "sep-2640-client-verify-digest",
    "sep-2640-client-verify-size",
    "sep-2640-client-verify-frontmatter",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/wif-jwt-bearer",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Suite {
    Stable,
    Next,
}

impl Suite {
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "stable" => Ok(Suite::Stable),
            "next" => Ok(Suite::Next),
            other => Err(format!("unknown suite `{other}` (expected stable or next)")),
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Suite::Stable => "stable",
            Suite::Next => "next",
        }
    }

    pub(super) fn version(self) -> &'static str {
        match self {
            Suite::Stable => "0.1.16",
            Suite::Next => "0.2.0-alpha.12",
        }
    }

    /// The runner's entry point inside the peers folder.
    pub(super) fn entry(self, peers: &Path) -> PathBuf {
        let folder = match self {
            Suite::Stable => "npm",
            Suite::Next => "conformance-next",
        };
        peers
            .join(folder)
            .join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
    }
}

/// One invocation series of the runner: a suite at a spec version, over some scenarios.
#[derive(Debug)]
pub(super) struct RunSpec {
    pub(super) suite: Suite,
    pub(super) spec: Option<String>,
    pub(super) scenarios: Vec<String>,
}

impl RunSpec {
    pub(super) fn label(&self) -> String {
        format!(
            "{}-{}",
            self.suite.name(),
            self.spec.as_deref().unwrap_or("default")
        )
    }
}
