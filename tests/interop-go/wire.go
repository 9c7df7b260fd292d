package main

// sentBytes counts the gRPC message bytes a client sends, compressed as they go on the wire
// (without the 5-byte gRPC prefix and HTTP/2 framing), through grpc-go's stats handler.

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"
)

type sentBytes struct {
	n atomic.Int64
}

func (s *sentBytes) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (s *sentBytes) HandleRPC(_ context.Context, rs stats.RPCStats) {
	if out, ok := rs.(*stats.OutPayload); ok && out.Client {
		s.n.Add(int64(out.CompressedLength))
	}
}

func (s *sentBytes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (s *sentBytes) HandleConn(context.Context, stats.ConnStats) {}

// total is the bytes counted so far.
func (s *sentBytes) total() int64 { return s.n.Load() }
