package main

// The export-otlp subcommand: a grpc-go OTLP logs client (the pdata plogotlp client, as the
// Collector's otlp exporter uses it, with gzip, the exporter's default compression) that keeps
// sending while it is refused, and reports the wait each refusal asks for in its
// google.rpc.RetryInfo status detail.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the gzip compressor, by name
	"google.golang.org/grpc/status"
)

// exportOutcome is one Export call's answer, printed as a JSON line.
type exportOutcome struct {
	// Ms is when the answer came, in milliseconds since the first call.
	Ms int64 `json:"ms"`
	// Code is the gRPC status code's name ("OK" for an accepted request).
	Code string `json:"code"`
	// RetryMs is the RetryInfo delay in milliseconds, or -1 without one.
	RetryMs int64 `json:"retry_ms"`
}

func cmdExportOTLP(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export-otlp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the OTLP/gRPC endpoint, HOST:PORT")
	senders := fs.Int("senders", 4, "calls in flight at once")
	records := fs.Int("records", 50, "log records per request")
	callTimeout := fs.Duration("call-timeout", time.Second, "deadline of each call")
	until := fs.Duration("until-retry", 0, "stop once a refusal asks for at least this wait")
	deadline := fs.Duration("deadline", 30*time.Second, "stop after this long in any case")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *addr == "" {
		return usageError{errors.New("-addr is required")}
	}
	conn, err := gzipClient(*addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := plogotlp.NewGRPCClient(conn)
	request := plogotlp.NewExportRequestFromLogs(sampleLogs(*records))

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	var mu sync.Mutex
	out := json.NewEncoder(stdout)
	reached := false
	var wg sync.WaitGroup
	for i := 0; i < *senders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				call, done := context.WithTimeout(ctx, *callTimeout)
				_, err := client.Export(call, request)
				done()
				outcome := exportOutcome{Ms: time.Since(start).Milliseconds(), Code: "OK", RetryMs: -1}
				if err != nil {
					st := status.Convert(err)
					outcome.Code = st.Code().String()
					for _, detail := range st.Details() {
						if info, ok := detail.(*errdetails.RetryInfo); ok {
							outcome.RetryMs = info.GetRetryDelay().AsDuration().Milliseconds()
						}
					}
				}
				mu.Lock()
				_ = out.Encode(outcome)
				if *until > 0 && outcome.RetryMs >= until.Milliseconds() {
					reached = true
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if *until > 0 && !reached {
		return fmt.Errorf("no refusal asked for %v or more within %v", *until, *deadline)
	}
	return nil
}

// gzipClient is a plaintext grpc-go connection to addr that compresses requests with gzip,
// as the Collector's otlp exporter does by default.
func gzipClient(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.UseCompressor("gzip")))
}
