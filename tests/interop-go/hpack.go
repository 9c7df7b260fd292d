package main

// The hpack subcommand: header blocks written by golang.org/x/net/http2/hpack (the encoder
// grpc-go uses, and the one the Collector's otelarrow exporter writes batch headers with),
// one JSON line each with the fields it encodes, for a decoder to check itself against.

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// hpackBlock is one line of output: the block and its fields, all hex-encoded; the blocks
// of one run are encoded in order by one encoder (one dynamic table).
type hpackBlock struct {
	Block  string      `json:"block"`
	Fields [][2]string `json:"fields"`
}

func cmdHpack(out io.Writer) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	enc := json.NewEncoder(w)
	var buf bytes.Buffer
	encoder := hpack.NewEncoder(&buf)
	emit := func(fields []hpack.HeaderField) error {
		line := hpackBlock{Block: hex.EncodeToString(buf.Bytes())}
		for _, f := range fields {
			line.Fields = append(line.Fields, [2]string{
				hex.EncodeToString([]byte(f.Name)), hex.EncodeToString([]byte(f.Value)),
			})
		}
		buf.Reset()
		return enc.Encode(line)
	}
	write := func(fields []hpack.HeaderField) error {
		for _, f := range fields {
			if err := encoder.WriteField(f); err != nil {
				return err
			}
		}
		return emit(fields)
	}

	// What the otelarrow exporter sends with each batch, sizes changing batch to batch,
	// the token marked sensitive (never indexed) in some.
	for i := 0; i < 40; i++ {
		fields := []hpack.HeaderField{
			{Name: "otlp-pdata-size", Value: strconv.Itoa(1000 + i*7919)},
			{Name: "x-tenant", Value: "interop"},
			{Name: "authorization", Value: "Bearer s3cret-" + strconv.Itoa(i%3), Sensitive: i%2 == 1},
		}
		if err := write(fields); err != nil {
			return err
		}
	}
	// Values long enough to evict the table's older entries, beside fields the static table
	// holds (whole or by name).
	for i := 0; i < 8; i++ {
		fields := []hpack.HeaderField{
			{Name: "x-long-" + strconv.Itoa(i), Value: strings.Repeat(string(rune('a'+i)), 900)},
			{Name: ":method", Value: "GET"},
			{Name: "content-type", Value: "application/grpc"},
		}
		if err := write(fields); err != nil {
			return err
		}
	}
	// A smaller table, then the full size again: the blocks start with size updates.
	for _, size := range []uint32{256, 0, 4096} {
		encoder.SetMaxDynamicTableSize(size)
		fields := []hpack.HeaderField{{Name: "x-after-resize", Value: strconv.Itoa(int(size))}}
		if err := write(fields); err != nil {
			return err
		}
	}
	// Every octet Huffman-coded by the package's coder, alone, in runs, and all together,
	// each as a literal field without indexing and with a new name.
	values := [][]byte{}
	for b := 0; b < 256; b++ {
		values = append(values, []byte{byte(b)}, bytes.Repeat([]byte{byte(b)}, 7))
	}
	all := make([]byte, 256)
	for b := range all {
		all[b] = byte(255 - b)
	}
	values = append(values, all)
	for _, v := range values {
		coded := hpack.AppendHuffmanString(nil, string(v))
		buf.WriteByte(0x00)
		buf.Write(hpackString([]byte("h"), false))
		buf.Write(hpackString(coded, true))
		if err := emit([]hpack.HeaderField{{Name: "h", Value: string(v)}}); err != nil {
			return err
		}
	}
	return nil
}

// hpackString frames a string literal (RFC 7541 5.2): the Huffman flag, its length as a
// 7-bit-prefix integer, the octets.
func hpackString(s []byte, huffman bool) []byte {
	var first byte
	if huffman {
		first = 0x80
	}
	out := []byte{}
	n := len(s)
	if n < 127 {
		out = append(out, first|byte(n))
	} else {
		out = append(out, first|127)
		n -= 127
		for n >= 128 {
			out = append(out, byte(n%128)|0x80)
			n /= 128
		}
		out = append(out, byte(n))
	}
	return append(out, s...)
}
