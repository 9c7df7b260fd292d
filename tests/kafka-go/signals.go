package main

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

const (
	encProto = "otlp_proto"
	encJSON  = "otlp_json"
)

type message struct {
	key   []byte
	value []byte
}

// signalCodec converts between OTLP request protobufs (the frames) and Kafka
// message values in a Collector encoding.
type signalCodec interface {
	// encode turns one Export*ServiceRequest into the exporter's messages.
	encode(req []byte, encoding string, byTraceID bool) ([]message, error)
	// decode turns one message value into an Export*ServiceRequest protobuf,
	// with the number of log records / spans / data points in it.
	decode(value []byte, encoding string) ([]byte, int, error)
	// gen makes synthetic request number i with n items.
	gen(i, n int) ([]byte, error)
}

func codecFor(signal string) (signalCodec, error) {
	switch signal {
	case "logs":
		return logsCodec{}, nil
	case "traces":
		return tracesCodec{}, nil
	case "metrics":
		return metricsCodec{}, nil
	}
	return nil, fmt.Errorf("unknown -signal %q (want logs, traces or metrics)", signal)
}

// Deterministic ids for generated data.
func traceID(i, j int) pcommon.TraceID {
	var id pcommon.TraceID
	id[0] = 0x5e
	id[7] = byte(i >> 8)
	id[8] = byte(i)
	id[15] = byte(j + 1)
	return id
}

func spanID(i, j int) pcommon.SpanID {
	var id pcommon.SpanID
	id[0] = 0xa0
	id[5] = byte(i >> 8)
	id[6] = byte(i)
	id[7] = byte(j + 1)
	return id
}

const genBaseNanos = 1_700_000_000_000_000_000

func genTime(i, j int) pcommon.Timestamp {
	return pcommon.Timestamp(genBaseNanos + uint64(i)*1_000_000_000 + uint64(j)*1_000_000)
}

func genResource(r pcommon.Resource, i int) {
	r.Attributes().PutStr("service.name", "kafka-go-gen")
	r.Attributes().PutInt("gen.request", int64(i))
}

// ---- logs ----

type logsCodec struct{}

func (logsCodec) encode(req []byte, encoding string, _ bool) ([]message, error) {
	ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(req)
	if err != nil {
		return nil, fmt.Errorf("unmarshal ExportLogsServiceRequest: %w", err)
	}
	var v []byte
	if encoding == encJSON {
		v, err = (&plog.JSONMarshaler{}).MarshalLogs(ld)
	} else {
		v, err = (&plog.ProtoMarshaler{}).MarshalLogs(ld)
	}
	if err != nil {
		return nil, err
	}
	return []message{{value: v}}, nil
}

func (logsCodec) decode(value []byte, encoding string) ([]byte, int, error) {
	var ld plog.Logs
	var err error
	if encoding == encJSON {
		ld, err = (&plog.JSONUnmarshaler{}).UnmarshalLogs(value)
	} else {
		ld, err = (&plog.ProtoUnmarshaler{}).UnmarshalLogs(value)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("unmarshal %s logs: %w", encoding, err)
	}
	b, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
	return b, ld.LogRecordCount(), err
}

func (logsCodec) gen(i, n int) ([]byte, error) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	genResource(rl.Resource(), i)
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("penstock.dev/kafka-go")
	sl.Scope().SetVersion("0")
	for j := 0; j < n; j++ {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(genTime(i, j))
		lr.SetObservedTimestamp(genTime(i, j) + 1000)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.Body().SetStr(fmt.Sprintf("log %d.%d", i, j))
		lr.Attributes().PutInt("gen.item", int64(j))
		lr.Attributes().PutStr("http.method", []string{"GET", "POST", "PUT"}[j%3])
		lr.SetTraceID(traceID(i, j%2))
		lr.SetSpanID(spanID(i, j))
	}
	return (&plog.ProtoMarshaler{}).MarshalLogs(ld)
}

// ---- traces ----

type tracesCodec struct{}

func (tracesCodec) marshal(td ptrace.Traces, encoding string) ([]byte, error) {
	if encoding == encJSON {
		return (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	}
	return (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
}

func (c tracesCodec) encode(req []byte, encoding string, byTraceID bool) ([]message, error) {
	td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(req)
	if err != nil {
		return nil, fmt.Errorf("unmarshal ExportTraceServiceRequest: %w", err)
	}
	if !byTraceID {
		v, err := c.marshal(td, encoding)
		if err != nil {
			return nil, err
		}
		return []message{{value: v}}, nil
	}
	var msgs []message
	for _, part := range splitByTraceID(td) {
		v, err := c.marshal(part.traces, encoding)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, message{key: []byte(hexTraceID(part.id)), value: v})
	}
	return msgs, nil
}

type traceGroup struct {
	id     pcommon.TraceID
	traces ptrace.Traces
}

// splitByTraceID regroups spans into one ptrace.Traces per trace id (in order
// of first appearance), keeping each span under a copy of its resource and
// scope, which is what the exporter does for partition_traces_by_id.
func splitByTraceID(td ptrace.Traces) []traceGroup {
	type scopeKey struct {
		id     pcommon.TraceID
		ri, si int
	}
	var groups []traceGroup
	byID := map[pcommon.TraceID]int{}
	resources := map[scopeKey]ptrace.ResourceSpans{}
	scopes := map[scopeKey]ptrace.ScopeSpans{}
	for ri := 0; ri < td.ResourceSpans().Len(); ri++ {
		rs := td.ResourceSpans().At(ri)
		for si := 0; si < rs.ScopeSpans().Len(); si++ {
			ss := rs.ScopeSpans().At(si)
			for k := 0; k < ss.Spans().Len(); k++ {
				span := ss.Spans().At(k)
				id := span.TraceID()
				gi, ok := byID[id]
				if !ok {
					gi = len(groups)
					byID[id] = gi
					groups = append(groups, traceGroup{id: id, traces: ptrace.NewTraces()})
				}
				rk := scopeKey{id: id, ri: ri, si: -1}
				nrs, ok := resources[rk]
				if !ok {
					nrs = groups[gi].traces.ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(nrs.Resource())
					nrs.SetSchemaUrl(rs.SchemaUrl())
					resources[rk] = nrs
				}
				sk := scopeKey{id: id, ri: ri, si: si}
				nss, ok := scopes[sk]
				if !ok {
					nss = nrs.ScopeSpans().AppendEmpty()
					ss.Scope().CopyTo(nss.Scope())
					nss.SetSchemaUrl(ss.SchemaUrl())
					scopes[sk] = nss
				}
				span.CopyTo(nss.Spans().AppendEmpty())
			}
		}
	}
	return groups
}

func (tracesCodec) decode(value []byte, encoding string) ([]byte, int, error) {
	var td ptrace.Traces
	var err error
	if encoding == encJSON {
		td, err = (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(value)
	} else {
		td, err = (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(value)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("unmarshal %s traces: %w", encoding, err)
	}
	b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	return b, td.SpanCount(), err
}

func (tracesCodec) gen(i, n int) ([]byte, error) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	genResource(rs.Resource(), i)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("penstock.dev/kafka-go")
	for j := 0; j < n; j++ {
		s := ss.Spans().AppendEmpty()
		// two traces per request, so that -partition-by-trace-id splits it
		s.SetTraceID(traceID(i, j%2))
		s.SetSpanID(spanID(i, j))
		if j >= 2 {
			s.SetParentSpanID(spanID(i, j%2))
		}
		s.SetName(fmt.Sprintf("span %d.%d", i, j))
		s.SetKind(ptrace.SpanKindServer)
		s.SetStartTimestamp(genTime(i, j))
		s.SetEndTimestamp(genTime(i, j) + 5_000_000)
		s.Attributes().PutInt("gen.item", int64(j))
		s.Status().SetCode(ptrace.StatusCodeOk)
	}
	return (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
}

// ---- metrics ----

type metricsCodec struct{}

func (metricsCodec) encode(req []byte, encoding string, _ bool) ([]message, error) {
	md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(req)
	if err != nil {
		return nil, fmt.Errorf("unmarshal ExportMetricsServiceRequest: %w", err)
	}
	var v []byte
	if encoding == encJSON {
		v, err = (&pmetric.JSONMarshaler{}).MarshalMetrics(md)
	} else {
		v, err = (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	}
	if err != nil {
		return nil, err
	}
	return []message{{value: v}}, nil
}

func (metricsCodec) decode(value []byte, encoding string) ([]byte, int, error) {
	var md pmetric.Metrics
	var err error
	if encoding == encJSON {
		md, err = (&pmetric.JSONUnmarshaler{}).UnmarshalMetrics(value)
	} else {
		md, err = (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(value)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("unmarshal %s metrics: %w", encoding, err)
	}
	b, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	return b, md.DataPointCount(), err
}

func (metricsCodec) gen(i, n int) ([]byte, error) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	genResource(rm.Resource(), i)
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("penstock.dev/kafka-go")
	sum := sm.Metrics().AppendEmpty()
	sum.SetName("gen.requests")
	sum.SetUnit("1")
	s := sum.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	gauge := sm.Metrics().AppendEmpty()
	gauge.SetName("gen.temperature")
	gauge.SetUnit("Cel")
	g := gauge.SetEmptyGauge()
	for j := 0; j < n; j++ {
		var dp pmetric.NumberDataPoint
		if j%2 == 0 {
			dp = s.DataPoints().AppendEmpty()
			dp.SetIntValue(int64(i*100 + j))
		} else {
			dp = g.DataPoints().AppendEmpty()
			dp.SetDoubleValue(20 + float64(j)/4)
		}
		dp.SetStartTimestamp(genTime(i, 0))
		dp.SetTimestamp(genTime(i, j))
		dp.Attributes().PutInt("gen.item", int64(j))
	}
	return (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
}
