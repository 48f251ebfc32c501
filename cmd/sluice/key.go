package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/server"
)

func keyCommand() *cli.Command {
	return &cli.Command{
		Name:      "key",
		Usage:     "print the identity and store keys a request would be counted under",
		ArgsUsage: " ",
		Description: "Resolves a request against the configuration as serve and proxy do, deciding nothing,\n" +
			"and prints one line per limit: its name, the identity (the form an override is\n" +
			"written in) and the store key. An API key is hashed with the secret in the\n" +
			"configuration's identity.api_key_secret_env, which must be set, as in the service.\n\n" +
			"  export SLUICE_API_KEY_SECRET=replace-with-32-random-bytes   # the secret sluice serve hashes API keys with\n" +
			"  sluice key --policy api --key \"$API_KEY\"\n" +
			"  sluice key --policy demo --key 2001:db8::7\n" +
			"  sluice key --policy api --key \"$API_KEY\" --method POST --path /v1/items\n" +
			"  sluice key --config deploy/envoy/sluice --domain edge --descriptor remote_address=203.0.113.7\n",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "the configuration `PATH` (empty: the built-in example)", Sources: cli.EnvVars("SLUICE_CONFIG")},
		}, requestFlags("SLUICE_KEY_")...),
		SliceFlagSeparator: ";",
		Action:             printKeys,
	}
}

func printKeys(_ context.Context, c *cli.Command) error {
	cfg := config.Default()
	if p := c.String("config"); p != "" {
		var err error
		if cfg, err = config.Load(p); err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
	}
	req, err := checkRequest(c)
	if err != nil {
		return err
	}
	if p, ok := cfg.Policy(req.Policy); ok && p.Key.Type == config.KeyAPIKey {
		env := cfg.Identity.APIKeySecretEnv
		if env == "" || os.Getenv(env) == "" {
			return fmt.Errorf("policy %q hashes API keys with the secret in identity.api_key_secret_env, which is %s: the service would use a per-process random secret, so no key can be printed",
				p.Name, map[bool]string{true: "not configured", false: "$" + env + ", not set"}[env == ""])
		}
	}
	st := memory.New()
	defer st.Close()
	srv, err := server.New(server.Options{Limiter: st, Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	infos, err := srv.Keys(&req)
	if err != nil {
		return err
	}
	w := c.Root().Writer
	for _, in := range infos {
		fmt.Fprintf(w, "limit:    %s (%s)\n", in.Name, in.Status)
		if in.Identity != "" {
			fmt.Fprintf(w, "identity: %s\n", in.Identity)
		}
		if in.Key != "" {
			fmt.Fprintf(w, "key:      %s\n", in.Key)
		}
	}
	return nil
}
