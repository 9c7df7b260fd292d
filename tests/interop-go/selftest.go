package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/open-telemetry/otel-arrow/go/pkg/otel/assert"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// sampleBatches is the number of batches pushed through each OTAP stream.
const sampleBatches = 3

// selftestVariants are the producer configurations the selftest covers.
var selftestVariants = []producerSettings{
	defaultProducerSettings,
	{zstd: false, dict: true},
	{zstd: true, dict: false},
}

// selftest round-trips the sample data of every signal through the
// frame-level produce and consume pipelines for each producer variant, and
// checks that every batch comes back equivalent to what went in. It returns
// a one-line summary.
func selftest() (string, error) {
	signalOrder := []*signal{logsSignal, tracesSignal, metricsSignal}
	items := make([]string, 0, len(signalOrder))
	barBytes := make([]string, 0, len(selftestVariants))

	for vi, settings := range selftestVariants {
		total := 0
		for _, sig := range signalOrder {
			inputs, err := sampleInputs(sig)
			if err != nil {
				return "", err
			}
			bars, outputs, err := roundTripFrames(sig, settings, inputs)
			if err != nil {
				return "", fmt.Errorf("%s [%s]: %w", sig.name, settings, err)
			}
			n, err := checkRoundTrip(sig, inputs, outputs)
			if err != nil {
				return "", fmt.Errorf("%s [%s]: %w", sig.name, settings, err)
			}
			if vi == 0 {
				items = append(items, fmt.Sprintf("%s %d %s", sig.name, n, sig.unit))
			}
			for _, bar := range bars {
				total += len(bar)
			}
		}
		barBytes = append(barBytes, fmt.Sprintf("%s:%dB", settings, total))
	}

	return fmt.Sprintf("selftest ok: %d batches per stream, %s; BAR bytes %s",
		sampleBatches, strings.Join(items, ", "), strings.Join(barBytes, " ")), nil
}

// sampleInputs returns the OTLP request bytes of all sample batches.
func sampleInputs(sig *signal) ([][]byte, error) {
	inputs := make([][]byte, sampleBatches)
	for i := range inputs {
		req, err := sampleRequest(sig, i)
		if err != nil {
			return nil, err
		}
		inputs[i] = req
	}
	return inputs, nil
}

// roundTripFrames frames the OTLP requests, runs them through runProduce and
// then runConsume (in memory, one stream each), and returns the
// BatchArrowRecords frames and the decoded OTLP request frames.
func roundTripFrames(sig *signal, settings producerSettings, inputs [][]byte) (bars, outputs [][]byte, err error) {
	var otlpIn, barStream, otlpOut bytes.Buffer
	if err := writeFrames(&otlpIn, inputs); err != nil {
		return nil, nil, err
	}
	// The BAR frames are parsed from a separate reader below so that
	// barStream stays intact for runConsume.
	if _, err := runProduce(sig, settings, &otlpIn, &barStream); err != nil {
		return nil, nil, fmt.Errorf("produce: %w", err)
	}
	if bars, err = readFrames(bytes.NewReader(barStream.Bytes())); err != nil {
		return nil, nil, err
	}
	if _, err := runConsume(sig, &barStream, &otlpOut); err != nil {
		return nil, nil, fmt.Errorf("consume: %w", err)
	}
	if outputs, err = readFrames(&otlpOut); err != nil {
		return nil, nil, err
	}
	if len(bars) != len(inputs) || len(outputs) != len(inputs) {
		return nil, nil, fmt.Errorf("frame counts: %d in, %d BARs, %d out", len(inputs), len(bars), len(outputs))
	}
	return bars, outputs, nil
}

// checkRoundTrip verifies that each decoded request has the same number of
// items as its input and is equivalent to it in the sense of the reference
// assert.Equiv (which tolerates regrouping of resources and scopes and
// reordering). It returns the total number of items.
func checkRoundTrip(sig *signal, inputs, outputs [][]byte) (int, error) {
	if len(inputs) != len(outputs) {
		return 0, fmt.Errorf("%d inputs but %d outputs", len(inputs), len(outputs))
	}
	total := 0
	for i := range inputs {
		want, err := sig.count(inputs[i])
		if err != nil {
			return 0, fmt.Errorf("batch %d: count input: %w", i, err)
		}
		got, err := sig.count(outputs[i])
		if err != nil {
			return 0, fmt.Errorf("batch %d: count output: %w", i, err)
		}
		if got != want {
			return 0, fmt.Errorf("batch %d: %d %s in, %d out", i, want, sig.unit, got)
		}
		if err := equivalent(sig, inputs[i], outputs[i]); err != nil {
			return 0, fmt.Errorf("batch %d: %w", i, err)
		}
		total += want
	}
	return total, nil
}

// writeFrames writes each payload as one frame.
func writeFrames(w io.Writer, payloads [][]byte) error {
	fw := newFrameWriter(w)
	for _, p := range payloads {
		if err := fw.write(p); err != nil {
			return err
		}
	}
	return nil
}

// readFrames reads frames until a clean EOF.
func readFrames(r io.Reader) ([][]byte, error) {
	fr := newFrameReader(r)
	var payloads [][]byte
	for {
		p, err := fr.next()
		if errors.Is(err, io.EOF) {
			return payloads, nil
		}
		if err != nil {
			return nil, err
		}
		payloads = append(payloads, p)
	}
}

// requestJSON decodes OTLP request bytes into the pdata request type, which
// implements json.Marshaler as required by assert.Equiv.
func requestJSON(sig *signal, otlp []byte) (json.Marshaler, error) {
	switch sig {
	case logsSignal:
		req := plogotlp.NewExportRequest()
		return req, req.UnmarshalProto(otlp)
	case tracesSignal:
		req := ptraceotlp.NewExportRequest()
		return req, req.UnmarshalProto(otlp)
	case metricsSignal:
		req := pmetricotlp.NewExportRequest()
		return req, req.UnmarshalProto(otlp)
	}
	return nil, fmt.Errorf("unknown signal %q", sig.name)
}

// equivalent reports whether two OTLP requests are equivalent according to
// the reference assert.Equiv helper.
func equivalent(sig *signal, expected, actual []byte) (err error) {
	exp, err := requestJSON(sig, expected)
	if err != nil {
		return err
	}
	act, err := requestJSON(sig, actual)
	if err != nil {
		return err
	}

	c := &equivChecker{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(equivAbort); !ok {
				panic(r)
			}
			err = c.failure
		}
	}()
	assert.Equiv(c, []json.Marshaler{exp}, []json.Marshaler{act})
	return nil
}

// equivChecker adapts assert.Equiv, which reports through a testing-like
// interface, to plain error values. FailNow records the failure and unwinds
// with an equivAbort panic that equivalent recovers.
type equivChecker struct {
	failure error
}

// equivAbort is the panic value used to abort a failed comparison.
type equivAbort struct{}

var _ assert.Testing = (*equivChecker)(nil)

func (c *equivChecker) Helper() {}

func (c *equivChecker) FailNow(failureMessage string, msgAndArgs ...any) bool {
	if len(msgAndArgs) > 0 {
		failureMessage += ": " + fmt.Sprint(msgAndArgs...)
	}
	c.failure = errors.New(failureMessage)
	panic(equivAbort{})
}

func (c *equivChecker) NoError(err error, msgAndArgs ...any) {
	if err != nil {
		c.FailNow(err.Error(), msgAndArgs...)
	}
}

func (c *equivChecker) Equal(expected, actual any, msgAndArgs ...any) bool {
	if !reflect.DeepEqual(expected, actual) {
		c.FailNow(fmt.Sprintf("not equal: %v != %v", expected, actual), msgAndArgs...)
	}
	return true
}
