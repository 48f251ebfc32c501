// Package reference installs and runs envoyproxy/ratelimit, the reference implementation
// of Envoy's rate limit service, beside sluice: servicebench measures it, and
// TestReferenceConformance sends both the same requests. Nothing of it is vendored: its
// module is fetched and built by the go command, as `go install` fetches a tool.
package reference

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// Version is the version measured and tested against: the reference's main branch of
// 2026-01-22, the newest the module proxy serves (it has no tagged release since v1.4.0).
const Version = "v1.4.1-0.20260122083618-3fb702589d36"

// The reference's commands Install builds.
const (
	Service     = "service_cmd"      // the rate limit service
	ConfigCheck = "config_check_cmd" // loads a directory of configuration files, exits 1 on an error
)

// Install returns the path of the reference's command (Service or ConfigCheck): spec
// itself when it names a file, else built from the module version spec ("" for Version)
// with go install into a directory of the user's cache, where later calls find it.
func Install(spec, command string) (string, error) {
	if spec == "" {
		spec = Version
	}
	if fi, err := os.Stat(spec); err == nil && !fi.IsDir() {
		return spec, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sluice-bench", "envoyproxy-ratelimit@"+spec)
	bin := filepath.Join(dir, command)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	pkg := "github.com/envoyproxy/ratelimit/src/" + command + "@" + spec
	cmd := exec.Command("go", "install", pkg)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s (it needs the Go module proxy): %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// WriteConfig writes one domain file where a Process started with root reads it
// (root/ratelimit/config/name).
func WriteConfig(root, name string, yaml []byte) error {
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), yaml, 0o644)
}

// Process is a running reference service.
type Process struct {
	Cmd                *exec.Cmd
	HTTPAddr, GRPCAddr string
}

// Start runs bin on free loopback ports with the domain files under root (WriteConfig),
// counting in the redis-server at redisAddr (host:port), and waits until it answers its
// health check. Its settings are its defaults but for the addresses, a TCP connection to
// Redis instead of twemproxy's unix socket, no log output but errors, and no stats at
// all (DISABLE_STATS, its cheapest setting: USE_STATSD=false alone logs every timer);
// env adds or overrides settings (NAME=value).
func Start(bin, root, redisAddr string, env ...string) (*Process, error) {
	p := &Process{HTTPAddr: proc.FreeAddr(), GRPCAddr: proc.FreeAddr()}
	host, port, _ := net.SplitHostPort(p.HTTPAddr)
	ghost, gport, _ := net.SplitHostPort(p.GRPCAddr)
	p.Cmd = exec.Command(bin)
	p.Cmd.Env = append(os.Environ(), "HOST="+host, "PORT="+port, "GRPC_HOST="+ghost, "GRPC_PORT="+gport,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(proc.FreePort()),
		"DISABLE_STATS=true", "USE_STATSD=false", "LOG_LEVEL=error", "REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+redisAddr, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
	p.Cmd.Env = append(p.Cmd.Env, env...)
	p.Cmd.Stderr = os.Stderr
	if err := p.Cmd.Start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if resp, err := http.Get("http://" + p.HTTPAddr + "/healthcheck"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Stop()
	return nil, fmt.Errorf("envoyproxy/ratelimit not healthy on %s after 20s", p.HTTPAddr)
}

// Stop ends the process and waits for it.
func (p *Process) Stop() {
	p.Cmd.Process.Kill()
	p.Cmd.Wait()
}
