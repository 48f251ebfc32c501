package server

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestGRPCFixedWindows: the gRPC server announces fixed 1 MiB flow-control windows (a
// SETTINGS_INITIAL_WINDOW_SIZE and a connection WINDOW_UPDATE), which turns off
// grpc-go's bandwidth-delay PINGs.
func TestGRPCFixedWindows(t *testing.T) {
	st := memoryStack(t, nil)
	s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)
	conn, err := net.Dial("tcp", r.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var window uint32
	var connUpdate bool
	for window == 0 || !connUpdate {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's first frames: %v (window %d, connection update %v)", err, window, connUpdate)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				window = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connUpdate = f.Increment == grpcWindow-65535
			}
		}
	}
	if window != grpcWindow {
		t.Errorf("initial window %d, want %d", window, grpcWindow)
	}
}
