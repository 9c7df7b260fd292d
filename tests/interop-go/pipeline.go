package main

import (
	"errors"
	"fmt"
	"io"

	arrowpb "github.com/open-telemetry/otel-arrow/go/api/experimental/arrow/v1"
	"github.com/open-telemetry/otel-arrow/go/pkg/config"
	"github.com/open-telemetry/otel-arrow/go/pkg/otel/arrow_record"
	"google.golang.org/protobuf/proto"
)

// producerSettings are the producer knobs exposed on the command line.
type producerSettings struct {
	// zstd enables zstd compression of the Arrow IPC buffers (the reference
	// default).
	zstd bool
	// dict enables dictionary encoding of eligible columns (the reference
	// default).
	dict bool
}

// defaultProducerSettings mirrors the reference producer's defaults.
var defaultProducerSettings = producerSettings{zstd: true, dict: true}

func (s producerSettings) String() string {
	return fmt.Sprintf("zstd=%t,dict=%t", s.zstd, s.dict)
}

// options translates the settings into otel-arrow producer options.
func (s producerSettings) options() []config.Option {
	var opts []config.Option
	if !s.zstd {
		opts = append(opts, config.WithNoZstd())
	}
	if !s.dict {
		opts = append(opts, config.WithNoDictionary())
	}
	return opts
}

// runProduce reads OTLP request frames from in and writes one
// BatchArrowRecords frame per input frame to out. A single producer encodes
// the whole input, so the output is one OTAP stream: the first batch of each
// payload type carries the Arrow schema and later batches may carry
// dictionary deltas. It returns the number of frames written.
func runProduce(sig *signal, settings producerSettings, in io.Reader, out io.Writer) (frames int, err error) {
	producer := arrow_record.NewProducerWithOptions(settings.options()...)
	defer func() {
		if cerr := producer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close producer: %w", cerr)
		}
	}()

	fr, fw := newFrameReader(in), newFrameWriter(out)
	for {
		otlp, err := fr.next()
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, fmt.Errorf("read frame %d: %w", frames, err)
		}
		bar, err := sig.encode(producer, otlp)
		if err != nil {
			return frames, fmt.Errorf("frame %d: produce %s: %w", frames, sig.name, err)
		}
		payload, err := proto.Marshal(bar)
		if err != nil {
			return frames, fmt.Errorf("frame %d: marshal BatchArrowRecords: %w", frames, err)
		}
		if err := fw.write(payload); err != nil {
			return frames, fmt.Errorf("write frame %d: %w", frames, err)
		}
		frames++
	}
}

// runConsume reads BatchArrowRecords frames (one OTAP stream, in order) from
// in and writes one OTLP request frame per input frame to out, using a single
// consumer for the whole input. It returns the number of frames written.
func runConsume(sig *signal, in io.Reader, out io.Writer) (frames int, err error) {
	consumer := arrow_record.NewConsumer()
	defer func() {
		if cerr := consumer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close consumer: %w", cerr)
		}
	}()

	fr, fw := newFrameReader(in), newFrameWriter(out)
	for {
		payload, err := fr.next()
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, fmt.Errorf("read frame %d: %w", frames, err)
		}
		bar := &arrowpb.BatchArrowRecords{}
		if err := proto.Unmarshal(payload, bar); err != nil {
			return frames, fmt.Errorf("frame %d: unmarshal BatchArrowRecords: %w", frames, err)
		}
		otlp, parts, err := sig.decode(consumer, bar)
		if err != nil {
			return frames, fmt.Errorf("frame %d (batch_id %d): consume %s: %w", frames, bar.GetBatchId(), sig.name, err)
		}
		// In v0.50.0, Consumer.LogsFrom and Consumer.TracesFrom drop the
		// error returned while decoding the attribute/related records and
		// then return an empty result with a nil error. A batch that has
		// payloads always decodes to exactly one pdata value when it is
		// valid, so treat "payloads in, nothing out" as a decode failure
		// rather than silently emitting an empty request.
		if parts == 0 && len(bar.GetArrowPayloads()) > 0 {
			return frames, fmt.Errorf("frame %d (batch_id %d): consume %s: consumer decoded nothing from %d payloads "+
				"(invalid batch, missing main record, or a related-record decode error swallowed by the reference consumer)",
				frames, bar.GetBatchId(), sig.name, len(bar.GetArrowPayloads()))
		}
		if err := fw.write(otlp); err != nil {
			return frames, fmt.Errorf("write frame %d: %w", frames, err)
		}
		frames++
	}
}
