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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn fields_keep_their_types_and_never_hide_the_stable_ones() {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(JsonLines)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
            tracing::warn!(
                client = %addr,
                bytes = 42u64,
                ok = true,
                level = "mine",
                quote = "a \"b\"\n",
                "said {}",
                "this"
            );
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["level"], "warn");
        assert_eq!(v["event"], "said this");
        assert_eq!(v["client"], "127.0.0.1:9");
        assert_eq!(v["bytes"], 42);
        assert_eq!(v["ok"], true);
        assert_eq!(v["field_level"], "mine");
        assert_eq!(v["quote"], "a \"b\"\n");
        let keys: Vec<&str> = text.split("\":").take(3).collect();
        assert!(
            keys[0].ends_with("\"time") && keys[1].ends_with("\"level"),
            "{text}"
        );
    }
}
