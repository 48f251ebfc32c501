package config

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sync"
)

//go:embed builtin/*.yaml
var builtinFS embed.FS

// DefaultFiles returns the files of the built-in configuration, named "builtin/<name>".
// `sluice serve` without --config runs with it: the in-memory store, a "demo" policy of 10
// requests per second per client IP (burst 20), an "api" policy per API key with free and
// pro tiers, a "users" policy of 100 requests per minute per user ID, and an
// envoyproxy/ratelimit domain "demo".
func DefaultFiles() []File {
	entries, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		panic(fmt.Sprintf("config: built-in files unreadable: %v", err))
	}
	var files []File
	for _, e := range entries {
		name := path.Join("builtin", e.Name())
		data, err := builtinFS.ReadFile(name)
		if err != nil {
			panic(fmt.Sprintf("config: built-in file unreadable: %v", err))
		}
		files = append(files, File{Name: name, Data: data})
	}
	return files
}

var defaultConfig = sync.OnceValue(func() *Config {
	c, err := Parse(DefaultFiles()...)
	if err != nil {
		// The built-in files are part of the binary and tested; this is a build defect.
		panic(fmt.Sprintf("config: built-in configuration invalid: %v", err))
	}
	return c
})

// Default returns the built-in configuration (see DefaultFiles). Every call returns the
// same immutable *Config.
func Default() *Config { return defaultConfig() }
