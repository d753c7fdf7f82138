//! How one metric family is written in the exposition: a counter or a gauge with its
//! rows of labels, a gauge by certificate name.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// The encoder of one scrape.
pub(super) type Enc<'a> = DescriptorEncoder<'a>;

/// A counter family: one sample per row of labels.
pub(super) fn counter(
    enc: &mut Enc<'_>,
    name: &str,
    help: &str,
    rows: &[(&[(&str, &str)], u64)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    if let [(&[], v)] = rows {
        return ConstCounter::new(*v).encode(m);
    }
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// A gauge family: one sample per row of labels.
pub(super) fn gauge(
    enc: &mut Enc<'_>,
    name: &str,
    help: &str,
    rows: &[(&[(&str, &str)], i64)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    if let [(&[], v)] = rows {
        return ConstGauge::new(*v).encode(m);
    }
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// A gauge with one sample per certificate name (label `name`).
pub(super) fn gauge_by_name(
    enc: &mut Enc<'_>,
    metric: &str,
    help: &str,
    rows: &[(String, i64)],
) -> std::fmt::Result {
    let labels: Vec<[(&str, &str); 1]> = rows.iter().map(|(n, _)| [("name", n.as_str())]).collect();
    let rows: Vec<(&[(&str, &str)], i64)> = labels
        .iter()
        .zip(rows)
        .map(|(l, (_, t))| (&l[..], *t))
        .collect();
    gauge(enc, metric, help, &rows)
}

/// A count as a gauge value (saturating).
pub(super) fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
