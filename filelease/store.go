package filelease

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// fileFormat names the layout of the records file and of the high-water
// mark, so that a file of another kind is refused, not misread.
const (
	fileFormat      = "leader-elector.filelease/v1"
	highWaterFormat = "leader-elector.filelease.high-water/v1"
)

// records is the records file: every Lease, and the store's
// resourceVersion, a counter that every write increments.
type records struct {
	Format          string                 `json:"format"`
	ResourceVersion int64                  `json:"resourceVersion"`
	Leases          []coordinationv1.Lease `json:"leases"`
}

// highWater is what the store has ever written, kept beside the records
// in a file of its own so that a records file deleted, replaced by an
// older copy or truncated cannot bring a resourceVersion or a fencing
// token back (see checkAgainst and Server.create).
type highWater struct {
	Format          string `json:"format"`
	ResourceVersion int64  `json:"resourceVersion"`
	// Tokens is the highest spec.leaseTransitions written, by
	// "namespace/name".
	Tokens map[string]int32 `json:"tokens"`
}

// ErrCorrupt is returned for a records or high-water file that cannot be
// read as one: it was truncated, hand-edited or is another file.
var ErrCorrupt = errors.New("corrupt")

// ErrWentBack is returned for a records file older than what this store
// has written: it was replaced by an older copy.
var ErrWentBack = errors.New("went back")

// state is the content of the store at one resourceVersion.
type state struct {
	resourceVersion int64
	leases          map[string]*coordinationv1.Lease
	// raw is the records file as read (nil: missing), which a write
	// compares under the lock (see store.writeNext).
	raw []byte
}

func key(namespace, name string) string { return namespace + "/" + name }

// store reads and writes the records file. Writers serialize on an
// exclusive flock of a lock file beside it (the records file itself is
// replaced by each write, so it cannot carry the lock); readers need no
// lock, since each write replaces the file by an atomic rename.
type store struct {
	path, lockPath, highWaterPath string
	// nextPath holds the records of a write between its renames (see
	// writeNext and finishTorn).
	nextPath string
	// mu serializes this process's writers before the flock, which is
	// per open file description.
	mu sync.Mutex
	// beforeWrite, if set, fails a write before anything is written: the
	// tests' full disk.
	beforeWrite func() error
	// afterMark, if set, runs between the mark's rename and the records':
	// an error stops the write there, as its writer's death would (the
	// tests' SIGKILL at the worst moment).
	afterMark func() error
}

func newStore(path string) *store {
	return &store{path: path, lockPath: path + ".lock", highWaterPath: path + ".hwm", nextPath: path + ".next"}
}

// read returns the current state and the high-water mark; a missing
// records file is an empty store one version above the mark. It reads
// without the lock, unless what it read may be a write half done (the mark
// renamed into place, the records not yet): it then reads again under a
// shared lock, which no write holds, and if the records are still behind
// the mark, finishes a write whose writer died half way (finishTorn).
func (s *store) read(ctx context.Context) (state, highWater, error) {
	st, hw, missing, err := s.readUnlocked()
	if err == nil && !missing {
		return st, hw, nil
	}
	if err != nil && !errors.Is(err, ErrWentBack) {
		return state{}, hw, err
	}
	st, hw, err = s.readLocked(ctx, unix.LOCK_SH, nil)
	if !errors.Is(err, ErrWentBack) {
		return st, hw, err
	}
	return s.readLocked(ctx, unix.LOCK_EX, s.finishTorn)
}

// readLocked reads under the lock, shared or exclusive (how), after
// first, if given.
func (s *store) readLocked(ctx context.Context, how int, first func() error) (state, highWater, error) {
	unlock, err := s.lock(ctx, how)
	if err != nil {
		return state{}, highWater{}, err
	}
	defer unlock()
	if first != nil {
		if err := first(); err != nil {
			return state{}, highWater{}, err
		}
	}
	st, hw, _, err := s.readUnlocked()
	return st, hw, err
}

// finishTorn completes a write whose writer died between renaming the mark
// and the records into place (SIGKILL there left the mark one version
// above the records, which every read then refused as gone back: the store
// was stuck until someone deleted the file). The write's records wait at
// nextPath, at the mark's resourceVersion; they are renamed into place,
// as their writer would have done. Called under the exclusive lock, so no
// write is half done by a live process. nextPath at the mark's version
// exists only then: a finished write renames it away, and a write that
// failed before renaming the mark left it one version above the mark. So
// a records file replaced by an older copy is still refused.
func (s *store) finishTorn() error {
	hw, err := s.readHighWater()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(s.nextPath)
	if err != nil {
		return nil
	}
	var r records
	if err := json.Unmarshal(b, &r); err != nil || r.Format != fileFormat || r.ResourceVersion != hw.ResourceVersion {
		return nil
	}
	if err := os.Rename(s.nextPath, s.path); err != nil {
		return fmt.Errorf("finish the write its writer left half done: replace %s: %w", s.path, err)
	}
	return syncDir(filepath.Dir(s.path))
}

func (s *store) readUnlocked() (st state, hw highWater, missing bool, err error) {
	if hw, err = s.readHighWater(); err != nil {
		return state{}, hw, false, err
	}
	st, missing, err = s.readRecords(hw)
	return st, hw, missing, err
}

func (s *store) readRecords(hw highWater) (st state, missing bool, err error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		// One version above the mark: a deletion of the file is a change,
		// which the watches deliver, the same in every process.
		return state{resourceVersion: hw.ResourceVersion + 1, leases: map[string]*coordinationv1.Lease{}}, true, nil
	}
	if err != nil {
		return state{}, false, fmt.Errorf("read the lease file: %w", err)
	}
	var r records
	if err := json.Unmarshal(b, &r); err != nil || r.Format != fileFormat {
		return state{}, false, fmt.Errorf("the lease file %s is %w (%s); stop its sidecars and delete it to start over: fencing tokens stay above those written (%s)", s.path, ErrCorrupt, describeBad(err, r.Format), s.highWaterPath)
	}
	st = state{resourceVersion: r.ResourceVersion, leases: make(map[string]*coordinationv1.Lease, len(r.Leases)), raw: b}
	for i := range r.Leases {
		l := &r.Leases[i]
		st.leases[key(l.Namespace, l.Name)] = l
	}
	if err := checkAgainst(st, hw); err != nil {
		return state{}, false, fmt.Errorf("the lease file %s %w: %v; it was replaced by an older copy or edited; stop its sidecars and delete it to start over", s.path, ErrWentBack, err)
	}
	return st, false, nil
}

// checkAgainst refuses a state older than the high-water mark: a lower
// resourceVersion, or a Lease with a holder and a fencing token below one
// written before. A Lease without a holder may have a lower token: it was
// deleted and created anew, and its next term's token is above the mark
// (Server.create).
func checkAgainst(st state, hw highWater) error {
	if st.resourceVersion < hw.ResourceVersion {
		return fmt.Errorf("resourceVersion %d is below %d, written before", st.resourceVersion, hw.ResourceVersion)
	}
	for k, l := range st.leases {
		token := int32(0)
		if l.Spec.LeaseTransitions != nil {
			token = *l.Spec.LeaseTransitions
		}
		if held := l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""; held && token < hw.Tokens[k] {
			return fmt.Errorf("lease %s has fencing token %d, below %d, written before", k, token, hw.Tokens[k])
		}
	}
	return nil
}

func describeBad(err error, format string) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("format %q, want %q", format, fileFormat)
}

func (s *store) readHighWater() (highWater, error) {
	hw := highWater{Format: highWaterFormat, Tokens: map[string]int32{}}
	b, err := os.ReadFile(s.highWaterPath)
	if errors.Is(err, fs.ErrNotExist) {
		return hw, nil
	}
	if err != nil {
		return hw, fmt.Errorf("read the lease file's high-water mark: %w", err)
	}
	if err := json.Unmarshal(b, &hw); err != nil || hw.Format != highWaterFormat {
		return hw, fmt.Errorf("the high-water mark %s is %w; stop its sidecars and delete it and the lease file to start over (fencing tokens then rely on the clock alone: see docs/api.md)", s.highWaterPath, ErrCorrupt)
	}
	if hw.Tokens == nil {
		hw.Tokens = map[string]int32{}
	}
	return hw, nil
}

// update applies change to the current state and writes the result:
// the high-water mark, then the records, each renamed over its file from
// a synced temporary file, so that the mark is never below the records
// (the records pass through nextPath: see writeNext).
// change returns an error to write nothing; it runs again, on the newer
// state, when another write came first. The files are written and
// synced before the lock is taken, which is then held only to check that
// no other write came in between (else all starts again) and to rename
// them: a process frozen (SIGSTOP) while it holds the lock stalls every
// other write, so the lock is held for three renames, not for the syncs.
func (s *store) update(ctx context.Context, change func(next *state, written highWater) error) (state, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		st, hw, err := s.read(ctx)
		if err != nil {
			return state{}, err
		}
		next := state{resourceVersion: st.resourceVersion + 1, leases: maps.Clone(st.leases)}
		if err := change(&next, hw); err != nil {
			return state{}, err
		}
		if s.beforeWrite != nil {
			if err := s.beforeWrite(); err != nil {
				return state{}, fmt.Errorf("write the lease file: %w", err)
			}
		}
		committed, err := s.writeNext(ctx, st.raw, next, hw)
		if err != nil {
			return state{}, err
		}
		if committed {
			return next, syncDir(filepath.Dir(s.path))
		}
		if ctx.Err() != nil {
			return state{}, ctx.Err()
		}
	}
}

// writeNext writes next and the mark raised to it, if the records file is
// still basedOn, byte for byte (every write changes its resourceVersion);
// committed false: another write came first. Under the lock it only reads
// one small file and renames three: a process frozen there (SIGSTOP) stalls
// every other write until it resumes or dies, so the lock is held for as
// short as can be; flock offers no way to break it safely.
func (s *store) writeNext(ctx context.Context, basedOn []byte, next state, hw highWater) (committed bool, err error) {
	hw.ResourceVersion = next.resourceVersion
	hw.Tokens = maps.Clone(hw.Tokens)
	for k, l := range next.leases {
		if l.Spec.LeaseTransitions != nil {
			hw.Tokens[k] = max(hw.Tokens[k], *l.Spec.LeaseTransitions)
		}
	}
	r := records{Format: fileFormat, ResourceVersion: next.resourceVersion, Leases: make([]coordinationv1.Lease, 0, len(next.leases))}
	for _, k := range sortedKeys(next.leases) {
		r.Leases = append(r.Leases, *next.leases[k])
	}
	// The two files are written and synced at once: their syncs then
	// share the file system's journal commits, and a write takes about
	// one sync less (see docs/performance.md).
	var (
		hwTmp string
		hwErr error
		wg    sync.WaitGroup
	)
	wg.Go(func() { hwTmp, hwErr = writeTemp(s.highWaterPath, hw) })
	recordsTmp, err := writeTemp(s.path, r)
	wg.Wait()
	if hwTmp != "" {
		defer os.Remove(hwTmp)
	}
	if recordsTmp != "" {
		defer os.Remove(recordsTmp)
	}
	if err = cmp.Or(hwErr, err); err != nil {
		return false, err
	}

	unlock, err := s.lock(ctx, unix.LOCK_EX)
	if err != nil {
		return false, err
	}
	defer unlock()
	current, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Still missing; but a write may have come and the file been
		// deleted again: the mark says (a missing file is one version
		// above it, next one more).
		if basedOn != nil {
			return false, nil
		}
		if now, err := s.readHighWater(); err != nil || now.ResourceVersion+2 != next.resourceVersion {
			return false, err
		}
	case err != nil:
		return false, fmt.Errorf("read the lease file: %w", err)
	case basedOn == nil || !bytes.Equal(current, basedOn):
		return false, nil
	}
	// The records go to nextPath first, so that a writer killed after
	// the mark's rename leaves them where finishTorn finds them.
	if err := os.Rename(recordsTmp, s.nextPath); err != nil {
		return false, fmt.Errorf("replace %s: %w", s.nextPath, err)
	}
	if err := os.Rename(hwTmp, s.highWaterPath); err != nil {
		return false, fmt.Errorf("replace %s: %w", s.highWaterPath, err)
	}
	if s.afterMark != nil {
		if err := s.afterMark(); err != nil {
			return false, err
		}
	}
	if err := os.Rename(s.nextPath, s.path); err != nil {
		return false, fmt.Errorf("replace %s: %w", s.path, err)
	}
	return true, nil
}

// lockPoll is how often lock tries a lock another process holds, at most;
// it starts at lockPollFirst and doubles: the lock is held only for a few
// renames, so most waits end within the first tries, where a fixed
// millisecond made every wait at least that long. (No gain showed in the
// handover benchmark, where a write rarely meets the lock.)
const (
	lockPollFirst = 20 * time.Microsecond
	lockPoll      = time.Millisecond
)

// lock takes the flock of the lock file, exclusive or shared (how), before
// ctx ends. It polls a non-blocking flock instead of blocking in it: a
// holder that is frozen (SIGSTOP) must make the request fail at its
// deadline, not hang its goroutine until the holder resumes.
func (s *store) lock(ctx context.Context, how int) (unlock func(), err error) {
	f, err := os.OpenFile(s.lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the lease file's lock: %w", err)
	}
	// A loop of its own rather than wait.Backoff: that one ends after its
	// steps, and this one must go on at lockPoll until ctx ends.
	delay := lockPollFirst
	for {
		err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			// Closing the file releases the lock.
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("another process holds it: %w", ctx.Err())
		case <-time.After(delay):
			delay = min(2*delay, lockPoll)
			continue
		}
		break
	}
	f.Close()
	return nil, fmt.Errorf("lock %s: %w", s.lockPath, err)
}

// writeTemp writes v as JSON to a synced temporary file in path's
// directory, to be renamed over path: a reader sees the old file or the
// new one, never a part, also after a crash of the machine (with
// syncDir once renamed).
func writeTemp(path string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return tmp.Name(), nil
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
