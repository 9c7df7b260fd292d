package main

// generatedMetrics makes `points` data points of one service in `series` series: the delta
// sum http.server.requests by http.route (100 routes) and k8s.pod.name (series / 100 pods),
// each round one point per series, `batch` points a request. Merging the pods away leaves 100
// series.

import (
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// routes is the number of http.route values.
const routes = 100

func generatedMetrics(points, series, batch int) []pmetricotlp.ExportRequest {
	pods := series / routes
	if pods < 1 {
		pods = 1
	}
	var requests []pmetricotlp.ExportRequest
	var current pmetric.NumberDataPointSlice
	inCurrent := 0
	start := time.Unix(1_750_000_000, 0)
	newRequest := func() {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "checkout")
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName("http")
		m := sm.Metrics().AppendEmpty()
		m.SetName("http.server.requests")
		m.SetUnit("{request}")
		sum := m.SetEmptySum()
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		sum.SetIsMonotonic(true)
		current = sum.DataPoints()
		inCurrent = 0
		requests = append(requests, pmetricotlp.NewExportRequestFromMetrics(md))
	}
	newRequest()
	made := 0
	for round := 0; made < points; round++ {
		begin := start.Add(time.Duration(round) * time.Second)
		for s := 0; s < pods*routes && made < points; s++ {
			if inCurrent == batch {
				newRequest()
			}
			p := current.AppendEmpty()
			p.SetStartTimestamp(pcommon.NewTimestampFromTime(begin))
			p.SetTimestamp(pcommon.NewTimestampFromTime(begin.Add(time.Second)))
			p.SetIntValue(int64(1 + (round+s)%7))
			p.Attributes().PutStr("http.route", fmt.Sprintf("/api/v1/r%03d", s%routes))
			p.Attributes().PutStr("k8s.pod.name", fmt.Sprintf("checkout-7d9f-%03d", s/routes))
			inCurrent++
			made++
		}
	}
	return requests
}
