//! Where the user authorizes: the [`Browser`] trait that turns an authorization URL into the
//! redirect URL the authorization server sent back, and [`NoFollowBrowser`] for servers that
//! redirect at once.
//!
//! Invariant: a browser only ever yields the redirect URL (or why there is none); it never
//! sees or keeps a token.

use futures::future::BoxFuture;

/// Where the user authorizes: opens `url` and yields the full redirect URL (with `code` and
/// `state`) the authorization server sent the browser to.
pub trait Browser: Send + Sync {
    /// Opens `url` and yields the redirect URL the authorization server sent back.
    fn authorize(&self, url: &str) -> BoxFuture<'_, Result<String, String>>;
}

/// A [`Browser`] for authorization servers that redirect at once (no login page): it requests
/// the authorization URL without following redirects and returns the `Location`. It stands in for
/// a user's browser against test servers (the conformance suite, the tests of this crate).
pub struct NoFollowBrowser;

impl Browser for NoFollowBrowser {
    fn authorize(&self, url: &str) -> BoxFuture<'_, Result<String, String>> {
        let url = url.to_string();
        Box::pin(async move {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| e.to_string())?;
            let response = client
                .get(&url)
                .send()
                .await
                .map_err(|e| e.without_url().to_string())?;
            response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| {
                    format!(
                        "the authorization endpoint answered {} without a redirect",
                        response.status()
                    )
                })
        })
    }
}
