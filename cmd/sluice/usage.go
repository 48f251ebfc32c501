package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/urfave/cli/v3"
)

// usageError is a command line that cannot be parsed. run prints it as one line,
// "sluice serve: unknown flag --confg; did you mean --config?", and exits with exitUsage.
type usageError struct {
	cmd string // the command's full name: "sluice override set"
	msg string
}

func (e *usageError) Error() string { return e.cmd + ": " + e.msg }
func (e *usageError) ExitCode() int { return exitUsage }

func usagef(c *cli.Command, format string, a ...any) error {
	return &usageError{cmd: c.FullName(), msg: fmt.Sprintf(format, a...)}
}

// unixConventions makes every command in the tree under c report usage errors as
// usageError: flag errors, an unknown command (CommandNotFound records it in *notFound,
// since that hook returns nothing), and an argument given to a command that takes none.
// A command with subcommands and an Action of its own (simulate) runs that Action when
// no argument follows it.
func unixConventions(c *cli.Command, notFound *error) {
	c.OnUsageError = func(_ context.Context, c *cli.Command, err error, _ bool) error {
		return flagUsageError(c, err)
	}
	if len(c.Commands) > 0 {
		// The flags after a command are that command's.
		one := 1
		c.StopOnNthArg = &one
		own := c.Action
		c.Action = func(ctx context.Context, c *cli.Command) error {
			switch {
			case c.Args().Present():
				return unknownCommand(c, c.Args().First())
			case own != nil:
				return own(ctx, c)
			case c.Root() == c:
				return cli.ShowRootCommandHelp(c)
			}
			return cli.ShowSubcommandHelp(c)
		}
		c.CommandNotFound = func(_ context.Context, c *cli.Command, name string) {
			*notFound = unknownCommand(c, name)
		}
	} else if strings.TrimSpace(c.ArgsUsage) == "" && c.Action != nil {
		action := c.Action
		c.Action = func(ctx context.Context, c *cli.Command) error {
			if c.Args().Present() {
				return usagef(c, "takes no arguments, got %q", c.Args().First())
			}
			return action(ctx, c)
		}
	}
	for _, sub := range c.Commands {
		unixConventions(sub, notFound)
	}
}

func unknownCommand(c *cli.Command, name string) error {
	var names []string
	for _, sub := range c.Commands {
		if !sub.Hidden {
			names = append(names, sub.Name)
		}
	}
	return usagef(c, "unknown command %s%s", name,
		suggest(name, "", names, "the commands are "+strings.Join(names, ", ")))
}

// suggest is "; did you mean <dashes><name>?" for the name of names nearest to s, else
// "; " + otherwise.
func suggest(s, dashes string, names []string, otherwise string) string {
	if n := nearest(s, names); n != "" {
		return "; did you mean " + dashes + n + "?"
	}
	return "; " + otherwise
}

var (
	invalidValue  = regexp.MustCompile(`^invalid value "(.*)" for flag -+([^:]+): (.*)$`)
	requiredFlags = regexp.MustCompile(`^Required flags? "(.*)" not set$`)
	strconvError  = regexp.MustCompile(`^strconv\.\w+: parsing ".*": `)
)

// flagUsageError rewrites an error of the flag parser as one line in the CLI's own terms
// (flags with two dashes), with the nearest flag to an unknown one.
func flagUsageError(c *cli.Command, err error) error {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		f = strings.TrimLeft(f, "-")
		var names []string
		for _, fl := range c.Flags {
			names = append(names, fl.Names()...)
		}
		msg = "unknown flag --" + f + suggest(f, "--", names, "see "+c.FullName()+" --help")
	} else if f, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		msg = "--" + strings.TrimLeft(f, "-") + " needs a value"
	} else if m := requiredFlags.FindStringSubmatch(msg); m != nil {
		var fs []string
		for f := range strings.SplitSeq(m[1], ", ") {
			fs = append(fs, "--"+f)
		}
		msg = "missing " + strings.Join(fs, ", ")
	} else if m := invalidValue.FindStringSubmatch(msg); m != nil {
		why := strconvError.ReplaceAllString(m[3], "")
		msg = fmt.Sprintf("--%s: %q is not valid (%s)", m[2], m[1], why)
	}
	return usagef(c, "%s", msg)
}

// nearest returns the name in names closest to s by edit distance, when it is close
// enough to be what was meant (at most a third of its letters wrong, at least one), or
// when s is the start of exactly one name; else "".
func nearest(s string, names []string) string {
	best, bestD := "", -1
	var prefixed []string
	for _, n := range names {
		if d := editDistance(s, n); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
		if len(s) >= 2 && strings.HasPrefix(n, s) {
			prefixed = append(prefixed, n)
		}
	}
	if bestD >= 0 && bestD <= max(1, len(best)/3) {
		return best
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
