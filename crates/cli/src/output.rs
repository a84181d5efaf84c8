//! How output is worded and written: counted nouns, times, and server text on a terminal.
//!
//! Invariant: server text reaches a terminal only without control characters (newlines and
//! tabs kept), so a server cannot clear the screen, move the cursor or retitle the window;
//! to a pipe or a file, and in JSON, it is passed on as the server sent it. Times in JSON are
//! RFC 3339 in UTC.

use std::io::{IsTerminal, Write as _};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// `text` as written to stdout for a person: without control characters when stdout is a
/// terminal, unchanged otherwise.
pub(crate) fn for_stdout(text: &str) -> String {
    if std::io::stdout().is_terminal() {
        for_terminal(text)
    } else {
        text.to_string()
    }
}

/// `1 tool`, `2 tools`, `0 tools`.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `t` in RFC 3339, UTC, to the millisecond: `2026-12-01T02:43:02.123Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let (secs, millis) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_millis()),
        Err(_) => (0, 0),
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `text` as it may be written to a terminal: control characters dropped (escape sequences
/// lose their ESC and cannot clear the screen, move the cursor or retitle the window; a bare
/// carriage return cannot overwrite what was printed), except newlines and tabs.
pub(crate) fn for_terminal(text: &str) -> String {
    text.chars()
        .filter(|&c| c == '\n' || c == '\t' || !(c.is_control() || is_bidi_control(c)))
        .collect()
}

/// The bidirectional embedding, override and isolate controls (U+202A–U+202E,
/// U+2066–U+2069): they reorder what follows them on the line, so a server's text could make
/// the words after it read differently from what they are.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `path` relative to the current directory when under it, else with `~` for the home folder.
pub(crate) fn short(path: &Path) -> String {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(rel) = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
    {
        return format!("./{}", rel.display());
    }
    if let Some(rel) = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|home| path.strip_prefix(home).ok().map(Path::to_path_buf))
    {
        return format!("~/{}", rel.display());
    }
    path.display().to_string()
}

/// The first failure writing stdout: later output is dropped, a command that streams ends, and
/// one that is not a closed reader (a full disk) makes the command fail saying so.
static STDOUT_FAILED: OnceLock<std::io::Error> = OnceLock::new();

/// Whether the command runs under `--json` (its stderr notes are JSON lines too).
static JSON_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records whether the command runs under `--json`.
pub(crate) fn set_json_stderr(json: bool) {
    JSON_STDERR.store(json, std::sync::atomic::Ordering::Relaxed);
}

/// Whether stderr notes are written as JSON lines (`--json`).
pub(crate) fn json_stderr() -> bool {
    JSON_STDERR.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes `args` (and a line end) to stdout, noting a failure instead of panicking.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    if STDOUT_FAILED.get().is_some() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        let _ = STDOUT_FAILED.set(e);
    }
}

/// The exit code once the command returned `code`: what is still buffered is flushed; when
/// stdout could not be written for another reason than its reader leaving, that is said and a
/// command that otherwise succeeded fails (exit 1) — a script writing `--json` to a full disk
/// must not take an empty file for success.
pub(crate) fn finish_stdout(code: u8) -> u8 {
    if STDOUT_FAILED.get().is_none()
        && let Err(e) = std::io::stdout().flush()
    {
        let _ = STDOUT_FAILED.set(e);
    }
    match STDOUT_FAILED.get() {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            let _ = writeln!(
                std::io::stderr(),
                "error: the output could not be written to stdout: {e}"
            );
            if code == 0 { 1 } else { code }
        }
        _ => code,
    }
}

/// Resolves once stdout can no longer be written: a write failed, or its reader went away (the
/// read end of a pipe closed — `watch | head -1`), looked at once a second without writing.
pub(crate) async fn stdout_closed() {
    loop {
        if STDOUT_FAILED.get().is_some() || reader_gone() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Whether stdout is a pipe whose read end is closed (`POLLERR` on its write end).
fn reader_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: poll(2) on one valid pollfd, without waiting.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready > 0 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counted_nouns() {
        assert_eq!(count(0, "tool"), "0 tools");
        assert_eq!(count(1, "tool"), "1 tool");
        assert_eq!(count(2, "server"), "2 servers");
    }

    #[test]
    fn terminal_text_loses_controls_and_bidi_overrides() {
        assert_eq!(
            for_terminal("a\u{1b}]0;title\u{7}b\r\u{202E}evil\u{2066}x\n\tc"),
            "a]0;titlebevilx\n\tc"
        );
        assert_eq!(
            for_terminal("ok \u{200D} zwj"),
            "ok \u{200D} zwj",
            "joiners stay"
        );
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_199_500); // leap-year February
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.500Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_868_800); // 2000-03-01
        assert_eq!(rfc3339(t), "2000-03-01T00:00:00.000Z");
    }
}
