//! The one place that sets up logging for every binary: `tracing` events on standard error,
//! human lines by default or one JSON object a line (`--log-format json`), filtered by a
//! `RUST_LOG`-style directive (default `info`), each callsite rate-limited by [`RateLimit`].
//!
//! Nodes log inside a `node{id=N}` span (entered on their threads), so three nodes in one
//! process are told apart. Product output (tables, JSON on stdout) never goes through here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;
use tracing::callsite::{Callsite, Identifier};
use tracing::field::{FieldSet, Value};
use tracing::metadata::Kind;
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Event, Level, Metadata};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Most events one callsite logs in a window of [`RATE_LIMIT_WINDOW_MS`]; the rest are
/// counted and reported in one line when the callsite next logs after the window.
pub const RATE_LIMIT_EVENTS_MAX: u32 = 10;

/// The length of a rate-limit window, in milliseconds.
pub const RATE_LIMIT_WINDOW_MS: u64 = 1_000;

/// The filter when `RUST_LOG` is not set.
pub const LOG_FILTER_DEFAULT: &str = "info";
/// The simulator's default filter: its simulated nodes run the product's code under the
/// faults it injects, so the apply journal's warning when a full disk turns it off and a
/// start's warnings about damage it found are expected there at every such fault; a
/// violation is reported in the simulator's table.
pub const SIM_LOG_FILTER_DEFAULT: &str =
    "info,engine::storage::journal=error,engine::node::recovery=error";

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human line an event: time, level, spans, message, fields.
    #[default]
    Human,
    /// One JSON object a line: `timestamp`, `level`, `fields`, `target`, `span`, `spans`.
    Json,
}

/// The environment variable that gives `--log-format` when the option is left out.
pub const LOG_FORMAT_ENV: &str = "ENGINE_LOG_FORMAT";

/// The global `--log-format` flag, for a binary's clap command line.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LogArgs {
    /// How log lines on standard error look: human (default) or json (one object a line,
    /// every line: the start and stop lines and a fatal error included). `RUST_LOG` filters
    /// them (default info).
    #[arg(long, global = true, value_enum, env = LOG_FORMAT_ENV, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
}

/// The format [`init`] set first (human before any call).
static FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The format of the process's log lines: what [`init`] set, human before it.
pub fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// Sets the process's subscriber: `format` on standard error, filtered by `RUST_LOG` (or
/// [`LOG_FILTER_DEFAULT`]), rate-limited per callsite. A second call changes nothing.
pub fn init(format: LogFormat) {
    init_with(format, LOG_FILTER_DEFAULT);
}

/// [`init`] for a command with its own default filter (`default`, when `RUST_LOG` is unset).
pub fn init_with(format: LogFormat, default: &str) {
    if FORMAT.set(format).is_err() {
        // Already set (a test, or a binary that called this twice): the first one stays.
        return;
    }
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let registry = tracing_subscriber::registry().with(filter);
    let writer = std::io::stderr;
    let result = match format {
        LogFormat::Human => {
            // Colours only for a person at a terminal, not in a file or a pipe.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(writer);
            registry.with(RateLimit::new(layer)).try_init()
        }
        LogFormat::Json => {
            let layer = tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(writer);
            registry.with(RateLimit::new(layer)).try_init()
        }
    };
    // Already set (a test, or a binary that called this twice): the first one stays.
    drop(result);
}

/// One callsite's window.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// When it opened, in milliseconds of the layer's clock.
    opened_ms: u64,
    /// Events logged in it.
    logged: u32,
    /// Events dropped since the last line was logged.
    suppressed: u64,
}

/// A layer that passes each callsite's events to `inner` at most [`RATE_LIMIT_EVENTS_MAX`]
/// times per [`RATE_LIMIT_WINDOW_MS`]; when a callsite logs again after a window in which
/// some were dropped, `inner` first gets one `warn` line saying how many (`suppressed`), at
/// that callsite's name. Only events pay the lock, never spans or disabled levels.
pub struct RateLimit<L> {
    inner: L,
    windows: Mutex<HashMap<Identifier, Window>>,
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl<L> RateLimit<L> {
    /// Rate-limits `inner` on the monotonic clock.
    pub fn new(inner: L) -> Self {
        let start = Instant::now();
        Self::with_clock(inner, move || start.elapsed().as_millis() as u64)
    }

    /// Rate-limits `inner` on `clock` (milliseconds; tests drive it by hand).
    pub fn with_clock(inner: L, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        RateLimit {
            inner,
            windows: Mutex::new(HashMap::new()),
            clock: Box::new(clock),
        }
    }

    /// Whether the event of `callsite` passes, and how many were dropped before it (to be
    /// reported first).
    fn admit(&self, callsite: Identifier) -> (bool, u64) {
        let now_ms = (self.clock)();
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let window = windows.entry(callsite).or_insert(Window {
            opened_ms: now_ms,
            logged: 0,
            suppressed: 0,
        });
        let mut report = 0;
        if now_ms.saturating_sub(window.opened_ms) >= RATE_LIMIT_WINDOW_MS {
            report = std::mem::take(&mut window.suppressed);
            *window = Window {
                opened_ms: now_ms,
                logged: 0,
                suppressed: 0,
            };
        }
        if window.logged < RATE_LIMIT_EVENTS_MAX {
            window.logged += 1;
            (true, report)
        } else {
            window.suppressed += 1;
            (false, report)
        }
    }
}

/// The callsite of the "suppressed" lines.
struct SuppressedCallsite;

static SUPPRESSED_CALLSITE: SuppressedCallsite = SuppressedCallsite;

static SUPPRESSED: Metadata<'static> = Metadata::new(
    "suppressed",
    "engine::log",
    Level::WARN,
    Some(file!()),
    Some(line!()),
    Some(module_path!()),
    FieldSet::new(
        &["message", "suppressed", "callsite"],
        Identifier(&SUPPRESSED_CALLSITE),
    ),
    Kind::EVENT,
);

impl Callsite for SuppressedCallsite {
    fn set_interest(&self, _: Interest) {}

    fn metadata(&self) -> &Metadata<'_> {
        &SUPPRESSED
    }
}

impl<S, L> Layer<S> for RateLimit<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn on_record(
        &self,
        span: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        self.inner.on_record(span, values, ctx);
    }

    fn on_follows_from(
        &self,
        span: &tracing::span::Id,
        follows: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let metadata = event.metadata();
        // Trace events appear only when `RUST_LOG` asks for them (the simulator's account of a
        // seed, step by step): dropping some would drop the steps they are read for.
        if *metadata.level() == tracing::Level::TRACE {
            return self.inner.on_event(event, ctx);
        }
        let (pass, suppressed) = self.admit(metadata.callsite());
        if suppressed > 0 {
            let fields = SUPPRESSED.fields();
            let message = format_args!("{suppressed} events not logged (rate limit)");
            let name = metadata.name();
            let values: [(&tracing::field::Field, Option<&dyn Value>); 3] = [
                (
                    &fields.field("message").expect("declared"),
                    Some(&message as &dyn Value),
                ),
                (
                    &fields.field("suppressed").expect("declared"),
                    Some(&suppressed as &dyn Value),
                ),
                (
                    &fields.field("callsite").expect("declared"),
                    Some(&name as &dyn Value),
                ),
            ];
            let values = fields.value_set(&values);
            self.inner
                .on_event(&Event::new(&SUPPRESSED, &values), ctx.clone());
        }
        if pass {
            self.inner.on_event(event, ctx);
        }
    }

    fn on_enter(&self, id: &tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &tracing::span::Id, new: &tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A writer into a shared buffer, for the fmt layer under test.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines().map(str::to_owned).collect()
        }
    }

    fn refuse(n: u32) {
        tracing::warn!(n, "refused");
    }

    /// Proves a callsite logs at most RATE_LIMIT_EVENTS_MAX lines a window, then one line
    /// counting the dropped ones before its next event; another callsite is not limited.
    #[test]
    fn rate_limit_counts_what_it_drops() {
        let buffer = Buffer::default();
        let now_ms = Arc::new(AtomicU64::new(0));
        let clock = Arc::clone(&now_ms);
        let writer = buffer.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        let limited = RateLimit::with_clock(layer, move || clock.load(Ordering::Relaxed));
        let subscriber = tracing_subscriber::registry().with(limited);
        tracing::subscriber::with_default(subscriber, || {
            for n in 0..25 {
                refuse(n);
            }
            tracing::info!("another callsite");
            now_ms.store(RATE_LIMIT_WINDOW_MS - 1, Ordering::Relaxed);
            refuse(25);
            now_ms.store(RATE_LIMIT_WINDOW_MS, Ordering::Relaxed);
            refuse(26);
        });
        let lines = buffer.lines();
        let refused = lines.iter().filter(|l| l.contains("refused")).count();
        assert_eq!(refused, RATE_LIMIT_EVENTS_MAX as usize + 1, "{lines:#?}");
        assert!(lines[RATE_LIMIT_EVENTS_MAX as usize].contains("another callsite"));
        let report = &lines[lines.len() - 2];
        assert!(
            report.contains("16 events not logged (rate limit)") && report.contains("WARN"),
            "{report}"
        );
        assert!(report.contains("suppressed=16"), "{report}");
        assert!(lines[lines.len() - 1].contains("n=26"));
    }

    /// Proves trace events, which only a `RUST_LOG` asking for them lets through, are never
    /// rate-limited: all 25 of one callsite in one window are written.
    #[test]
    fn trace_events_are_not_rate_limited() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        let limited = RateLimit::with_clock(layer, || 0);
        let subscriber = tracing_subscriber::registry().with(limited);
        tracing::subscriber::with_default(subscriber, || {
            for n in 0..25 {
                tracing::trace!(n, "step");
            }
        });
        let steps = buffer.lines().iter().filter(|l| l.contains("step")).count();
        assert_eq!(steps, 25);
    }

    /// Proves the JSON format writes one object a line with a level, a timestamp and the
    /// node span.
    #[test]
    fn json_lines_carry_level_time_and_node_span() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(move || writer.clone());
        let subscriber = tracing_subscriber::registry().with(RateLimit::new(layer));
        tracing::subscriber::with_default(subscriber, || {
            let _node = tracing::info_span!("node", id = 2).entered();
            tracing::info!(term = 3, "became leader");
        });
        let lines = buffer.lines();
        assert_eq!(lines.len(), 1);
        let line: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(line["level"], "INFO");
        assert!(line["timestamp"].as_str().is_some_and(|t| t.len() >= 20));
        assert_eq!(line["span"]["name"], "node");
        assert_eq!(line["span"]["id"], 2);
        assert_eq!(line["fields"]["term"], 3);
    }
}
