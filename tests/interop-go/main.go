// Command otap-interop bridges Penstock's interoperability tests to the
// OTel-Arrow reference implementation (github.com/open-telemetry/otel-arrow/go).
//
// It converts between OTLP and OTAP (BatchArrowRecords) using the reference
// producer and consumer, reading and writing length-prefixed protobuf frames
// on stdin/stdout. See README.md for the frame format.
//
// Usage:
//
//	otap-interop produce -signal logs|traces|metrics [-zstd=true] [-dict=true]
//	otap-interop consume -signal logs|traces|metrics
//	otap-interop send -signal logs|traces|metrics -addr HOST:PORT [-compression zstdarrow1] [-token T -token-in metadata|headers] [-in-flight N] [-summary]
//	otap-interop serve [-listen 127.0.0.1:0]
//	otap-interop serve-otlp [-listen 127.0.0.1:0] [-warning TEXT] [-first-json FILE]
//	otap-interop serve-otlp-http [-listen 127.0.0.1:0] [-warning TEXT] [-rejected N] [-fail-first N -fail-status 503 -retry-after 1]
//	otap-interop export-otlp -addr HOST:PORT [-senders 4] [-records 50] [-until-retry D]
//	otap-interop export-traces -addr HOST:PORT [-signal traces|metrics|logs] [-connections 2] [-in-flight 1] [-compression gzip|zstd|none] [-generate N] [-retry] [-quiet]
//	otap-interop selftest
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // conversion, decode or I/O failure
	exitUsage = 2 // bad command line
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one subcommand and returns the process exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]

	var err error
	switch cmd {
	case "produce":
		err = cmdProduce(rest, stdin, stdout, stderr)
	case "consume":
		err = cmdConsume(rest, stdin, stdout, stderr)
	case "selftest":
		err = cmdSelftest(rest, stdout, stderr)
	case "send":
		err = cmdSend(rest, stdin, stdout, stderr)
	case "serve":
		err = cmdServe(rest, stdin, stdout, stderr)
	case "serve-otlp":
		err = cmdServeOTLP(rest, stdin, stdout, stderr)
	case "serve-otlp-http":
		err = cmdServeOTLPHTTP(rest, stdin, stdout, stderr)
	case "export-otlp":
		err = cmdExportOTLP(rest, stdout, stderr)
	case "export-traces":
		err = cmdExportTraces(rest, stdin, stdout, stderr)
	case "hpack":
		err = cmdHpack(stdout)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "otap-interop: unknown subcommand %q\n", cmd)
		usage(stderr)
		return exitUsage
	}

	var uerr usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "otap-interop %s: %v\n", cmd, err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "otap-interop %s: %v\n", cmd, err)
		return exitError
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage:
  otap-interop produce -signal %[1]s [-zstd=true] [-dict=true]
      stdin: OTLP Export*ServiceRequest frames; stdout: BatchArrowRecords frames
  otap-interop consume -signal %[1]s
      stdin: BatchArrowRecords frames; stdout: OTLP Export*ServiceRequest frames
  otap-interop send -signal %[1]s -addr HOST:PORT [-compression zstdarrow1|zstd|gzip|none]
                    [-token T] [-token-in metadata|headers] [-timeout 60s] [-in-flight N]
                    [-summary]
      stdin: OTLP request frames, sent as one OTAP stream (half-closed after the last;
      with -in-flight, at most N batches without a status, and half-closed once every
      status is in); stdout: one JSON line per BatchStatus received; with -summary,
      stderr at the end: the batches sent, the seconds until the last status and the
      bytes on the wire
  otap-interop serve [-listen 127.0.0.1:0] [-token T]
      serves the three Arrow services until stdin closes; stdout: "listening ADDR", then
      one frame per acknowledged batch: a signal byte (0 logs, 1 traces, 2 metrics) + OTLP;
      with -token, streams without the metadata "authorization: Bearer T" end UNAUTHENTICATED
  otap-interop serve-otlp [-listen 127.0.0.1:0] [-warning TEXT] [-first-json FILE]
      serves OTLP/gRPC (LogsService, TraceService, MetricsService Export; gzip, zstd or
      none) until stdin closes; stdout: "listening ADDR", then one frame per accepted
      Export: a signal byte (0 logs, 1 traces, 2 metrics) + the Export*ServiceRequest;
      stderr at exit: the exports and items accepted per signal. -warning: every response
      carries a partial success rejecting nothing, with TEXT as its message; -first-json:
      the first accepted Export is also written to FILE as OTLP/JSON
  otap-interop serve-otlp-http [-listen 127.0.0.1:0] [-warning TEXT] [-rejected N]
                    [-fail-first N] [-fail-status 503] [-retry-after S | -retry-after-date D]
                    [-compress-responses] [-tls-cert FILE -tls-key FILE]
      serves OTLP/HTTP (POST /v1/logs, /v1/traces, /v1/metrics; protobuf or JSON; gzip,
      zstd or none) until stdin closes; stdout as serve-otlp; stderr: one JSON line per
      request (path, proto, content_type, content_encoding, status, items, unix_ms,
      headers),
      then the summary. -fail-first: refuse the first N requests with -fail-status and
      the Retry-After given; -rejected: report N records rejected in every response
  otap-interop hpack
      stdout: one JSON line per HPACK header block written by golang.org/x/net/http2/hpack
      (one encoder, in order): the block and the fields it encodes, hex-encoded
  otap-interop export-otlp -addr HOST:PORT [-senders 4] [-records 50] [-call-timeout 1s]
                    [-until-retry D] [-deadline 30s]
      sends OTLP/gRPC logs Export calls (pdata client, gzip) from -senders loops without
      waiting between them; stdout: one JSON line per answer (ms, code, retry_ms: the
      RetryInfo delay, -1 without one); with -until-retry, stops once a refusal asks for at
      least D, and fails if none did by -deadline
  otap-interop export-traces -addr HOST:PORT [-signal traces|metrics|logs] [-connections 2]
                    [-in-flight 1] [-compression gzip|zstd|none] [-call-timeout 10s]
                    [-generate N [-batch 512] [-series 10000]] [-retry] [-quiet]
      stdin (or -generate: traces of 1 to 8 spans, data points of a delta sum in -series
      series, or log records with JSON bodies, made here): Export*ServiceRequest
      frames (pdata client, gzip by default), request i on connection i mod -connections,
      each connection sending its requests in order, -in-flight calls at once, each
      waiting for its answer; stdout: one JSON line per answer (request, connection,
      code), or with -quiet one summary line (requests, seconds from the first call to
      the last answer, refusals, bytes on the wire, calls sent again); -retry: refused
      calls are sent again as the Collector's exporter does (its retry_on_failure
      defaults, the RetryInfo delay when longer)
  otap-interop selftest
      round-trips built-in sample data through produce and consume

A frame is a 4-byte little-endian length followed by that many protobuf bytes.
`, signalNames())
}

// usageError marks errors caused by a bad command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// newFlagSet returns a flag set that reports parse errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("otap-interop "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and rejects stray positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %q", fs.Args())}
	}
	return nil
}

// signalFlag registers the mandatory -signal flag.
func signalFlag(fs *flag.FlagSet) *string {
	return fs.String("signal", "", "signal type: "+signalNames())
}

func cmdProduce(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("produce", stderr)
	sigName := signalFlag(fs)
	zstd := fs.Bool("zstd", true, "compress Arrow IPC buffers with zstd (false: config.WithNoZstd)")
	dict := fs.Bool("dict", true, "use dictionary encoding (false: config.WithNoDictionary)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	sig, err := lookupSignal(*sigName)
	if err != nil {
		return usageError{err}
	}
	_, err = runProduce(sig, producerSettings{zstd: *zstd, dict: *dict}, stdin, stdout)
	return err
}

func cmdConsume(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("consume", stderr)
	sigName := signalFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	sig, err := lookupSignal(*sigName)
	if err != nil {
		return usageError{err}
	}
	_, err = runConsume(sig, stdin, stdout)
	return err
}

func cmdSelftest(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("selftest", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	summary, err := selftest()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, summary)
	return nil
}
