// Command kafka-go writes and reads Kafka messages in the encodings of the
// OpenTelemetry Collector's kafka exporter and receiver, so that Penstock's
// Kafka source and sink can be tested against a real broker
// (tests/kafka/broker.sh) with messages laid out exactly as a Collector would.
//
// Framing on stdin/stdout: each frame is a 4-byte little-endian length
// followed by one OTLP Export{Logs,Trace,Metrics}ServiceRequest protobuf.
//
//	kafka-go gen     -signal logs|traces|metrics -count N [-items M]  > frames
//	kafka-go produce -brokers ADDR -topic T -encoding otlp_proto|otlp_json -signal S < frames
//	kafka-go consume -brokers ADDR -topic T -group G -encoding E|raw -signal S -count N [-items M] > frames
//	kafka-go topic   -brokers ADDR -topic T -partitions P
//	kafka-go same    A B   (exit 0 when two frame files hold the same frames, in any order)
//
// Message conventions (those of the Collector's kafka exporter, which uses
// franz-go): the value is the plog/ptrace/pmetric ProtoMarshaler (otlp_proto)
// or JSONMarshaler (otlp_json) output of the whole request; the key is nil
// and there are no headers unless asked for; records are partitioned with
// franz-go's sticky-key partitioner and the Sarama-compatible FNV-1a hasher.
// With -partition-by-trace-id (traces only, like the exporter's
// partition_traces_by_id) a request is split into one message per trace ID,
// keyed by the trace ID in lowercase hex.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const usage = `usage:
  kafka-go gen     -signal logs|traces|metrics -count N [-items M] [-seed S]
  kafka-go produce -brokers ADDR -topic T -encoding otlp_proto|otlp_json -signal S
                   [-acks all|leader] [-compression none|gzip|snappy|lz4|zstd]
                   [-partition-by-trace-id] [-header k=v ...]
  kafka-go consume -brokers ADDR -topic T -group G -encoding E|raw -signal S -count N
                   [-items N] [-timeout D] [-offset earliest|latest] [-v]
  kafka-go topic   -brokers ADDR -topic T -partitions P [-timeout D]
  kafka-go same    FILE_A FILE_B
frames on stdin/stdout: 4-byte little-endian length + Export*ServiceRequest protobuf
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = cmdGen(os.Args[2:])
	case "produce":
		err = cmdProduce(os.Args[2:])
	case "consume":
		err = cmdConsume(os.Args[2:])
	case "topic":
		err = cmdTopic(os.Args[2:])
	case "same":
		err = cmdSame(os.Args[2:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
		return
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafka-go %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// ---- framing ----

func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("truncated frame header")
		}
		return nil, err // io.EOF at a frame boundary: done
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("truncated frame body (%d bytes announced): %w", n, err)
	}
	return buf, nil
}

func writeFrame(w io.Writer, b []byte) error {
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(len(b)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// ---- shared flags ----

type common struct {
	brokers  string
	topic    string
	encoding string
	signal   string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	fs.StringVar(&c.topic, "topic", "", "topic")
	fs.StringVar(&c.encoding, "encoding", "otlp_proto", "otlp_proto or otlp_json")
	fs.StringVar(&c.signal, "signal", "logs", "logs, traces or metrics")
}

func (c *common) check(needSignal bool) (signalCodec, error) {
	if c.topic == "" {
		return nil, errors.New("-topic is required")
	}
	if !needSignal {
		return nil, nil
	}
	if c.encoding != encProto && c.encoding != encJSON {
		return nil, fmt.Errorf("unknown -encoding %q (want %s or %s)", c.encoding, encProto, encJSON)
	}
	return codecFor(c.signal)
}

func seeds(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// saramaCompatHash is FNV-1a 32, the hash Sarama used for keyed records; the
// Collector's franz-go producer keeps it so keyed records land where they did.
func saramaCompatHash(b []byte) uint32 {
	h := fnv.New32a()
	_, _ = h.Write(b)
	return h.Sum32()
}

type headerFlags []kgo.RecordHeader

func (h *headerFlags) String() string { return fmt.Sprint(*h) }
func (h *headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("header %q is not k=v", v)
	}
	*h = append(*h, kgo.RecordHeader{Key: k, Value: []byte(val)})
	return nil
}

// ---- gen ----

func cmdGen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	signal := fs.String("signal", "logs", "logs, traces or metrics")
	count := fs.Int("count", 1, "number of requests (frames)")
	items := fs.Int("items", 3, "log records / spans / data points per request")
	seed := fs.Int("seed", 0, "offsets the generated ids and values")
	_ = fs.Parse(args)
	c, err := codecFor(*signal)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; i < *count; i++ {
		req, err := c.gen(*seed+i, *items)
		if err != nil {
			return err
		}
		if err := writeFrame(w, req); err != nil {
			return err
		}
	}
	return w.Flush()
}

// ---- produce ----

type produced struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

func cmdProduce(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	var c common
	c.register(fs)
	acks := fs.String("acks", "all", "all or leader (the Collector's default is leader, required_acks=1)")
	compression := fs.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	byTrace := fs.Bool("partition-by-trace-id", false, "traces: one message per trace id, keyed by its hex (partition_traces_by_id)")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request produce timeout")
	var headers headerFlags
	fs.Var(&headers, "header", "static record header k=v (repeatable; like record_headers)")
	_ = fs.Parse(args)
	codec, err := c.check(true)
	if err != nil {
		return err
	}
	if *byTrace && c.signal != "traces" {
		return errors.New("-partition-by-trace-id applies to -signal traces only")
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds(c.brokers)...),
		kgo.DefaultProduceTopic(c.topic),
		kgo.ClientID("penstock-kafka-go"),
		kgo.DisableClientMetrics(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(saramaCompatHash))),
		kgo.ProducerBatchMaxBytes(16 << 20),
	}
	switch *acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "leader":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		return fmt.Errorf("unknown -acks %q", *acks)
	}
	switch *compression {
	case "none":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	default:
		return fmt.Errorf("unknown -compression %q", *compression)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for n := 0; ; n++ {
		req, err := readFrame(in)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("frame %d: %w", n, err)
		}
		msgs, err := codec.encode(req, c.encoding, *byTrace)
		if err != nil {
			return fmt.Errorf("frame %d: %w", n, err)
		}
		recs := make([]*kgo.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = &kgo.Record{Key: m.key, Value: m.value, Headers: headers}
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		results := cl.ProduceSync(ctx, recs...)
		cancel()
		for _, r := range results {
			if r.Err != nil {
				return fmt.Errorf("frame %d: produce to %q: %w", n, c.topic, r.Err)
			}
			if err := enc.Encode(produced{Partition: r.Record.Partition, Offset: r.Record.Offset}); err != nil {
				return err
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return out.Flush()
}

// ---- consume ----

type consumed struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       *string           `json:"key"`
	Headers   map[string]string `json:"headers,omitempty"`
	Bytes     int               `json:"bytes"`
	Items     int               `json:"items"`
}

func cmdConsume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	var c common
	c.register(fs)
	group := fs.String("group", "", "consumer group id")
	count := fs.Int("count", 1, "number of messages to read")
	timeout := fs.Duration("timeout", 60*time.Second, "give up when -count messages have not arrived by then")
	offset := fs.String("offset", "earliest", "where a group without committed offsets starts: earliest or latest (the receiver's initial_offset; its default is latest)")
	verbose := fs.Bool("v", false, "print a JSON line per message (partition, offset, key, headers, sizes) on stderr")
	itemsWanted := fs.Int("items", 0, "read until this many records (log records, spans, data points) arrived, whatever -count says")
	_ = fs.Parse(args)
	raw := c.encoding == "raw"
	var codec signalCodec
	var err error
	if raw {
		// Message values written out as they are, one frame each.
		_, err = c.check(false)
	} else {
		codec, err = c.check(true)
	}
	if err != nil {
		return err
	}
	if *itemsWanted > 0 {
		*count = math.MaxInt32
	}
	itemsGot := 0
	if *group == "" {
		return errors.New("-group is required")
	}
	reset := kgo.NewOffset().AtStart()
	switch *offset {
	case "earliest":
	case "latest":
		reset = kgo.NewOffset().AtEnd()
	default:
		return fmt.Errorf("unknown -offset %q", *offset)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds(c.brokers)...),
		kgo.ClientID("penstock-kafka-go"),
		kgo.DisableClientMetrics(),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(reset),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return err
	}
	defer cl.Close() // leaves the group

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	logw := json.NewEncoder(os.Stderr)
	got := 0
	for got < *count && (*itemsWanted == 0 || itemsGot < *itemsWanted) {
		fetches := cl.PollRecords(ctx, *count-got)
		if ctx.Err() != nil {
			return fmt.Errorf("read %d messages (%d records) before the %s timeout", got, itemsGot, *timeout)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("fetch %s[%d]: %w", t, p, err))
		})
		if ferr != nil {
			return ferr
		}
		recs := fetches.Records()
		if len(recs) > *count-got {
			recs = recs[:*count-got]
		}
		for _, r := range recs {
			req, items := r.Value, 1
			if !raw {
				req, items, err = codec.decode(r.Value, c.encoding)
				if err != nil {
					return fmt.Errorf("message %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
				}
			}
			itemsGot += items
			if err := writeFrame(out, req); err != nil {
				return err
			}
			if *verbose {
				m := consumed{Partition: r.Partition, Offset: r.Offset, Bytes: len(r.Value), Items: items}
				if r.Key != nil {
					k := string(r.Key)
					m.Key = &k
				}
				if len(r.Headers) > 0 {
					m.Headers = map[string]string{}
					for _, h := range r.Headers {
						m.Headers[h.Key] = string(h.Value)
					}
				}
				_ = logw.Encode(m)
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
		// Commit only what was written out.
		if len(recs) > 0 {
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
		}
		got += len(recs)
	}
	return nil
}

// ---- topic ----

func cmdTopic(args []string) error {
	fs := flag.NewFlagSet("topic", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	topic := fs.String("topic", "", "topic to create")
	partitions := fs.Int("partitions", 1, "number of partitions")
	timeout := fs.Duration("timeout", 60*time.Second, "keep retrying (broker starting) until then")
	_ = fs.Parse(args)
	if *topic == "" {
		return errors.New("-topic is required")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(*brokers)...), kgo.DisableClientMetrics())
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for {
		resp, err := adm.CreateTopic(ctx, int32(*partitions), 1, nil, *topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			if err != nil {
				fmt.Fprintf(os.Stderr, "topic %s already exists\n", *topic)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("create topic %s: %w", *topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---- same ----

func readFrames(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out []string
	for {
		b, err := readFrame(r)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: frame %d: %w", path, len(out), err)
		}
		out = append(out, string(b))
	}
}

// cmdSame compares two frame files as multisets: messages come back from
// several partitions in an order of their own.
func cmdSame(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: kafka-go same FILE_A FILE_B")
	}
	a, err := readFrames(args[0])
	if err != nil {
		return err
	}
	b, err := readFrames(args[1])
	if err != nil {
		return err
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return fmt.Errorf("%s (%d frames) and %s (%d frames) differ", args[0], len(a), args[1], len(b))
	}
	fmt.Printf("same: %d frames\n", len(a))
	return nil
}

// hexTraceID renders a trace id as the exporter keys it (lowercase hex).
func hexTraceID(id [16]byte) string { return hex.EncodeToString(id[:]) }
