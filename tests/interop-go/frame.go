package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The stdin/stdout wire format is a sequence of frames. Each frame is a
// 4-byte little-endian unsigned length followed by that many bytes of
// protobuf. EOF exactly at a frame boundary ends the stream; EOF anywhere
// else is an error.

// frameHeaderLen is the size of the length prefix of a frame.
const frameHeaderLen = 4

// maxFrameLen bounds the payload size accepted by frameReader, so that a
// corrupt length prefix fails fast instead of attempting a huge allocation.
const maxFrameLen = 1 << 30

// frameReader reads length-prefixed frames from an underlying reader.
type frameReader struct {
	r *bufio.Reader
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReader(r)}
}

// next returns the payload of the next frame. It returns io.EOF (unwrapped)
// when the input ends cleanly at a frame boundary.
func (fr *frameReader) next() ([]byte, error) {
	var header [frameHeaderLen]byte
	if _, err := io.ReadFull(fr.r, header[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("truncated frame header")
		}
		return nil, err // io.EOF at a frame boundary, or an I/O error
	}
	n := binary.LittleEndian.Uint32(header[:])
	if n > maxFrameLen {
		return nil, fmt.Errorf("frame length %d exceeds limit of %d bytes", n, maxFrameLen)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("truncated frame: want %d payload bytes", n)
		}
		return nil, err
	}
	return payload, nil
}

// frameWriter writes length-prefixed frames. Every frame is flushed as soon
// as it is written so that a peer driving the process interactively (one
// request frame in, one response frame out) never waits on buffered output.
type frameWriter struct {
	w *bufio.Writer
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: bufio.NewWriter(w)}
}

// write emits one frame carrying payload and flushes it.
func (fw *frameWriter) write(payload []byte) error {
	if uint64(len(payload)) > maxFrameLen {
		return fmt.Errorf("frame length %d exceeds limit of %d bytes", len(payload), maxFrameLen)
	}
	var header [frameHeaderLen]byte
	binary.LittleEndian.PutUint32(header[:], uint32(len(payload)))
	if _, err := fw.w.Write(header[:]); err != nil {
		return err
	}
	if _, err := fw.w.Write(payload); err != nil {
		return err
	}
	return fw.w.Flush()
}
