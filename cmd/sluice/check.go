package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/server"
)

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "ask a running sluice server whether a request would pass",
		ArgsUsage: " ",
		Description: "Sends one request to a server's JSON API and prints the decision. The exit status is\n" +
			"  0  allowed\n" +
			"  1  an error: the server cannot be reached, or has no such policy or domain\n" +
			"  2  a usage error: the command line cannot be parsed\n" +
			"  3  denied\n" +
			"  4  no limit of the configuration applies (the request would pass, uncounted)\n\n" +
			"  sluice check --policy demo --key 203.0.113.7\n" +
			"  sluice check --policy api --key \"$API_KEY\" --tier pro --method POST --path /v1/items\n" +
			"  sluice check --domain demo --descriptor remote_address=203.0.113.7\n" +
			"  sluice check --domain demo --descriptor user=alice --cost 2\n" +
			"  sluice check --peek --policy demo --key 203.0.113.7      # spend nothing\n" +
			"  sluice check --health                                   # liveness: GET /healthz\n" +
			"  sluice check --ready                                    # readiness: GET /readyz\n\n" +
			"--health and --ready exit 0 when the server answers 200 and 1 otherwise, so a\n" +
			"container's health check needs no shell or curl: HEALTHCHECK CMD [\"sluice\", \"check\", \"--health\"].",
		Flags: append(append(clientFlags("SLUICE_CHECK_"), requestFlags("SLUICE_CHECK_")...),
			&cli.Int64Flag{Name: "cost", Value: 1, Usage: "units to spend", Sources: cli.EnvVars("SLUICE_CHECK_COST")},
			&cli.BoolFlag{Name: "health", Usage: "only probe the server's liveness (GET /healthz): exit 0 when it answers 200, else 1", Sources: cli.EnvVars("SLUICE_CHECK_HEALTH")},
			&cli.BoolFlag{Name: "ready", Usage: "only probe the server's readiness (GET /readyz: the store answers and the server is not draining): exit 0 when it answers 200, else 1", Sources: cli.EnvVars("SLUICE_CHECK_READY")},
			&cli.BoolFlag{Name: "peek", Usage: "only look: spend nothing (/v1/peek)", Sources: cli.EnvVars("SLUICE_CHECK_PEEK")},
		),
		// A descriptor's entries are separated by commas, so several descriptors in one
		// value (the environment variable) are separated by semicolons.
		SliceFlagSeparator: ";",
		Action:             check,
	}
}

func check(ctx context.Context, c *cli.Command) error {
	switch health, ready := c.Bool("health"), c.Bool("ready"); {
	case health && ready:
		return cli.Exit("--health and --ready are two probes: name one", exitUsage)
	case health:
		return probe(ctx, c, "/healthz")
	case ready:
		return probe(ctx, c, "/readyz")
	}
	req, err := checkRequest(c)
	if err != nil {
		return err
	}
	cost := c.Int64("cost")
	req.Cost = &cost
	path := "/v1/check"
	if c.Bool("peek") {
		path = "/v1/peek"
	}
	body, _ := json.Marshal(req)
	resp, out, err := send(ctx, c, http.MethodPost, path, "", body, 1<<20)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return answerError(resp, out)
	}
	var cr server.CheckResponse
	if err := json.Unmarshal(out, &cr); err != nil {
		return fmt.Errorf("server answered %s with an unreadable body: %w", resp.Status, err)
	}
	pretty, _ := json.MarshalIndent(cr, "", "  ")
	fmt.Fprintf(c.Root().Writer, "%s\n", pretty)
	if !cr.Allowed {
		return cli.Exit("", exitDenied)
	}
	// A limit applied unless its descriptor matched no rule (or a replaced one).
	applied := func(l server.LimitStatus) bool { return l.Status != "no_match" && l.Status != "replaced" }
	if !slices.ContainsFunc(cr.Limits, applied) {
		return cli.Exit("", exitNoMatch)
	}
	return nil
}

// answerError is the error of an answer other than the one asked for: the detail of a
// problem+json body, and the status.
func answerError(resp *http.Response, body []byte) error {
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) == nil && p.Detail != "" {
		return fmt.Errorf("%s (server answered %s)", p.Detail, resp.Status)
	}
	if b := bytes.TrimSpace(body); len(b) > 0 {
		return fmt.Errorf("server answered %s: %s", resp.Status, b)
	}
	return fmt.Errorf("server answered %s", resp.Status)
}

// probe asks the server's health endpoint path and succeeds when it answers 200.
func probe(ctx context.Context, c *cli.Command, path string) error {
	// A body cut short still shows what arrived: only a missing answer is an error.
	resp, out, err := send(ctx, c, http.MethodGet, path, "", nil, 4<<10)
	if resp == nil {
		return err
	}
	fmt.Fprintf(c.Root().Writer, "%s %s: %s\n", path, resp.Status, bytes.TrimSpace(out))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", path, resp.Status)
	}
	return nil
}

// requestFlags are the flags checkRequest reads, each also set by the environment
// variable env+its name (SLUICE_CHECK_POLICY).
func requestFlags(env string) []cli.Flag {
	from := func(v string) cli.ValueSourceChain { return cli.EnvVars(env + v) }
	descriptor := "a descriptor as `KEY=VALUE[,KEY=VALUE...]`, its entries in order (repeat the flag for several descriptors; in the variable, separate them with ';'"
	return []cli.Flag{
		&cli.StringFlag{Name: "policy", Usage: "the sluice policy `NAME`", Sources: from("POLICY")},
		&cli.StringFlag{Name: "key", Usage: "the identity the policy limits: an IP address, a user ID or a raw API key", Sources: from("KEY")},
		&cli.StringFlag{Name: "tier", Usage: "the identity's tier", Sources: from("TIER")},
		&cli.StringFlag{Name: "method", Usage: "the request's method, for route limits", Sources: from("METHOD")},
		&cli.StringFlag{Name: "path", Usage: "the request's path, for route limits", Sources: from("PATH")},
		&cli.StringFlag{Name: "domain", Usage: "an envoyproxy/ratelimit `DOMAIN`", Sources: from("DOMAIN")},
		&cli.StringSliceFlag{Name: "descriptor", Usage: descriptor + ")", Sources: from("DESCRIPTORS")},
	}
}

// clientFlags are the flags of a command that calls a running server: its URL, how long
// to wait, and TLS; env prefixes their environment variables.
func clientFlags(env string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Value: "http://localhost:8080", Usage: "the server's HTTP `URL`", Sources: cli.EnvVars("SLUICE_SERVER")},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "give up after this long", Sources: cli.EnvVars(env + "TIMEOUT")},
		&cli.StringFlag{Name: "tls-ca", Usage: "for an https:// --server: trust the CAs in this PEM `FILE` (default: the system's)", Sources: cli.EnvVars(env + "TLS_CA")},
		&cli.StringFlag{Name: "tls-cert", Usage: "for a server that requires client certificates: present the certificate in this PEM `FILE`; with --tls-key", Sources: cli.EnvVars(env + "TLS_CERT")},
		&cli.StringFlag{Name: "tls-key", Usage: "the private key of --tls-cert, a PEM `FILE`", Sources: cli.EnvVars(env + "TLS_KEY")},
	}
}

// checkRequest reads the request flags shared by check and key: a --policy with its
// identity and route, or a --domain with its --descriptor entries; Cost is left nil.
func checkRequest(c *cli.Command) (server.CheckRequest, error) {
	req := server.CheckRequest{Subject: server.Subject{
		Policy: c.String("policy"), Key: c.String("key"), Tier: c.String("tier"),
		Method: c.String("method"), Path: c.String("path"),
	}, Domain: c.String("domain")}
	for _, d := range c.StringSlice("descriptor") {
		var desc server.Descriptor
		for part := range strings.SplitSeq(d, ",") {
			k, v, ok := strings.Cut(part, "=")
			if !ok || k == "" {
				return req, cli.Exit(fmt.Sprintf("--descriptor %q: %q is not KEY=VALUE", d, part), exitUsage)
			}
			desc.Entries = append(desc.Entries, server.Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	if (req.Policy == "") == (req.Domain == "") {
		return req, cli.Exit("name a --policy (with --key) or a --domain (with --descriptor)", exitUsage)
	}
	return req, nil
}

// send makes one request to --server within --timeout, over the client the TLS flags ask
// for, with the bearer token when one is given and body as JSON when it is not nil, and
// reads at most limit bytes of the answer. The answer is nil only when none came.
func send(ctx context.Context, c *cli.Command, method, path, token string, body []byte, limit int64) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	base, err := serverURL(c)
	if err != nil {
		return nil, nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, nil, usagef(c, "--server: %v", err)
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	client, err := checkClient(c)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Do(hr)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp, out, err
}

// serverURL is --server without its trailing slash; a URL without the http:// or https://
// scheme is a usage error that suggests it.
func serverURL(c *cli.Command) (string, error) {
	s := strings.TrimRight(c.String("server"), "/")
	scheme, rest, ok := strings.Cut(s, "://")
	switch {
	case !ok:
		return "", usagef(c, "--server %s has no scheme; did you mean http://%s?", s, s)
	case scheme != "http" && scheme != "https":
		return "", usagef(c, "--server %s: sluice speaks http:// or https://; did you mean http://%s?", s, rest)
	}
	return s, nil
}

// checkClient returns the HTTP client the TLS flags ask for.
func checkClient(c *cli.Command) (*http.Client, error) {
	f, err := readTLSFiles(c, "tls-ca", false)
	if f == nil {
		return http.DefaultClient, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: f.pool}
	if f.cert != nil {
		cfg.Certificates = []tls.Certificate{*f.cert}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	return &http.Client{Transport: t}, nil
}
