// Package testbed starts Lockgate's services for the Go client's integration tests, through
// `python -m lockgate.localcluster.testbed` (three coordinators, two executors with
// --data-plane none, the schema registry and a Kafka broker, on free loopback ports), and
// runs the Python tools the tests check their effects with.
package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds the testbed's start: a broker, a registry and five services on 2 cores.
const startTimeout = 3 * time.Minute

// Process is one process the testbed started.
type Process struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	PID     int    `json:"pid"`
}

// Testbed is a running set of services, as the testbed's JSON line describes them.
type Testbed struct {
	Home         string    `json:"home"`
	Kafka        string    `json:"kafka"`
	Coordinators []string  `json:"coordinators"`
	Executors    []string  `json:"executors"`
	RegistryGRPC string    `json:"registry_grpc"`
	RegistryHTTP string    `json:"registry_http"`
	LeaseMs      int       `json:"lease_ms"`
	Processes    []Process `json:"processes"`

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
}

// Python is the interpreter that runs Lockgate: $LOCKGATE_PYTHON if set, else "python" from
// PATH (the venv's under make).
func Python() string {
	if python := os.Getenv("LOCKGATE_PYTHON"); python != "" {
		return python
	}
	return "python"
}

// Start runs the testbed with its data under home and returns once every service is ready.
// Stop it with Stop.
func Start(home string) (*Testbed, error) {
	cmd := exec.Command(Python(), "-m", "lockgate.localcluster.testbed", "--home", home)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot run %s (set LOCKGATE_PYTHON to the venv's python): %w", Python(), err)
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	tb := &Testbed{cmd: cmd, stdin: stdin, stderr: stderr}
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), tb); err != nil || len(tb.Coordinators) == 0 {
			_ = tb.Stop()
			return nil, fmt.Errorf("the testbed did not start (first line %q): %s", strings.TrimSpace(line), stderr.String())
		}
		return tb, nil
	case <-time.After(startTimeout):
		_ = tb.Stop()
		return nil, fmt.Errorf("the testbed was not ready within %s: %s", startTimeout, stderr.String())
	}
}

// Stop closes the testbed's stdin, which makes it stop every service, and waits for it.
func (tb *Testbed) Stop() error {
	_ = tb.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- tb.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		_ = tb.cmd.Process.Kill()
		return errors.New("the testbed did not stop within a minute after its stdin closed; killed it")
	}
}

// PID is the process id of the service at address, 0 if none.
func (tb *Testbed) PID(address string) int {
	for _, p := range tb.Processes {
		if p.Address == address {
			return p.PID
		}
	}
	return 0
}

// Kill sends SIGKILL to the service at address.
func (tb *Testbed) Kill(address string) error {
	pid := tb.PID(address)
	if pid == 0 {
		return fmt.Errorf("no testbed process at %s", address)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// RunPython runs Python with args (e.g. "-m", "lockgate.client.cli", ...) and returns its
// stdout; an exit other than 0 is an error carrying stderr.
func RunPython(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, Python(), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", Python(), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// CreateTopics creates Kafka topics on the testbed's broker, name -> partitions.
func (tb *Testbed) CreateTopics(ctx context.Context, topics map[string]int) error {
	var script strings.Builder
	script.WriteString("import sys\nfrom lockgate.localcluster.kafka import create_topic\n")
	for name, partitions := range topics {
		fmt.Fprintf(&script, "create_topic(sys.argv[1], %q, partitions=%d)\n", name, partitions)
	}
	_, err := RunPython(ctx, "-c", script.String(), tb.Kafka)
	return err
}

// lockedBuffer collects a process's stderr while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
