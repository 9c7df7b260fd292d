package main

// The export-traces subcommand: the pdata ptraceotlp gRPC client (pmetricotlp or plogotlp
// with -signal metrics or logs), as the Collector's otlp exporter uses it (gzip, its default
// compression, or -compression zstd or none), over several connections: request i goes on
// connection i mod -connections, and each connection sends its requests in order, -in-flight
// calls at once (by default one after the other), each call waiting for its answer. So the
// spans of one trace (or the series merged into one) can reach a gateway on different
// connections. The requests come from stdin, or with -generate from a generator of traces of
// 1 to 8 spans (of delta sums in -series series, see generatedMetrics; of log records with JSON
// bodies, see generatedLogs).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// tracesOutcome is one Export call's answer, printed as a JSON line.
type tracesOutcome struct {
	// Request is the request's index in the input.
	Request int `json:"request"`
	// Connection is the connection it went on.
	Connection int `json:"connection"`
	// Code is the gRPC status code's name ("OK" for an accepted request).
	Code string `json:"code"`
}

func cmdExportTraces(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export-traces", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the OTLP/gRPC endpoint, HOST:PORT")
	connections := fs.Int("connections", 2, "connections the requests are spread over")
	inFlight := fs.Int("in-flight", 1, "calls at once on each connection")
	compression := fs.String("compression", "gzip", "gRPC compression of the requests: gzip, zstd or none")
	callTimeout := fs.Duration("call-timeout", 10*time.Second, "deadline of each call")
	generate := fs.Int("generate", 0, "generate this many spans (data points with -signal metrics, log records with -signal logs) instead of reading stdin")
	batch := fs.Int("batch", 512, "spans (data points, log records) per generated request")
	series := fs.Int("series", 10000, "series of the generated data points (100 routes times series/100 pods)")
	quiet := fs.Bool("quiet", false, "print only a summary line, not one line per answer")
	signal := fs.String("signal", "traces", "what stdin holds: traces, metrics or logs requests")
	retry := fs.Bool("retry", false, "send refused calls again as the Collector's exporter does (retry_on_failure defaults: backoff from 5 s, x1.5, +-50%, at most 30 s apart, the RetryInfo delay when longer; RESOURCE_EXHAUSTED only with RetryInfo)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *addr == "" || *connections < 1 || *inFlight < 1 || *batch < 1 {
		return usageError{errors.New("-addr is required, -connections, -in-flight and -batch at least 1")}
	}
	switch *compression {
	case "gzip", "zstd", "none":
	default:
		return usageError{fmt.Errorf("-compression %q: gzip, zstd or none", *compression)}
	}
	var count int
	var export exportCall
	switch {
	case *signal == "metrics":
		requests := generatedMetrics(*generate, *series, *batch)
		if *generate == 0 {
			var err error
			requests, err = framedRequests(stdin, pmetricotlp.NewExportRequest)
			if err != nil {
				return err
			}
		}
		count = len(requests)
		export = func(ctx context.Context, conn *grpc.ClientConn, i int) error {
			_, err := pmetricotlp.NewGRPCClient(conn).Export(ctx, requests[i])
			return err
		}
	case *signal == "logs":
		requests := generatedLogs(*generate, *batch)
		if *generate == 0 {
			var err error
			requests, err = framedRequests(stdin, plogotlp.NewExportRequest)
			if err != nil {
				return err
			}
		}
		count = len(requests)
		export = func(ctx context.Context, conn *grpc.ClientConn, i int) error {
			_, err := plogotlp.NewGRPCClient(conn).Export(ctx, requests[i])
			return err
		}
	case *signal != "traces":
		return usageError{fmt.Errorf("-signal %q: traces, metrics or logs", *signal)}
	default:
		requests := generatedTraces(*generate, *batch)
		if *generate == 0 {
			var err error
			requests, err = framedRequests(stdin, ptraceotlp.NewExportRequest)
			if err != nil {
				return err
			}
		}
		count = len(requests)
		export = func(ctx context.Context, conn *grpc.ClientConn, i int) error {
			_, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, requests[i])
			return err
		}
	}
	outcomes := make([]tracesOutcome, count)
	var retried atomic.Int64
	var wg sync.WaitGroup
	sent := &sentBytes{}
	started := time.Now()
	for c := 0; c < *connections; c++ {
		conn, err := otlpClient(*addr, *compression, sent)
		if err != nil {
			return err
		}
		defer conn.Close()
		// The connection's requests are c, c + connections, ...: each caller takes the next.
		var next atomic.Int64
		for k := 0; k < *inFlight; k++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				for {
					i := c + int(next.Add(1)-1)*(*connections)
					if i >= count {
						return
					}
					err := exportRetrying(export, conn, i, *callTimeout, *retry, &retried)
					outcomes[i] = tracesOutcome{Request: i, Connection: c, Code: "OK"}
					if err != nil {
						outcomes[i].Code = status.Convert(err).Code().String()
					}
				}
			}(c)
		}
	}
	wg.Wait()
	elapsed := time.Since(started)
	failed := 0
	out := json.NewEncoder(stdout)
	for _, outcome := range outcomes {
		if outcome.Code != "OK" {
			failed++
		}
		if !*quiet {
			if err := out.Encode(outcome); err != nil {
				return err
			}
		}
	}
	if *quiet {
		fmt.Fprintf(stdout, "sent %d requests in %.3f s, %d refused, %d bytes on the wire, %d sent again\n",
			count, elapsed.Seconds(), failed, sent.total(), retried.Load())
	}
	return nil
}

// otlpClient is a plaintext grpc-go connection to addr that compresses requests with
// compression (gzip, zstd: the pooled compressor of zstd.go, as the Collector's, or none) and
// counts the bytes sent in sent.
func otlpClient(addr, compression string, sent *sentBytes) (*grpc.ClientConn, error) {
	options := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(sent),
	}
	if compression != "none" {
		options = append(options, grpc.WithDefaultCallOptions(grpc.UseCompressor(compression)))
	}
	return grpc.NewClient(addr, options...)
}

// exportCall sends request i on conn.
type exportCall func(ctx context.Context, conn *grpc.ClientConn, i int) error

// protoRequest is a pdata export request read from protobuf.
type protoRequest interface {
	UnmarshalProto([]byte) error
}

// framedRequests reads the framed protobuf requests on r, each made by newRequest.
func framedRequests[R protoRequest](r io.Reader, newRequest func() R) ([]R, error) {
	frames, err := readFrames(r)
	if err != nil {
		return nil, err
	}
	requests := make([]R, 0, len(frames))
	for _, frame := range frames {
		request := newRequest()
		if err := request.UnmarshalProto(frame); err != nil {
			return nil, err
		}
		requests = append(requests, request)
	}
	return requests, nil
}

// generatedTraces makes about `spans` spans in traces of 1 to 8 spans (one service, a root
// and its children), `batch` spans a request: 1% of traces have an error span, 1% last more
// than 2 s, the rest between 1 ms and 1 s. The trace ids are random (a fixed seed).
func generatedTraces(spans, batch int) []ptraceotlp.ExportRequest {
	rng := rand.New(rand.NewSource(7))
	var requests []ptraceotlp.ExportRequest
	var current ptrace.SpanSlice
	inCurrent := 0
	start := time.Unix(1_750_000_000, 0)
	newRequest := func() {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "checkout")
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("http")
		current = ss.Spans()
		inCurrent = 0
		requests = append(requests, ptraceotlp.NewExportRequestFromTraces(td))
	}
	newRequest()
	made := 0
	for t := 0; made < spans; t++ {
		var id [16]byte
		rng.Read(id[:])
		count := 1 + rng.Intn(8)
		failed := rng.Intn(100) == 0
		rootMs := 1 + rng.Intn(1000)
		if rng.Intn(100) == 0 {
			rootMs = 2001 + rng.Intn(1000)
		}
		begin := start.Add(time.Duration(t) * time.Millisecond)
		for s := 0; s < count && made < spans; s++ {
			if inCurrent == batch {
				newRequest()
			}
			span := current.AppendEmpty()
			span.SetTraceID(pcommon.TraceID(id))
			var sid [8]byte
			binary.BigEndian.PutUint64(sid[:], uint64(t)<<4|uint64(s)+1)
			span.SetSpanID(pcommon.SpanID(sid))
			ms := rootMs
			if s > 0 {
				ms = 1 + rng.Intn(rootMs)
				var parent [8]byte
				binary.BigEndian.PutUint64(parent[:], uint64(t)<<4|1)
				span.SetParentSpanID(pcommon.SpanID(parent))
			}
			span.SetName(fmt.Sprintf("op-%d", s))
			span.SetKind(ptrace.SpanKindServer)
			span.SetStartTimestamp(pcommon.NewTimestampFromTime(begin))
			span.SetEndTimestamp(pcommon.NewTimestampFromTime(begin.Add(time.Duration(ms) * time.Millisecond)))
			span.Attributes().PutStr("http.route", "/cart")
			span.Attributes().PutInt("http.response.status_code", 200)
			if failed && s == count-1 {
				span.Status().SetCode(ptrace.StatusCodeError)
			}
			inCurrent++
			made++
		}
	}
	return requests
}

// exportRetrying sends request i on conn, each call within callTimeout; with retry, a refusal
// the Collector's exporter would retry is sent again after the delay it would wait (counted in
// retried). The error is the last call's.
func exportRetrying(export exportCall, conn *grpc.ClientConn, i int, callTimeout time.Duration, retry bool, retried *atomic.Int64) error {
	backoff := 5 * time.Second
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		err := export(ctx, conn, i)
		cancel()
		if err == nil || !retry {
			return err
		}
		delay, ok := retryDelay(status.Convert(err))
		if !ok {
			return err
		}
		// The exporter's exponential backoff (randomized by +-50%), or the server's delay when
		// that is longer.
		wait := time.Duration(float64(backoff) * (0.5 + rand.Float64()))
		if delay > wait {
			wait = delay
		}
		backoff = min(time.Duration(float64(backoff)*1.5), 30*time.Second)
		retried.Add(1)
		time.Sleep(wait)
	}
}

// retryDelay says whether the Collector's OTLP exporter retries a call that ended with st, and
// the RetryInfo delay it carries (0 without one).
func retryDelay(st *status.Status) (time.Duration, bool) {
	var delay time.Duration
	hasInfo := false
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.RetryInfo); ok {
			delay = info.GetRetryDelay().AsDuration()
			hasInfo = true
		}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange,
		codes.Unavailable, codes.DataLoss:
		return delay, true
	case codes.ResourceExhausted:
		return delay, hasInfo
	}
	return 0, false
}
