package main

// The send and serve subcommands: the reference producer and consumer over real gRPC
// streams (ArrowLogsService, ArrowTracesService, ArrowMetricsService), behaving as the
// Collector's otelarrow exporter and receiver do on the wire: zstd gRPC compression named
// zstdarrowN, one HPACK encoder per stream for the batch headers, statuses awaited after the
// client half-closes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	arrowpb "github.com/open-telemetry/otel-arrow/go/api/experimental/arrow/v1"
	"github.com/open-telemetry/otel-arrow/go/pkg/otel/arrow_record"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // the gzip compressor, by name

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// zstdCompressor is plain zstd under a gRPC encoding name.
type zstdCompressor struct {
	name  string
	level zstd.EncoderLevel
}

func (c zstdCompressor) Name() string { return c.name }

func (c zstdCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(c.level))
}

func (c zstdCompressor) Decompress(r io.Reader) (io.Reader, error) {
	d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(d)
	d.Close()
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(out), nil
}

func init() {
	// "zstd" itself is the Collector-style pooled compressor in zstd.go.
	// The otelarrow exporter's names: zstdarrow1 (fastest) .. zstdarrow10.
	for level := 1; level <= 10; level++ {
		encoding.RegisterCompressor(zstdCompressor{
			name:  "zstdarrow" + strconv.Itoa(level),
			level: zstd.EncoderLevelFromZstd(level),
		})
	}
}

// batchResult is one line of send's output.
type batchResult struct {
	BatchID int64  `json:"batch_id"`
	Code    int32  `json:"code"`
	Message string `json:"message,omitempty"`
}

func cmdSend(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("send", stderr)
	sigName := signalFlag(fs)
	addr := fs.String("addr", "", "host:port of the OTAP receiver")
	compression := fs.String("compression", "zstdarrow1", "gRPC compression: zstdarrow1..10, zstd, gzip or none")
	token := fs.String("token", "", "bearer token")
	tokenIn := fs.String("token-in", "metadata", "where the token goes: metadata (the stream) or headers (every batch)")
	timeout := fs.Duration("timeout", 60*time.Second, "deadline for the whole exchange")
	inFlight := fs.Int("in-flight", 0, "batches without a status at most, the statuses read as they come and the stream half-closed after the last one, as the otelarrow exporter keeps its stream open (0: every batch sent, the stream half-closed, then the statuses read)")
	summary := fs.Bool("summary", false, "print on stderr, at the end, the batches sent, the seconds from the first to the last status and the bytes on the wire")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	sig, err := lookupSignal(*sigName)
	if err != nil {
		return usageError{err}
	}
	if *addr == "" {
		return usageError{errors.New("-addr is required")}
	}
	if *inFlight < 0 {
		return usageError{errors.New("-in-flight: 0 or more")}
	}
	sent := &sentBytes{}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(sent))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *token != "" && *tokenIn == "metadata" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	var opts []grpc.CallOption
	if *compression != "none" {
		opts = append(opts, grpc.UseCompressor(*compression))
	}
	stream, err := sig.open(ctx, conn, opts...)
	if err != nil {
		return fmt.Errorf("open %s stream: %w", sig.name, err)
	}

	producer := arrow_record.NewProducer()
	defer producer.Close()
	var headerBuf bytes.Buffer
	headers := hpack.NewEncoder(&headerBuf)
	fr := newFrameReader(stdin)
	started := time.Now()
	batches := 0
	if *summary {
		defer func() {
			fmt.Fprintf(stderr, "sent %d batches in %.3f s, %d bytes on the wire\n",
				batches, time.Since(started).Seconds(), sent.total())
		}()
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	// With -in-flight, a batch takes a place in window before it is sent and its status gives
	// the place back; the statuses are read beside the sending until the stream ends.
	var window chan struct{}
	var read chan error
	if *inFlight > 0 {
		window = make(chan struct{}, *inFlight)
		read = make(chan error, 1)
		go func() {
			read <- readStatuses(stream, enc, func() { <-window })
		}()
	}
	var readErr error
	ended := false // the statuses' reader is done
	defer func() {
		// Leaving early: the reader stops with the stream, before the output is flushed.
		if read != nil && !ended {
			cancel()
			<-read
		}
	}()
sending:
	for batch := 0; ; batch++ {
		otlp, err := fr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read frame %d: %w", batch, err)
		}
		bar, err := sig.encode(producer, otlp)
		if err != nil {
			return fmt.Errorf("frame %d: produce: %w", batch, err)
		}
		headerBuf.Reset()
		fields := []hpack.HeaderField{
			{Name: "otlp-pdata-size", Value: strconv.Itoa(len(otlp))},
			{Name: "x-tenant", Value: "interop"},
		}
		if *token != "" && *tokenIn == "headers" {
			fields = append(fields, hpack.HeaderField{Name: "authorization", Value: "Bearer " + *token})
		}
		for _, f := range fields {
			if err := headers.WriteField(f); err != nil {
				return err
			}
		}
		bar.Headers = bytes.Clone(headerBuf.Bytes())
		if window != nil {
			select {
			case window <- struct{}{}:
			case readErr = <-read:
				ended = true
				break sending
			}
		}
		if err := stream.SendMsg(bar); err != nil {
			// io.EOF: the receiver ended the stream; its statuses say why.
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("send batch %d: %w", batch, err)
		}
		batches++
	}
	if window == nil {
		// Half-close with batches still unacknowledged: every one must still get its status.
		if err := stream.CloseSend(); err != nil {
			return err
		}
		return readStatuses(stream, enc, func() {})
	}
	// Every place back (every status in), then the half-close.
	for i := 0; i < *inFlight && !ended; i++ {
		select {
		case window <- struct{}{}:
		case readErr = <-read:
			ended = true
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if !ended {
		readErr = <-read
		ended = true
	}
	return readErr
}

// readStatuses writes a JSON line for every BatchStatus of stream until it ends, calling done
// after each.
func readStatuses(stream grpc.ClientStream, enc *json.Encoder, done func()) error {
	for {
		status := &arrowpb.BatchStatus{}
		err := stream.RecvMsg(status)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receive status: %w", err)
		}
		if err := enc.Encode(batchResult{status.GetBatchId(), int32(status.GetStatusCode()), status.GetStatusMessage()}); err != nil {
			return err
		}
		done()
	}
}

// open starts the signal's Arrow stream.
func (s *signal) open(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	switch s.name {
	case "logs":
		return arrowpb.NewArrowLogsServiceClient(conn).ArrowLogs(ctx, opts...)
	case "traces":
		return arrowpb.NewArrowTracesServiceClient(conn).ArrowTraces(ctx, opts...)
	default:
		return arrowpb.NewArrowMetricsServiceClient(conn).ArrowMetrics(ctx, opts...)
	}
}

// receiver consumes the three Arrow services, one reference consumer per stream, and writes
// every batch it acknowledged as a frame: one byte naming the signal (0 logs, 1 traces,
// 2 metrics) followed by the OTLP request.
type receiver struct {
	arrowpb.UnimplementedArrowLogsServiceServer
	arrowpb.UnimplementedArrowTracesServiceServer
	arrowpb.UnimplementedArrowMetricsServiceServer

	mu  sync.Mutex
	out *frameWriter
}

func (r *receiver) ArrowLogs(s arrowpb.ArrowLogsService_ArrowLogsServer) error {
	return r.serve(0, logsSignal, s)
}

func (r *receiver) ArrowTraces(s arrowpb.ArrowTracesService_ArrowTracesServer) error {
	return r.serve(1, tracesSignal, s)
}

func (r *receiver) ArrowMetrics(s arrowpb.ArrowMetricsService_ArrowMetricsServer) error {
	return r.serve(2, metricsSignal, s)
}

type barStream interface {
	Send(*arrowpb.BatchStatus) error
	Recv() (*arrowpb.BatchArrowRecords, error)
}

func (r *receiver) serve(tag byte, sig *signal, s barStream) error {
	consumer := arrow_record.NewConsumer()
	defer consumer.Close()
	headers := hpack.NewDecoder(4096, nil)
	for {
		bar, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bar.GetHeaders()) > 0 {
			if _, err := headers.DecodeFull(bar.GetHeaders()); err != nil {
				return s.Send(&arrowpb.BatchStatus{BatchId: bar.GetBatchId(), StatusCode: arrowpb.StatusCode_INVALID_ARGUMENT, StatusMessage: err.Error()})
			}
		}
		otlp, parts, err := sig.decode(consumer, bar)
		if err == nil && parts == 0 && len(bar.GetArrowPayloads()) > 0 {
			err = errors.New("the batch decoded to nothing")
		}
		if err != nil {
			if serr := s.Send(&arrowpb.BatchStatus{BatchId: bar.GetBatchId(), StatusCode: arrowpb.StatusCode_INVALID_ARGUMENT, StatusMessage: err.Error()}); serr != nil {
				return serr
			}
			continue
		}
		r.mu.Lock()
		err = r.out.write(append([]byte{tag}, otlp...))
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if err := s.Send(&arrowpb.BatchStatus{BatchId: bar.GetBatchId(), StatusCode: arrowpb.StatusCode_OK}); err != nil {
			return err
		}
	}
}

func cmdServe(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	maxStreams := fs.Uint("max-streams", 0, "concurrent streams per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); 0: grpc-go's default")
	token := fs.String("token", "", "refuse streams whose authorization metadata is not \"Bearer TOKEN\" (UNAUTHENTICATED)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	options := []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}
	if *maxStreams > 0 {
		options = append(options, grpc.MaxConcurrentStreams(uint32(*maxStreams)))
	}
	if *token != "" {
		want := "Bearer " + *token
		options = append(options, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			if got := md.Get("authorization"); len(got) != 1 || got[0] != want {
				return status.Errorf(codes.Unauthenticated, "authorization %q is not the token", got)
			}
			return handler(srv, ss)
		}))
	}
	server := grpc.NewServer(options...)
	r := &receiver{out: newFrameWriter(stdout)}
	arrowpb.RegisterArrowLogsServiceServer(server, r)
	arrowpb.RegisterArrowTracesServiceServer(server, r)
	arrowpb.RegisterArrowMetricsServiceServer(server, r)
	r.mu.Lock()
	_, err = fmt.Fprintf(r.out.w, "listening %s\n", lis.Addr())
	if err == nil {
		err = r.out.w.Flush()
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	// Serves until stdin closes.
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		server.Stop()
	}()
	return server.Serve(lis)
}
