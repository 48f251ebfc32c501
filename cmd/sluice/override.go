package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/server"
)

// overrideCommand is `sluice override set|get|list|rm`: the overrides API of a running
// server (/v1/overrides), with the admin token from --token-file or $SLUICE_ADMIN_TOKEN.
func overrideCommand() *cli.Command {
	common := []cli.Flag{
		&cli.StringFlag{Name: "server", Value: "http://localhost:8080", Usage: "the server's HTTP `URL`", Sources: cli.EnvVars("SLUICE_SERVER")},
		&cli.StringFlag{Name: "token-file", Usage: "read the admin token from this `FILE` (default: $SLUICE_ADMIN_TOKEN)", Sources: cli.EnvVars("SLUICE_ADMIN_TOKEN_FILE")},
		&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "give up after this long"},
		&cli.StringFlag{Name: "tls-ca", Usage: "for an https:// --server: trust the CAs in this PEM `FILE`"},
		&cli.StringFlag{Name: "tls-cert", Usage: "present the client certificate in this PEM `FILE`; with --tls-key"},
		&cli.StringFlag{Name: "tls-key", Usage: "the private key of --tls-cert, a PEM `FILE`"},
	}
	with := func(fs ...cli.Flag) []cli.Flag { return append(append([]cli.Flag{}, common...), fs...) }
	return &cli.Command{
		Name:  "override",
		Usage: "set, read, list and remove the limits a running server applies per identity",
		Description: "Limits set here apply at once, ahead of the configuration's overrides, tiers and\n" +
			"policy limits; on Redis every replica applies them within a second, and they\n" +
			"survive restarts. IDENTITY is written raw (an IP, a user ID, an API key, which is\n" +
			"hashed on arrival) or as the decision log prints it (user:org-42); a trailing *\n" +
			"is a pattern (org-42:*), and the most specific override wins.\n\n" +
			"  sluice override set api org-42:* --rate 5000 --period 1m --reason 'upgrade' --expires-in 720h\n" +
			"  sluice override get api org-42:*\n" +
			"  sluice override list --policy api\n" +
			"  sluice override rm api org-42:*",
		Commands: []*cli.Command{
			{
				Name: "set", Usage: "set an override", ArgsUsage: "POLICY IDENTITY",
				Flags: with(
					&cli.Int64Flag{Name: "rate", Usage: "units per period", Required: true},
					&cli.StringFlag{Name: "period", Usage: "a Go duration (1m), a word (minute) or a calendar period (calendar_month)", Required: true},
					&cli.Int64Flag{Name: "burst", Usage: "bucket depth (gcra, token_bucket, leaky_bucket)"},
					&cli.StringFlag{Name: "algorithm", Usage: "the algorithm (default: the policy's)"},
					&cli.StringFlag{Name: "zone", Usage: "a calendar period's IANA zone"},
					&cli.IntFlag{Name: "anchor-day", Usage: "a calendar period's anchor day"},
					&cli.StringFlag{Name: "expires-in", Usage: "remove the override after this `DURATION` (2s, 720h)"},
					&cli.StringFlag{Name: "reason", Usage: "why, for the change log"},
				),
				Action: func(ctx context.Context, c *cli.Command) error {
					p, id, err := policyIdentity(c)
					if err != nil {
						return err
					}
					body, _ := json.Marshal(server.OverrideRequest{
						Rate: c.Int64("rate"), Period: c.String("period"), Burst: c.Int64("burst"),
						Algorithm: c.String("algorithm"), Zone: c.String("zone"), AnchorDay: c.Int("anchor-day"),
						ExpiresIn: c.String("expires-in"), Reason: c.String("reason"),
					})
					return adminCall(ctx, c, http.MethodPut, overridePath(p, id), body)
				},
			},
			{
				Name: "get", Usage: "print one override", ArgsUsage: "POLICY IDENTITY", Flags: with(),
				Action: func(ctx context.Context, c *cli.Command) error {
					p, id, err := policyIdentity(c)
					if err != nil {
						return err
					}
					return adminCall(ctx, c, http.MethodGet, overridePath(p, id), nil)
				},
			},
			{
				Name: "list", Usage: "print the overrides in force", Flags: with(&cli.StringFlag{Name: "policy", Usage: "only this policy's"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					path := "/v1/overrides"
					if p := c.String("policy"); p != "" {
						path += "?policy=" + url.QueryEscape(p)
					}
					return adminCall(ctx, c, http.MethodGet, path, nil)
				},
			},
			{
				Name: "rm", Usage: "remove an override", ArgsUsage: "POLICY IDENTITY", Flags: with(),
				Action: func(ctx context.Context, c *cli.Command) error {
					p, id, err := policyIdentity(c)
					if err != nil {
						return err
					}
					return adminCall(ctx, c, http.MethodDelete, overridePath(p, id), nil)
				},
			},
		},
	}
}

func policyIdentity(c *cli.Command) (string, string, error) {
	if c.NArg() != 2 {
		return "", "", cli.Exit(fmt.Sprintf("want POLICY IDENTITY, got %d arguments", c.NArg()), exitUsage)
	}
	return c.Args().Get(0), c.Args().Get(1), nil
}

// overridePath escapes the policy and identity into the API's path; the identity may hold
// '/' (an IPv6 prefix), which the route's {identity...} takes as part of it.
func overridePath(policy, identity string) string {
	return "/v1/overrides/" + url.PathEscape(policy) + "/" + url.PathEscape(identity)
}

// adminCall sends one admin request and prints the answer's JSON; a status other than
// 2xx is an error.
func adminCall(ctx context.Context, c *cli.Command, method, path string, body []byte) error {
	token := strings.TrimSpace(os.Getenv("SLUICE_ADMIN_TOKEN"))
	if f := c.String("token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return cli.Exit(fmt.Sprintf("--token-file: %v", err), exitUsage)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return cli.Exit("no admin token: set $SLUICE_ADMIN_TOKEN or --token-file", exitUsage)
	}
	resp, out, err := send(ctx, c, method, path, token, body, 1<<20)
	if err != nil {
		return err
	}
	w := c.Root().Writer
	if len(bytes.TrimSpace(out)) > 0 {
		var v any
		if json.Unmarshal(out, &v) == nil {
			out, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintf(w, "%s\n", bytes.TrimSpace(out))
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("server answered %s", resp.Status)
	}
	return nil
}
