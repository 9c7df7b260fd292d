package main

// The serve-otlp-http subcommand: an OTLP/HTTP receiver on net/http, reading requests as the
// Collector's OTLP receiver does: POST /v1/logs, /v1/traces or /v1/metrics, a body in
// application/x-protobuf or application/json (pdata's UnmarshalProto and UnmarshalJSON),
// Content-Encoding gzip, zstd or none; answered with an Export*ServiceResponse in the
// request's content type, or a google.rpc.Status with an error status. It can be told to
// refuse the first requests (503 with Retry-After, 400, ...) and to report rejected records.
// With a certificate it serves TLS, where net/http offers HTTP/2 as well as HTTP/1.1.

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxHTTPBody is the largest request body read, after decompression.
const maxHTTPBody = 64 << 20

// httpSignal is what serve-otlp-http does with one signal's requests.
type httpSignal struct {
	tag byte
	// decode parses a request body (OTLP JSON when json is true, else protobuf) and returns
	// it marshalled as protobuf by pdata, with its items (log records, spans, data points).
	decode func(body []byte, json bool) (otlp []byte, items int, err error)
	// respond marshals an export response; with rejected or message set, it carries a
	// partial success.
	respond func(json bool, rejected int64, message string) ([]byte, error)
}

var httpSignals = map[string]httpSignal{
	"/v1/logs": newHTTPSignal(tagLogs, plogotlp.NewExportRequest,
		func(r plogotlp.ExportRequest) int { return r.Logs().LogRecordCount() },
		plogotlp.NewExportResponse, plogotlp.ExportResponse.PartialSuccess,
		plogotlp.ExportPartialSuccess.SetRejectedLogRecords),
	"/v1/traces": newHTTPSignal(tagTraces, ptraceotlp.NewExportRequest,
		func(r ptraceotlp.ExportRequest) int { return r.Traces().SpanCount() },
		ptraceotlp.NewExportResponse, ptraceotlp.ExportResponse.PartialSuccess,
		ptraceotlp.ExportPartialSuccess.SetRejectedSpans),
	"/v1/metrics": newHTTPSignal(tagMetrics, pmetricotlp.NewExportRequest,
		func(r pmetricotlp.ExportRequest) int { return r.Metrics().DataPointCount() },
		pmetricotlp.NewExportResponse, pmetricotlp.ExportResponse.PartialSuccess,
		pmetricotlp.ExportPartialSuccess.SetRejectedDataPoints),
}

// exportRequest is what the pdata Export*Request types have in common.
type exportRequest interface {
	UnmarshalProto([]byte) error
	UnmarshalJSON([]byte) error
	MarshalProto() ([]byte, error)
}

// exportResponse is what the pdata Export*Response types have in common.
type exportResponse interface {
	MarshalProto() ([]byte, error)
	MarshalJSON() ([]byte, error)
}

// partialSuccess is what the pdata Export*PartialSuccess types have in common.
type partialSuccess interface {
	SetErrorMessage(string)
}

// newHTTPSignal builds a signal's handling from its pdata types and functions: newReq and
// items make and count requests; newResp makes responses, partial gets their partial
// success and setRejected sets its rejected count.
func newHTTPSignal[Req exportRequest, Resp exportResponse, P partialSuccess](
	tag byte, newReq func() Req, items func(Req) int,
	newResp func() Resp, partial func(Resp) P, setRejected func(P, int64),
) httpSignal {
	return httpSignal{
		tag: tag,
		decode: func(body []byte, isJSON bool) ([]byte, int, error) {
			req := newReq()
			var err error
			if isJSON {
				err = req.UnmarshalJSON(body)
			} else {
				err = req.UnmarshalProto(body)
			}
			if err != nil {
				return nil, 0, err
			}
			out, err := req.MarshalProto()
			return out, items(req), err
		},
		respond: func(isJSON bool, rejected int64, message string) ([]byte, error) {
			resp := newResp()
			if rejected > 0 || message != "" {
				setRejected(partial(resp), rejected)
				partial(resp).SetErrorMessage(message)
			}
			if isJSON {
				return resp.MarshalJSON()
			}
			return resp.MarshalProto()
		},
	}
}

// httpReport is the JSON line serve-otlp-http writes on stderr per request.
type httpReport struct {
	Path            string            `json:"path"`
	Proto           string            `json:"proto"`
	ContentType     string            `json:"content_type"`
	ContentEncoding string            `json:"content_encoding"`
	Status          int               `json:"status"`
	Items           int               `json:"items"`
	Error           string            `json:"error,omitempty"`
	UnixMillis      int64             `json:"unix_ms"`
	Headers         map[string]string `json:"headers,omitempty"`
}

// httpReceiver serves OTLP/HTTP, writing accepted requests through an otlpReceiver.
type httpReceiver struct {
	*otlpReceiver
	rejected   int64         // reported rejected in every accepted request's response
	failFirst  int           // how many requests to refuse first
	failStatus int           // with this status
	retryAfter string        // and this Retry-After (none when empty)
	retryDate  time.Duration // or an HTTP date this far ahead
	compress   bool          // compress responses as the request was

	reportMu sync.Mutex
	report   *json.Encoder
	requests int
}

// ServeHTTP handles one export request and reports it.
func (h *httpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rep := httpReport{
		Path:            req.URL.Path,
		Proto:           req.Proto,
		ContentType:     req.Header.Get("Content-Type"),
		ContentEncoding: req.Header.Get("Content-Encoding"),
		UnixMillis:      time.Now().UnixMilli(),
		Headers:         map[string]string{},
	}
	for name := range req.Header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "x-") || lower == "authorization" || lower == "user-agent" {
			rep.Headers[lower] = req.Header.Get(name)
		}
	}
	rep.Status, rep.Items, rep.Error = h.export(w, req)
	h.reportMu.Lock()
	defer h.reportMu.Unlock()
	_ = h.report.Encode(rep)
}

// export reads, checks and accepts (or refuses) one request, writes the response and
// returns its status, the items it holds (when it decoded) and what went wrong.
func (h *httpReceiver) export(w http.ResponseWriter, req *http.Request) (int, int, string) {
	sig, ok := httpSignals[req.URL.Path]
	if req.Method != http.MethodPost || !ok {
		http.Error(w, "not an OTLP export", http.StatusNotFound)
		return http.StatusNotFound, 0, "not an OTLP export"
	}
	isJSON := false
	switch ct := req.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/json"):
		isJSON = true
	case strings.HasPrefix(ct, "application/x-protobuf"):
	default:
		return h.refuse(w, false, http.StatusUnsupportedMediaType, "content type "+ct)
	}
	body, err := readBody(req)
	if err != nil {
		return h.refuse(w, isJSON, http.StatusBadRequest, err.Error())
	}
	otlp, items, err := sig.decode(body, isJSON)
	if err != nil {
		return h.refuse(w, isJSON, http.StatusBadRequest, "decoding: "+err.Error())
	}
	h.reportMu.Lock()
	h.requests++
	refused := h.requests <= h.failFirst
	h.reportMu.Unlock()
	if refused {
		code, _, message := h.refuse(w, isJSON, h.failStatus, "refused by the test receiver")
		return code, items, message
	}
	if err := h.accept(sig.tag, func() ([]byte, error) { return otlp, nil }, items); err != nil {
		return h.refuse(w, isJSON, http.StatusInternalServerError, err.Error())
	}
	resp, err := sig.respond(isJSON, h.rejected, h.warningFor())
	if err != nil {
		return h.refuse(w, isJSON, http.StatusInternalServerError, err.Error())
	}
	h.write(w, req, isJSON, http.StatusOK, resp)
	return http.StatusOK, items, ""
}

// warningFor is the partial success message of accepted requests.
func (h *httpReceiver) warningFor() string {
	if h.rejected > 0 && h.warning == "" {
		return "rejected by the test receiver"
	}
	return h.warning
}

// refuse answers with status and a google.rpc.Status body, plus Retry-After when set.
func (h *httpReceiver) refuse(w http.ResponseWriter, isJSON bool, code int, message string) (int, int, string) {
	grpcCode := codes.InvalidArgument
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		grpcCode = codes.Unavailable
	}
	st := status.New(grpcCode, message).Proto()
	var body []byte
	if isJSON {
		body, _ = protojson.Marshal(st)
	} else {
		body, _ = proto.Marshal(st)
	}
	if h.retryAfter != "" {
		w.Header().Set("Retry-After", h.retryAfter)
	} else if h.retryDate > 0 {
		w.Header().Set("Retry-After", time.Now().Add(h.retryDate).UTC().Format(http.TimeFormat))
	}
	h.write(w, nil, isJSON, code, body)
	return code, 0, message
}

// write sends a response body, compressed as req was when told to.
func (h *httpReceiver) write(w http.ResponseWriter, req *http.Request, isJSON bool, code int, body []byte) {
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	if h.compress && req != nil {
		if encoding := req.Header.Get("Content-Encoding"); encoding == "gzip" || encoding == "zstd" {
			if compressed, err := compressBody(encoding, body); err == nil {
				w.Header().Set("Content-Encoding", encoding)
				body = compressed
			}
		}
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// readBody reads a request body, decompressed per its Content-Encoding.
func readBody(req *http.Request) ([]byte, error) {
	var r io.Reader = req.Body
	switch encoding := req.Header.Get("Content-Encoding"); encoding {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer gz.Close()
		r = gz
	case "zstd":
		zr, err := zstd.NewReader(req.Body, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", encoding)
	}
	body, err := io.ReadAll(io.LimitReader(r, maxHTTPBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxHTTPBody {
		return nil, errors.New("body too large")
	}
	return body, nil
}

// compressBody compresses a response body with gzip or zstd.
func compressBody(encoding string, body []byte) ([]byte, error) {
	var buf bytes.Buffer
	var w io.WriteCloser
	var err error
	if encoding == "gzip" {
		w = gzip.NewWriter(&buf)
	} else if w, err = zstd.NewWriter(&buf); err != nil {
		return nil, err
	}
	if _, err := w.Write(body); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func cmdServeOTLPHTTP(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve-otlp-http", stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	warning := fs.String("warning", "", "answer every accepted request with a partial success carrying this message")
	rejected := fs.Int64("rejected", 0, "report this many records rejected in every accepted request's partial success")
	failFirst := fs.Int("fail-first", 0, "refuse the first N requests (after reading them)")
	failStatus := fs.Int("fail-status", http.StatusServiceUnavailable, "the HTTP status of refused requests")
	retryAfter := fs.String("retry-after", "", "the Retry-After header of refused requests, as given")
	retryDate := fs.Duration("retry-after-date", 0, "the Retry-After header of refused requests as an HTTP date this far ahead")
	compress := fs.Bool("compress-responses", false, "compress responses with the request's Content-Encoding")
	tlsCert := fs.String("tls-cert", "", "serve TLS (and HTTP/2) with this PEM certificate chain")
	tlsKey := fs.String("tls-key", "", "the PEM private key of -tls-cert")
	lis, err := parseAndListen(fs, args, listen)
	if err != nil {
		return err
	}
	h := &httpReceiver{
		otlpReceiver: &otlpReceiver{name: "serve-otlp-http", warning: *warning, out: newFrameWriter(stdout)},
		rejected:     *rejected,
		failFirst:    *failFirst,
		failStatus:   *failStatus,
		retryAfter:   *retryAfter,
		retryDate:    *retryDate,
		compress:     *compress,
		report:       json.NewEncoder(stderr),
	}
	server := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	serve := func() error {
		if *tlsCert != "" {
			return server.ServeTLS(lis, *tlsCert, *tlsKey)
		}
		return server.Serve(lis)
	}
	err = h.serveUntilClosed(stdin, lis, serve, func() { server.Close() })
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	h.reportMu.Lock()
	fmt.Fprintln(stderr, h.summary())
	h.reportMu.Unlock()
	return err
}
