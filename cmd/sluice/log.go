package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v3"
)

// logFlags are the logging flags every long-running command has.
func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", Sources: cli.EnvVars("SLUICE_LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Value: "json", Usage: "json or text", Sources: cli.EnvVars("SLUICE_LOG_FORMAT")},
	}
}

// newLogger builds the logger the flags ask for, writing to w.
func newLogger(c *cli.Command, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, cli.Exit(fmt.Sprintf("--log-level: %v", err), exitUsage)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.String("log-format")) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, cli.Exit(fmt.Sprintf("--log-format must be json or text, got %q", c.String("log-format")), exitUsage)
}
