//! `--log-format json`: one JSON object per log line, for Loki or Elasticsearch pipelines.
//! Field names are stable: `time` (RFC 3339, UTC), `level` (`error` … `trace`), `event`
//! (a fixed name, e.g. `reload_done`, that pipelines match on: every event of shuck's has
//! one, given as `name:` where it is logged, and the manual lists them), `message` (the text
//! of the text format), then the event's own values under their names (`client`, `sni`,
//! `bytes_in`, …), numbers as numbers. A value named like one of the first four is written
//! with a `field_` prefix, so it never hides them. An event from a library shuck uses has
//! `event` = `library` and its `target`.

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
        let meta = event.metadata();
        let level = meta.level().as_str().to_ascii_lowercase();
        // tracing names an event "event FILE:LINE" unless it was given a name.
        let named = !meta.name().starts_with("event ");
        write!(
            writer,
            "{{\"time\":{},\"level\":\"{level}\",\"event\":{},\"message\":{}",
            quoted(&time),
            quoted(if named { meta.name() } else { "library" }),
            quoted(f.message.as_deref().unwrap_or(""))
        )?;
        if !named {
            write!(writer, ",\"target\":{}", quoted(meta.target()))?;
        }
        for (name, value) in &f.fields {
            let key = match *name {
                "time" | "level" | "event" | "message" | "target" => {
                    quoted(&format!("field_{name}"))
                }
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
                name: "test_event",
                word = "this",
                client = %addr,
                bytes = 42u64,
                ok = true,
                level = "mine",
                quote = "a \"b\"\n",
                "said {}",
                "this",
            );
            tracing::event!(tracing::Level::INFO, "from a library");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let (text, library) = text.split_once('\n').unwrap();
        // An event without a name (a library's): `library` and its target.
        let lib: Value = serde_json::from_str(library.trim()).unwrap();
        assert_eq!(lib["event"], "library");
        assert_eq!(lib["message"], "from a library");
        assert!(
            lib["target"].as_str().unwrap().contains("json_log"),
            "{lib}"
        );
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["level"], "warn");
        assert_eq!(v["event"], "test_event");
        assert_eq!(v["message"], "said this");
        assert_eq!(v["word"], "this");
        assert_eq!(v["client"], "127.0.0.1:9");
        assert_eq!(v["bytes"], 42);
        assert_eq!(v["ok"], true);
        assert_eq!(v["field_level"], "mine");
        assert_eq!(v["quote"], "a \"b\"\n");
        let keys: Vec<&str> = text.split("\":").take(4).collect();
        assert!(
            keys[0].ends_with("\"time") && keys[1].ends_with("\"level"),
            "{text}"
        );
    }
}
