"""A DBOS app with OpenTelemetry tracing, for stead's trace-propagation test (tests/otel.rs).

Usage: python otel_app.py <system database URL> <JSON settings>
Settings: {"app", "queue", "stead_app", "stead_queue", "stead_workflow", "stead_id", "tail_id"}

Launches DBOS as application "app" serving "queue", where it runs "py_tail" (stead enqueues it).
Inside a root span it enqueues stead's workflow onto "stead_queue" with DBOS's client
(application "stead_app"), passing the root's context (EnqueueOptions' otel_context, which DBOS
records under the dbos.otelContext attribute). It waits for stead's result and for its own
py_tail span, then prints one JSON object: {"root": span, "spans": [span...], "result": ...},
each span {"name", "trace_id", "span_id", "parent_span_id", "attributes"} (ids in hex).
"""

import json
import sys
import time

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# Before DBOS is imported and configured: DBOS traces through the global provider.
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions  # noqa: E402
from dbos._serialization import WorkflowSerializationFormat  # noqa: E402


def span_view(span):
    ctx = span.get_span_context() if hasattr(span, "get_span_context") else span.context
    parent = getattr(span, "parent", None)
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent else None,
        "attributes": {k: str(v) for k, v in (getattr(span, "attributes", None) or {}).items()},
    }


def main():
    url, settings = sys.argv[1], json.loads(sys.argv[2])
    config: DBOSConfig = {
        "name": settings["app"],
        "system_database_url": url,
        "enable_otlp": True,
    }
    DBOS(config=config)

    @DBOS.workflow(name="py_tail")
    def py_tail(n):
        return n + 1

    DBOS.launch()
    DBOS.register_queue(settings["queue"], polling_interval_sec=0.1)
    client = DBOSClient(system_database_url=url, application_name=settings["stead_app"])
    try:
        tracer = trace.get_tracer("otel-test")
        with tracer.start_as_current_span("py-root") as root:
            options: EnqueueOptions = {
                "workflow_name": settings["stead_workflow"],
                "queue_name": settings["stead_queue"],
                "workflow_id": settings["stead_id"],
                "otel_context": otel_context.get_current(),
                "serialization_type": WorkflowSerializationFormat.PORTABLE,
            }
            handle = client.enqueue(options, 1)
        result = handle.get_result(polling_interval_sec=0.1)
        # The tail's span ends as its workflow returns, just after stead sees the result.
        deadline = time.time() + 10
        while time.time() < deadline:
            spans = exporter.get_finished_spans()
            if any(s.attributes.get("operationUUID") == settings["tail_id"] for s in spans):
                break
            time.sleep(0.05)
        out = {
            "root": span_view(root),
            "spans": [span_view(s) for s in exporter.get_finished_spans()],
            "result": result,
        }
    finally:
        client.destroy()
        DBOS.destroy()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
