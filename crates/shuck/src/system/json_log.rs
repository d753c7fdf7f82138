//! `--log-format json`: one JSON object per log line, for Loki or Elasticsearch pipelines.
//! Field names are stable: `time` (RFC 3339, UTC), `level` (`error` … `trace`), `event`
//! (what happened, the text of the text format) and then the event's own fields under their
//! names (`client`, `sni`, `bytes_in`, …), numbers as numbers. A field named like one of the
//! first three is written with a `field_` prefix, so it never hides them.

use std::fmt;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON line formatter.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonLines;

/// An event's message and fields, in the order it gave them.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    fields: Vec<(&'static str, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.fields.push((field.name(), value));
        }
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here too, their Debug being the Display.
        self.put(field, format!("{value:?}").into());
    }
}

/// `s` as a JSON string.
fn quoted(s: &str) -> String {
    Value::from(s).to_string()
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut time = String::new();
        SystemTime.format_time(&mut Writer::new(&mut time))?;
        let mut f = Fields::default();
        event.record(&mut f);
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        write!(
            writer,
            "{{\"time\":{},\"level\":\"{level}\",\"event\":{}",
            quoted(&time),
            quoted(f.message.as_deref().unwrap_or(""))
        )?;
        for (name, value) in &f.fields {
            let key = match *name {
                "time" | "level" | "event" => quoted(&format!("field_{name}")),
                n => quoted(n),
            };
            write!(writer, ",{key}:{value}")?;
        }
        writeln!(writer, "}}")
    }
}
