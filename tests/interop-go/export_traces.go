package main

// The export-traces subcommand: the pdata ptraceotlp gRPC client, as the Collector's otlp
// exporter uses it (gzip, its default compression), over several connections: request i goes
// on connection i mod -connections, one after the other. So the spans of one trace can reach
// a gateway on different connections.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the gzip compressor, by name
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
	callTimeout := fs.Duration("call-timeout", 10*time.Second, "deadline of each call")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *addr == "" || *connections < 1 {
		return usageError{errors.New("-addr is required, and -connections at least 1")}
	}
	frames, err := readFrames(stdin)
	if err != nil {
		return err
	}
	clients := make([]ptraceotlp.GRPCClient, *connections)
	for i := range clients {
		conn, err := grpc.NewClient(*addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.UseCompressor("gzip")))
		if err != nil {
			return err
		}
		defer conn.Close()
		clients[i] = ptraceotlp.NewGRPCClient(conn)
	}
	out := json.NewEncoder(stdout)
	for i, frame := range frames {
		request := ptraceotlp.NewExportRequest()
		if err := request.UnmarshalProto(frame); err != nil {
			return err
		}
		connection := i % *connections
		ctx, cancel := context.WithTimeout(context.Background(), *callTimeout)
		_, err := clients[connection].Export(ctx, request)
		cancel()
		outcome := tracesOutcome{Request: i, Connection: connection, Code: "OK"}
		if err != nil {
			outcome.Code = status.Convert(err).Code().String()
		}
		if err := out.Encode(outcome); err != nil {
			return err
		}
	}
	return nil
}
