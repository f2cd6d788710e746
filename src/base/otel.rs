//! OpenTelemetry across processes and languages (feature `otel`).
//!
//! DBOS 3.4 keeps the W3C trace context of a workflow's starter in the workflow's attributes,
//! under `dbos.otelContext` (`{"traceparent": "00-…", "tracestate": "…"}`), so the workflow's
//! span joins its starter's trace after a queue hand-off or a recovery, in any process. stead
//! does the same both ways: a start or enqueue made inside a span records that span's context
//! there, and a workflow run's span (and so its steps' spans) takes the recorded context as its
//! parent. A Python caller's trace thus continues through stead and back into Python.
//!
//! stead's spans are `tracing` spans; they reach OpenTelemetry through `tracing-opentelemetry`'s
//! layer, which the application installs with its tracer (re-exported here so the versions
//! match). This module never installs a subscriber or a global provider, and never fails a
//! workflow over a bad carrier: one that cannot be read is ignored.
//!
//! ```no_run
//! use stead::otel::{opentelemetry::trace::TracerProvider as _, opentelemetry_sdk, tracing_opentelemetry};
//! use tracing_subscriber::prelude::*;
//!
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build(); // + an exporter
//! tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("my-service")))
//!     .init();
//! ```
//!
//! ## Design notes
//!
//! Propagation is DBOS 3.4's (`_context.py`: `inject_trace_context`, `extract_trace_context`,
//! `otel_carrier_from_attributes`; `_core.py`: `_carrier_otel_context`): the carrier is the W3C
//! `traceparent`/`tracestate` dict under the attribute `dbos.otelContext`, and baggage never
//! travels. DBOS writes it only inside `PropagateOtelContext` or with the client's `otel_context`;
//! stead writes it on every start and enqueue made inside a span with a valid context (no
//! subscriber with the layer, no carrier), children included, since a Rust caller's span is the
//! obvious parent. A carrier the caller put in the attributes wins over the current span (DBOS lets
//! the explicit context win over a hand-written carrier; in stead the hand-written one is the
//! explicit one). The claim, the recovery statements and a direct start hand the carrier to the
//! workflow actor (`Dispatch::trace_context`), which parents the run's span on it before entering
//! it; steps are its children through `tracing`. Spans get `otel.name` (recorded only with the
//! feature, before the OpenTelemetry span is built; a `fmt` subscriber shows it as one more field)
//! and DBOS's `operationUUID`/`operationType`.
//!
//! Versions: `opentelemetry`/`opentelemetry_sdk` 0.33, `tracing-opentelemetry` 0.34,
//! `opentelemetry-otlp` 0.33 (HTTP/protobuf, blocking reqwest without TLS: the exporter runs on the
//! SDK's own thread). The Python side of the OpenTelemetry tests needs `dbos[otel]`, which
//! `.ci/test-deps` installs.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::Value;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::base::attributes::{Attributes, OTEL_CONTEXT_KEY};

pub use opentelemetry;
pub use opentelemetry_sdk;
pub use tracing_opentelemetry;

/// `given` plus the current span's trace context under [`OTEL_CONTEXT_KEY`]; `None` when there
/// is nothing to add (no span with a valid context, or a context the caller set already).
pub(crate) fn with_current_trace(given: Option<&Attributes>) -> Option<Attributes> {
    if given.is_some_and(|a| a.contains_key(OTEL_CONTEXT_KEY)) {
        return None;
    }
    let carrier = carrier_of(&tracing::Span::current().context())?;
    let mut attributes = given.cloned().unwrap_or_default();
    attributes.insert(OTEL_CONTEXT_KEY.to_owned(), Value::Object(carrier));
    Some(attributes)
}

/// The W3C carrier of `cx` (`traceparent`, and `tracestate` when not empty), as DBOS writes it;
/// `None` for a context without a valid span.
fn carrier_of(cx: &opentelemetry::Context) -> Option<Attributes> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut fields: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut fields);
    let carrier: Attributes = fields
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, Value::from(v)))
        .collect();
    (!carrier.is_empty()).then_some(carrier)
}

/// The context a recorded carrier (the JSON of a `dbos.otelContext` attribute) describes;
/// `None` when it holds no valid span context (not an object, values not strings, a bad
/// `traceparent`), so the caller keeps the context it has, as DBOS does.
fn context_of(carrier_json: &str) -> Option<opentelemetry::Context> {
    let Ok(Value::Object(carrier)) = serde_json::from_str::<Value>(carrier_json) else {
        return None;
    };
    let fields: HashMap<String, String> = carrier
        .into_iter()
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect();
    let cx = TraceContextPropagator::new().extract(&fields);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` continue the trace of `carrier_json` (a workflow's recorded starter), if it
/// holds one. Call before the span is first entered, after [`describe`].
pub(crate) fn continue_trace(span: &tracing::Span, carrier_json: Option<&str>) {
    if let Some(cx) = carrier_json.and_then(context_of) {
        // Fails only for a span no OpenTelemetry layer sees, which has no trace to join.
        let _ = span.set_parent(cx);
    }
}

/// Names `span` for OpenTelemetry after what it runs (`otel.name`, as DBOS names its spans by
/// function) and tags it with DBOS's operation attributes. Call before [`continue_trace`].
pub(crate) fn describe(span: &tracing::Span, name: &str, kind: &'static str, workflow_id: &str) {
    // Before anything builds the OpenTelemetry span (asking for its context does): the name is
    // read from the builder. A `fmt` subscriber shows it as one more field.
    span.record("otel.name", name);
    span.set_attribute("operationUUID", workflow_id.to_owned());
    span.set_attribute("operationType", kind);
}

/// An OTLP/HTTP (protobuf) tracer provider exporting to `endpoint` (e.g.
/// `http://127.0.0.1:4318/v1/traces`) in batches, its resource named `service_name` (feature
/// `otlp`). Install it in the layer as in the module's example; shut it down before exiting so
/// the last batch is sent.
#[cfg(feature = "otlp")]
pub fn otlp_tracer_provider(
    endpoint: &str,
    service_name: &str,
) -> crate::Result<opentelemetry_sdk::trace::SdkTracerProvider> {
    use opentelemetry_otlp::WithExportConfig;

    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| crate::Error::Config(format!("OTLP exporter for {endpoint}: {e}")))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name.to_owned())
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_carrier_round_trips_as_dbos_writes_it() {
        let cx = context_of(&format!(r#"{{"traceparent": "{PARENT}"}}"#)).unwrap();
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
        );
        assert_eq!(sc.span_id(), SpanId::from_hex("b7ad6b7169203331").unwrap());
        assert!(sc.is_remote() && sc.is_sampled());
        let carrier = carrier_of(&cx).unwrap();
        assert_eq!(
            Value::Object(carrier),
            serde_json::json!({"traceparent": PARENT})
        );
    }

    #[test]
    fn a_trace_state_travels_too() {
        let sc = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
            SpanId::from_hex("b7ad6b7169203331").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("vendor", "v1")]).unwrap(),
        );
        let cx = opentelemetry::Context::new().with_remote_span_context(sc);
        let carrier = carrier_of(&cx).unwrap();
        assert_eq!(carrier["tracestate"], "vendor=v1");
    }

    #[test]
    fn unreadable_carriers_are_ignored() {
        for bad in [
            "not json",
            "[1]",
            r#"{"traceparent": 7}"#,
            r#"{"traceparent": "00-zz-b7ad6b7169203331-01"}"#,
            r#"{"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"}"#,
            "{}",
        ] {
            assert!(context_of(bad).is_none(), "{bad}");
        }
        assert!(carrier_of(&opentelemetry::Context::new()).is_none());
    }

    #[test]
    fn without_a_span_nothing_is_added_and_a_given_carrier_wins() {
        assert_eq!(with_current_trace(None), None);
        let mut given = Attributes::new();
        given.insert(
            OTEL_CONTEXT_KEY.into(),
            serde_json::json!({"traceparent": PARENT}),
        );
        assert_eq!(with_current_trace(Some(&given)), None);
    }
}
