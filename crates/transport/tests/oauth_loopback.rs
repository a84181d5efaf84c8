//! The login "browser": the loopback callback yields the redirect URL; a pasted bare code is
//! paired with the state of this login's authorization URL.

use mcp_harness_transport::auth::loopback::pasted_redirect;
use mcp_harness_transport::auth::{Browser, LoopbackBrowser};

#[tokio::test]
async fn loopback_callback_yields_the_redirect_url() {
    let browser = LoopbackBrowser::bind(0, false).await.unwrap();
    let redirect_uri = browser.redirect_uri().to_string();
    assert!(redirect_uri.starts_with("http://127.0.0.1:"));
    let auth_url = "https://as.example/authorize?state=s1&code_challenge=x";
    let waiting = browser.authorize(auth_url);
    let hit = async {
        // Anything but the callback path is answered 404 and ignored.
        let client = reqwest::Client::new();
        let base = redirect_uri.trim_end_matches("/callback");
        let r = client
            .get(format!("{base}/favicon.ico"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        let r = client
            .get(format!("{redirect_uri}?code=abc&state=s1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    };
    let (redirect, ()) = tokio::join!(waiting, hit);
    assert_eq!(
        redirect.unwrap(),
        format!("{redirect_uri}?code=abc&state=s1")
    );
}

#[test]
fn pasted_code_or_url() {
    let auth = "https://as.example/authorize?client_id=c&state=st%2B1";
    let redirect = "http://127.0.0.1:33418/callback";
    assert_eq!(
        pasted_redirect("  the-code \n", redirect, auth).unwrap(),
        "http://127.0.0.1:33418/callback?code=the-code&state=st%2B1"
    );
    let url = "http://127.0.0.1:33418/callback?code=c&state=s";
    assert_eq!(pasted_redirect(url, redirect, auth).unwrap(), url);
    assert!(pasted_redirect("   ", redirect, auth).is_none());
}
