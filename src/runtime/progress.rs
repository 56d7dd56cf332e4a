//! Progress of long work on stderr. On a terminal: bars that redraw in place. Anywhere
//! else (a log file, CI, a batch job's output) a bar would print nothing, so the work
//! reports in plain lines instead, such as
//!
//! ```text
//! compare: 120/240 comparisons (50%), 3.1/s, ETA 39 s
//! ```
//!
//! one every [`interval`] (10 s; `NLG_JUDGE_PROGRESS_INTERVAL` seconds, 0 for a line
//! at every step) and one when the work ends, without escape codes. The file work of the
//! runtime (downloads, extraction, hashing) uses [`bytes_bar`] and [`spinner`]; the
//! command line's bars (`cli/progress.rs`) use [`PlainLines`].

use std::io::{IsTerminal, Read};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// The environment variable that sets the seconds between two plain progress lines.
pub const INTERVAL_ENV: &str = "NLG_JUDGE_PROGRESS_INTERVAL";

/// Seconds between two plain lines unless [`INTERVAL_ENV`] says otherwise.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Whether progress goes out as plain lines: stderr is not a terminal.
pub fn plain() -> bool {
    !std::io::stderr().is_terminal()
}

/// The time between two plain lines: [`INTERVAL_ENV`] seconds (a decimal number, 0 for
/// every step), else 10 s. Read once per process; a value that is not a number of
/// seconds is reported once and the default kept.
pub fn interval() -> Duration {
    static INTERVAL: OnceLock<Duration> = OnceLock::new();
    *INTERVAL.get_or_init(|| match std::env::var(INTERVAL_ENV) {
        Ok(text) => parse_interval(&text).unwrap_or_else(|| {
            eprintln!(
                "note: {INTERVAL_ENV}={text:?} is not a number of seconds; progress lines \
                 every {} s",
                DEFAULT_INTERVAL.as_secs()
            );
            DEFAULT_INTERVAL
        }),
        Err(_) => DEFAULT_INTERVAL,
    })
}

fn parse_interval(text: &str) -> Option<Duration> {
    let seconds: f64 = text.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// What a task counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// Steps called by this noun ("comparisons").
    Count(String),
    /// Bytes, shown in KiB, MiB or GiB.
    Bytes,
    /// Nothing: work of unknown length, reported when it starts and ends.
    Nothing,
}

/// The plain lines of one task: when one is due and what it says. The caller prints.
#[derive(Debug)]
pub struct PlainLines {
    label: String,
    unit: Unit,
    /// 0: unknown.
    total: u64,
    position: u64,
    /// Of `position`, the steps found done already (answers from a cache): counted in
    /// the amount, not in the rate.
    cached: u64,
    started: Instant,
    last_line: Instant,
    interval: Duration,
    finished: bool,
}

impl PlainLines {
    /// A task of `total` steps (0: unknown) under `label`, a line every [`interval`].
    pub fn new(label: impl Into<String>, total: u64, unit: Unit) -> Self {
        Self::with_interval(label, total, unit, interval())
    }

    pub fn with_interval(
        label: impl Into<String>,
        total: u64,
        unit: Unit,
        interval: Duration,
    ) -> Self {
        let now = Instant::now();
        Self {
            label: label.into(),
            unit,
            total,
            position: 0,
            cached: 0,
            started: now,
            last_line: now,
            interval,
            finished: false,
        }
    }

    /// The line announcing work of unknown length ([`Unit::Nothing`]); other tasks
    /// report their first line after the interval.
    pub fn start(&self) -> Option<String> {
        (self.unit == Unit::Nothing).then(|| format!("{}: started", self.label))
    }

    /// `steps` more done: the line to print if one is due.
    pub fn advance(&mut self, steps: u64) -> Option<String> {
        self.position = self.position.saturating_add(steps);
        let now = Instant::now();
        if steps == 0 || self.finished || now.duration_since(self.last_line) < self.interval {
            return None;
        }
        self.last_line = now;
        Some(self.render(now.duration_since(self.started), false))
    }

    /// `steps` found done already: counted, never a line of their own, never in the rate.
    pub fn found_in_cache(&mut self, steps: u64) {
        self.position = self.position.saturating_add(steps);
        self.cached = self.cached.saturating_add(steps);
    }

    /// The task is over: its last line (once; none for a counted task that had nothing
    /// to do).
    pub fn finish(&mut self) -> Option<String> {
        let empty = self.unit != Unit::Nothing && self.total == 0 && self.position == 0;
        if self.finished || empty {
            return None;
        }
        self.finished = true;
        Some(self.render(self.started.elapsed(), true))
    }

    /// The line after `elapsed`, `done` or under way.
    pub fn render(&self, elapsed: Duration, done: bool) -> String {
        let label = &self.label;
        let seconds = elapsed.as_secs_f64();
        if self.unit == Unit::Nothing {
            return match done {
                true => format!("{label}: done in {}", duration(elapsed)),
                false => format!("{label}: {} so far", duration(elapsed)),
            };
        }
        let computed = self.position.saturating_sub(self.cached);
        let rate = if seconds > 0.0 {
            computed as f64 / seconds
        } else {
            0.0
        };
        let (amount, rate_text) = match &self.unit {
            Unit::Bytes => {
                let scale = byte_scale(self.total.max(self.position));
                let amount = match self.total {
                    0 => format!("{} {}", bytes_in(self.position, scale), scale.1),
                    total => format!(
                        "{}/{} {}",
                        bytes_in(self.position, scale),
                        bytes_in(total, scale),
                        scale.1
                    ),
                };
                let rate_scale = byte_scale(rate as u64);
                let rate_text = format!("{} {}/s", bytes_in(rate as u64, rate_scale), rate_scale.1);
                (amount, rate_text)
            }
            Unit::Count(noun) => {
                let amount = match self.total {
                    0 => format!("{} {noun}", self.position),
                    total => format!("{}/{total} {noun}", self.position),
                };
                let rate_text = match (computed, self.cached) {
                    (_, 0) => format!("{}/s", number(rate)),
                    (0, _) => "all from the cache".to_string(),
                    (_, cached) => format!("{}/s, {cached} from the cache", number(rate)),
                };
                (amount, rate_text)
            }
            Unit::Nothing => unreachable!("handled above"),
        };
        let share = match self.total {
            0 => String::new(),
            total => format!(
                " ({:.0}%)",
                100.0 * (self.position.min(total) as f64) / total as f64
            ),
        };
        if done {
            return format!(
                "{label}: {amount}{share} in {}, {rate_text}",
                duration(elapsed)
            );
        }
        let left = self.total.saturating_sub(self.position);
        let eta = if self.total == 0 {
            String::new()
        } else if rate > 0.0 {
            format!(
                ", ETA {}",
                duration(Duration::from_secs_f64(left as f64 / rate))
            )
        } else {
            ", ETA unknown".to_string()
        };
        format!("{label}: {amount}{share}, {rate_text}{eta}")
    }
}

/// A rate with the digits that matter: 312, 3.1, 0.42.
fn number(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// "39 s", "2 min 05 s", "1 h 03 min".
fn duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64().round() as u64;
    match seconds {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {:02} s", s / 60, s % 60),
        s => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// The unit that shows `bytes` best: (bytes per unit, name).
fn byte_scale(bytes: u64) -> (u64, &'static str) {
    const KIB: u64 = 1024;
    match bytes {
        b if b >= KIB * KIB * KIB => (KIB * KIB * KIB, "GiB"),
        b if b >= KIB * KIB => (KIB * KIB, "MiB"),
        _ => (KIB, "KiB"),
    }
}

fn bytes_in(bytes: u64, scale: (u64, &'static str)) -> String {
    format!("{:.1}", bytes as f64 / scale.0 as f64)
}

/// A progress bar for file work: drawn on a terminal, plain lines elsewhere, nothing
/// when progress is switched off.
pub struct Bar {
    bar: ProgressBar,
    plain: Option<Mutex<PlainLines>>,
}

impl Bar {
    /// A bar that shows nothing.
    pub fn hidden() -> Self {
        Self {
            bar: ProgressBar::hidden(),
            plain: None,
        }
    }

    fn plain(lines: PlainLines) -> Self {
        if let Some(line) = lines.start() {
            eprintln!("{line}");
        }
        Self {
            bar: ProgressBar::hidden(),
            plain: Some(Mutex::new(lines)),
        }
    }

    fn with_lines(&self, f: impl FnOnce(&mut PlainLines) -> Option<String>) {
        if let Some(lines) = &self.plain {
            let mut lines = lines
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(line) = f(&mut lines) {
                eprintln!("{line}");
            }
        }
    }

    /// `steps` more done.
    pub fn inc(&self, steps: u64) {
        self.bar.inc(steps);
        self.with_lines(|lines| lines.advance(steps));
    }

    /// The work is over: the bar disappears, the plain lines end with a summary.
    pub fn finish_and_clear(&self) {
        self.bar.finish_and_clear();
        self.with_lines(PlainLines::finish);
    }

    /// `reader`, moving this bar by the bytes read.
    pub fn wrap_read<R: Read>(&self, reader: R) -> BarRead<'_, R> {
        BarRead { bar: self, reader }
    }
}

/// A reader that moves a [`Bar`] (see [`Bar::wrap_read`]).
pub struct BarRead<'a, R> {
    bar: &'a Bar,
    reader: R,
}

impl<R: Read> Read for BarRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.reader.read(buf)?;
        self.bar.inc(read as u64);
        Ok(read)
    }
}

/// A byte-count bar of `total` bytes (0: unknown length, a spinner with a byte count).
pub fn bytes_bar(enabled: bool, total: u64, message: impl Into<String>) -> Bar {
    let message = message.into();
    if !enabled {
        return Bar::hidden();
    }
    if plain() {
        return Bar::plain(PlainLines::new(message, total, Unit::Bytes));
    }
    let bar = if total > 0 {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:40!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg:40!} {bytes}") {
            bar.set_style(style);
        }
        bar
    };
    bar.set_message(message);
    Bar { bar, plain: None }
}

/// A spinner for work of unknown length (a `pip download`).
pub fn spinner(enabled: bool, message: impl Into<String>) -> Bar {
    let message = message.into();
    if !enabled {
        return Bar::hidden();
    }
    if plain() {
        return Bar::plain(PlainLines::new(message, 0, Unit::Nothing));
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    Bar { bar, plain: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(total: u64, unit: Unit, position: u64) -> PlainLines {
        let mut lines =
            PlainLines::with_interval("compare", total, unit, Duration::from_secs(3600));
        assert_eq!(lines.advance(position), None, "not due within the interval");
        lines
    }

    #[test]
    fn count_lines_give_share_rate_and_eta() {
        let lines = lines(240, Unit::Count("comparisons".into()), 120);
        assert_eq!(
            lines.render(Duration::from_secs(40), false),
            "compare: 120/240 comparisons (50%), 3.0/s, ETA 40 s"
        );
        assert_eq!(
            lines.render(Duration::from_secs(125), true),
            "compare: 120/240 comparisons (50%) in 2 min 05 s, 0.96/s"
        );
        let unknown = self::lines(0, Unit::Count("rows".into()), 7);
        assert_eq!(
            unknown.render(Duration::from_secs(2), false),
            "compare: 7 rows, 3.5/s"
        );
        let stalled = self::lines(10, Unit::Count("rows".into()), 0);
        assert!(stalled
            .render(Duration::ZERO, false)
            .ends_with("(0%), 0.00/s, ETA unknown"));
    }

    /// Answers found in the cache count toward the amount and share, never the rate:
    /// a run served wholly from the cache says so instead of a rate of millions per
    /// second, and a mixed one gives the rate of what it computed.
    #[test]
    fn cached_steps_are_counted_but_not_in_the_rate() {
        let unit = || Unit::Count("comparisons".into());
        let mut all = lines(240, unit(), 0);
        all.found_in_cache(240);
        assert_eq!(
            all.render(Duration::from_millis(3), true),
            "compare: 240/240 comparisons (100%) in 0 s, all from the cache"
        );
        let mut mixed = lines(240, unit(), 0);
        mixed.found_in_cache(120);
        assert_eq!(mixed.advance(60), None);
        assert_eq!(
            mixed.render(Duration::from_secs(20), false),
            "compare: 180/240 comparisons (75%), 3.0/s, 120 from the cache, ETA 20 s"
        );
    }

    #[test]
    fn byte_lines_use_one_unit_for_amount_and_total() {
        let mib = 1024 * 1024;
        let lines = lines(94 * mib, Unit::Bytes, 47 * mib);
        assert_eq!(
            lines.render(Duration::from_secs(5), false),
            "compare: 47.0/94.0 MiB (50%), 9.4 MiB/s, ETA 5 s"
        );
        let spinner = PlainLines::with_interval("pip", 0, Unit::Nothing, Duration::ZERO);
        assert_eq!(spinner.start().as_deref(), Some("pip: started"));
        assert_eq!(
            spinner.render(Duration::from_secs(3700), true),
            "pip: done in 1 h 01 min"
        );
    }

    #[test]
    fn a_zero_interval_reports_every_step_and_the_end_once() {
        let mut lines = PlainLines::with_interval("x", 2, Unit::Count("s".into()), Duration::ZERO);
        assert!(lines.advance(1).unwrap().starts_with("x: 1/2 s (50%)"));
        assert!(lines.advance(1).unwrap().starts_with("x: 2/2 s (100%)"));
        assert!(lines.finish().unwrap().starts_with("x: 2/2 s (100%) in "));
        assert_eq!(lines.finish(), None);
        assert_eq!(lines.advance(1), None);
        let mut idle = PlainLines::with_interval("x", 2, Unit::Count("s".into()), Duration::ZERO);
        assert_eq!(idle.advance(0), None, "nothing done, nothing to say");
        let mut empty = PlainLines::with_interval("x", 0, Unit::Count("s".into()), Duration::ZERO);
        assert_eq!(empty.finish(), None, "an empty task ends quietly");
    }

    #[test]
    fn intervals_are_seconds_or_refused() {
        assert_eq!(parse_interval("0"), Some(Duration::ZERO));
        assert_eq!(parse_interval(" 2.5 "), Some(Duration::from_millis(2500)));
        assert_eq!(parse_interval("-1"), None);
        assert_eq!(parse_interval("soon"), None);
    }
}
