package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Store is the owner of the cursor repositories and the idle probes of whoever opens the connections: a
// processor.Client holds one over its shared connections (New(shared)), and processors without a
// Client share the default store (Default), which gives each repository a connection of its own and
// probes per database.
//
// Within a store, Open hands out one Repository per database, process name and instance name: asking
// twice gives the same one, so two parts of one program can never hold two locks, or two connections,
// for one cursor as one instance; and Prober one probe per database (or per shared pool), so that fifty
// quiet processes send one probe statement, not fifty.
type Store struct {
	shared *Shared

	mu    sync.Mutex // held while a repository connects: not while a probe is handed out
	repos map[string]*Repository

	probeMu sync.Mutex
	probers map[string]*Prober

	fleetMu sync.Mutex
	fleets  map[string]*FleetWatch
}

// New returns a store whose repositories and probe work on shared's connections; nil shared gives a
// store whose repositories each open a connection of their own (see Config.Shared).
func New(shared *Shared) *Store { return &Store{shared: shared} }

var defaultStore = sync.OnceValue(func() *Store { return New(nil) })

// Default returns the store of the processors that run without a Client: one per Go process, so
// that they share a probe per database and meet each other's claims (see Repository.Claim).
func Default() *Store { return defaultStore() }

// Open returns the repository for process name on the default store (see Store.Open).
func Open(ctx context.Context, name string, cfg Config) (*Repository, error) {
	return Default().Open(ctx, name, cfg)
}

// Open returns the repository for process name on cfg's database as instance cfg.Instance, connecting and
// registering the process on first use. Asking the store again for the same returns the same repository
// (cfg is then ignored). Instances with other names are other instances, as in other programs. A store
// made over shared connections gives them to every repository it opens.
func (s *Store) Open(ctx context.Context, name string, cfg Config) (*Repository, error) {
	if name == "" {
		return nil, errors.New("cursor: process name is empty")
	}
	if cfg.Shared == nil {
		cfg.Shared = s.shared
	}
	if cfg.Shared != nil {
		cfg.ConnConfig, cfg.Instance = cfg.Shared.ConnConfig(), cfg.Shared.Instance()
	}
	if cfg.ConnConfig == nil {
		return nil, fmt.Errorf("open cursor %q: Config.ConnConfig is required", name)
	}
	key := fmt.Sprintf("%s:%d/%s/%s\x00%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, name, cfg.Instance)
	s.mu.Lock()
	defer s.mu.Unlock()
	if repo, ok := s.repos[key]; ok {
		return repo, nil
	}
	repo := &Repository{name: name, key: key, cfg: cfg, store: s, shared: cfg.Shared}
	repo.lockSQL, repo.lockArgs = lockStatement(cfg, repo.ApplicationName())
	repo.lockSQL17 = withoutTransactionTimeout(repo.lockSQL)
	if err := repo.connect(ctx); err != nil {
		return nil, err
	}
	if err := repo.register(ctx); err != nil {
		repo.closeConn()
		repo.Detach()
		return nil, err
	}
	repo.Detach()
	if s.repos == nil {
		s.repos = map[string]*Repository{}
	}
	s.repos[key] = repo
	return repo, nil
}

// forget removes a released repository from the store.
func (s *Store) forget(r *Repository) {
	s.mu.Lock()
	if s.repos[r.key] == r {
		delete(s.repos, r.key)
	}
	s.mu.Unlock()
}

// claims are the repositories claimed in this Go process, by database, process and instance. Instance
// names are the Go process's by default ("<hostname>:<pid>"), so two stores (two Clients, or a Client and
// processors without one) may open the same cursor as the same instance: the second Claim fails, as it
// would in one store, rather than let two processors take each other for their own former session.
var claims = &claimSet{keys: map[string]bool{}}

type claimSet struct {
	mu   sync.Mutex
	keys map[string]bool
}

// take claims key, and reports false when it is claimed already.
func (c *claimSet) take(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys[key] {
		return false
	}
	c.keys[key] = true
	return true
}

// give ends a claim of key.
func (c *claimSet) give(key string) {
	c.mu.Lock()
	delete(c.keys, key)
	c.mu.Unlock()
}
