"""Sends spans made with the OpenTelemetry Python SDK to a Penstock gateway through the SDK's
own OTLP exporters: gRPC (opentelemetry-exporter-otlp-proto-grpc) and HTTP/protobuf
(opentelemetry-exporter-otlp-proto-http).

usage: send_spans.py GRPC_HOST:PORT HTTP_HOST:PORT SPANS TOKEN

Exits 0 when both exporters report SUCCESS, 1 otherwise.
"""

import sys

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def make_spans(service: str, count: int):
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("penstock.interop", "1.0")
    for i in range(count):
        with tracer.start_as_current_span("GET /orders") as parent:
            parent.set_attribute("http.request.method", "GET")
            parent.set_attribute("http.response.status_code", 500 if i % 7 == 0 else 200)
            with tracer.start_as_current_span("SELECT orders") as child:
                child.set_attribute("db.system", "postgresql")
                child.add_event("rows", {"count": i})
    provider.shutdown()
    return memory.get_finished_spans()


def main() -> int:
    grpc_addr, http_addr, count, token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    headers = {"authorization": f"Bearer {token}"}
    exporters = [
        ("py-grpc", GrpcExporter(endpoint=f"http://{grpc_addr}", insecure=True, headers=headers)),
        ("py-http", HttpExporter(endpoint=f"http://{http_addr}/v1/traces", headers=headers)),
    ]
    ok = True
    for service, exporter in exporters:
        spans = make_spans(service, count)
        result = exporter.export(spans)
        exporter.shutdown()
        print(f"{service}: {len(spans)} spans: {result.name}")
        ok = ok and result == SpanExportResult.SUCCESS
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
