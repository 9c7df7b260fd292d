package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	arrowpb "github.com/open-telemetry/otel-arrow/go/api/experimental/arrow/v1"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
)

// runAsMainEnv makes the test binary behave as the otap-interop command, so
// that tests can exercise real processes connected by OS pipes without a
// separate build step.
const runAsMainEnv = "OTAP_INTEROP_RUN_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// selfCommand returns a command running this test binary as otap-interop.
func selfCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runAsMainEnv+"=1")
	return cmd
}

func mustSampleInputs(t *testing.T, sig *signal) [][]byte {
	t.Helper()
	inputs, err := sampleInputs(sig)
	if err != nil {
		t.Fatal(err)
	}
	return inputs
}

// TestStreamingRoundTrip connects produce and consume with an in-process
// pipe so that both run concurrently on one OTAP stream, for every signal
// and producer variant.
func TestStreamingRoundTrip(t *testing.T) {
	for _, settings := range selftestVariants {
		for _, sig := range []*signal{logsSignal, tracesSignal, metricsSignal} {
			t.Run(sig.name+"/"+settings.String(), func(t *testing.T) {
				inputs := mustSampleInputs(t, sig)

				otlpIn, otlpInW := io.Pipe()
				barR, barW := io.Pipe()
				go func() {
					otlpInW.CloseWithError(writeFrames(otlpInW, inputs))
				}()
				go func() {
					_, err := runProduce(sig, settings, otlpIn, barW)
					barW.CloseWithError(err)
				}()

				var out bytes.Buffer
				n, err := runConsume(sig, barR, &out)
				if err != nil {
					t.Fatalf("consume: %v", err)
				}
				if n != len(inputs) {
					t.Fatalf("consumed %d frames, want %d", n, len(inputs))
				}
				outputs, err := readFrames(&out)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := checkRoundTrip(sig, inputs, outputs); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestBinaryPipeline runs `produce | consume` as two processes joined by an
// OS pipe, exactly as a shell (or the Rust test harness) would.
func TestBinaryPipeline(t *testing.T) {
	for _, sig := range []*signal{logsSignal, tracesSignal, metricsSignal} {
		t.Run(sig.name, func(t *testing.T) {
			inputs := mustSampleInputs(t, sig)
			var in bytes.Buffer
			if err := writeFrames(&in, inputs); err != nil {
				t.Fatal(err)
			}

			produce := selfCommand(t, "produce", "-signal", sig.name, "-zstd=false")
			consume := selfCommand(t, "consume", "-signal", sig.name)
			var out, produceErr, consumeErr bytes.Buffer
			produce.Stdin = &in
			produce.Stderr = &produceErr
			consume.Stdout = &out
			consume.Stderr = &consumeErr
			pipe, err := produce.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			consume.Stdin = pipe

			if err := produce.Start(); err != nil {
				t.Fatal(err)
			}
			if err := consume.Run(); err != nil {
				t.Fatalf("consume: %v; stderr: %s", err, consumeErr.String())
			}
			if err := produce.Wait(); err != nil {
				t.Fatalf("produce: %v; stderr: %s", err, produceErr.String())
			}

			outputs, err := readFrames(&out)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkRoundTrip(sig, inputs, outputs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInteractive checks that each input frame is answered before the next
// one is sent, so a driver may exchange frames one at a time.
func TestInteractive(t *testing.T) {
	inputs := mustSampleInputs(t, tracesSignal)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run([]string{"produce", "-signal", "traces"}, stdinR, stdoutW, io.Discard)
		stdoutW.Close()
		done <- code
	}()

	fw, fr := newFrameWriter(stdinW), newFrameReader(stdoutR)
	for i, req := range inputs {
		if err := fw.write(req); err != nil {
			t.Fatal(err)
		}
		payload, err := fr.next()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		var bar arrowpb.BatchArrowRecords
		if err := proto.Unmarshal(payload, &bar); err != nil {
			t.Fatal(err)
		}
		if bar.GetBatchId() != int64(i) {
			t.Errorf("batch id %d, want %d", bar.GetBatchId(), i)
		}
	}
	stdinW.Close()
	if code := <-done; code != exitOK {
		t.Fatalf("exit status %d", code)
	}
}

// TestStreamState checks that the producer really emits one stateful OTAP
// stream: the first BAR of a payload stream opens with its Arrow schema,
// while later BARs of the same stream carry no schema, only dictionary
// batches (deltas) and the record batch.
func TestStreamState(t *testing.T) {
	bars, _, err := roundTripFrames(logsSignal, defaultProducerSettings, mustSampleInputs(t, logsSignal))
	if err != nil {
		t.Fatal(err)
	}
	// messageTypes lists the IPC message types of the main LOGS payload.
	messageTypes := func(frame []byte) []ipc.MessageType {
		var bar arrowpb.BatchArrowRecords
		if err := proto.Unmarshal(frame, &bar); err != nil {
			t.Fatal(err)
		}
		main := bar.GetArrowPayloads()[0]
		if main.GetType() != arrowpb.ArrowPayloadType_LOGS {
			t.Fatalf("first payload is %v, want LOGS", main.GetType())
		}
		mr := ipc.NewMessageReader(bytes.NewReader(main.GetRecord()))
		defer mr.Release()
		var types []ipc.MessageType
		for {
			msg, err := mr.Message()
			if err != nil {
				return types
			}
			types = append(types, msg.Type())
		}
	}
	count := func(types []ipc.MessageType, want ipc.MessageType) (n int) {
		for _, typ := range types {
			if typ == want {
				n++
			}
		}
		return n
	}

	first, later := messageTypes(bars[0]), messageTypes(bars[len(bars)-1])
	if len(first) == 0 || first[0] != ipc.MessageSchema {
		t.Errorf("first BAR: messages %v, want a leading schema", first)
	}
	if count(later, ipc.MessageSchema) != 0 || count(later, ipc.MessageDictionaryBatch) == 0 ||
		later[len(later)-1] != ipc.MessageRecordBatch {
		t.Errorf("later BAR: messages %v, want dictionary batches and a record batch, no schema", later)
	}
}

// TestEmptyRequest checks that an empty OTLP request survives the round trip.
func TestEmptyRequest(t *testing.T) {
	for _, sig := range []*signal{logsSignal, tracesSignal, metricsSignal} {
		t.Run(sig.name, func(t *testing.T) {
			inputs := [][]byte{{}, mustSampleInputs(t, sig)[0], {}}
			_, outputs, err := roundTripFrames(sig, defaultProducerSettings, inputs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkRoundTrip(sig, inputs, outputs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestZstdFlag checks that -zstd=false really disables compression, using a
// batch large and repetitive enough for zstd to pay off.
func TestZstdFlag(t *testing.T) {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for i := 0; i < 2000; i++ {
		lr := lrs.AppendEmpty()
		lr.Body().SetStr(strings.Repeat(fmt.Sprintf("line %d ", i%10), 20))
		lr.SetTimestamp(ts(0, i))
	}
	req, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}

	size := func(settings producerSettings) int {
		bars, _, err := roundTripFrames(logsSignal, settings, [][]byte{req})
		if err != nil {
			t.Fatal(err)
		}
		return len(bars[0])
	}
	compressed := size(producerSettings{zstd: true, dict: true})
	plain := size(producerSettings{zstd: false, dict: true})
	if compressed*2 >= plain {
		t.Errorf("zstd BAR is %d bytes, uncompressed %d: expected a clear reduction", compressed, plain)
	}
}

// TestEquivalentDetectsDifferences guards against a vacuous equivalence check.
func TestEquivalentDetectsDifferences(t *testing.T) {
	ld := sampleLogs(0)
	want, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	lr := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
	lr.Attributes().PutStr("user.id", "someone-else")
	got, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	if err := equivalent(logsSignal, want, want); err != nil {
		t.Fatalf("identical requests reported different: %v", err)
	}
	if err := equivalent(logsSignal, want, got); err == nil {
		t.Fatal("different requests reported equivalent")
	}
}

// TestConsumeErrors checks that undecodable input makes consume fail with
// status 1 and a message on stderr.
func TestConsumeErrors(t *testing.T) {
	badRecord, err := proto.Marshal(&arrowpb.BatchArrowRecords{
		ArrowPayloads: []*arrowpb.ArrowPayload{{
			SchemaId: "0",
			Type:     arrowpb.ArrowPayloadType_LOGS,
			Record:   []byte("definitely not Arrow IPC"),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A well-formed logs stream decoded as traces: the payload types do not
	// belong to the signal.
	logsBAR, _, err := roundTripFrames(logsSignal, defaultProducerSettings, mustSampleInputs(t, logsSignal)[:1])
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		signal string
		frames [][]byte
	}{
		{"not protobuf", "logs", [][]byte{{0xff, 0xff, 0xff}}},
		{"not arrow", "logs", [][]byte{badRecord}},
		{"wrong signal", "traces", logsBAR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in, stdout, stderr bytes.Buffer
			if err := writeFrames(&in, tc.frames); err != nil {
				t.Fatal(err)
			}
			code := run([]string{"consume", "-signal", tc.signal}, &in, &stdout, &stderr)
			if code != exitError {
				t.Fatalf("exit status %d, want %d; stderr: %s", code, exitError, stderr.String())
			}
			if !strings.Contains(stderr.String(), "otap-interop consume:") {
				t.Errorf("stderr lacks error message: %q", stderr.String())
			}
			t.Log(strings.TrimSpace(stderr.String()))
		})
	}
}

// TestFrames covers the frame reader's edge cases.
func TestFrames(t *testing.T) {
	if frames, err := readFrames(bytes.NewReader(nil)); err != nil || len(frames) != 0 {
		t.Errorf("empty input: %d frames, err %v", len(frames), err)
	}
	var buf bytes.Buffer
	if err := writeFrames(&buf, [][]byte{{1, 2, 3}, {}, {4}}); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	if want := []byte{3, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 1, 0, 0, 0, 4}; !bytes.Equal(raw, want) {
		t.Fatalf("encoding %v, want %v", raw, want)
	}
	frames, err := readFrames(bytes.NewReader(raw))
	if err != nil || len(frames) != 3 || len(frames[1]) != 0 || frames[2][0] != 4 {
		t.Errorf("decode: %v, %v", frames, err)
	}
	for _, cut := range []int{2, 6} { // inside a header, inside a payload
		if _, err := readFrames(bytes.NewReader(raw[:cut])); err == nil {
			t.Errorf("truncation at %d not detected", cut)
		}
	}
}

// TestUsage checks command-line validation.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"bogus"},
		{"produce"},
		{"produce", "-signal", "profiles"},
		{"consume", "-signal", "logs", "extra"},
		{"consume", "-nope"},
	} {
		if code := run(args, bytes.NewReader(nil), io.Discard, io.Discard); code != exitUsage {
			t.Errorf("%q: exit status %d, want %d", args, code, exitUsage)
		}
	}
}

func TestSelftest(t *testing.T) {
	summary, err := selftest()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
}

// responseStats records, for a grpc-go client, the compression each response came with and
// the sizes of its messages.
type responseStats struct {
	mu          sync.Mutex
	compression []string // per response: its grpc-encoding ("" for none)
	payloads    [][2]int // per response message: uncompressed and compressed length
}

func (s *responseStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (s *responseStats) HandleRPC(_ context.Context, rs stats.RPCStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch in := rs.(type) {
	case *stats.InHeader:
		s.compression = append(s.compression, in.Compression)
	case *stats.InPayload:
		s.payloads = append(s.payloads, [2]int{in.Length, in.CompressedLength})
	}
}

func (s *responseStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (s *responseStats) HandleConn(context.Context, stats.ConnStats) {}

// last returns the last response's compression and message sizes.
func (s *responseStats) last(t *testing.T) (string, [2]int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.compression) == 0 || len(s.payloads) == 0 {
		t.Fatal("no response recorded")
	}
	return s.compression[len(s.compression)-1], s.payloads[len(s.payloads)-1]
}

// TestServeOTLP exports every signal to serve-otlp with grpc-go clients, uncompressed, gzip
// and zstd: every Export is written out as one frame holding the request, the counts add up,
// and the responses (never empty, even without a warning) come back compressed as the
// requests were.
func TestServeOTLP(t *testing.T) {
	for _, warning := range []string{"", "kept everything, mind the clock skew"} {
		t.Run(fmt.Sprintf("warning=%q", warning), func(t *testing.T) {
			addr, frames, stop := runServer(t, "serve-otlp", "-warning", warning)
			defer stop()

			rs := &responseStats{}
			conn, err := grpc.NewClient(addr,
				grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(rs))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			var wantItems [3]int
			exports := 0
			for _, compression := range []string{"none", "gzip", "zstd"} {
				var opts []grpc.CallOption
				if compression != "none" {
					opts = append(opts, grpc.UseCompressor(compression))
				}
				for batch, sig := range []*signal{logsSignal, tracesSignal, metricsSignal} {
					var body []byte
					var message string
					var err error
					switch sig {
					case logsSignal:
						req := plogotlp.NewExportRequestFromLogs(sampleLogs(batch))
						wantItems[tagLogs] += req.Logs().LogRecordCount()
						body, _ = req.MarshalProto()
						var resp plogotlp.ExportResponse
						resp, err = plogotlp.NewGRPCClient(conn).Export(ctx, req, opts...)
						message = resp.PartialSuccess().ErrorMessage()
					case tracesSignal:
						req := ptraceotlp.NewExportRequestFromTraces(sampleTraces(batch))
						wantItems[tagTraces] += req.Traces().SpanCount()
						body, _ = req.MarshalProto()
						var resp ptraceotlp.ExportResponse
						resp, err = ptraceotlp.NewGRPCClient(conn).Export(ctx, req, opts...)
						message = resp.PartialSuccess().ErrorMessage()
					default:
						req := pmetricotlp.NewExportRequestFromMetrics(sampleMetrics(batch))
						wantItems[tagMetrics] += req.Metrics().DataPointCount()
						body, _ = req.MarshalProto()
						var resp pmetricotlp.ExportResponse
						resp, err = pmetricotlp.NewGRPCClient(conn).Export(ctx, req, opts...)
						message = resp.PartialSuccess().ErrorMessage()
					}
					if err != nil {
						t.Fatalf("%s/%s: %v", compression, sig.name, err)
					}
					exports++
					if message != warning {
						t.Errorf("%s/%s: partial success message %q, want %q", compression, sig.name, message, warning)
					}
					frame, ok := <-frames
					if !ok {
						t.Fatalf("%s/%s: no frame", compression, sig.name)
					}
					if want := byte(batch); frame[0] != want {
						t.Errorf("%s/%s: signal byte %d, want %d", compression, sig.name, frame[0], want)
					}
					if !bytes.Equal(frame[1:], body) {
						if err := equivalent(sig, body, frame[1:]); err != nil {
							t.Errorf("%s/%s: the frame differs from the request: %v", compression, sig.name, err)
						}
					}

					// grpc-go answers with the request's compressor. The response message is
					// never empty: pdata writes the empty partial_success field (0a 00).
					encoding, sizes := rs.last(t)
					wantEncoding := compression
					if compression == "none" {
						wantEncoding = ""
					}
					if encoding != wantEncoding {
						t.Errorf("%s/%s: response grpc-encoding %q, want %q", compression, sig.name, encoding, wantEncoding)
					}
					switch {
					case warning == "" && sizes[0] != 2, warning != "" && sizes[0] <= len(warning):
						t.Errorf("%s/%s: response message of %d bytes", compression, sig.name, sizes[0])
					case compression == "none" && sizes[0] != sizes[1]:
						t.Errorf("%s/%s: uncompressed response sizes %v", compression, sig.name, sizes)
					case compression != "none" && sizes[0] == sizes[1]:
						t.Errorf("%s/%s: response sizes %v: not compressed", compression, sig.name, sizes)
					}
				}
			}

			code, stderr := stop()
			if code != exitOK {
				t.Fatalf("exit status %d; stderr: %s", code, stderr)
			}
			if extra, ok := <-frames; ok {
				t.Errorf("an extra frame of %d bytes", len(extra))
			}
			summary := strings.TrimSpace(stderr)
			want := fmt.Sprintf("serve-otlp: logs 3 exports, %d log records; traces 3 exports, %d spans; metrics 3 exports, %d data points",
				wantItems[tagLogs], wantItems[tagTraces], wantItems[tagMetrics])
			if summary != want || exports != 9 {
				t.Errorf("summary %q, want %q (%d exports)", summary, want, exports)
			}
		})
	}
}

// TestGeneratedLogs: export-traces -signal logs -generate makes the records asked for, batch a
// request, each body a JSON object of 10 fields (strings, whole numbers, a number with a
// fraction, a bool) that differ between records.
func TestGeneratedLogs(t *testing.T) {
	requests := generatedLogs(2500, 1000)
	if len(requests) != 3 {
		t.Fatalf("%d requests, want 3", len(requests))
	}
	bodies := map[string]bool{}
	for i, req := range requests {
		want := 1000
		if i == 2 {
			want = 500
		}
		if n := req.Logs().LogRecordCount(); n != want {
			t.Errorf("request %d: %d log records, want %d", i, n, want)
		}
		records := req.Logs().ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
		for j := 0; j < records.Len(); j++ {
			record := records.At(j)
			body := record.Body().Str()
			bodies[body] = true
			decoder := json.NewDecoder(strings.NewReader(body))
			decoder.UseNumber()
			var fields map[string]any
			if err := decoder.Decode(&fields); err != nil {
				t.Fatalf("request %d, record %d: body %q: %v", i, j, body, err)
			}
			kinds := map[string]int{}
			for key, value := range fields {
				if _, clash := record.Attributes().Get(key); clash {
					t.Errorf("body field %q is an attribute too", key)
				}
				switch v := value.(type) {
				case json.Number:
					if _, err := v.Int64(); err == nil {
						kinds["int"]++
					} else {
						kinds["float"]++
					}
				case string:
					kinds["string"]++
				case bool:
					kinds["bool"]++
				default:
					t.Errorf("body field %q: %T", key, value)
				}
			}
			if want := map[string]int{"string": 6, "int": 2, "float": 1, "bool": 1}; fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Fatalf("body %s: fields %v, want %v", body, kinds, want)
			}
		}
	}
	if len(bodies) != 2500 {
		t.Errorf("%d different bodies of 2500", len(bodies))
	}
}

// TestServeOTLPFirstJSON: with -first-json, serve-otlp writes the first Export it accepts,
// and only that one, as OTLP/JSON.
func TestServeOTLPFirstJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "first.json")
	addr, _, stop := runServer(t, "serve-otlp", "-first-json", path)
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	requests := generatedLogs(30, 10)
	for _, req := range requests {
		if _, err := plogotlp.NewGRPCClient(conn).Export(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit status %d; stderr: %s", code, stderr)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := plogotlp.NewExportRequest()
	if err := got.UnmarshalJSON(body); err != nil {
		t.Fatal(err)
	}
	want, _ := requests[0].MarshalProto()
	gotProto, _ := got.MarshalProto()
	if err := equivalent(logsSignal, want, gotProto); err != nil {
		t.Errorf("the JSON is not the first request: %v", err)
	}
}

// startServer runs `subcommand` (serve or serve-otlp) in process; it returns the address it
// listens on and the frames it writes, and stops it when the test ends.
func startServer(t *testing.T, subcommand string) (string, <-chan []byte) {
	t.Helper()
	addr, frames, stop := runServer(t, subcommand)
	t.Cleanup(func() {
		if code, stderr := stop(); code != exitOK {
			t.Errorf("%s: exit status %d; stderr: %s", subcommand, code, stderr)
		}
	})
	return addr, frames
}

// runServer runs the server subcommand of args in process; it returns the address it listens
// on, the frames it writes, and how to stop it: its stdin is closed, and its exit status and
// stderr returned.
func runServer(t *testing.T, args ...string) (string, <-chan []byte, func() (int, string)) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := run(args, stdinR, stdoutW, &stderr)
		stdoutW.Close()
		done <- code
	}()
	var once sync.Once
	var code int
	stop := func() (int, string) {
		once.Do(func() {
			stdinW.Close()
			code = <-done
		})
		return code, stderr.String()
	}
	out := bufio.NewReader(stdoutR)
	line, err := out.ReadString('\n')
	if err != nil {
		stop()
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if !ok {
		stop()
		t.Fatalf("first line %q", line)
	}
	frames := make(chan []byte, 1024)
	go func() {
		defer close(frames)
		fr := newFrameReader(out)
		for {
			frame, err := fr.next()
			if err != nil {
				_, _ = io.Copy(io.Discard, out)
				return
			}
			frames <- frame
		}
	}()
	return addr, frames, stop
}

// logFrames is generatedLogs(logs, batch) as framed protobuf requests, and their bytes.
func logFrames(t *testing.T, logs, batch int) ([][]byte, []byte) {
	t.Helper()
	var input bytes.Buffer
	fw := newFrameWriter(&input)
	var frames [][]byte
	for _, req := range generatedLogs(logs, batch) {
		frame, err := req.MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		if err := fw.write(frame); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frame)
	}
	return frames, input.Bytes()
}

// TestExportLogsFrames: export-traces -signal logs sends every request read from stdin, with
// each compression and several calls at once on each connection, and sums up the bytes it
// sent (uncompressed: the requests' own size; compressed: less).
func TestExportLogsFrames(t *testing.T) {
	frames, input := logFrames(t, 2000, 100)
	size := 0
	for _, frame := range frames {
		size += len(frame)
	}
	for _, compression := range []string{"none", "gzip", "zstd"} {
		t.Run(compression, func(t *testing.T) {
			addr, received := startServer(t, "serve-otlp")
			var stdout, stderr bytes.Buffer
			code := run([]string{"export-traces", "-signal", "logs", "-addr", addr, "-connections", "2",
				"-in-flight", "3", "-compression", compression, "-quiet"}, bytes.NewReader(input), &stdout, &stderr)
			if code != exitOK {
				t.Fatalf("exit status %d; stderr: %s", code, stderr.String())
			}
			var requests, refused int
			var seconds float64
			var wire int
			if _, err := fmt.Sscanf(stdout.String(), "sent %d requests in %g s, %d refused, %d bytes on the wire",
				&requests, &seconds, &refused, &wire); err != nil {
				t.Fatalf("summary %q: %v", stdout.String(), err)
			}
			if requests != len(frames) || refused != 0 {
				t.Errorf("summary %q: want %d requests, none refused", stdout.String(), len(frames))
			}
			if compression == "none" && wire != size || compression != "none" && (wire <= 0 || wire >= size/2) {
				t.Errorf("%d bytes on the wire for %d bytes of requests", wire, size)
			}
			want := map[string]int{}
			for _, frame := range frames {
				want[string(frame)]++
			}
			for range frames {
				select {
				case frame := <-received:
					if frame[0] != tagLogs {
						t.Fatalf("signal byte %d", frame[0])
					}
					want[string(frame[1:])]--
				case <-time.After(10 * time.Second):
					t.Fatal("a request did not arrive")
				}
			}
			for _, n := range want {
				if n != 0 {
					t.Fatal("the requests received are not those sent")
				}
			}
		})
	}
}

// TestSendSummary: send -summary says on stderr how many batches it sent and how many bytes
// they took on the wire, and every batch is acknowledged, whether the statuses are read after
// the half-close or beside the sending with a window of batches in flight.
func TestSendSummary(t *testing.T) {
	for _, inFlight := range []string{"0", "1", "3"} {
		t.Run("in-flight="+inFlight, func(t *testing.T) { sendSummary(t, inFlight) })
	}
}

func sendSummary(t *testing.T, inFlight string) {
	addr, received := startServer(t, "serve")
	frames, input := logFrames(t, 1000, 100)
	var stdout, stderr bytes.Buffer
	code := run([]string{"send", "-signal", "logs", "-addr", addr, "-compression", "zstdarrow5",
		"-in-flight", inFlight, "-summary"}, bytes.NewReader(input), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit status %d; stderr: %s", code, stderr.String())
	}
	if acked := strings.Count(stdout.String(), `"code":0`); acked != len(frames) {
		t.Errorf("%d batches acknowledged of %d: %s", acked, len(frames), stdout.String())
	}
	var batches, wire int
	var seconds float64
	if _, err := fmt.Sscanf(stderr.String(), "sent %d batches in %g s, %d bytes on the wire",
		&batches, &seconds, &wire); err != nil {
		t.Fatalf("summary %q: %v", stderr.String(), err)
	}
	if batches != len(frames) || wire <= 0 {
		t.Errorf("summary %q: want %d batches and some bytes", stderr.String(), len(frames))
	}
	for range frames {
		select {
		case <-received:
		case <-time.After(10 * time.Second):
			t.Fatal("a batch did not arrive")
		}
	}
}
