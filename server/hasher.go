package server

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/keys"
)

// hashers holds the API-key hashers of the configurations seen, by the environment
// variable holding the secret (the environment does not change while the process runs).
type hashers struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string]*keys.Hasher
}

func newHashers(log *slog.Logger) *hashers {
	return &hashers{log: log, m: map[string]*keys.Hasher{}}
}

// processSecret is the API-key secret used when the configuration names none.
var processSecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
})

// get returns the API-key hasher for cfg: keyed by the secret in the environment variable
// cfg.Identity.APIKeySecretEnv, else by a random per-process secret (a fleet sharing Redis
// must configure one).
func (hs *hashers) get(cfg *config.Config) (*keys.Hasher, error) {
	env := cfg.Identity.APIKeySecretEnv
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h, ok := hs.m[env]; ok {
		return h, nil
	}
	secret := processSecret()
	if env != "" {
		if v := os.Getenv(env); v != "" {
			secret = []byte(v)
		} else {
			hs.log.Warn("API key secret not set; hashing API keys with a per-process random secret", slog.String("env", env))
		}
	}
	h, err := keys.NewHasher(secret, keys.Hex)
	if err != nil {
		return nil, fmt.Errorf("server: API key secret from $%s: %w", env, err)
	}
	hs.m[env] = h
	return h, nil
}
