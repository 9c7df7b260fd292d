package main

// The gRPC compressor named "zstd", shaped as the OpenTelemetry Collector's gRPC servers and
// clients register it (configgrpc): encoders and decoders are pooled and reused, each encoder
// runs on one goroutine with a 512 KiB window, and messages are streamed through it. grpc-go
// uses the compressor a request came with for the response too, so a server built with this
// answers zstd requests with zstd-compressed response messages.

import (
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// zstdWindow is the encoder window, small enough for any decoder's default limits.
const zstdWindow = 512 << 10

// pooledZstd implements encoding.Compressor with pools of encoders and decoders.
type pooledZstd struct {
	encoders sync.Pool // *zstd.Encoder
	decoders sync.Pool // *zstd.Decoder
}

func newPooledZstd() *pooledZstd {
	c := &pooledZstd{}
	c.encoders.New = func() any {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(zstdWindow))
		if err != nil {
			return err
		}
		return enc
	}
	c.decoders.New = func() any {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return err
		}
		return dec
	}
	return c
}

func (c *pooledZstd) Name() string { return "zstd" }

// Compress returns a writer that compresses into w; Close finishes the frame and returns the
// encoder to the pool.
func (c *pooledZstd) Compress(w io.Writer) (io.WriteCloser, error) {
	switch got := c.encoders.Get().(type) {
	case *zstd.Encoder:
		got.Reset(w)
		return &pooledEncoder{enc: got, pool: &c.encoders}, nil
	case error:
		return nil, got
	default:
		return nil, errors.New("zstd: unexpected value in the encoder pool")
	}
}

// Decompress returns a reader of r's decompressed bytes; the decoder goes back to the pool
// once the reader has been read to its end (or failed).
func (c *pooledZstd) Decompress(r io.Reader) (io.Reader, error) {
	switch got := c.decoders.Get().(type) {
	case *zstd.Decoder:
		if err := got.Reset(r); err != nil {
			c.decoders.Put(got)
			return nil, err
		}
		return &pooledDecoder{dec: got, pool: &c.decoders}, nil
	case error:
		return nil, got
	default:
		return nil, errors.New("zstd: unexpected value in the decoder pool")
	}
}

type pooledEncoder struct {
	enc  *zstd.Encoder
	pool *sync.Pool
}

func (e *pooledEncoder) Write(p []byte) (int, error) {
	if e.enc == nil {
		return 0, errors.New("zstd: write after close")
	}
	return e.enc.Write(p)
}

func (e *pooledEncoder) Close() error {
	if e.enc == nil {
		return nil
	}
	err := e.enc.Close()
	e.enc.Reset(nil) // drop the reference to the destination
	e.pool.Put(e.enc)
	e.enc = nil
	return err
}

type pooledDecoder struct {
	dec  *zstd.Decoder
	pool *sync.Pool
}

func (d *pooledDecoder) Read(p []byte) (int, error) {
	if d.dec == nil {
		return 0, io.EOF
	}
	n, err := d.dec.Read(p)
	if err != nil {
		// Finished, one way or the other: the decoder can serve another message.
		_ = d.dec.Reset(nil)
		d.pool.Put(d.dec)
		d.dec = nil
	}
	return n, err
}

func init() {
	encoding.RegisterCompressor(newPooledZstd())
}
