package main

// The serve-otlp subcommand: an OTLP/gRPC receiver built as the Collector's OTLP receiver is,
// on the pdata gRPC services (plogotlp, ptraceotlp, pmetricotlp) and a grpc-go server with
// default settings, gzip and zstd registered. grpc-go answers a compressed request with a
// response compressed the same way. A response is never empty: pdata marshals an
// ExportResponse without partial success as the empty partial_success field (bytes 0a 00),
// so even it goes back compressed (grpc-go sends only zero-length messages uncompressed).
// With -first-json FILE, the first Export accepted is also written to FILE as OTLP/JSON, for
// a look at what a sender delivers without decoding the frames.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the gzip compressor, by name; zstd is in zstd.go
	"google.golang.org/grpc/status"
)

// Signal bytes of serve and serve-otlp output frames.
const (
	tagLogs    byte = 0
	tagTraces  byte = 1
	tagMetrics byte = 2
)

// otlpCount is what serve-otlp accepted of one signal.
type otlpCount struct {
	exports int // Export calls
	items   int // log records, spans or metric data points
}

// otlpReceiver writes every accepted Export as a frame (signal byte + the request's protobuf)
// and counts them per signal.
type otlpReceiver struct {
	// name starts the summary line (the subcommand).
	name string
	// warning, when set, goes back in every response as a partial success rejecting
	// nothing (an OTLP warning), which makes the response message non-empty.
	warning string
	// firstJSON, when set, is the file the first accepted Export is written to as OTLP/JSON.
	firstJSON string

	mu     sync.Mutex
	out    *frameWriter
	counts [3]otlpCount
	// keptFirst: the first accepted Export went to firstJSON.
	keptFirst bool
}

// accept records one request; an error means it could not be written out.
func (r *otlpReceiver) accept(tag byte, marshal func() ([]byte, error), items int) error {
	body, err := marshal()
	if err != nil {
		return status.Errorf(codes.Internal, "marshal the request: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.out.write(append([]byte{tag}, body...)); err != nil {
		return status.Errorf(codes.Unavailable, "write the frame: %v", err)
	}
	r.counts[tag].exports++
	r.counts[tag].items += items
	return nil
}

// keepFirst writes the Export just accepted to firstJSON (marshalJSON gives it as OTLP/JSON)
// when it is the first.
func (r *otlpReceiver) keepFirst(marshalJSON func() ([]byte, error)) error {
	r.mu.Lock()
	first := r.firstJSON != "" && !r.keptFirst
	r.keptFirst = r.keptFirst || first
	r.mu.Unlock()
	if !first {
		return nil
	}
	body, err := marshalJSON()
	if err == nil {
		err = os.WriteFile(r.firstJSON, body, 0o644)
	}
	if err != nil {
		return status.Errorf(codes.Internal, "write the request as JSON: %v", err)
	}
	return nil
}

// announce prints the "listening ADDR" line that precedes the frames.
func (r *otlpReceiver) announce(addr net.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := fmt.Fprintf(r.out.w, "listening %s\n", addr); err != nil {
		return err
	}
	return r.out.w.Flush()
}

// snapshot returns the counts so far.
func (r *otlpReceiver) snapshot() [3]otlpCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts
}

// summary is the line serve-otlp prints on stderr when it stops.
func (r *otlpReceiver) summary() string {
	c := r.snapshot()
	return fmt.Sprintf("%s: logs %d exports, %d %s; traces %d exports, %d %s; metrics %d exports, %d %s",
		r.name, c[tagLogs].exports, c[tagLogs].items, logsSignal.unit,
		c[tagTraces].exports, c[tagTraces].items, tracesSignal.unit,
		c[tagMetrics].exports, c[tagMetrics].items, metricsSignal.unit)
}

type otlpLogs struct {
	plogotlp.UnimplementedGRPCServer
	r *otlpReceiver
}

func (s *otlpLogs) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	resp := plogotlp.NewExportResponse()
	if err := s.r.accept(tagLogs, req.MarshalProto, req.Logs().LogRecordCount()); err != nil {
		return resp, err
	}
	if err := s.r.keepFirst(req.MarshalJSON); err != nil {
		return resp, err
	}
	if s.r.warning != "" {
		resp.PartialSuccess().SetRejectedLogRecords(0)
		resp.PartialSuccess().SetErrorMessage(s.r.warning)
	}
	return resp, nil
}

type otlpTraces struct {
	ptraceotlp.UnimplementedGRPCServer
	r *otlpReceiver
}

func (s *otlpTraces) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	resp := ptraceotlp.NewExportResponse()
	if err := s.r.accept(tagTraces, req.MarshalProto, req.Traces().SpanCount()); err != nil {
		return resp, err
	}
	if err := s.r.keepFirst(req.MarshalJSON); err != nil {
		return resp, err
	}
	if s.r.warning != "" {
		resp.PartialSuccess().SetRejectedSpans(0)
		resp.PartialSuccess().SetErrorMessage(s.r.warning)
	}
	return resp, nil
}

type otlpMetrics struct {
	pmetricotlp.UnimplementedGRPCServer
	r *otlpReceiver
}

func (s *otlpMetrics) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	resp := pmetricotlp.NewExportResponse()
	if err := s.r.accept(tagMetrics, req.MarshalProto, req.Metrics().DataPointCount()); err != nil {
		return resp, err
	}
	if err := s.r.keepFirst(req.MarshalJSON); err != nil {
		return resp, err
	}
	if s.r.warning != "" {
		resp.PartialSuccess().SetRejectedDataPoints(0)
		resp.PartialSuccess().SetErrorMessage(s.r.warning)
	}
	return resp, nil
}

// newOTLPServer returns a grpc-go server (default settings) with the three OTLP services.
func newOTLPServer(r *otlpReceiver) *grpc.Server {
	server := grpc.NewServer()
	plogotlp.RegisterGRPCServer(server, &otlpLogs{r: r})
	ptraceotlp.RegisterGRPCServer(server, &otlpTraces{r: r})
	pmetricotlp.RegisterGRPCServer(server, &otlpMetrics{r: r})
	return server
}

func cmdServeOTLP(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve-otlp", stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	warning := fs.String("warning", "", "answer every Export with a partial success that rejects nothing and carries this message")
	firstJSON := fs.String("first-json", "", "also write the first accepted Export to this file as OTLP/JSON")
	lis, err := parseAndListen(fs, args, listen)
	if err != nil {
		return err
	}
	r := &otlpReceiver{name: "serve-otlp", warning: *warning, firstJSON: *firstJSON, out: newFrameWriter(stdout)}
	server := newOTLPServer(r)
	err = r.serveUntilClosed(stdin, lis, func() error { return server.Serve(lis) }, server.Stop)
	fmt.Fprintln(stderr, r.summary())
	return err
}

// parseAndListen parses args into fs and listens on the address of its -listen flag.
func parseAndListen(fs *flag.FlagSet, args []string, listen *string) (net.Listener, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return net.Listen("tcp", *listen)
}

// serveUntilClosed announces lis, then serves on it (serve) until stdin closes, which calls
// stop to end serve.
func (r *otlpReceiver) serveUntilClosed(stdin io.Reader, lis net.Listener, serve func() error, stop func()) error {
	if err := r.announce(lis.Addr()); err != nil {
		lis.Close()
		return err
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		stop()
	}()
	return serve()
}
