package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	arrowpb "github.com/open-telemetry/otel-arrow/go/api/experimental/arrow/v1"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
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
