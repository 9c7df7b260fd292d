package main

// generatedLogs makes `logs` log records of one service, `batch` a request, each with a body
// that is a JSON object of 10 fields of mixed types (6 strings, 2 integers, a float with a
// fraction, a bool) whose values vary from record to record, and 3 attributes of their own
// (none named as a body field).

import (
	"fmt"
	"math/rand"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
)

func generatedLogs(logs, batch int) []plogotlp.ExportRequest {
	rng := rand.New(rand.NewSource(11))
	levels := []string{"info", "info", "info", "debug", "warn", "error"}
	severities := map[string]plog.SeverityNumber{
		"debug": plog.SeverityNumberDebug, "info": plog.SeverityNumberInfo,
		"warn": plog.SeverityNumberWarn, "error": plog.SeverityNumberError,
	}
	methods := []string{"GET", "GET", "GET", "POST", "PUT", "DELETE"}
	statuses := []int{200, 200, 200, 201, 204, 304, 400, 404, 500, 503}
	regions := []string{"eu-west-1", "us-east-1", "us-west-2", "ap-south-1"}
	var requests []plogotlp.ExportRequest
	var current plog.LogRecordSlice
	start := time.Unix(1_750_000_000, 0)
	for i := 0; i < logs; i++ {
		if i%batch == 0 {
			ld := plog.NewLogs()
			rl := ld.ResourceLogs().AppendEmpty()
			rl.Resource().Attributes().PutStr("service.name", "checkout")
			rl.Resource().Attributes().PutStr("host.name", fmt.Sprintf("node-%02d", len(requests)%16))
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName("http")
			current = sl.LogRecords()
			current.EnsureCapacity(min(batch, logs-i))
			requests = append(requests, plogotlp.NewExportRequestFromLogs(ld))
		}
		level := levels[rng.Intn(len(levels))]
		var trace [16]byte
		rng.Read(trace[:])
		// An odd number of thousandths: never a whole number, so it stays a float in JSON.
		duration := float64(2*rng.Intn(500_000)+1) / 1000
		body := fmt.Sprintf(`{"level":%q,"user":"u-%d","method":%q,"path":"/api/v1/orders/%d",`+
			`"status":%d,"bytes":%d,"duration_ms":%s,"cached":%t,"region":%q,"trace":"%x"}`,
			level, rng.Intn(100_000), methods[rng.Intn(len(methods))], rng.Intn(1_000_000),
			statuses[rng.Intn(len(statuses))], rng.Intn(1_000_000),
			strconv.FormatFloat(duration, 'f', -1, 64), rng.Intn(4) == 0,
			regions[rng.Intn(len(regions))], trace)
		at := pcommon.NewTimestampFromTime(start.Add(time.Duration(i) * time.Millisecond))
		record := current.AppendEmpty()
		record.SetTimestamp(at)
		record.SetObservedTimestamp(at)
		record.SetSeverityText(level)
		record.SetSeverityNumber(severities[level])
		record.Body().SetStr(body)
		record.Attributes().PutStr("log.source", "access")
		record.Attributes().PutStr("thread.name", fmt.Sprintf("worker-%d", rng.Intn(8)))
		record.Attributes().PutInt("sequence", int64(i))
	}
	return requests
}
