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

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
)

// overrideCommand is `sluice override set|get|list|rm`: the overrides API of a running
// server (/v1/overrides), with the admin token from --token-file or $SLUICE_ADMIN_TOKEN.
func overrideCommand() *cli.Command {
	common := append(clientFlags("SLUICE_OVERRIDE_"),
		&cli.StringFlag{Name: "token-file", Usage: "read the admin token from this `FILE` (default: $SLUICE_ADMIN_TOKEN)", Sources: cli.EnvVars("SLUICE_ADMIN_TOKEN_FILE")})
	with := func(fs ...cli.Flag) []cli.Flag { return append(append([]cli.Flag{}, common...), fs...) }
	return &cli.Command{
		Name:  "override",
		Usage: "set, read, list and remove the limits a running server applies per identity",
		Description: "Limits set here apply at once, ahead of the configuration's overrides, tiers and\n" +
			"policy limits; on Redis every replica applies them within a second, and they\n" +
			"survive restarts. IDENTITY is of the kind the policy limits: an IP address or\n" +
			"prefix, a user ID, or an API key (hashed on arrival), written raw or as the\n" +
			"decision log prints it (user:org-42:alice). A trailing * makes a pattern of a user\n" +
			"ID or an address (org-42:*), and the most specific override wins; API keys, kept\n" +
			"only as their MACs, have no patterns. An identity of another kind is an error.\n" +
			"The admin token is $SLUICE_ADMIN_TOKEN, or the file --token-file names, sent as\n" +
			"Authorization: Bearer <token>.\n\n" +
			"  export SLUICE_ADMIN_TOKEN=change-me   # the admin token sluice serve was started with\n" +
			"  sluice override set users 'org-42:*' --rate 5000 --period 1m --reason 'upgrade' --expires-in 720h\n" +
			"  sluice override get users 'org-42:*'\n" +
			"  sluice override set demo 203.0.113.7 --rate 1 --period 1s --expires-in 2h\n" +
			"  sluice override list --policy users\n" +
			"  sluice override rm users 'org-42:*'\n",
		Commands: []*cli.Command{
			{
				Name: "set", Usage: "set an override", ArgsUsage: "POLICY IDENTITY",
				Flags: with(
					&cli.Int64Flag{Name: "rate", Usage: "units per period", Required: true, Sources: cli.EnvVars("SLUICE_OVERRIDE_RATE")},
					&cli.StringFlag{Name: "period", Usage: "a Go duration (1m), a word (minute) or a calendar period (calendar_month); none for a concurrency limit", Sources: cli.EnvVars("SLUICE_OVERRIDE_PERIOD")},
					&cli.StringFlag{Name: "lease", Usage: "a concurrency limit's longest hold of a slot (30s)", Sources: cli.EnvVars("SLUICE_OVERRIDE_LEASE")},
					&cli.Int64Flag{Name: "burst", Usage: "bucket depth (gcra, token_bucket, leaky_bucket)", Sources: cli.EnvVars("SLUICE_OVERRIDE_BURST")},
					&cli.StringFlag{Name: "algorithm", Usage: "the algorithm (default: the policy's)", Sources: cli.EnvVars("SLUICE_OVERRIDE_ALGORITHM")},
					&cli.StringFlag{Name: "zone", Usage: "a calendar period's IANA zone", Sources: cli.EnvVars("SLUICE_OVERRIDE_ZONE")},
					&cli.IntFlag{Name: "anchor-day", Usage: "a calendar period's anchor day", Sources: cli.EnvVars("SLUICE_OVERRIDE_ANCHOR_DAY")},
					&cli.StringFlag{Name: "expires-in", Usage: "remove the override after this `DURATION` (2s, 720h)", Sources: cli.EnvVars("SLUICE_OVERRIDE_EXPIRES_IN")},
					&cli.StringFlag{Name: "reason", Usage: "why, for the change log", Sources: cli.EnvVars("SLUICE_OVERRIDE_REASON")},
				),
				Action: onIdentity(http.MethodPut, func(c *cli.Command) []byte {
					body, _ := json.Marshal(server.OverrideRequest{
						LimitSpec: config.LimitSpec{
							Rate: c.Int64("rate"), Period: c.String("period"), Burst: c.Int64("burst"), Lease: c.String("lease"),
							Algorithm: c.String("algorithm"), Zone: c.String("zone"), AnchorDay: c.Int("anchor-day"),
						},
						ExpiresIn: c.String("expires-in"), Reason: c.String("reason"),
					})
					return body
				}),
			},
			{Name: "get", Usage: "print one override", ArgsUsage: "POLICY IDENTITY", Flags: with(), Action: onIdentity(http.MethodGet, nil)},
			{
				Name: "list", Usage: "print the overrides in force", Flags: with(&cli.StringFlag{Name: "policy", Usage: "only this policy's", Sources: cli.EnvVars("SLUICE_OVERRIDE_POLICY")}),
				Action: func(ctx context.Context, c *cli.Command) error {
					path := "/v1/overrides"
					if p := c.String("policy"); p != "" {
						path += "?policy=" + url.QueryEscape(p)
					}
					return adminCall(ctx, c, http.MethodGet, path, nil)
				},
			},
			{Name: "rm", Usage: "remove an override", ArgsUsage: "POLICY IDENTITY", Flags: with(), Action: onIdentity(http.MethodDelete, nil)},
		},
	}
}

// onIdentity is the action of a subcommand that sends method, with the body that body
// makes (none when nil), to the override its POLICY IDENTITY arguments name.
func onIdentity(method string, body func(*cli.Command) []byte) cli.ActionFunc {
	return func(ctx context.Context, c *cli.Command) error {
		if c.NArg() != 2 {
			return usagef(c, "want POLICY IDENTITY, got %d arguments", c.NArg())
		}
		var b []byte
		if body != nil {
			b = body(c)
		}
		return adminCall(ctx, c, method, overridePath(c.Args().Get(0), c.Args().Get(1)), b)
	}
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
	if resp.StatusCode/100 != 2 {
		return answerError(resp, out)
	}
	if len(bytes.TrimSpace(out)) > 0 {
		var v any
		if json.Unmarshal(out, &v) == nil {
			out, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintf(c.Root().Writer, "%s\n", bytes.TrimSpace(out))
	}
	return nil
}
