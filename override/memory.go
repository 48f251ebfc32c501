package override

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// Memory is a Store in the process: the overrides of one server, gone when it stops.
type Memory struct {
	mu      sync.Mutex
	m       map[[2]string]Override
	version int64
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{m: map[[2]string]Override{}} }

// Put implements Store.
func (s *Memory) Put(_ context.Context, o Override) (*Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{o.Policy, o.Identity}
	var prev *Override
	if p, ok := s.m[k]; ok {
		prev = &p
	}
	s.m[k] = o
	s.version++
	return prev, nil
}

// Delete implements Store.
func (s *Memory) Delete(_ context.Context, policy, identity string) (*Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{policy, identity}
	p, ok := s.m[k]
	if !ok {
		return nil, nil
	}
	delete(s.m, k)
	s.version++
	return &p, nil
}

// Load implements Store.
func (s *Memory) Load(context.Context) ([]Override, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.AppendSeq(make([]Override, 0, len(s.m)), maps.Values(s.m)), s.version, nil
}

// Version implements Store.
func (s *Memory) Version(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, nil
}
