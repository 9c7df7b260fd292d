"""Sends logs made with the OpenTelemetry Python SDK's logging handler to a Penstock gateway
through the SDK's OTLP gRPC exporter (opentelemetry-exporter-otlp-proto-grpc, gzip): half of
them with a JSON text body (`logger.info(json.dumps(...))`), half with a structured body (a
dict message, which the handler sends as a map body).

usage: send_json_logs.py GRPC_HOST:PORT LOGS

Prints one JSON object per log sent (its service and fields) and exits 0 when the exporter
reports SUCCESS, 1 otherwise.
"""

import json
import logging
import sys

from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource


def fields(i: int) -> dict:
    """The fields of log `i`: of every JSON type."""
    return {
        "user": f"u-{i}",
        "status": 500 if i % 5 == 0 else 200,
        "duration_ms": 1.5 + i,
        "cached": i % 2 == 0,
        "http": {"method": "GET", "route": "/orders/{id}"},
        "tags": ["a", str(i)],
    }


def main() -> int:
    addr, count = sys.argv[1], int(sys.argv[2])
    sent, records = [], []
    for service in ("checkout", "cart"):
        # One exporter per provider: shutting a provider down stops its exporter.
        memory = InMemoryLogRecordExporter()
        provider = LoggerProvider(resource=Resource.create({"service.name": service}))
        provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
        logger = logging.getLogger(f"penstock.interop.{service}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
        logger.addHandler(handler)
        for i in range(count // 2):
            body = fields(i)
            if i % 2 == 0:
                logger.info(json.dumps(body))
            else:
                logger.info(body)
            sent.append({"service": service, "fields": body})
        logger.removeHandler(handler)
        provider.shutdown()
        records.extend(memory.get_finished_logs())
    exporter = OTLPLogExporter(endpoint=f"http://{addr}", insecure=True, compression=Compression.Gzip)
    result = exporter.export(records)
    exporter.shutdown()
    for log in sent:
        print(json.dumps(log))
    print(f"{len(records)} logs: {result.name}", file=sys.stderr)
    return 0 if result == LogRecordExportResult.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main())
