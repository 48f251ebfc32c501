package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v3"
)

// buildVersion, when set at link time (go build -ldflags "-X main.buildVersion=v1.2.3", as
// deploy/Dockerfile does), is the version the binary reports.
var buildVersion string

// version is buildVersion when the build set it, else the module version of the binary (a
// tag when installed with go install module@version), with the VCS revision when the build
// recorded one.
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " (" + rev + dirty + ")"
	}
	return v
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version of sluice and of Go it was built with",
		Action: func(ctx context.Context, c *cli.Command) error {
			fmt.Fprintf(c.Root().Writer, "sluice %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
