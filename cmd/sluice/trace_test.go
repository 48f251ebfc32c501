package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTracerProvider(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		on      bool
		wantErr string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, wantErr: `OTEL_TRACES_EXPORTER="jaeger": want otlp, console or none`},
	} {
		var out bytes.Buffer
		tp, err := newTracerProvider(context.Background(), func(k string) string { return tc.env[k] }, &out)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil || (tp != nil) != tc.on {
			t.Errorf("%v: provider %v, error %v; want on %v", tc.env, tp, err, tc.on)
			continue
		}
		if tp == nil {
			continue
		}
		if tc.env["OTEL_TRACES_EXPORTER"] == "console" {
			_, sp := tp.Tracer("test").Start(context.Background(), "decision")
			sp.End()
		}
		// No span is buffered for otlp, so shutting down sends nothing (no collector here).
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutdown: %v", tc.env, err)
		}
		if tc.env["OTEL_TRACES_EXPORTER"] == "console" && !strings.Contains(out.String(), `"Name":"decision"`) {
			t.Errorf("console exporter wrote %q, want the span", out.String())
		}
	}
}
