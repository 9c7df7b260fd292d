// tailsampling-go runs the OpenTelemetry Collector's tail_sampling processor (contrib
// v0.145.0, the release benches/compare builds the Collector from) in process, with its
// defaults and the policies given, on OTLP traces, and prints the ids of the traces it kept.
//
//	tailsampling-go -config policies.json [-decision-wait 1s] < frames
//
// stdin: ExportTraceServiceRequest frames (a 4-byte little-endian length, then the protobuf).
// -config: a JSON object merged into the processor's configuration, as the Collector reads
// its YAML (e.g. {"policies": [{"name": "errors", "type": "status_code",
// "status_code": {"status_codes": ["ERROR"]}}]}). stdout: the hex id of every trace kept,
// one per line, sorted; stderr: how many traces and spans were kept.
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/tailsamplingprocessor"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tailsampling-go:", err)
		os.Exit(1)
	}
}

func run() error {
	configPath := flag.String("config", "", "JSON configuration of the processor (policies)")
	wait := flag.Duration("decision-wait", time.Second, "the processor's decision_wait")
	flag.Parse()
	if *configPath == "" {
		return errors.New("-config is required")
	}
	raw, err := os.ReadFile(*configPath)
	if err != nil {
		return err
	}
	var settings map[string]any
	if err := json.Unmarshal(raw, &settings); err != nil {
		return err
	}
	factory := tailsamplingprocessor.NewFactory()
	cfg := factory.CreateDefaultConfig()
	if err := confmap.NewFromStringMap(settings).Unmarshal(cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if err := confmap.NewFromStringMap(map[string]any{"decision_wait": wait.String()}).Unmarshal(cfg); err != nil {
		return err
	}
	sink := new(consumertest.TracesSink)
	ctx := context.Background()
	proc, err := factory.CreateTraces(ctx, processortest.NewNopSettings(component.MustNewType("tail_sampling")), cfg, sink)
	if err != nil {
		return err
	}
	if err := proc.Start(ctx, componenttest.NewNopHost()); err != nil {
		return err
	}
	for {
		var size [4]byte
		if _, err := io.ReadFull(os.Stdin, size[:]); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		frame := make([]byte, binary.LittleEndian.Uint32(size[:]))
		if _, err := io.ReadFull(os.Stdin, frame); err != nil {
			return err
		}
		request := ptraceotlp.NewExportRequest()
		if err := request.UnmarshalProto(frame); err != nil {
			return err
		}
		if err := proc.ConsumeTraces(ctx, request.Traces()); err != nil {
			return err
		}
	}
	// The processor decides on a one-second tick, decision_wait after a trace's first span:
	// every trace is decided after two more ticks.
	time.Sleep(*wait + 2*time.Second)
	if err := proc.Shutdown(ctx); err != nil {
		return err
	}
	kept := map[string]bool{}
	spans := 0
	for _, td := range sink.AllTraces() {
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			sss := rss.At(i).ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				ss := sss.At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					id := ss.At(k).TraceID()
					kept[hex.EncodeToString(id[:])] = true
					spans++
				}
			}
		}
	}
	ids := make([]string, 0, len(kept))
	for id := range kept {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Println(id)
	}
	fmt.Fprintf(os.Stderr, "kept %d traces, %d spans\n", len(ids), spans)
	return nil
}
