package main

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRetryDelay: -retry sends again what the Collector's OTLP exporter would: the transient
// codes always, RESOURCE_EXHAUSTED only with a RetryInfo (whose delay is kept), and nothing
// else.
func TestRetryDelay(t *testing.T) {
	withInfo, err := status.New(codes.ResourceExhausted, "busy").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(250 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		st    *status.Status
		delay time.Duration
		retry bool
	}{
		{withInfo, 250 * time.Millisecond, true},
		{status.New(codes.ResourceExhausted, "busy"), 0, false},
		{status.New(codes.Unavailable, "gone"), 0, true},
		{status.New(codes.DeadlineExceeded, "late"), 0, true},
		{status.New(codes.InvalidArgument, "bad"), 0, false},
		{status.New(codes.Unauthenticated, "who"), 0, false},
	}
	for _, c := range cases {
		delay, retry := retryDelay(c.st)
		if delay != c.delay || retry != c.retry {
			t.Errorf("%v: got %v %v, want %v %v", c.st.Code(), delay, retry, c.delay, c.retry)
		}
	}
}
