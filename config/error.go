package config

import (
	"errors"
	"fmt"
	"strings"
)

// Position is a place in a configuration file. Line and Column are 1-based; zero means
// unknown (the error concerns the whole file).
type Position struct {
	File   string
	Line   int
	Column int
}

// String formats p as "file:line:col", "file:line" or "file".
func (p Position) String() string {
	switch {
	case p.Line > 0 && p.Column > 0:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
	case p.Line > 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	default:
		return p.File
	}
}

// Error is one problem in one configuration file, formatted as
// "policies.yaml:12:5: policies[2].rate: must be positive". Field is the path of the
// field from the top of the file (empty for the file as a whole); Err, when set, is the
// underlying error (one wrapping sluice.ErrInvalidLimit, say).
type Error struct {
	Pos   Position
	Field string
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Field + ": " + e.Msg
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found while loading a configuration, in file order.
type Errors []*Error

// Error joins the messages one per line.
func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// err returns es as an error, or nil when es is empty.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// ErrorList returns the configuration errors inside err: the list of an Errors value, a
// single *Error, or nil when err holds neither.
func ErrorList(err error) []*Error {
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return nil
}
