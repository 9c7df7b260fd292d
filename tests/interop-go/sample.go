package main

import (
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// Deterministic sample data used by the selftest and the Go tests.
//
// Every batch shares most keys and values with the previous ones (so later
// batches reuse Arrow schemas and dictionaries) but also introduces new
// string values (dictionary deltas) and, from the second batch on, extra
// attribute types (schema updates within the same stream).

// sampleBase is the fixed origin of all sample timestamps.
var sampleBase = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// ts returns a timestamp offset from sampleBase.
func ts(batch, i int) pcommon.Timestamp {
	return pcommon.NewTimestampFromTime(sampleBase.Add(time.Duration(batch)*time.Minute + time.Duration(i)*time.Millisecond))
}

// traceID and spanID derive stable, non-zero IDs from small integers.
func traceID(batch, i int) pcommon.TraceID {
	return pcommon.TraceID{0x5e, 0xed, byte(batch), byte(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, byte(i + 1)}
}

func spanID(batch, i int) pcommon.SpanID {
	return pcommon.SpanID{0xab, byte(batch), byte(i), 4, 5, 6, 7, byte(i + 1)}
}

// sampleRequest returns the OTLP Export*ServiceRequest protobuf bytes of the
// given sample batch for a signal.
func sampleRequest(sig *signal, batch int) ([]byte, error) {
	switch sig {
	case logsSignal:
		return plogotlp.NewExportRequestFromLogs(sampleLogs(batch)).MarshalProto()
	case tracesSignal:
		return ptraceotlp.NewExportRequestFromTraces(sampleTraces(batch)).MarshalProto()
	case metricsSignal:
		return pmetricotlp.NewExportRequestFromMetrics(sampleMetrics(batch)).MarshalProto()
	}
	return nil, fmt.Errorf("no sample data for signal %q", sig.name)
}

// putResource fills resource attributes for the r-th resource of a batch.
func putResource(res pcommon.Resource, batch, r int) {
	attrs := res.Attributes()
	attrs.PutStr("service.name", fmt.Sprintf("svc-%c", 'a'+r))
	attrs.PutStr("host.name", fmt.Sprintf("host-%d-%d", r, batch)) // new dictionary value per batch
	attrs.PutInt("process.pid", int64(1000+r))
	if batch > 0 {
		attrs.PutBool("cloud.enabled", r%2 == 0) // attribute type first seen in batch 1
	}
}

// putScope fills the s-th instrumentation scope.
func putScope(scope pcommon.InstrumentationScope, s int) {
	scope.SetName(fmt.Sprintf("penstock/scope-%d", s))
	scope.SetVersion(fmt.Sprintf("1.%d.0", s))
	if s == 0 {
		scope.Attributes().PutStr("scope.kind", "library")
	}
}

// putAttrs adds a varied attribute set, covering every AnyValue type once
// the batch is large enough.
func putAttrs(attrs pcommon.Map, batch, i int) {
	attrs.PutStr("http.method", []string{"GET", "POST", "PUT"}[i%3])
	attrs.PutStr("user.id", fmt.Sprintf("user-%d-%d", batch, i))
	attrs.PutInt("http.status_code", int64(200+100*(i%4)))
	attrs.PutDouble("latency.ms", 0.5+float64(i)*1.25)
	attrs.PutBool("retry", i%2 == 1)
	if i%3 == 0 {
		attrs.PutEmptyBytes("payload.hash").FromRaw([]byte{byte(batch), byte(i), 0xff})
	}
	if batch > 0 && i%2 == 0 {
		m := attrs.PutEmptyMap("request")
		m.PutStr("path", fmt.Sprintf("/api/v%d", batch))
		m.PutInt("size", int64(64*i))
	}
	if batch > 1 && i%2 == 1 {
		sl := attrs.PutEmptySlice("tags")
		sl.AppendEmpty().SetStr("alpha")
		sl.AppendEmpty().SetInt(int64(i))
	}
}

// setBody sets a log body whose type cycles through every AnyValue kind.
func setBody(body pcommon.Value, batch, i int) {
	switch i % 7 {
	case 0:
		body.SetStr(fmt.Sprintf("request %d of batch %d handled", i, batch))
	case 1:
		body.SetInt(int64(batch*100 + i))
	case 2:
		m := body.SetEmptyMap()
		m.PutStr("event", "login")
		m.PutInt("attempt", int64(i))
		m.PutEmptyMap("nested").PutBool("ok", true)
	case 3:
		body.SetDouble(3.25 * float64(i))
	case 4:
		body.SetBool(batch%2 == 0)
	case 5:
		body.SetEmptyBytes().FromRaw([]byte("raw-bytes"))
	case 6:
		sl := body.SetEmptySlice()
		sl.AppendEmpty().SetStr("first")
		sl.AppendEmpty().SetDouble(2.5)
	}
}

// sampleLogs builds two resources with three scopes in total and log
// records whose bodies cover all value types.
func sampleLogs(batch int) plog.Logs {
	ld := plog.NewLogs()
	n := 0
	for r := 0; r < 2; r++ {
		rl := ld.ResourceLogs().AppendEmpty()
		rl.SetSchemaUrl("https://opentelemetry.io/schemas/1.21.0")
		putResource(rl.Resource(), batch, r)
		for s := 0; s < 2-r; s++ {
			sl := rl.ScopeLogs().AppendEmpty()
			putScope(sl.Scope(), s)
			for k := 0; k < 4+batch; k++ {
				lr := sl.LogRecords().AppendEmpty()
				lr.SetTimestamp(ts(batch, n))
				lr.SetObservedTimestamp(ts(batch, n+1))
				lr.SetSeverityNumber(plog.SeverityNumber(1 + (n*4)%24))
				lr.SetSeverityText([]string{"DEBUG", "INFO", "WARN", "ERROR"}[n%4])
				if n%2 == 0 {
					lr.SetTraceID(traceID(batch, n))
					lr.SetSpanID(spanID(batch, n))
					lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
				}
				if n%5 == 4 {
					lr.SetEventName("app.audit")
				}
				setBody(lr.Body(), batch, n)
				putAttrs(lr.Attributes(), batch, n)
				n++
			}
		}
	}
	return ld
}

// sampleTraces builds spans with events, links, status and parents.
func sampleTraces(batch int) ptrace.Traces {
	td := ptrace.NewTraces()
	n := 0
	for r := 0; r < 2; r++ {
		rs := td.ResourceSpans().AppendEmpty()
		putResource(rs.Resource(), batch, r)
		for s := 0; s < 2; s++ {
			ss := rs.ScopeSpans().AppendEmpty()
			putScope(ss.Scope(), s)
			for k := 0; k < 3+batch; k++ {
				span := ss.Spans().AppendEmpty()
				span.SetTraceID(traceID(batch, n/3)) // a few spans per trace
				span.SetSpanID(spanID(batch, n))
				if n%3 != 0 {
					span.SetParentSpanID(spanID(batch, n-n%3))
				}
				span.TraceState().FromRaw(fmt.Sprintf("vendor=v%d", batch))
				span.SetName([]string{"GET /users", "db.query", "cache.get"}[n%3])
				span.SetKind(ptrace.SpanKind(1 + n%5))
				span.SetStartTimestamp(ts(batch, n))
				span.SetEndTimestamp(ts(batch, n+7))
				putAttrs(span.Attributes(), batch, n)
				switch n % 3 {
				case 1:
					span.Status().SetCode(ptrace.StatusCodeOk)
				case 2:
					span.Status().SetCode(ptrace.StatusCodeError)
					span.Status().SetMessage("boom")
				}
				for e := 0; e < n%3; e++ {
					ev := span.Events().AppendEmpty()
					ev.SetName(fmt.Sprintf("event-%d", e))
					ev.SetTimestamp(ts(batch, n+e+1))
					ev.Attributes().PutStr("exception.type", "IOError")
					ev.Attributes().PutInt("attempt", int64(e))
				}
				if n%2 == 1 {
					link := span.Links().AppendEmpty()
					link.SetTraceID(traceID(batch+1, n))
					link.SetSpanID(spanID(batch+1, n))
					link.TraceState().FromRaw("linked=yes")
					link.Attributes().PutStr("link.kind", "follows_from")
				}
				if n%4 == 3 {
					span.SetDroppedAttributesCount(2)
					span.SetDroppedEventsCount(1)
				}
				n++
			}
		}
	}
	return td
}

// putExemplar adds an exemplar with filtered attributes and trace context.
func putExemplar(exs pmetric.ExemplarSlice, batch, i int, intValue bool) {
	ex := exs.AppendEmpty()
	ex.SetTimestamp(ts(batch, i))
	if intValue {
		ex.SetIntValue(int64(10 + i))
	} else {
		ex.SetDoubleValue(1.5 + float64(i))
	}
	ex.SetTraceID(traceID(batch, i))
	ex.SetSpanID(spanID(batch, i))
	ex.FilteredAttributes().PutStr("client", fmt.Sprintf("c-%d", i))
}

// sampleMetrics builds one metric of every kind per scope, with exemplars.
func sampleMetrics(batch int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	for r := 0; r < 2; r++ {
		rm := md.ResourceMetrics().AppendEmpty()
		putResource(rm.Resource(), batch, r)
		for s := 0; s < 2; s++ {
			sm := rm.ScopeMetrics().AppendEmpty()
			putScope(sm.Scope(), s)
			ms := sm.Metrics()
			dps := 2 + batch

			gauge := ms.AppendEmpty()
			gauge.SetName("system.cpu.utilization")
			gauge.SetUnit("1")
			gauge.SetDescription("CPU utilization")
			g := gauge.SetEmptyGauge()
			for i := 0; i < dps; i++ {
				dp := g.DataPoints().AppendEmpty()
				dp.SetTimestamp(ts(batch, i))
				dp.Attributes().PutStr("cpu", fmt.Sprintf("cpu%d", i))
				if i%2 == 0 {
					dp.SetDoubleValue(0.1 * float64(i+1))
				} else {
					dp.SetIntValue(int64(i))
				}
			}

			sum := ms.AppendEmpty()
			sum.SetName("http.server.requests")
			sum.SetUnit("{request}")
			cum := sum.SetEmptySum()
			cum.SetIsMonotonic(true)
			cum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			for i := 0; i < dps; i++ {
				dp := cum.DataPoints().AppendEmpty()
				dp.SetStartTimestamp(ts(0, 0))
				dp.SetTimestamp(ts(batch, i))
				dp.SetIntValue(int64(100*batch + i))
				dp.Attributes().PutStr("route", fmt.Sprintf("/r%d", i))
				putExemplar(dp.Exemplars(), batch, i, true)
			}

			delta := ms.AppendEmpty()
			delta.SetName("queue.depth.change")
			ds := delta.SetEmptySum()
			ds.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
			dp := ds.DataPoints().AppendEmpty()
			dp.SetTimestamp(ts(batch, 1))
			dp.SetDoubleValue(-2.5)

			hist := ms.AppendEmpty()
			hist.SetName("http.server.duration")
			hist.SetUnit("ms")
			h := hist.SetEmptyHistogram()
			h.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
			for i := 0; i < dps; i++ {
				hdp := h.DataPoints().AppendEmpty()
				hdp.SetStartTimestamp(ts(batch, 0))
				hdp.SetTimestamp(ts(batch, i+1))
				hdp.SetCount(uint64(6 + i))
				hdp.SetSum(42.5 + float64(i))
				hdp.SetMin(0.5)
				hdp.SetMax(20)
				hdp.ExplicitBounds().FromRaw([]float64{1, 5, 10})
				hdp.BucketCounts().FromRaw([]uint64{1, 2, 2, uint64(1 + i)})
				hdp.Attributes().PutStr("method", []string{"GET", "POST"}[i%2])
				putExemplar(hdp.Exemplars(), batch, i, false)
			}

			ehist := ms.AppendEmpty()
			ehist.SetName("rpc.latency")
			ehist.SetUnit("s")
			eh := ehist.SetEmptyExponentialHistogram()
			eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			for i := 0; i < dps; i++ {
				edp := eh.DataPoints().AppendEmpty()
				edp.SetStartTimestamp(ts(0, 0))
				edp.SetTimestamp(ts(batch, i))
				edp.SetScale(int32(2 - i%3))
				edp.SetZeroCount(uint64(i))
				edp.SetZeroThreshold(1e-9)
				edp.SetCount(uint64(9 + 2*i))
				edp.SetSum(12.75)
				edp.SetMin(-3)
				edp.SetMax(7)
				edp.Positive().SetOffset(int32(i))
				edp.Positive().BucketCounts().FromRaw([]uint64{1, 3, 2})
				edp.Negative().SetOffset(-1)
				edp.Negative().BucketCounts().FromRaw([]uint64{2, 1})
				edp.Attributes().PutStr("rpc.method", fmt.Sprintf("Export%d", i))
				putExemplar(edp.Exemplars(), batch, i, i%2 == 0)
			}

			summary := ms.AppendEmpty()
			summary.SetName("gc.pause")
			summary.SetUnit("ms")
			sd := summary.SetEmptySummary()
			for i := 0; i < dps; i++ {
				sdp := sd.DataPoints().AppendEmpty()
				sdp.SetStartTimestamp(ts(0, 0))
				sdp.SetTimestamp(ts(batch, i))
				sdp.SetCount(uint64(20 + i))
				sdp.SetSum(123.5)
				for _, q := range [][2]float64{{0, 0.1}, {0.5, 2}, {0.99, 9.5}} {
					qv := sdp.QuantileValues().AppendEmpty()
					qv.SetQuantile(q[0])
					qv.SetValue(q[1])
				}
				sdp.Attributes().PutStr("generation", fmt.Sprintf("gen%d", i%2))
			}
		}
	}
	return md
}
