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

// DefaultFiles returns the files of the built-in configuration, which `sluice serve` runs
// without --config, named "builtin/<name>".
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
		panic(fmt.Sprintf("config: built-in configuration invalid: %v", err))
	}
	return c
})

// Default returns the built-in configuration (DefaultFiles), the same *Config each call.
func Default() *Config { return defaultConfig() }
