package main

import (
	"fmt"
	"sort"
	"strings"

	arrowpb "github.com/open-telemetry/otel-arrow/go/api/experimental/arrow/v1"
	"github.com/open-telemetry/otel-arrow/go/pkg/otel/arrow_record"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// signal bundles the per-signal glue between OTLP protobuf bytes (an
// Export{Logs,Trace,Metrics}ServiceRequest), pdata and the otel-arrow
// producer and consumer.
type signal struct {
	name string
	// unit names what count measures, for human-readable summaries.
	unit string

	// encode unmarshals one OTLP request and turns it into one
	// BatchArrowRecords using the (stateful) producer.
	encode func(p *arrow_record.Producer, otlp []byte) (*arrowpb.BatchArrowRecords, error)

	// decode turns one BatchArrowRecords into OTLP request bytes using the
	// (stateful) consumer. The consumer returns a slice of pdata values;
	// they are merged into a single request. decode also reports how many
	// pdata values the consumer returned.
	decode func(c *arrow_record.Consumer, bar *arrowpb.BatchArrowRecords) (otlp []byte, parts int, err error)

	// count returns the number of items (log records, spans or metric data
	// points) in an OTLP request.
	count func(otlp []byte) (int, error)
}

var signals = map[string]*signal{
	"logs":    logsSignal,
	"traces":  tracesSignal,
	"metrics": metricsSignal,
}

// signalNames returns the accepted -signal values, sorted.
func signalNames() string {
	names := make([]string, 0, len(signals))
	for name := range signals {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, "|")
}

// lookupSignal maps a -signal flag value to its signal.
func lookupSignal(name string) (*signal, error) {
	s, ok := signals[name]
	if !ok {
		return nil, fmt.Errorf("unknown signal %q (want %s)", name, signalNames())
	}
	return s, nil
}

var logsSignal = &signal{
	name: "logs",
	unit: "log records",
	encode: func(p *arrow_record.Producer, otlp []byte) (*arrowpb.BatchArrowRecords, error) {
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(otlp); err != nil {
			return nil, fmt.Errorf("unmarshal ExportLogsServiceRequest: %w", err)
		}
		return p.BatchArrowRecordsFromLogs(req.Logs())
	},
	decode: func(c *arrow_record.Consumer, bar *arrowpb.BatchArrowRecords) ([]byte, int, error) {
		parts, err := c.LogsFrom(bar)
		if err != nil {
			return nil, 0, err
		}
		merged := plog.NewLogs()
		for _, part := range parts {
			part.ResourceLogs().MoveAndAppendTo(merged.ResourceLogs())
		}
		out, err := plogotlp.NewExportRequestFromLogs(merged).MarshalProto()
		return out, len(parts), err
	},
	count: func(otlp []byte) (int, error) {
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(otlp); err != nil {
			return 0, err
		}
		return req.Logs().LogRecordCount(), nil
	},
}

var tracesSignal = &signal{
	name: "traces",
	unit: "spans",
	encode: func(p *arrow_record.Producer, otlp []byte) (*arrowpb.BatchArrowRecords, error) {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(otlp); err != nil {
			return nil, fmt.Errorf("unmarshal ExportTraceServiceRequest: %w", err)
		}
		return p.BatchArrowRecordsFromTraces(req.Traces())
	},
	decode: func(c *arrow_record.Consumer, bar *arrowpb.BatchArrowRecords) ([]byte, int, error) {
		parts, err := c.TracesFrom(bar)
		if err != nil {
			return nil, 0, err
		}
		merged := ptrace.NewTraces()
		for _, part := range parts {
			part.ResourceSpans().MoveAndAppendTo(merged.ResourceSpans())
		}
		out, err := ptraceotlp.NewExportRequestFromTraces(merged).MarshalProto()
		return out, len(parts), err
	},
	count: func(otlp []byte) (int, error) {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(otlp); err != nil {
			return 0, err
		}
		return req.Traces().SpanCount(), nil
	},
}

var metricsSignal = &signal{
	name: "metrics",
	unit: "data points",
	encode: func(p *arrow_record.Producer, otlp []byte) (*arrowpb.BatchArrowRecords, error) {
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(otlp); err != nil {
			return nil, fmt.Errorf("unmarshal ExportMetricsServiceRequest: %w", err)
		}
		return p.BatchArrowRecordsFromMetrics(req.Metrics())
	},
	decode: func(c *arrow_record.Consumer, bar *arrowpb.BatchArrowRecords) ([]byte, int, error) {
		parts, err := c.MetricsFrom(bar)
		if err != nil {
			return nil, 0, err
		}
		merged := pmetric.NewMetrics()
		for _, part := range parts {
			part.ResourceMetrics().MoveAndAppendTo(merged.ResourceMetrics())
		}
		out, err := pmetricotlp.NewExportRequestFromMetrics(merged).MarshalProto()
		return out, len(parts), err
	},
	count: func(otlp []byte) (int, error) {
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(otlp); err != nil {
			return 0, err
		}
		return req.Metrics().DataPointCount(), nil
	},
}
