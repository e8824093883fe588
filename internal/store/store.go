package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Store is the owner of the cursor repositories and the idle probe of whoever owns the connections: a
// processor.Client holds one over its shared connections (New(shared)); a processor without a Client is
// given one of its own. A store made with New(nil) (the operator's tools and tests) gives each repository
// it opens shared connections of its own, closed with it. There is no store shared behind the callers'
// backs: what processors share, they share through the Client they were given.
//
// Within a store, Open hands out one Repository per database, process name and instance name: asking
// twice gives the same one, so two parts of one program can never hold two locks, or two connections,
// for one cursor as one instance; and Prober one probe per database (or per shared pool), so that fifty
// quiet processes send one probe statement, not fifty.
type Store struct {
	shared *Shared

	mu    sync.Mutex // guards repos and opening; never held while a repository connects
	repos map[string]*Repository
	// opening holds, for each repository being opened, a channel closed once it is open or has failed:
	// a second Open of the same waits for the first, and the repositories of other processes connect
	// and register meanwhile, so that a thousand processes start side by side rather than one by one.
	opening map[string]chan struct{}

	probeMu sync.Mutex
	probers map[string]*Prober

	fleetMu sync.Mutex
	fleets  map[string]*FleetWatch
}

// New returns a store whose repositories and probe work on shared's connections; nil shared gives a
// store whose repositories each get shared connections of their own (see Config.Shared), and no probe.
func New(shared *Shared) *Store { return &Store{shared: shared} }

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
	var own *Shared
	if cfg.Shared == nil {
		// Connections of its own, made as a Client's are: a session and one to work on.
		var err error
		own, err = NewShared(SharedConfig{ConnConfig: cfg.ConnConfig, MaxConns: 2, Instance: cfg.Instance,
			Timeout: cfg.Timeout, BeforeConnect: cfg.BeforeConnect})
		if err != nil {
			return nil, fmt.Errorf("open cursor %q: %w", name, err)
		}
		cfg.Shared = own
	}
	key := fmt.Sprintf("%s:%d/%s/%s\x00%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, name, cfg.Instance)
	s.mu.Lock()
	for {
		if repo, ok := s.repos[key]; ok {
			s.mu.Unlock()
			if own != nil {
				own.Close()
			}
			return repo, nil
		}
		opening, ok := s.opening[key]
		if !ok {
			break
		}
		s.mu.Unlock()
		select {
		case <-opening:
		case <-ctx.Done():
			if own != nil {
				own.Close()
			}
			return nil, fmt.Errorf("open cursor %q: %w", name, ctx.Err())
		}
		s.mu.Lock()
	}
	if s.opening == nil {
		s.opening = map[string]chan struct{}{}
	}
	opened := make(chan struct{})
	s.opening[key] = opened
	s.mu.Unlock()
	repo, err := s.open(ctx, name, key, cfg, own)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.opening, key)
	close(opened)
	if err != nil {
		return nil, err
	}
	if s.repos == nil {
		s.repos = map[string]*Repository{}
	}
	s.repos[key] = repo
	return repo, nil
}

// open makes the repository of Open, on cfg.Shared (own, when it made those connections for this
// repository alone), connecting it and registering the process.
func (s *Store) open(ctx context.Context, name, key string, cfg Config, own *Shared) (*Repository, error) {
	repo := newRepository(name, key, cfg, s, own)
	if err := repo.Session.connect(ctx); err != nil {
		repo.Session.closeOwn()
		return nil, err
	}
	if err := repo.register(ctx); err != nil {
		repo.Session.closeConn()
		repo.Session.Detach()
		repo.Session.closeOwn()
		return nil, err
	}
	repo.Session.Detach()
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
