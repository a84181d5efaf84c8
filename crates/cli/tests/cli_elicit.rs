//! Issue 17 point 4: a server's questions on the terminal — every field kind of a form asked in
//! the schema's order and parsed to its type, an invalid answer asked again, decline and cancel
//! reaching the server — and the roots offered, and sampling declined with the reason. Driven
//! through the built binary on a pseudo-terminal against the fixture's `--client-requests`
//! tools, which report what reached the server.

mod common;

use common::{Pty, bin, run_in, temp_home};
use serde_json::{Value, json};

/// A folder with `mcp.json` configuring the fixture with its asking tools as server `fx`.
fn setup(tag: &str) -> std::path::PathBuf {
    let dir = temp_home("elicit", tag);
    let config = json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--client-requests"]}
    }});
    std::fs::write(dir.join("mcp.json"), config.to_string()).expect("write config");
    dir
}

/// The JSON the fixture's tool returned (from the first `{` of the line that holds `"result"`
/// or `"error"`: on a terminal it follows the last prompt).
fn reported(output: &str) -> Value {
    output
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l[l.find('{')?..].trim()).ok())
        .find(|v| v.get("result").is_some() || v.get("error").is_some())
        .unwrap_or_else(|| panic!("no tool answer in:\n{output}"))
}

const ASK_FORM: [&str; 5] = ["call", "mcp__fx__ask_form", "--yes", "--config", "mcp.json"];

/// The fixture (an rmcp server, which sends its schema's properties sorted by name): every
/// field kind parsed, each invalid answer asked again, defaults kept on Enter.
#[test]
fn a_form_is_asked_typed_checked_and_sent() {
    let dir = setup("form");
    let mut t = Pty::spawn(&dir, &ASK_FORM);
    t.expect("fx asks: Tell us about you");
    t.expect("Answer? [");
    t.send("\r");
    // Each with title, name, type, required, default, description and choices.
    t.expect("[1/7] Age (age) — integer, at least 0, at most 150; required");
    t.expect("age> ");
    t.send("old\r");
    t.expect("`old` is not a whole number; try again");
    t.expect("age> ");
    t.send("200\r");
    t.expect("invalid: ");
    t.expect("age> ");
    t.send("36\r");
    t.expect("[2/7] Color (color) — one choice; required");
    t.expect("choices: r (Red), g (Green), b (Blue)");
    t.expect("color> ");
    t.send("purple\r");
    t.expect("is not one of the choices: r, g, b");
    t.expect("color> ");
    t.send("Green\r");
    t.expect("[3/7] Full name (name) — text, at least 2 characters; required");
    t.expect("How we address you");
    t.expect("name> ");
    t.send("A\r");
    t.expect("invalid: ");
    t.expect("name> ");
    t.send("Ada\r");
    t.expect("[4/7] Ratio (ratio) — number, at least 0, at most 1; optional; default: 0.5");
    t.expect("Between 0 and 1");
    t.expect("ratio> ");
    t.send("\r");
    t.expect("[5/7] size — one choice; optional; default: m");
    t.expect("size> ");
    t.send("l\r");
    t.expect("[6/7] Subscribe (subscribe) — yes/no; optional; default: no");
    t.expect("subscribe> ");
    t.send("maybe\r");
    t.expect("answer yes or no");
    t.expect("subscribe> ");
    t.send("yes\r");
    t.expect(
        "[7/7] Tags (tags) — several choices, separated by commas, at least 1 choices; required",
    );
    t.expect("choices: x, y, z");
    t.expect("tags> ");
    t.send("\r");
    t.expect("this field is required");
    t.expect("tags> ");
    t.send("z, x\r");
    let (code, shown) = t.finish();
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        reported(&shown)["result"],
        json!({"action": "accept", "content": {
            "name": "Ada", "age": 36, "ratio": 0.5, "subscribe": true, "color": "g",
            "size": "l", "tags": ["z", "x"]
        }}),
        "{shown}"
    );
}

/// server-everything (the TypeScript SDK, which keeps the schema's order): its 13 fields asked
/// in the order it wrote them, enums matched by value or title, formats checked.
#[test]
fn a_real_servers_form_is_asked_in_its_order() {
    let dir = temp_home("elicit", "everything");
    let (node, server) = common::everything_paths();
    let config = json!({"mcpServers": {"ev": {"command": node, "args": [server]}}});
    std::fs::write(dir.join("mcp.json"), config.to_string()).expect("write config");
    let mut t = Pty::spawn(
        &dir,
        &[
            "call",
            "mcp__ev__trigger-elicitation-request",
            "--yes",
            "--config",
            "mcp.json",
        ],
    );
    t.expect("Answer? [");
    t.send("a\r");
    let answers = [
        ("[1/13] String (name) — text; required", "Ada"),
        ("[2/13] Boolean (check) — yes/no; optional", "y"),
        (
            "[3/13] String with default (firstLine) — text; optional; default: It was a dark and stormy night.",
            "",
        ),
        (
            "[4/13] String with email format (email) — text, format email; optional",
            "nope",
        ),
        ("invalid: ", "ada@example.com"),
        ("[5/13] String with uri format (homepage)", ""),
        ("[6/13] String with date format (birthdate)", "1815-12-10"),
        (
            "[7/13] Integer (integer) — integer, at least 1, at most 100; optional; default: 42",
            "7",
        ),
        ("[8/13] Number in range 1-1000 (number)", "2.5"),
        (
            "[9/13] Untitled Single Select Enum (untitledSingleSelectEnum)",
            "joey",
        ),
        (
            "[10/13] Untitled Multiple Select Enum (untitledMultipleSelectEnum) — several choices",
            "piano, Drums",
        ),
        (
            "[11/13] Titled Single Select Enum (titledSingleSelectEnum)",
            "Wonder Woman",
        ),
        (
            "[12/13] Titled Multiple Select Enum (titledMultipleSelectEnum)",
            "salmon,fish-3",
        ),
        (
            "[13/13] Legacy Titled Single Select Enum (legacyTitledEnum)",
            "Dogs",
        ),
    ];
    for (shown, typed) in answers {
        t.expect(shown);
        t.expect("> ");
        t.send(&format!("{typed}\r"));
    }
    let (code, shown) = t.finish();
    assert_eq!(code, 0, "{shown}");
    let raw = shown
        .split("Raw result: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no raw result in:\n{shown}"));
    let got: Value = serde_json::Deserializer::from_str(raw)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("raw result is not JSON:\n{shown}"));
    assert_eq!(
        got,
        json!({"action": "accept", "content": {
            "name": "Ada", "check": true, "firstLine": "It was a dark and stormy night.",
            "email": "ada@example.com", "birthdate": "1815-12-10", "integer": 7, "number": 2.5,
            "untitledSingleSelectEnum": "Joey",
            "untitledMultipleSelectEnum": ["Piano", "Drums"],
            "titledSingleSelectEnum": "hero-3",
            "titledMultipleSelectEnum": ["fish-2", "fish-3"],
            "legacyTitledEnum": "pet-2"
        }}),
        "{shown}"
    );
}

#[test]
fn declining_reaches_the_server() {
    let dir = setup("decline");
    let mut t = Pty::spawn(&dir, &ASK_FORM);
    t.expect("Answer? [");
    t.send("d\r");
    let (code, shown) = t.finish();
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        reported(&shown)["result"],
        json!({"action": "decline"}),
        "{shown}"
    );
}

#[test]
fn ctrl_d_in_the_middle_of_a_form_cancels_it() {
    let dir = setup("cancel");
    let mut t = Pty::spawn(&dir, &ASK_FORM);
    t.expect("Answer? [");
    t.send("a\r");
    t.expect("age> ");
    t.send("36\r");
    t.expect("color> ");
    t.send("\x04");
    let (code, shown) = t.finish();
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        reported(&shown)["result"],
        json!({"action": "cancel"}),
        "{shown}"
    );
}

#[test]
fn without_a_terminal_a_form_is_declined_unasked() {
    let dir = setup("no-tty");
    let (code, out, err) = run_in(&dir, &ASK_FORM, &[]);
    assert_eq!(code, 0, "{err}");
    // Nobody to ask: declined, never answered for the user.
    assert_eq!(
        reported(&out)["result"],
        json!({"action": "decline"}),
        "{out}"
    );
}

#[test]
fn roots_are_the_working_directory_or_the_given_folders() {
    let dir = setup("roots");
    let args = [
        "call",
        "mcp__fx__ask_roots",
        "--yes",
        "--config",
        "mcp.json",
    ];
    let (code, out, err) = run_in(&dir, &args, &[]);
    assert_eq!(code, 0, "{err}");
    let here = std::fs::canonicalize(&dir).expect("canonical");
    let roots = &reported(&out)["result"]["roots"];
    assert_eq!(
        roots,
        &json!([{"uri": format!("file://{}", here.display()),
                  "name": here.file_name().map(|n| n.to_string_lossy().into_owned())}]),
        "{out}"
    );

    std::fs::create_dir_all(dir.join("a b")).expect("mkdir");
    let mut more = args.to_vec();
    more.extend(["--root", "a b", "--root", "home"]);
    let (code, out, err) = run_in(&dir, &more, &[]);
    assert_eq!(code, 0, "{err}");
    let uris: Vec<String> = reported(&out)["result"]["roots"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|r| r["uri"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        uris,
        [
            format!("file://{}/a%20b", here.display()),
            format!("file://{}/home", here.display())
        ],
        "{out}"
    );

    let mut missing = args.to_vec();
    missing.extend(["--root", "nowhere"]);
    let (code, _, err) = run_in(&dir, &missing, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--root nowhere"), "{err}");
}

#[test]
fn sampling_is_declined_with_the_reason() {
    let dir = setup("sampling");
    let args = [
        "call",
        "mcp__fx__ask_sample",
        "--yes",
        "--config",
        "mcp.json",
    ];
    let (code, out, err) = run_in(&dir, &args, &[]);
    assert_eq!(code, 0, "{err}");
    let got = reported(&out);
    assert_eq!(got["error"]["code"], -1, "{out}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no model attached"), "{out}");
    assert!(
        err.contains("fx asked to run a model") && err.contains("no model attached"),
        "{err}"
    );
}
